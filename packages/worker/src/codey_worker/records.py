"""Exactly-once actions: a small on-disk record of the actions this worker has seen.

An action re-sent after a reconnect or a worker restart must be answered, never executed twice.
The connection layer uses the store like this::

    records = ActionRecords(home / "actions.sqlite3")
    existing = records.mark_started(action.action_id, raw_frame)   # atomic check-and-record
    if existing is None:            -> new: execute it, then
        records.finish(action_id, encoded ActionResult / ActionErrored frame)
    elif existing.status == "finished":
        -> send existing.response again (ActionAccepted(replayed=True) first, if wanted)
    elif existing.live:
        -> still running in this process: the result will be sent when it finishes
    else:
        -> "started" by a previous worker process that died mid-action: answer
           ActionErrored(code="interrupted") and finish() it with that frame. Never run it again.

Storage: one SQLite file in WAL mode, mode 0600. It is opened (``sqlite3`` imported, the
syncer thread started) by the first call that reads or writes a record: an idle worker needs
neither, and they are about 1.7 MiB of its memory (issue 27). The file is created, and what an
earlier process left in it flushed, when the store is made. The ``keep`` most recently started
or finished records are kept (a long command's answer is as fresh as its finish); older ones
are pruned after every write, except actions still running in this process. Methods are
synchronous and thread-safe (one lock), quick enough to call from the event loop.

Durability, with group commit:

* a returned ``mark_started``/``finish`` has been committed to the WAL file (written, not yet
  flushed to the disk): it survives the worker process dying any way it can — ``kill -9``, a
  crash, the OOM killer — which is what "never run twice" rests on;
* a syncer thread then flushes the WAL with one ``fdatasync`` for every batch of commits: those
  made within ``flush_delay_s`` (5 ms) of the first, and while the previous flush ran
  (``synchronous=NORMAL`` leaves the flushing to it). Concurrent actions share a flush, and so
  do an action's start and answer when it is quick; no action waits for the disk before it
  runs or before its answer goes out. :meth:`ActionRecords.sync` waits for it (``close``
  does).
* what a power cut (or a kernel crash) can lose is the last few milliseconds of records not
  flushed yet (the delay and one flush): an action started in that window could be run
  again after the machine comes back. A disk flush before every action would close the
  window at the cost of a flush (4 ms on the machine this was measured on) on every step.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import sqlite3

__all__ = ["ActionRecords", "Record"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    action_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL CHECK (status IN ('started', 'finished')),
    action BLOB NOT NULL,
    response BLOB,
    touched INTEGER NOT NULL  -- bumped on every write; pruning keeps the most recently touched
)
"""

_NEXT_TOUCH = "(SELECT coalesce(max(touched), 0) + 1 FROM records)"

#: how long the syncer lets commits gather before it flushes them (a commit delay: an
#: action's start and finish, or a burst of actions, share one fdatasync)
FLUSH_DELAY_S = 0.005


@dataclass(frozen=True)
class Record:
    """What the store knows about one action.

    ``live`` is True when this store instance (this process) started the action and has not
    finished it yet; a ``"started"`` record with ``live=False`` was left by a process that died.
    """

    action_id: str
    status: Literal["started", "finished"]
    action: bytes
    response: bytes | None = None
    live: bool = False


