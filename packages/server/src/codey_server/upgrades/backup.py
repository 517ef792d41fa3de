"""Backups of a server's data, and restoring one into a new data dir.

A backup is a folder::

    backup.json   what it is (below); written last, so a folder without it is no backup
    events.db     the event log, copied with SQLite's online backup API: a consistent copy
                  of a log a running server keeps writing to
    …             every other file of the data dir (credentials, tokens, keys, blobs,
                  format.json), as they were

``backup.json`` says which release made it, the data's format, the last seq of the log, where
the data came from, and its database: ``sqlite`` (everything is in the folder), or
``postgresql`` (the log and the shared state are in the database: only the data dir's files
are in the folder, and, for a backup made before a migration, the rows the migrations
change, in ``postgres/<table>.jsonl``; ``pg_dump`` backs up the database, docs/deploy.md).

The data dir's ``backups/`` (where the server puts the backup it makes before a migration)
is never part of a backup, and a restore leaves it where it is.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec

from codey_protocol.version import __version__
from codey_server.secretfile import ensure_private_dir, write_secret_file
from codey_server.upgrades.data import SqliteDatabase, read_file_marker
from codey_server.upgrades.errors import BackupRefused
from codey_server.upgrades.plan import UNMARKED

__all__ = ["BACKUPS_DIR", "MANIFEST", "Manifest", "backup", "latest_backup", "read_manifest",
           "restore"]

MANIFEST = "backup.json"
#: where, in the data dir, the server keeps the backups it makes before migrations
BACKUPS_DIR = "backups"
#: the log's files: copied through SQLite, never as files
_LOG_FILES = ("events.db", "events.db-wal", "events.db-shm", "events.db-journal")


class Manifest(msgspec.Struct, kw_only=True):
    """``backup.json``."""

    #: the release that made the backup
    version: str
    #: the data's format (``format.json``'s, else the log's marker; 1: not marked)
    format: int
    created_at: float
    #: the data dir it was made from
    source: str
    database: Literal["sqlite", "postgresql"] = "sqlite"
    #: the log's last seq in the copy (SQLite)
    seq: int = 0
    #: the data dir's files copied (the log not counted)
    files: int = 0
    #: why it was made: ``manual`` (``codey-server backup``) or ``migration``
    reason: Literal["manual", "migration"] = "manual"


_decode_manifest = msgspec.json.Decoder(Manifest).decode


def _files(data_dir: Path) -> Iterator[Path]:
    """The data dir's files to copy (relative paths): all but the log and backups/."""
    for root, dirs, names in os.walk(data_dir):
        here = Path(root)
        if here == data_dir:
            dirs[:] = [d for d in dirs if d != BACKUPS_DIR]
        dirs.sort()
        for name in sorted(names):
            rel = (here / name).relative_to(data_dir)
            if here == data_dir and name in _LOG_FILES:
                continue
            if name.startswith(".") and name.endswith(".tmp"):  # a write under way
                continue
            yield rel


def _copy_file(src: Path, dst: Path) -> None:
    ensure_private_dir(dst.parent)
    shutil.copy2(src, dst)
    os.chmod(dst, 0o600)


def _empty_target(dest: Path) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupRefused(f"codey-server: {dest} is not an empty folder; back up into a "
                            "new one")
    ensure_private_dir(dest)


def _inside(folder: Path, data_dir: Path) -> bool:
    """Whether ``folder`` is the data dir or in it, elsewhere than under its backups/ (a
    backup there would copy itself; a restore would delete it)."""
    return folder == data_dir or (data_dir in folder.parents
                                  and (data_dir / BACKUPS_DIR) not in folder.parents)


def _copy_log(db_path: Path, dest: Path) -> int:
    """Copy the log with SQLite's online backup (one step: a consistent snapshot, taken while
    a server may be appending); its last seq."""
    source = sqlite3.connect(db_path)
    try:
        source.execute("PRAGMA busy_timeout=5000")
        target = sqlite3.connect(dest)
        try:
            source.backup(target)
            # a copy that stands alone (the live log is in WAL mode; its copy needs no -wal)
            target.execute("PRAGMA journal_mode=DELETE")
            has_events = target.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                        "AND name = 'events'").fetchone() is not None
            row = target.execute("SELECT max(seq) FROM events").fetchone() if has_events \
                else None
        finally:
            target.close()
    finally:
        source.close()
    os.chmod(dest, 0o600)
    return int(row[0] or 0) if row else 0


