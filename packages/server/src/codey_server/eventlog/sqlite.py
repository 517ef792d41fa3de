"""``SqliteEventLog``: the log in one SQLite file (WAL), with group commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from codey_protocol.codec import encode
from codey_protocol.events import Envelope, Event
from codey_protocol.upcasting import current_json_many
from codey_server.errors import AppendConflict, LogClosed, ServerError
from codey_server.eventlog.base import (
    SNAPSHOTS_KEPT,
    EventLog,
    Fence,
    _decode_many,
    _envelope,
    _tag,
    no_leases,
    sessions_of,
)

__all__ = ["SqliteEventLog"]

T = TypeVar("T")

_log = logging.getLogger("codey_server.eventlog")


def _trimmed_through(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'trimmed_through'").fetchone()
    return int(row[0]) if row else 0


#: the tables as sqlite-utils created them before (the same SQL, so old and new files match)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS "events" (
   "seq" INTEGER PRIMARY KEY,
   "ts" REAL,
   "session_id" TEXT,
   "type" TEXT,
   "envelope" BLOB
);
CREATE INDEX IF NOT EXISTS "idx_events_session_id"
    ON "events" ("session_id");
CREATE TABLE IF NOT EXISTS "snapshots" (
   "seq" INTEGER PRIMARY KEY,
   "data" BLOB
);
CREATE TABLE IF NOT EXISTS "meta" (
   "key" TEXT PRIMARY KEY,
   "value" INTEGER
);
"""

_INSERT = "INSERT INTO events (seq, ts, session_id, type, envelope) VALUES (?, ?, ?, ?, ?)"
#: a session's last stored seq (the session index holds the seq: one step down the b-tree)
_HEAD = "SELECT seq FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1"


# An append request is a plain tuple: building it is on the hot path of every append.
# (events, future, expected)
_AppendRequest = tuple[list[tuple[str | None, Event]], "asyncio.Future[list[Envelope]]",
                       int | None]


class _CallRequest:
    """Run ``fn(conn)`` on the writer thread in its own transaction (snapshots, pragmas)."""

    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], future: asyncio.Future[Any]):
        self.fn = fn
        self.future = future


_STOP = object()