class ActionRecords:
    """Recent actions by id, on disk. See the module docstring for the order of calls."""

    def __init__(self, path: Path, keep: int = 500, flush_delay_s: float = FLUSH_DELAY_S) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.path = Path(path)
        self.keep = keep
        self.flush_delay_s = flush_delay_s
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Create the file ourselves so it (and SQLite's -wal/-shm, which copy its mode) is 0600.
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600))
        self._lock = threading.Lock()
        self._live: set[str] = set()
        # what an earlier process committed (and its syncer had not flushed) goes to the disk
        # now, before this process acts on it; this needs no SQLite
        self._flush_all()
        self._conn: sqlite3.Connection | None = None  # opened by ``_db``, under the lock
        # group commit: ``_written`` counts commits, ``_synced`` how many are on the disk
        self._sync_cond = threading.Condition()
        self._written = self._synced = 0
        self._armed = False  # the syncer has been woken for the commits since its last flush
        self._closing = False
        self.flushes = 0  # fdatasync calls made (for tests and benchmarks)
        self._syncer: threading.Thread | None = None

    @property
    def _db(self) -> sqlite3.Connection:
        """The database, opened on first use (callers hold ``_lock``)."""
        conn = self._conn
        if conn is None:
            if self._closing:
                raise RuntimeError("the action records are closed")
            conn = self._conn = self._open()
        return conn

    def _open(self) -> sqlite3.Connection:
        import sqlite3

        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        # commits are written, not flushed: the syncer thread flushes them in batches
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(_SCHEMA)
        conn.execute("CREATE INDEX IF NOT EXISTS records_touched ON records (touched)")
        self._syncer = threading.Thread(target=self._sync_loop, name="records-sync",
                                        daemon=True)
        self._syncer.start()
        # the schema of a new file is flushed with the first write's batch (the same WAL)
        return conn

    def close(self) -> None:
        """Flush what was written, stop the syncer, close the database."""
        with self._lock, self._sync_cond:  # the lock: no ``_db`` opens it meanwhile
            self._closing = True
            self._sync_cond.notify_all()
        if self._syncer is not None:
            self._syncer.join()
        with self._lock:
            if self._conn is not None:
                self._conn.close()

    def sync(self, timeout: float | None = None) -> bool:
        """Wait until every record written so far is on the disk; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._sync_cond:
            target = self._written
            while self._synced < target:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._sync_cond.wait(left)
        return True

    def __enter__(self) -> ActionRecords:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _flush_all(self) -> None:
        """fdatasync the WAL (and the database file): everything committed is on the disk."""
        for suffix in ("-wal", ""):
            try:
                fd = os.open(f"{self.path}{suffix}", os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)

    def _sync_loop(self) -> None:
        """The syncer: one fdatasync of the WAL per batch of commits (group commit)."""
        wal_fd: int | None = None
        try:
            while True:
                with self._sync_cond:
                    while self._synced == self._written and not self._closing:
                        self._sync_cond.wait()
                    if self._synced == self._written:  # closing, nothing left
                        return
                    # let the commits that follow (the action's answer, other actions') join
                    # this flush: they do not wake this thread again (``_armed``); close()
                    # cuts the wait short
                    self._sync_cond.wait_for(lambda: self._closing, self.flush_delay_s)
                    target = self._written
                    self._armed = False
                if wal_fd is None:
                    # the WAL stays the same file while this connection is open (SQLite
                    # resets it after a checkpoint, never deletes it then)
                    wal_fd = os.open(f"{self.path}-wal", os.O_RDONLY | os.O_CLOEXEC)
                os.fdatasync(wal_fd)
                with self._sync_cond:
                    self.flushes += 1
                    self._synced = max(self._synced, target)
                    self._sync_cond.notify_all()
        finally:
            if wal_fd is not None:
                os.close(wal_fd)

    def _wrote(self) -> None:
        with self._sync_cond:
            self._written += 1
            if not self._armed:  # one wake-up per flush, not one per commit
                self._armed = True
                self._sync_cond.notify_all()

    def get(self, action_id: str) -> Record | None:
        """The record of ``action_id``, or None if this worker never saw it (or pruned it)."""
        with self._lock:
            return self._get(action_id)

    def mark_started(self, action_id: str, action_bytes: bytes) -> Record | None:
        """Record that ``action_id`` is about to run. Returns None when it is new (run it);
        otherwise the existing record, unchanged — then do NOT run it."""
        with self._lock:
            existing = self._get(action_id)
            if existing is not None:
                return existing
            with self._transaction():
                self._db.execute(
                    "INSERT INTO records (action_id, status, action, touched)"
                    f" VALUES (?, 'started', ?, {_NEXT_TOUCH})",
                    (action_id, action_bytes),
                )
                self._live.add(action_id)
                self._prune()
            self._wrote()
            return None

    def finish(self, action_id: str, response_bytes: bytes) -> None:
        """Store the answer sent for ``action_id`` (the encoded result or error frame).

        Finishing an action that was never started (e.g. an error answered before running)
        records it as finished too. Finishing twice keeps the first response.
        """
        with self._lock, self._transaction():
            self._db.execute(
                "INSERT INTO records (action_id, status, action, response, touched)"
                f" VALUES (?, 'finished', x'', ?, {_NEXT_TOUCH})"
                " ON CONFLICT (action_id) DO UPDATE SET status = 'finished',"
                " response = excluded.response, touched = excluded.touched"
                " WHERE status = 'started'",
                (action_id, response_bytes),
            )
            self._live.discard(action_id)
            self._prune()
        self._wrote()

    def interrupted(self) -> list[str]:
        """Action ids started by an earlier process and never finished (it died mid-action)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT action_id FROM records WHERE status = 'started' ORDER BY seq"
            ).fetchall()
        return [row[0] for row in rows if row[0] not in self._live]

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT count(*) FROM records").fetchone()
        return int(count)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction: the change and its pruning, committed to the WAL."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _get(self, action_id: str) -> Record | None:
        row = self._db.execute(
            "SELECT status, action, response FROM records WHERE action_id = ?", (action_id,)
        ).fetchone()
        if row is None:
            return None
        status, action, response = row
        return Record(
            action_id=action_id,
            status=status,
            action=bytes(action),
            response=None if response is None else bytes(response),
            live=action_id in self._live,
        )

    def _prune(self) -> None:
        old = self._db.execute(
            "SELECT action_id FROM records WHERE touched <="
            " (SELECT touched FROM records ORDER BY touched DESC LIMIT 1 OFFSET ?)",
            (self.keep,),
        ).fetchall()
        doomed = [(row[0],) for row in old if row[0] not in self._live]
        if doomed:
            self._db.executemany("DELETE FROM records WHERE action_id = ?", doomed)
