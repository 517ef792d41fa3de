"""The data's format over real server processes: a newer data dir is refused with one line,
an older one is backed up, migrated and told once, and a backup of a running server restores
into a new data dir that serves the same state."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.version import __version__
from codey_server.upgrades.backup import BACKUPS_DIR, read_manifest
from codey_server.upgrades.data import FORMAT_FILE, SqliteDatabase
from codey_server.upgrades.plan import FORMAT, MIGRATIONS, UNMARKED
from codey_testkit.stack import ServerProcess
from codey_testkit.waiting import wait_until

pytestmark = pytest.mark.integration

WORKER_ID = "wrk_test"
#: an ``mcp_tokens.json`` as codey 0.1.0 (745192a) wrote it: no scope, no maximum policy
OLD_TOKENS = [{"token_id": "mt_0a1b2c3d4e5f", "name": "ci-agent", "created_at": 1795400000.5,
               "sha256": "9f" * 32, "last_used_at": 1795400100.25}]


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "codey_server.cli", *args],
                          capture_output=True, text=True, timeout=timeout)


def _session(server: ServerProcess, prompt: str) -> str:
    r = server.http.post("/api/sessions", json={"worker_id": WORKER_ID, "workdir": "/tmp/w",
                                                "prompt": prompt})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def _state(server: ServerProcess) -> dict[str, Any]:
    state: dict[str, Any] = server.http.get("/api/state/bootstrap").json()["state"]
    return state


def _settled(server: ServerProcess, sids: list[str]) -> dict[str, Any]:
    """The state once every session's turn has ended (with no model provider, in an error
    item)."""
    def done() -> bool:
        sessions = _state(server)["sessions"]
        return all(sessions[s]["status"] not in ("running", "waiting_worker")
                   and len(sessions[s]["items"]) >= 2 for s in sids)

    wait_until(done, timeout=30, what="the sessions' turns to end")
    return _state(server)


def _as_unmarked(data: Path) -> None:
    """Make the data dir look as codey 0.1.0 left it: no format marker anywhere."""
    (data / FORMAT_FILE).unlink()
    with sqlite3.connect(data / "events.db") as conn:
        conn.execute("DROP TABLE codey_format")


@pytest.mark.parametrize("where", ["file", "database"])
def test_a_data_dir_of_a_newer_release_is_refused_in_one_line(seeded_server: Any,
                                                              where: str) -> None:
    server: ServerProcess = seeded_server({})
    _session(server, "")
    server.stop()
    data = server.data_dir
    if where == "file":  # the newer neighbour's marker, as it would have written it
        (data / FORMAT_FILE).write_text(json.dumps({"format": FORMAT + 1, "version": "9.9.0"}))
    else:
        db = SqliteDatabase(data / "events.db")
        db.mark(FORMAT + 1, "9.9.0")
        db.close()
    before = {p.name: p.stat().st_mtime_ns for p in data.iterdir()}

    done = _cli("serve", "--port", "0", "--data-dir", str(data))

    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert "Traceback" not in done.stderr and "listening" not in done.stdout
    assert line.startswith("codey-server: ") and str(data) in line
    assert "codey 9.9.0" in line and f"codey {__version__}" in line
    assert f"format {FORMAT + 1}" in line and "run codey 9.9.0 or newer" in line
    assert "restore" in line
    assert {p.name: p.stat().st_mtime_ns for p in data.iterdir()} == before  # untouched


def test_an_old_data_dir_is_backed_up_migrated_and_told_once(seeded_server: Any) -> None:
    server: ServerProcess = seeded_server({})
    sid = _session(server, "")
    server.stop()
    data = server.data_dir
    _as_unmarked(data)
    (data / "mcp_tokens.json").write_text(json.dumps(OLD_TOKENS))

    server.start()

    log = server.log_text()
    [folder] = (data / BACKUPS_DIR).iterdir()
    assert f"backed up to {folder}" in log and "format 1 (codey 0.1.0 or earlier)" in log
    for migration in MIGRATIONS:
        assert f"migration {migration.number}: {migration.description}" in log
    assert read_manifest(folder).format == UNMARKED
    assert json.loads((folder / "mcp_tokens.json").read_text()) == OLD_TOKENS

    # the token can do what it could before, as the server sees it
    [token] = server.http.get("/api/mcp/tokens").json()
    assert (token["scope"], token["max_policy"]) == ("admin", "full-auto")

    # the browsers are told once: an event in the log, in the state until dismissed
    [notice] = _state(server)["upgrades"]
    assert (notice["from_format"], notice["to_format"]) == (UNMARKED, FORMAT)
    assert notice["backup"] == str(folder) and not notice["dismissed"]
    assert any("ci-agent" in c and "full-auto" in c for c in notice["changes"])
    assert any("workspace-write" in c for c in notice["changes"])
    assert sid in _state(server)["sessions"]

    server.restart()  # up to date now: no second backup, no second notice
    assert len(list((data / BACKUPS_DIR).iterdir())) == 1
    assert "backed up" not in server.log_text()
    assert len(_state(server)["upgrades"]) == 1


def test_a_backup_of_a_running_server_restores_into_a_new_data_dir(seeded_server: Any,
                                                                   tmp_path: Path) -> None:
    server: ServerProcess = seeded_server({})
    sids = [_session(server, f"prompt {n}") for n in range(3)]
    assert server.http.post("/api/tasks", json={"title": "a task"}).status_code == 201
    before = _settled(server, sids)
    copy = tmp_path / "backup"

    made = _cli("backup", str(copy), "--data-dir", str(server.data_dir))  # the server runs

    assert made.returncode == 0, made.stderr
    assert f"to {copy}" in made.stdout and f"seq {before['seq']}" in made.stdout
    _session(server, "after the backup")  # not in the copy
    new = tmp_path / "restored"
    refused = _cli("restore", str(copy), "--data-dir", str(server.data_dir))
    assert refused.returncode == 2
    assert "is not empty" in refused.stderr and "--force" in refused.stderr
    restored = _cli("restore", str(copy), "--data-dir", str(new))
    assert restored.returncode == 0, restored.stderr
    assert f"serve --data-dir {new}" in restored.stdout
    token = server.token
    server.stop()

    with ServerProcess(new) as again:
        assert again.token == token  # the same access token: browsers stay logged in
        after = _state(again)
    assert "backed up" not in again.log_text()  # no migration: the copy is marked current
    assert after["sessions"] == before["sessions"]
    assert after["tasks"] == before["tasks"]
    assert after["workers"].keys() == before["workers"].keys()