def _resolve(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


def _reject(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _conflict(conn: sqlite3.Connection, heads: dict[str, int], known: dict[str, int],
              events: list[tuple[str | None, Event]], expected: int) -> AppendConflict | None:
    """The refusal of an append decided at ``expected`` whose sessions moved on after it, or
    None. A session's last seq is read from ``heads`` (what this group has set so far), then
    ``known`` (what the commits before left), then the table (and kept in ``heads``)."""
    for sid in sessions_of(events):
        head = heads.get(sid)
        if head is None:
            head = known.get(sid)
            if head is None:
                row = conn.execute(_HEAD, (sid,)).fetchone()
                head = row[0] if row else 0
            heads[sid] = head
        if head > expected:
            return AppendConflict(sid, head, expected)
    return None


def _stored(conn: sqlite3.Connection, after_seq: int, limit: int) -> list[bytes]:
    """The stored envelopes after ``after_seq``, at most ``limit`` (negative: all)."""
    cur = conn.execute("SELECT envelope FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                       (after_seq, limit))
    return [row[0] for row in cur]


class SqliteEventLog(EventLog):
    """The log in one SQLite file (WAL, ``synchronous=FULL``), with group commit.

    One dedicated writer thread owns the only writing connection. :meth:`append` queues a
    request; the writer takes everything queued at that moment, assigns seqs, and commits it all
    in one transaction (one fsync). Callers are answered and subscribers fed on the event loop
    after the commit, in seq order. Reads go through a separate pool of reader connections.

    :attr:`commits` counts append transactions (for tests and benchmarks).
    """

    #: Reader threads (each with its own connection); WAL lets them read while the writer writes.
    READERS = 2

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.commits = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writer: threading.Thread | None = None
        self._writer_done: asyncio.Future[None] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._broken: BaseException | None = None  # why the writer thread died, if it did
        self._next_seq = 1  # owned by the writer thread once it runs
        # each session's last stored seq, as far as the writer thread has read or written it
        # (it is the file's only writer); owned by that thread, forgotten by a trim
        self._heads: dict[str, int] = {}
        self._readers: ThreadPoolExecutor | None = None
        self._reader_local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()

    # lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._writer is not None:
            raise ServerError("the event log is already open")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._closed = False
        self._closing = None
        self._broken = None
        ready: asyncio.Future[int] = loop.create_future()
        self._writer_done = loop.create_future()
        self._writer = threading.Thread(
            target=self._writer_main, args=(loop, ready), name="eventlog-writer", daemon=True
        )
        self._writer.start()
        try:
            self._last_seq = await ready
        except BaseException:
            self._writer = None
            raise
        self._readers = ThreadPoolExecutor(
            max_workers=self.READERS,
            thread_name_prefix="eventlog-reader",
            initializer=self._open_reader,
        )

    async def close(self) -> None:
        if self._closing is not None:  # a second caller waits for the first one's close
            await asyncio.shield(self._closing)
            return
        self._closing = asyncio.get_running_loop().create_future()
        try:
            await self._close()
        finally:
            self._closing.set_result(None)

    async def _close(self) -> None:
        self._closed = True  # from now on append() refuses, so _STOP is the last request
        if self._writer is not None and self._writer_done is not None:
            self._queue.put(_STOP)
            # Resolved by call_soon_threadsafe after every earlier delivery callback (FIFO),
            # so all in-flight appends have been answered and published when this returns.
            await self._writer_done
            self._writer = None
        self._end_subscribers()
        if self._readers is not None:
            readers, self._readers = self._readers, None
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: readers.shutdown(wait=True)
            )
        with self._reader_lock:
            conns, self._reader_conns = self._reader_conns, []
        for conn in conns:
            conn.close()

    # writing ------------------------------------------------------------------------------

    async def append(self, events: Sequence[tuple[str | None, Event]], *,
                     fence: Fence | None = None,
                     expected: int | None = None) -> list[Envelope]:
        if self._closed or self._loop is None or self._broken is not None:
            raise self._refusal()
        if fence is not None:  # one server: no leases (see EventLog)
            raise no_leases(fence)
        if not events:
            return []
        future: asyncio.Future[list[Envelope]] = self._loop.create_future()
        self._queue.put((list(events), future, expected))
        return await future

    async def save_snapshot(self, seq: int, data: bytes) -> None:
        payload = bytes(data)

        def save(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO snapshots (seq, data) VALUES (?, ?)", (seq, payload)
            )
            conn.execute(
                "DELETE FROM snapshots WHERE seq NOT IN "
                "(SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?)",
                (SNAPSHOTS_KEPT,),
            )

        await self._call_writer(save)

    async def pragmas(self) -> dict[str, Any]:
        """``journal_mode`` and ``synchronous`` as the writing connection sees them."""

        def query(conn: sqlite3.Connection) -> dict[str, Any]:
            return {
                "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
                "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],
            }

        result: dict[str, Any] = await self._call_writer(query)
        return result

    async def _call_writer(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed or self._loop is None or self._broken is not None:
            raise self._refusal()
        future: asyncio.Future[T] = self._loop.create_future()
        self._queue.put(_CallRequest(fn, future))
        return await future

    def _refusal(self) -> LogClosed:
        if self._broken is not None:
            return LogClosed(f"the event log writer stopped: {self._broken!r}")
        return LogClosed("the event log is closed")

    def _writer_main(self, loop: asyncio.AbstractEventLoop, ready: asyncio.Future[int]) -> None:
        try:
            conn = self._connect_writer()
        except BaseException as exc:
            loop.call_soon_threadsafe(_reject, ready, exc)
            return
        loop.call_soon_threadsafe(_resolve, ready, self._next_seq - 1)
        in_hand: list[Any] = []
        try:
            self._writer_loop(conn, loop, in_hand)
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            _log.exception("event log writer thread crashed")
            loop.call_soon_threadsafe(self._writer_crashed, exc, in_hand)
        finally:
            conn.close()
            assert self._writer_done is not None
            loop.call_soon_threadsafe(_resolve, self._writer_done, None)

    def _connect_writer(self) -> sqlite3.Connection:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # a log created before files were kept private (or copied in by hand): SQLite gives the
        # -wal and -shm files the main file's mode, so tighten all three before opening
        for part in (self.path, self.path.with_name(self.path.name + "-wal"),
                     self.path.with_name(self.path.name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                if part.stat().st_mode & 0o077:
                    os.chmod(part, 0o600)
        # Autocommit mode: transactions are opened and committed explicitly below.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout=5000")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ServerError(f"cannot put {self.path} in WAL mode (got {mode!r})")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            last = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
            trimmed = _trimmed_through(conn)
        except BaseException:
            conn.close()
            raise
        # a trim may have deleted the newest events: never hand their seqs out again
        self._next_seq = max(last or 0, trimmed) + 1
        self._heads = {}
        return conn

    def _writer_loop(
        self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop, in_hand: list[Any]
    ) -> None:
        """Commit queued requests group by group until _STOP; ``in_hand`` holds the current
        group so that a crash can still answer its callers."""
        get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            in_hand.clear()
            requests = in_hand
            requests.append(get())
            # Everything queued while the previous transaction was being written goes into
            # this one: that is the group commit.
            with contextlib.suppress(queue.Empty):
                while True:
                    requests.append(get_nowait())
            stop = requests[-1] is _STOP  # close() refuses new requests before queueing _STOP
            if stop:
                requests.pop()
            appends: list[_AppendRequest] = [r for r in requests if type(r) is tuple]
            if appends:
                self._commit_group(conn, loop, appends)
            if len(appends) != len(requests):
                self._run_calls(conn, loop, requests)
            if stop:
                return
            # Nothing of this group may stay referenced while get() waits for the next: a
            # loop variable kept the last snapshot's payload (the whole state, encoded) alive
            # until the next call, as much memory again as the state took (issue 36).
            del appends

    def _commit_group(
        self,
        conn: sqlite3.Connection,
        loop: asyncio.AbstractEventLoop,
        requests: list[_AppendRequest],
    ) -> None:
        seq = self._next_seq
        ts = time.time()
        rows: list[tuple[int, float, str | None, str, bytes]] = []
        batch: list[Envelope] = []
        answers: list[tuple[asyncio.Future[list[Envelope]], list[Envelope]]] = []
        refused: list[tuple[asyncio.Future[list[Envelope]], BaseException]] = []
        # each session's last seq as the appends before in this group leave it
        heads: dict[str, int] = {}
        failed: BaseException | None = None
        try:
            # the expected positions are read inside the transaction that inserts
            conn.execute("BEGIN IMMEDIATE")
            for events, future, expected in requests:
                if expected is not None:
                    conflict = _conflict(conn, heads, self._heads, events, expected)
                    if conflict is not None:  # this request only; it takes no seq
                        refused.append((future, conflict))
                        continue
                envs: list[Envelope] = []
                mark = len(rows)
                try:
                    for session_id, event in events:
                        tag = _tag(event)
                        env = _envelope(seq, ts, session_id, event, tag)
                        rows.append((seq, ts, session_id, tag, encode(env)))
                        envs.append(env)
                        seq += 1
                except Exception as exc:
                    # Only this request is refused; its seqs go to the next one (no gap).
                    del rows[mark:]
                    seq -= len(envs)
                    refused.append((future, exc))
                    continue
                for env in envs:
                    if env.session_id is not None:
                        heads[env.session_id] = env.seq
                answers.append((future, envs))
                batch.extend(envs)
            if rows:
                conn.executemany(_INSERT, rows)
            conn.execute("COMMIT")
        except Exception as exc:
            failed = exc
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            # every request not yet answered (the failure came before its turn) gets it too
            handled = {id(f) for f, _ in answers} | {id(f) for f, _ in refused}
            answers += [(r[1], []) for r in requests if id(r[1]) not in handled]
        else:
            self._heads.update(heads)
            if rows:
                self._next_seq = seq
                self.commits += 1
        loop.call_soon_threadsafe(self._deliver, answers, refused, batch, failed)

    def _deliver(
        self,
        answers: list[tuple[asyncio.Future[list[Envelope]], list[Envelope]]],
        refused: list[tuple[asyncio.Future[list[Envelope]], BaseException]],
        batch: list[Envelope],
        failed: BaseException | None,
    ) -> None:
        """On the event loop, after the commit: answer callers, then publish the batch."""
        for future, exc in refused:
            # a conflict with an append of the failed group would name a seq never committed
            _reject(future, failed if failed is not None and isinstance(exc, AppendConflict)
                    else exc)
        if failed is not None:
            for future, _ in answers:
                _reject(future, failed)
            return
        for future, envs in answers:
            if not future.done():  # done if the caller was cancelled
                future.set_result(envs)
        if batch:
            self._publish(batch)

    def _run_calls(self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop,
                   requests: list[Any]) -> None:
        for req in requests:
            if type(req) is _CallRequest:
                self._run_call(conn, loop, req)

    def _run_call(
        self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop, req: _CallRequest
    ) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
            result = req.fn(conn)
            conn.execute("COMMIT")
        except Exception as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            loop.call_soon_threadsafe(_reject, req.future, exc)
        else:
            loop.call_soon_threadsafe(_resolve, req.future, result)

    def _writer_crashed(self, exc: BaseException, in_hand: list[Any]) -> None:
        """On the event loop: refuse every queued and future request (none can be added now)."""
        self._broken = exc
        error = self._refusal()
        with contextlib.suppress(queue.Empty):
            while True:
                in_hand.append(self._queue.get_nowait())
        for req in in_hand:
            if isinstance(req, tuple):
                _reject(req[1], error)
            elif isinstance(req, _CallRequest):
                _reject(req.future, error)

    # reading ------------------------------------------------------------------------------

    def _open_reader(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA query_only=1")
        self._reader_local.conn = conn
        with self._reader_lock:
            self._reader_conns.append(conn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        readers = self._readers
        if readers is None:
            raise LogClosed("the event log is closed")
        local = self._reader_local
        return await asyncio.get_running_loop().run_in_executor(readers, lambda: fn(local.conn))

    async def read(self, after_seq: int, limit: int | None = None) -> list[Envelope]:
        return _decode_many(await self._read_stored(after_seq, -1 if limit is None else limit))

    async def read_session(self, session_id: str) -> list[Envelope]:
        return _decode_many(await self.read_session_stored(session_id))

    async def read_session_stored(self, session_id: str) -> list[bytes]:
        def query(conn: sqlite3.Connection) -> list[bytes]:
            cur = conn.execute(
                "SELECT envelope FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
            )
            return [bytes(row[0]) for row in cur]

        return await self._read(query)

    async def read_raw(self, after_seq: int, limit: int) -> list[bytes]:
        # (in the reader thread: an older envelope's upcasting costs the loop nothing)
        return await self._read(lambda conn: current_json_many(_stored(conn, after_seq, limit)))

    async def _read_stored(self, after_seq: int, limit: int) -> list[bytes]:
        return await self._read(lambda conn: _stored(conn, after_seq, limit))

    async def latest_snapshot(self) -> tuple[int, bytes] | None:
        def query(conn: sqlite3.Connection) -> tuple[int, bytes] | None:
            row = conn.execute(
                "SELECT seq, data FROM snapshots ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            return None if row is None else (int(row[0]), bytes(row[1]))

        return await self._read(query)

    async def first_seq(self) -> int:
        def query(conn: sqlite3.Connection) -> int:
            trimmed = _trimmed_through(conn)
            if trimmed:
                return trimmed + 1
            return int(conn.execute("SELECT min(seq) FROM events").fetchone()[0] or 0)

        return await self._read(query)

    async def trim(self, keep: Collection[str], through_seq: int) -> int:
        kept = msgspec.json.encode(sorted(keep)).decode()

        def delete(conn: sqlite3.Connection) -> int:  # one transaction (_run_call)
            self._heads.clear()  # (on the writer thread) the trimmed sessions' go back
            gone = conn.execute(
                "DELETE FROM events WHERE seq <= ? AND session_id IS NOT NULL AND "
                "session_id NOT IN (SELECT value FROM json_each(?))",
                (through_seq, kept)).rowcount
            if gone:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('trimmed_through', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)",
                    (through_seq,))
            conn.execute("DELETE FROM snapshots WHERE seq < ?", (through_seq,))
            return int(gone)

        return await self._call_writer(delete)
