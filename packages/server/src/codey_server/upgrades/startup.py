"""The start-up check of the data's format: the thin driver of :func:`.plan.plan`.

Order of calls (``codey-server serve``, :mod:`codey_server.cli`)::

    prepare(settings)          # before anything opens the data: the services, the event log
    … the server starts …
    await announce(engine, settings.data_dir)   # the upgrade's notice, as an event

:func:`prepare` reads the markers (:mod:`.data`), asks :func:`.plan.plan`, and then:

- refuses: raises :class:`~.errors.DataTooNew`, whose message is the one line to print;
- no data yet: marks it with this code's format;
- older data: backs it up under ``DATA_DIR/backups/<time>-format<N>/`` (and says where), runs
  each migration's step (:data:`.migrations.STEPS`) in order with one log line each, keeps
  what the user must be told in ``DATA_DIR/upgrade-notice.json``, and marks the data last —
  so a start that stops half-way migrates again (the steps are idempotent) rather than
  leaving data marked as migrated that is not.

:func:`announce` records that notice through the engine's write path (``data_upgraded``,
decided by :func:`.decide.upgraded`), so every browser gets it, once, and forgets the file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from codey_protocol import events as ev
from codey_protocol.version import __version__
from codey_server.core.engine import Engine
from codey_server.secretfile import ensure_private_dir, read_secret_file, write_secret_file
from codey_server.settings import Settings
from codey_server.upgrades import decide
from codey_server.upgrades.backup import BACKUPS_DIR, backup, latest_backup
from codey_server.upgrades.data import (
    STATE_FILES,
    LogDatabase,
    PostgresDatabase,
    open_database,
    read_file_marker,
    write_file_marker,
)
from codey_server.upgrades.errors import DataTooNew
from codey_server.upgrades.migrations import STEPS, Data
from codey_server.upgrades.plan import FORMAT, UNMARKED, Found, Plan, Refusal, plan

__all__ = ["PENDING", "announce", "prepare"]

log = logging.getLogger("codey.upgrades")

#: the notices of upgrades not yet recorded in the log (a list of ``data_upgraded`` events)
PENDING = "upgrade-notice.json"
#: the tables a backup before a migration keeps among replicas: those the migrations change
#: (the rest of the database is pg_dump's, docs/deploy.md)
PG_TABLES = ("codey_format", "codey_mcp_tokens", "codey_files")

_pending = msgspec.json.Decoder(list[ev.DataUpgraded])


def _found(marks: list[Found], has_data: Callable[[], bool]) -> Found | None:
    """The data's format as its markers say: the newest when one is newer than this code
    (refuse), else the oldest (migrating from there again is harmless); unmarked data is
    :data:`UNMARKED`; None: no data."""
    if marks:
        newest = max(marks, key=lambda m: m.format)
        return newest if newest.format > FORMAT else min(marks, key=lambda m: m.format)
    return Found(format=UNMARKED) if has_data() else None


def _release(found: Found) -> str:
    if found.version:
        return f"codey {found.version}"
    return "codey 0.1.0 or earlier" if found.format == UNMARKED else "an unknown release"


def prepare(settings: Settings, *, now: Callable[[], float] = time.time) -> Plan:
    """Check the data's format and bring it to this code's (see the module). Returns the plan
    carried out; raises :class:`~.errors.DataTooNew` (nothing touched) when this code cannot
    read the data, :class:`~.errors.UpgradeError` when a marker or a migration fails."""
    data_dir = settings.data_dir
    db = open_database(settings.db_path, settings.database_url)
    try:
        file_mark, db_mark = read_file_marker(data_dir), db.marker()
        marks = [m for m in (file_mark, db_mark) if m is not None]
        found = _found(marks, lambda: db.has_data() or any(
            (data_dir / name).exists() for name in STATE_FILES))
        restorable = None if settings.database_url else latest_backup(data_dir, FORMAT)
        decided = plan(found, backup=str(restorable or ""))
        if isinstance(decided, Refusal):
            where = db.where if settings.database_url else str(data_dir)
            raise DataTooNew(decided.line(where))
        ensure_private_dir(data_dir)
        if decided.steps:
            assert found is not None
            _migrate(settings, db, decided, found, now())
        current = Found(format=FORMAT, version=__version__)
        if db_mark != current:
            db.mark(FORMAT, __version__)
        if file_mark != current:
            write_file_marker(data_dir, FORMAT, __version__)
        return decided
    finally:
        db.close()


def _migrate(settings: Settings, db: LogDatabase, decided: Plan, found: Found,
             at: float) -> None:
    """Back up, run the steps, keep the notice (see the module)."""
    data_dir = settings.data_dir
    name = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(at))}-format{found.format}"
    folder = data_dir / BACKUPS_DIR / name
    n = 1
    while folder.exists():
        n += 1
        folder = data_dir / BACKUPS_DIR / f"{name}-{n}"
    pg = db.conn if isinstance(db, PostgresDatabase) else None
    backup(data_dir, folder, db_path=None if pg is not None else settings.db_path,
           pg=pg, pg_tables=PG_TABLES, reason="migration")
    log.info("data format %d (%s) is older than this release's (%d, codey %s): backed up to "
             "%s%s before migrating", found.format, _release(found), decided.target,
             __version__, folder, " (the rows the migrations change; the whole database: "
             "pg_dump, docs/deploy.md)" if pg is not None else "")
    changes: list[str] = []
    for migration in decided.steps:
        told = STEPS[migration.number](Data(data_dir=data_dir, db=db))
        log.info("migration %d: %s%s", migration.number, migration.description,
                 "" if told else " (nothing to change)")
        changes += told
    notice = ev.DataUpgraded(upgrade_id=folder.name, from_format=found.format,
                             to_format=decided.target, version=__version__, changes=changes,
                             backup=str(folder))
    path = data_dir / PENDING
    waiting = _read_pending(path)
    write_secret_file(path, msgspec.json.encode([*waiting, notice]))


def _read_pending(path: Path) -> list[ev.DataUpgraded]:
    raw = read_secret_file(path)
    if not raw:
        return []
    try:
        return _pending.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        log.warning("%s does not read (%s): its notice is lost", path, err)
        return []


async def announce(engine: Engine, data_dir: Path) -> None:
    """Record the notices :func:`prepare` kept (once the engine has started), then forget
    them. Each is recorded once, even if this runs again before the file is gone."""
    path = data_dir / PENDING
    try:
        for notice in _read_pending(path):
            await engine.submit(decide.upgraded, notice)
    except Exception:  # the server runs on; the file stays for the next start
        log.exception("the upgrade's notice could not be recorded; the next start tries again")
        return
    path.unlink(missing_ok=True)
