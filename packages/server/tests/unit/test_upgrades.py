"""The data's format at start (codey_server.upgrades): the plan (pure), the migrations on data
in the old shape, the driver on a real data dir, backups and restores, and the upgrade's
notice as events."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import msgspec
import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_protocol.version import __version__
from codey_server.core.engine import Engine
from codey_server.core.rules import CommandRejected, Context
from codey_server.eventlog import SqliteEventLog
from codey_server.features import RULES, apply, decide
from codey_server.mcp.tokens import FileMcpTokenStore
from codey_server.settings import Settings
from codey_server.upgrades import decide as upgrades_decide
from codey_server.upgrades.backup import BACKUPS_DIR, backup, latest_backup, read_manifest, restore
from codey_server.upgrades.data import FORMAT_FILE, SqliteDatabase, read_file_marker
from codey_server.upgrades.errors import BackupRefused, DataTooNew, UpgradeError
from codey_server.upgrades.migrations import STEPS, keep_token_rights
from codey_server.upgrades.plan import (
    FORMAT,
    MIGRATIONS,
    UNMARKED,
    Found,
    Migration,
    Plan,
    Refusal,
    plan,
)
from codey_server.upgrades.startup import PENDING, announce, prepare

#: an ``mcp_tokens.json`` as codey wrote it before tokens had scopes (745192a's McpToken:
#: token_id, name, created_at, sha256, last_used_at)
OLD_TOKENS = [
    {"token_id": "mt_0a1b2c3d4e5f", "name": "ci-agent", "created_at": 1795400000.5,
     "sha256": "9f" * 32, "last_used_at": 1795400100.25},
    {"token_id": "mt_111111111111", "name": "laptop", "created_at": 1795400200.0,
     "sha256": "ab" * 32, "last_used_at": None},
]


# the plan ----------------------------------------------------------------------------------


def test_migrations_are_numbered_in_order_from_the_unmarked_format_each_with_a_step() -> None:
    numbers = [m.number for m in MIGRATIONS]
    assert numbers == list(range(UNMARKED + 1, FORMAT + 1))
    assert set(STEPS) == set(numbers)
    for m in MIGRATIONS:
        assert m.description and "\n" not in m.description


def test_no_data_yet_is_only_marked() -> None:
    decided = plan(None)
    assert decided == Plan(found=None, target=FORMAT)
    assert not decided.backup and not decided.upgrade


def test_data_of_this_format_needs_nothing() -> None:
    decided = plan(Found(FORMAT, __version__))
    assert isinstance(decided, Plan)
    assert decided.steps == () and not decided.backup and not decided.upgrade


def test_older_data_is_backed_up_then_migrated_in_order_from_its_own_format() -> None:
    decided = plan(Found(UNMARKED))
    assert isinstance(decided, Plan)
    assert decided.steps == MIGRATIONS and decided.backup and decided.upgrade
    steps = (Migration(2, "two"), Migration(3, "three"), Migration(4, "four"))
    later = plan(Found(2, "0.2.0"), target=4, migrations=steps)
    assert isinstance(later, Plan) and [m.number for m in later.steps] == [3, 4]


def test_newer_data_is_refused_in_one_line_naming_both_releases_and_what_to_do() -> None:
    decided = plan(Found(FORMAT + 1, "0.9.1"), backup="/srv/codey/backups/x-format3")
    assert isinstance(decided, Refusal)
    line = decided.line("/srv/codey")
    assert "\n" not in line
    assert "codey 0.9.1" in line and f"codey {__version__}" in line
    assert f"format {FORMAT + 1}" in line and f"format {FORMAT} at most" in line
    assert "run codey 0.9.1 or newer" in line
    assert "codey-server restore /srv/codey/backups/x-format3" in line
    # a newer release that did not say its name, and no backup at hand
    bare = plan(Found(FORMAT + 2))
    assert isinstance(bare, Refusal)
    assert "run the newer codey" in bare.line("d") and "backups/" in bare.line("d")


def test_a_format_no_release_wrote_is_refused() -> None:
    decided = plan(Found(0))
    assert isinstance(decided, Refusal)
    assert "no release of Codey wrote" in decided.line("d")


# the migrations ---------------------------------------------------------------------------


def test_tokens_made_before_scopes_get_the_rights_they_had() -> None:
    records = json.loads(json.dumps(OLD_TOKENS))
    assert keep_token_rights(records) == ["ci-agent", "laptop"]
    assert all(r["scope"] == "admin" and r["max_policy"] == "full-auto" for r in records)
    assert records[0]["last_used_at"] == 1795400100.25  # the rest as it was
    assert keep_token_rights(records) == []  # idempotent


def test_a_token_with_a_scope_is_left_as_it_is() -> None:
    records = [{"token_id": "mt_2", "name": "reader", "created_at": 1.0, "sha256": "cd",
                "scope": "read", "max_policy": "suggest"}]
    assert keep_token_rights(records) == []
    assert records[0]["scope"] == "read"


# the driver on a data dir -----------------------------------------------------------------


def _old_data_dir(data: Path, *, sessions: bool = True) -> Path:
    """A data dir as codey 0.1.0 left it: a log with events, no marker, the old tokens."""
    data.mkdir(parents=True)

    async def write() -> None:
        log = SqliteEventLog(data / "events.db")
        await log.open()
        events: list[tuple[str | None, ev.Event]] = [(None, ev.TaskCreated(task_id="t1",
                                                                          title="a task"))]
        if sessions:
            events.append(("s1", ev.SessionCreated(worker_id="w", workdir="/src",
                                                   provider="p", model="m", title="old")))
        await log.append(events)
        await log.close()

    asyncio.run(write())
    (data / "mcp_tokens.json").write_text(json.dumps(OLD_TOKENS))
    return data


def _settings(data: Path) -> Settings:
    return Settings(data_dir=data)


def test_a_new_data_dir_is_marked_with_this_format(tmp_path: Path) -> None:
    data = tmp_path / "new"
    decided = prepare(_settings(data))
    assert decided == Plan(found=None, target=FORMAT)
    current = Found(FORMAT, __version__)
    assert read_file_marker(data) == current
    assert SqliteDatabase(data / "events.db").marker() == current
    assert not (data / BACKUPS_DIR).exists() and not (data / PENDING).exists()
    assert prepare(_settings(data)).steps == ()  # the next start: nothing to do


def test_old_data_is_backed_up_migrated_and_its_notice_kept(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture
                                                             ) -> None:
    data = _old_data_dir(tmp_path / "data")
    caplog.set_level("INFO", logger="codey.upgrades")
    decided = prepare(_settings(data), now=lambda: 1796000000.0)
    assert isinstance(decided, Plan) and decided.found == UNMARKED and decided.upgrade

    # the tokens have the rights they had, as the server reads them
    tokens = {t.name: t for t in FileMcpTokenStore(data / "mcp_tokens.json")._tokens.values()}
    assert tokens["ci-agent"].allows("admin") and tokens["ci-agent"].allows_policy("full-auto")
    assert tokens["laptop"].scope == "admin" and tokens["laptop"].max_policy == "full-auto"
    assert tokens["ci-agent"].last_used_at == 1795400100.25

    # the backup, made first, holds the data as it was
    folder = data / BACKUPS_DIR / "20261130-005320-format1"
    manifest = read_manifest(folder)
    assert (manifest.format, manifest.reason, manifest.seq) == (UNMARKED, "migration", 2)
    assert json.loads((folder / "mcp_tokens.json").read_text()) == OLD_TOKENS
    with sqlite3.connect(folder / "events.db") as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2

    # one log line for the backup (saying where), one per migration
    lines = [r.getMessage() for r in caplog.records if r.name == "codey.upgrades"]
    assert str(folder) in lines[0] and "format 1" in lines[0]
    assert [line.split(":")[0] for line in lines[1:]] == [f"migration {m.number}"
                                                         for m in MIGRATIONS]

    # what the user is told, once the server runs
    [notice] = msgspec.json.decode((data / PENDING).read_bytes(), type=list[ev.DataUpgraded])
    assert (notice.from_format, notice.to_format, notice.version) == (1, FORMAT, __version__)
    assert notice.upgrade_id == folder.name and notice.backup == str(folder)
    assert any("ci-agent" in c and "laptop" in c and "admin" in c for c in notice.changes)
    assert any("sandbox" in c and "workspace-write" in c for c in notice.changes)

    # marked last; the next start finds nothing to do and keeps the notice for announce()
    assert read_file_marker(data) == Found(FORMAT, __version__)
    assert prepare(_settings(data)).steps == ()
    assert (data / PENDING).exists()


def test_nothing_to_tell_of_a_migration_that_changed_nothing(tmp_path: Path) -> None:
    data = _old_data_dir(tmp_path / "data", sessions=False)
    (data / "mcp_tokens.json").unlink()
    prepare(_settings(data))
    [notice] = msgspec.json.decode((data / PENDING).read_bytes(), type=list[ev.DataUpgraded])
    assert notice.changes == []


@pytest.mark.parametrize("where", ["file", "database"])
def test_newer_data_is_refused_and_left_untouched(tmp_path: Path, where: str) -> None:
    data = tmp_path / "data"
    prepare(_settings(data))
    if where == "file":
        (data / FORMAT_FILE).write_text(json.dumps({"format": FORMAT + 1, "version": "0.9.0"}))
    else:
        SqliteDatabase(data / "events.db").mark(FORMAT + 1, "0.9.0")
    before = sorted(p.name for p in data.iterdir())
    with pytest.raises(DataTooNew) as refused:
        prepare(_settings(data))
    assert "\n" not in str(refused.value)
    assert "codey 0.9.0" in str(refused.value) and f"codey {__version__}" in str(refused.value)
    assert str(data) in str(refused.value)
    assert sorted(p.name for p in data.iterdir()) == before


def test_the_refusal_names_a_backup_this_release_can_restore(tmp_path: Path) -> None:
    data = _old_data_dir(tmp_path / "data")
    prepare(_settings(data))  # the backup of format 1, made by this release
    (data / FORMAT_FILE).write_text(json.dumps({"format": FORMAT + 1, "version": "0.9.0"}))
    with pytest.raises(DataTooNew) as refused:
        prepare(_settings(data))
    [folder] = (data / BACKUPS_DIR).iterdir()
    assert f"codey-server restore {folder}" in str(refused.value)


def test_a_marker_that_does_not_read_stops_the_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    prepare(_settings(data))
    (data / FORMAT_FILE).write_text("three")
    with pytest.raises(UpgradeError, match="does not read"):
        prepare(_settings(data))


# backups -----------------------------------------------------------------------------------


def test_backup_and_restore_round_trip_with_every_file(tmp_path: Path) -> None:
    data = _old_data_dir(tmp_path / "data")
    (data / "blobs" / "ab").mkdir(parents=True)
    (data / "blobs" / "ab" / "abcd").write_bytes(b"blob")
    manifest = backup(data, tmp_path / "copy", db_path=data / "events.db")
    assert (manifest.seq, manifest.files, manifest.format) == (2, 2, UNMARKED)
    with pytest.raises(BackupRefused, match="not an empty folder"):
        backup(data, tmp_path / "copy", db_path=data / "events.db")
    with pytest.raises(BackupRefused, match="inside the data dir"):
        backup(data, data / "copy", db_path=data / "events.db")

    target = tmp_path / "restored"
    restore(tmp_path / "copy", target)
    assert (target / "blobs" / "ab" / "abcd").read_bytes() == b"blob"
    assert json.loads((target / "mcp_tokens.json").read_text()) == OLD_TOKENS
    assert not (target / "backup.json").exists()
    with sqlite3.connect(target / "events.db") as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2
    assert (target / "events.db").stat().st_mode & 0o077 == 0


def test_restore_refuses_a_data_dir_that_is_not_empty_unless_forced(tmp_path: Path) -> None:
    data = _old_data_dir(tmp_path / "data")
    backup(data, tmp_path / "copy", db_path=data / "events.db")
    prepare(_settings(data))  # now migrated, with backups/ of its own
    with pytest.raises(BackupRefused, match=r"not empty .* --force"):
        restore(tmp_path / "copy", data)
    restore(tmp_path / "copy", data, force=True)
    assert json.loads((data / "mcp_tokens.json").read_text()) == OLD_TOKENS
    assert read_file_marker(data) is None  # the copy's (unmarked) data, not the migrated one
    assert (data / BACKUPS_DIR).is_dir() and latest_backup(data, FORMAT) is not None


def test_restore_refuses_a_folder_that_is_no_backup(tmp_path: Path) -> None:
    (tmp_path / "junk").mkdir()
    with pytest.raises(BackupRefused, match="not a backup"):
        restore(tmp_path / "junk", tmp_path / "new")


# the notice --------------------------------------------------------------------------------


def _upgraded(upgrade_id: str = "20261229-124000-format1") -> ev.DataUpgraded:
    return ev.DataUpgraded(upgrade_id=upgrade_id, from_format=1, to_format=FORMAT,
                           version=__version__, changes=["a change"], backup="/b")


def _fold(state: State, decided: list[tuple[str | None, ev.Event]]) -> State:
    for sid, event in decided:
        apply(state, ev.Envelope(seq=state.seq + 1, ts=5.0, session_id=sid, event=event))
    return state


def test_the_notice_is_recorded_once_and_dismissed_once() -> None:
    state, ctx = State(), Context()
    _fold(state, upgrades_decide.upgraded(state, _upgraded(), ctx))
    assert upgrades_decide.upgraded(state, _upgraded(), ctx) == []
    [notice] = state.upgrades
    assert (notice.changes, notice.upgraded_at, notice.dismissed) == (["a change"], 5.0, False)
    dismiss = cl.DismissUpgradeNotice(upgrade_id=notice.upgrade_id)
    _fold(state, decide(state, dismiss, ctx))
    assert state.upgrades[0].dismissed
    assert decide(state, dismiss, ctx) == []
    with pytest.raises(CommandRejected) as err:
        decide(state, cl.DismissUpgradeNotice(upgrade_id="nope"), ctx)
    assert err.value.code == "not_found"


def test_announce_records_the_kept_notice_through_the_engine_once(tmp_path: Path) -> None:
    data = _old_data_dir(tmp_path / "data")
    prepare(_settings(data))

    async def run() -> State:
        engine = Engine(SqliteEventLog(data / "events.db"), RULES)
        await engine.start()
        await announce(engine, data)
        await announce(engine, data)  # the file is gone: nothing more
        state = engine.state
        await engine.stop()
        return state

    state = asyncio.run(run())
    assert [n.from_format for n in state.upgrades] == [UNMARKED]
    assert not (data / PENDING).exists()


# the changelog -------------------------------------------------------------------------------


def test_the_changelog_says_what_this_release_does_to_the_data() -> None:
    """A new migration is a new format, so a new release with its entry: the version rises
    with the data's format (docs/CHANGELOG.md)."""
    text = (Path(__file__).resolve().parents[4] / "docs" / "CHANGELOG.md").read_text()
    release = text.split(f"\n## [{__version__}]\n", 1)
    assert len(release) == 2, f"docs/CHANGELOG.md has no section for {__version__}"
    section = release[1].split("\n## ", 1)[0]
    assert f"data format {FORMAT}" in section
    for migration in MIGRATIONS:
        assert f"Migration {migration.number} —" in section, migration