def backup(data_dir: Path, dest: Path, *, db_path: Path | None = None,
           pg: Any = None, pg_tables: tuple[str, ...] = (),
           reason: Literal["manual", "migration"] = "manual") -> Manifest:
    """Back the data dir ``data_dir`` up into ``dest`` (a new or empty folder): the log at
    ``db_path`` (SQLite; None: the log is in PostgreSQL), every other file, and, among
    replicas, the rows of ``pg_tables`` read on the connection ``pg``. Returns what
    ``backup.json`` says. Raises :class:`BackupRefused` when ``dest`` is not empty."""
    data_dir = data_dir.resolve()
    dest = dest.resolve()
    if _inside(dest, data_dir):
        raise BackupRefused(f"codey-server: {dest} is inside the data dir; back up elsewhere "
                            f"(or under its {BACKUPS_DIR}/)")
    _empty_target(dest)
    seq = 0
    database: Literal["sqlite", "postgresql"] = "postgresql" if db_path is None else "sqlite"
    found = read_file_marker(data_dir)
    if db_path is not None and db_path.exists():
        seq = _copy_log(db_path, dest / "events.db")
        db = SqliteDatabase(dest / "events.db")
        try:
            found = db.marker() or found
        finally:
            db.close()
    files = 0
    for rel in _files(data_dir):
        try:
            _copy_file(data_dir / rel, dest / rel)
        except FileNotFoundError:  # deleted while we copied (a blob, a temporary file)
            continue
        files += 1
    if pg is not None and pg_tables:
        _copy_rows(pg, pg_tables, dest / "postgres")
    manifest = Manifest(version=__version__, format=found.format if found else UNMARKED,
                        created_at=time.time(), source=str(data_dir), database=database,
                        seq=seq, files=files, reason=reason)
    write_secret_file(dest / MANIFEST, msgspec.json.format(msgspec.json.encode(manifest)))
    return manifest


def _copy_rows(conn: Any, tables: tuple[str, ...], folder: Path) -> None:
    """Each table of ``tables`` that exists, as JSON lines (bytes as base64)."""
    ensure_private_dir(folder)
    for table in tables:
        if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
            continue
        cur = conn.execute(f"SELECT * FROM {table}")
        names = [c.name for c in cur.description]
        lines = []
        for row in cur.fetchall():
            lines.append(json.dumps({n: ({"base64": base64.b64encode(bytes(v)).decode()}
                                         if isinstance(v, bytes | memoryview) else v)
                                     for n, v in zip(names, row, strict=True)}))
        write_secret_file(folder / f"{table}.jsonl", "".join(f"{x}\n" for x in lines).encode())


def read_manifest(folder: Path) -> Manifest:
    """What a backup folder holds; :class:`BackupRefused` if it is no backup."""
    try:
        return _decode_manifest((folder / MANIFEST).read_bytes())
    except FileNotFoundError:
        raise BackupRefused(f"codey-server: {folder} is not a backup (it has no {MANIFEST}; "
                            "make one with codey-server backup)") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise BackupRefused(f"codey-server: {folder / MANIFEST} does not read: {err}") from None


def restore(folder: Path, data_dir: Path, *, force: bool = False) -> Manifest:
    """Restore the backup in ``folder`` into ``data_dir``, which must be new or empty —
    unless ``force``: then what is in it goes first (but its ``backups/``). Stop the server
    of that data dir before. Returns the backup's manifest."""
    folder, data_dir = folder.resolve(), data_dir.resolve()
    manifest = read_manifest(folder)
    present = sorted(p.name for p in data_dir.iterdir()) if data_dir.is_dir() else []
    if data_dir.exists() and not data_dir.is_dir():
        raise BackupRefused(f"codey-server: {data_dir} is a file, not a data dir")
    if present and not force:
        shown = ", ".join(present[:4]) + (", …" if len(present) > 4 else "")
        raise BackupRefused(
            f"codey-server: {data_dir} is not empty ({shown}): restore into a new data dir, "
            "or add --force to replace what is there")
    if _inside(folder, data_dir):
        raise BackupRefused(f"codey-server: the backup {folder} is inside {data_dir}; move it "
                            "out first")
    ensure_private_dir(data_dir)
    for name in present:
        if name == BACKUPS_DIR:
            continue
        path = data_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        if here == folder:
            dirs[:] = [d for d in dirs if d != "postgres"]  # rows, for pg_restore by hand
        for name in names:
            rel = (here / name).relative_to(folder)
            if rel == Path(MANIFEST):
                continue
            _copy_file(here / name, data_dir / rel)
    return manifest


def latest_backup(data_dir: Path, readable: int) -> Path | None:
    """The newest backup under the data dir's ``backups/`` whose data is in a format up to
    ``readable`` and that holds its log (None: none)."""
    best: tuple[float, Path] | None = None
    root = data_dir / BACKUPS_DIR
    if not root.is_dir():
        return None
    for folder in root.iterdir():
        try:
            manifest = read_manifest(folder)
        except BackupRefused:
            continue
        if manifest.format <= readable and manifest.database == "sqlite" and (
                best is None or manifest.created_at > best[0]):
            best = (manifest.created_at, folder)
    return best[1] if best else None
