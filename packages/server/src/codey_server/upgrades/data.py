"""Where the data is, as the upgrades see it: the data dir (its format marker, a file) and the
log's database (its format marker, a table; what the migrations read).

The marker is kept twice — ``format.json`` in the data dir and the table ``codey_format`` in
the log's database (SQLite's ``events.db``, or PostgreSQL) — because either may travel alone
(a database restored without its data dir, a replica's new data dir on an old database). Its
shape never changes, so that every later release can read it: ``{"format": N, "version":
"X.Y.Z"}`` in the file, the rows ``format`` and ``version`` in the table.

Synchronous on purpose: it runs at start, before the event loop and before anything else
opens the data. psycopg is imported only for a database URL.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Protocol

from codey_server.secretfile import write_secret_file
from codey_server.upgrades.errors import UpgradeError
from codey_server.upgrades.plan import Found

__all__ = ["FORMAT_FILE", "STATE_FILES", "LogDatabase", "PostgresDatabase", "SqliteDatabase",
           "mark_current", "open_database", "read_file_marker", "write_file_marker"]

#: the data dir's marker
FORMAT_FILE = "format.json"
#: the data dir's files that hold state (besides the log): one of them makes a data dir
#: "not new" even when its log is empty
STATE_FILES = ("mcp_tokens.json", "workers.json", "auth.json", "telegram.json")

_TABLE = ("CREATE TABLE IF NOT EXISTS codey_format "
          "(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
#: held by the replica that checks and migrates a PostgreSQL database, so replicas starting
#: together take turns ("codeyU" in ASCII)
_PG_LOCK = 0x636F64657955


def _found(values: dict[str, str], where: str) -> Found | None:
    if "format" not in values:
        return None
    try:
        number = int(values["format"])
    except (TypeError, ValueError):
        raise UpgradeError(f"codey-server: the format marker in {where} does not read "
                           f"({values['format']!r}); restore a backup, or put the marker "
                           "of the release that wrote the data back") from None
    return Found(format=number, version=str(values.get("version") or ""))


def read_file_marker(data_dir: Path) -> Found | None:
    """The data dir's marker (None: it has none)."""
    path = data_dir / FORMAT_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        values = json.loads(raw)
        if not isinstance(values, dict):
            raise ValueError("not an object")
    except ValueError:
        values = {"format": raw.decode(errors="replace")[:40]}
    return _found(values, str(path))


def write_file_marker(data_dir: Path, number: int, version: str) -> None:
    write_secret_file(data_dir / FORMAT_FILE, json.dumps(
        {"format": number, "version": version, "marked_at": time.time()}).encode() + b"\n")


class LogDatabase(Protocol):
    """The log's database, for the upgrades: its marker, whether it holds anything."""

    #: where it is, for messages (a path, or the URL without its password)
    where: str

    def marker(self) -> Found | None: ...

    def mark(self, number: int, version: str) -> None: ...

    def has_data(self) -> bool:
        """Whether it holds anything: events, a snapshot (among replicas, shared state)."""
        ...

    def has_event(self, type_: str) -> bool:
        """Whether it holds an event of this type (``session_created``)."""
        ...

    def close(self) -> None: ...


class SqliteDatabase:
    """``events.db``. Opened only if it exists; :meth:`mark` creates it (with its marker
    table alone: the event log adds its own tables when it opens)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)
        self._conn: sqlite3.Connection | None = None

    def _connect(self, create: bool = False) -> sqlite3.Connection | None:
        if self._conn is None and (create or self.path.exists()):
            self._conn = sqlite3.connect(self.path, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout=5000")
        return self._conn

    def _table(self, conn: sqlite3.Connection, name: str) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (name,)).fetchone() is not None

    def marker(self) -> Found | None:
        conn = self._connect()
        if conn is None or not self._table(conn, "codey_format"):
            return None
        return _found(dict(conn.execute("SELECT key, value FROM codey_format").fetchall()),
                      self.where)

    def mark(self, number: int, version: str) -> None:
        conn = self._connect(create=True)
        assert conn is not None
        with conn:  # one transaction
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_TABLE)
            conn.executemany("INSERT OR REPLACE INTO codey_format (key, value) VALUES (?, ?)",
                             [("format", str(number)), ("version", version),
                              ("marked_at", str(time.time()))])

    def has_data(self) -> bool:
        conn = self._connect()
        if conn is None:
            return False
        return any(self._table(conn, t) and conn.execute(
            f"SELECT 1 FROM {t} LIMIT 1").fetchone() is not None for t in ("events", "snapshots"))

    def has_event(self, type_: str) -> bool:
        conn = self._connect()
        if conn is None or not self._table(conn, "events"):
            return False
        return conn.execute("SELECT 1 FROM events WHERE type = ? LIMIT 1",
                            (type_,)).fetchone() is not None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PostgresDatabase:
    """The replicas' database. Holds a lock from :meth:`open` to :meth:`close`, so replicas
    starting together check and migrate it one at a time (the second finds it done).
    :attr:`conn` (autocommit) is there for the migrations' own statements."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = _without_password(url)
        self.conn: Any = None

    def open(self) -> PostgresDatabase:
        import psycopg

        try:
            self.conn = psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as err:
            raise UpgradeError(f"codey-server: cannot reach the database {self.where} to check "
                               f"its data format: {str(err).strip().splitlines()[0]}") from None
        self.conn.execute("SELECT pg_advisory_lock(%s)", (_PG_LOCK,))
        return self

    def _table(self, name: str) -> bool:
        return bool(self.conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                      (name,)).fetchone()[0])

    def marker(self) -> Found | None:
        if not self._table("codey_format"):
            return None
        rows = self.conn.execute("SELECT key, value FROM codey_format").fetchall()
        return _found({str(k): str(v) for k, v in rows}, self.where)

    def mark(self, number: int, version: str) -> None:
        with self.conn.transaction():
            self.conn.execute(_TABLE)
            for key, value in (("format", str(number)), ("version", version),
                               ("marked_at", str(time.time()))):
                self.conn.execute(
                    "INSERT INTO codey_format (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    def has_data(self) -> bool:
        # the log, and the shared state an older cluster may have left without a log of
        # this database (its tokens, its copies of the data dirs' files)
        return any(self._table(t) and self.conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM {t})").fetchone()[0]
            for t in ("codey_events", "codey_snapshots", "codey_mcp_tokens", "codey_files"))

    def has_event(self, type_: str) -> bool:
        if not self._table("codey_events"):
            return False
        return bool(self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM codey_events WHERE type = %s)", (type_,)).fetchone()[0])

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()  # the lock goes with the session
            self.conn = None


def _without_password(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def mark_current(data_dir: Path, db_name: str = "events.db") -> None:
    """Mark a data dir whose log was written by hand (a test's seeded log, a benchmark's) as
    data of this release: the server then opens it as it is, where it would take an unmarked
    log for codey 0.1.0's and migrate it."""
    from codey_protocol.version import __version__
    from codey_server.upgrades.plan import FORMAT

    db = SqliteDatabase(data_dir / db_name)
    try:
        db.mark(FORMAT, __version__)
    finally:
        db.close()
    write_file_marker(data_dir, FORMAT, __version__)


def open_database(db_path: Path, database_url: str | None) -> LogDatabase:
    """The log's database: PostgreSQL at ``database_url`` when given, else SQLite at
    ``db_path``."""
    if database_url:
        return PostgresDatabase(database_url).open()
    return SqliteDatabase(db_path)
