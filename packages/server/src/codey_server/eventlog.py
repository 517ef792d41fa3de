"""The event log: every state change, in one gapless sequence (design §3).

Each event is stored as an :class:`~codey_protocol.events.Envelope` with a global ``seq``
(1, 2, 3, … with no gaps), ``ts`` (unix time of its commit), ``session_id`` (``None`` for global
events) and the event itself, tagged by ``type``.

Order of calls::

    log = SqliteEventLog(path)        # or MemoryEventLog()
    await log.open()
    sub = log.subscribe()             # attach live first …
    missed = await log.read(after_seq)   # … then catch up; drop live duplicates by seq
    envs = await log.append([(session_id, event), ...])
    async for batch in sub: ...
    await log.close()                 # finishes in-flight appends, then ends subscriptions

Guarantees every implementation gives (checked by ``codey_server.testing.eventlog_contract``,
which each backend's tests subclass):

- one :meth:`EventLog.append` call is one atomic group: its events get consecutive seqs and are
  committed together, or not at all (then the caller gets the exception and no seq is used);
- subscribers receive exactly the committed events, in seq order, and only after their commit,
  so an event a subscriber sees is already readable;
- a subscriber that falls ``maxsize`` batches behind is dropped with :class:`SubscriberOverflow`
  and resumes from the log with ``after_seq`` — the log is the buffer.

Retention (:meth:`EventLog.trim`, driven by :mod:`codey_server.retention`) deletes the events
of finished sessions up to a snapshot. The seqs stay gapless as numbers handed out, but the
stored log then has holes below :meth:`EventLog.first_seq`; a reader resuming from before it
gets a snapshot instead (``clients.py``).

:class:`SqliteEventLog` group-commits: concurrent appends that queue up while a transaction is
being written go into the next transaction together, so throughput does not fall to one fsync
per append.
"""

from __future__ import annotations

import abc
import asyncio
import bisect
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import sqlite_utils

from codey_protocol.codec import encode
from codey_protocol.errors import ProtocolError
from codey_protocol.events import Envelope, Event
from codey_server.errors import LogClosed, ServerError, SubscriberOverflow

__all__ = [
    "EventLog",
    "LogClosed",
    "MemoryEventLog",
    "SqliteEventLog",
    "SubscriberOverflow",
    "Subscription",
]

T = TypeVar("T")

_log = logging.getLogger(__name__)

#: How many snapshots :meth:`EventLog.save_snapshot` keeps (the newest ones).
SNAPSHOTS_KEPT = 3

# Decoding a whole page as one JSON array is several times faster than one decode per row.
_envelope_list = msgspec.json.Decoder(list[Envelope])


def _decode_many(blobs: list[bytes]) -> list[Envelope]:
    if not blobs:
        return []
    try:
        return _envelope_list.decode(b"[" + b",".join(blobs) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise ProtocolError("bad_frame", f"stored envelope does not decode: {err}") from None


_tags: dict[type, str] = {}


def _tag(event: Event) -> str:
    """The ``type`` tag of an event, cached per class (it is read once per stored event)."""
    cls = type(event)
    try:
        return _tags[cls]
    except KeyError:
        config = getattr(cls, "__struct_config__", None)
        tag = getattr(config, "tag", None)
        if not isinstance(tag, str):
            raise TypeError(f"{cls.__name__} is not a tagged protocol event") from None
        _tags[cls] = tag
        return tag


class Subscription:
    """Live batches of committed envelopes, from :meth:`EventLog.subscribe`.

    Each batch is a ``list[Envelope]`` in seq order (one committed group); batches arrive in seq
    order. Batch lists are shared between subscribers: do not mutate them.

    The queue holds at most ``maxsize`` batches. When one more arrives, the subscription is
    marked :attr:`overflowed`, detached from the log, its buffer dropped, and :meth:`get` raises
    :class:`SubscriberOverflow`: resume with ``log.read(last_seen_seq)``.

    When the log closes, :meth:`get` returns what is still buffered, then raises
    :class:`LogClosed`; ``async for`` simply ends. After :meth:`close`, :meth:`get` raises
    :class:`LogClosed` at once.
    """

    def __init__(self, log: EventLog, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._log: EventLog | None = log
        self._maxsize = maxsize
        self._buf: deque[list[Envelope]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self.overflowed = False

    # called by the log, on the event loop thread ----------------------------------------

    def _push(self, batch: list[Envelope]) -> None:
        if len(self._buf) >= self._maxsize:
            self.overflowed = True
            self._buf.clear()
            self._detach()
        else:
            self._buf.append(batch)
        self._wake()

    def _end(self) -> None:
        """The log closed: keep the buffer so the consumer can finish it."""
        self._ended = True
        self._log = None
        self._wake()

    # public -------------------------------------------------------------------------------

    async def get(self) -> list[Envelope]:
        """The next batch; waits for one. Raises SubscriberOverflow or LogClosed."""
        while True:
            if self.overflowed:
                raise SubscriberOverflow("subscriber fell too far behind; resume with after_seq")
            if self._buf:
                return self._buf.popleft()
            if self._ended:
                raise LogClosed("subscription ended")
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """Detach from the log and drop buffered batches. Idempotent."""
        self._buf.clear()
        self._ended = True
        self._detach()
        self._wake()

    def __aiter__(self) -> AsyncIterator[list[Envelope]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[list[Envelope]]:
        while True:
            try:
                batch = await self.get()
            except LogClosed:
                return
            yield batch

    # private ------------------------------------------------------------------------------

    def _detach(self) -> None:
        if self._log is not None:
            self._log._subscribers.discard(self)
            self._log = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class EventLog(abc.ABC):
    """The append-only log of events. See the module docstring for the order of calls.

    All methods must be called from the event loop that called :meth:`open`.
    """

    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()
        self._last_seq = 0
        self._closed = False

    @property
    def last_seq(self) -> int:
        """The seq of the last committed and published event (0 when the log is empty)."""
        return self._last_seq

    @abc.abstractmethod
    async def open(self) -> None:
        """Open (creating if needed) the store; ``last_seq`` continues from what it holds."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Finish in-flight appends, then end every subscription and release the store.

        Appends started after ``close()`` raise :class:`LogClosed`.
        """

    @abc.abstractmethod
    async def append(self, events: Sequence[tuple[str | None, Event]]) -> list[Envelope]:
        """Append ``(session_id, event)`` pairs as one atomic group; return their envelopes.

        The events get consecutive seqs and are committed together. Returns after the commit;
        subscribers get the group as one batch after the commit. If the commit fails, the
        exception is raised here, nothing is published and no seq is used up.

        Cancelling the awaiting task does not withdraw the events: they may still be committed.
        """

    @abc.abstractmethod
    async def read(self, after_seq: int, limit: int | None = None) -> list[Envelope]:
        """Stored envelopes with ``seq > after_seq``, in seq order, at most ``limit``.

        May include events committed but not yet published to subscribers (dedupe by seq).
        """

    @abc.abstractmethod
    async def read_session(self, session_id: str) -> list[Envelope]:
        """Every stored envelope of one session, in seq order."""

    @abc.abstractmethod
    async def read_raw(self, after_seq: int, limit: int) -> list[bytes]:
        """Like :meth:`read`, but each item is the stored Envelope JSON (no decode).

        A negative ``limit`` means no limit.
        """

    @abc.abstractmethod
    async def save_snapshot(self, seq: int, data: bytes) -> None:
        """Store a state snapshot taken at ``seq``; only the newest few are kept."""

    @abc.abstractmethod
    async def latest_snapshot(self) -> tuple[int, bytes] | None:
        """The snapshot with the highest seq as ``(seq, data)``, or ``None``."""

    @abc.abstractmethod
    async def first_seq(self) -> int:
        """The seq from which the log is complete: 1 if never trimmed, 0 if the log is empty;
        after a trim, one past the newest trimmed event. A reader resuming from before it
        may have missed trimmed events, so it needs a snapshot."""

    @abc.abstractmethod
    async def trim(self, keep: Collection[str], through_seq: int) -> int:
        """Delete the events of every session not in ``keep`` with ``seq <= through_seq``
        (events of no session stay), and the snapshots older than ``through_seq``; return how
        many events went. ``through_seq`` must be at or below a stored snapshot, so the state
        is still rebuilt from that snapshot. Seqs are never reused after a trim."""

    def follow(self, after_seq: int, on_foreign: Callable[[list[Envelope]], None]) -> None:
        """From now on, also publish the events other processes commit after ``after_seq``,
        and hand them to ``on_foreign`` before publishing them. Only a store several servers
        share (PostgreSQL) has any; the others ignore this."""
        del after_seq, on_foreign

    async def committed_seq(self) -> int:
        """The last seq any process committed. Where this process is the only writer, that is
        :attr:`last_seq`; a shared store asks the database."""
        return self._last_seq

    def subscribe(self, maxsize: int = 1024) -> Subscription:
        """Attach a live subscription; it receives groups committed after this call."""
        if self._closed:
            raise LogClosed("the event log is closed")
        sub = Subscription(self, maxsize)
        self._subscribers.add(sub)
        return sub

    def _publish(self, batch: list[Envelope]) -> None:
        self._last_seq = batch[-1].seq
        if self._subscribers:
            # _push may detach an overflowing subscriber: iterate over a copy.
            for sub in tuple(self._subscribers):
                sub._push(batch)

    def _end_subscribers(self) -> None:
        for sub in tuple(self._subscribers):
            sub._end()
        self._subscribers.clear()


# ---------------------------------------------------------------------------------------------
# memory


class MemoryEventLog(EventLog):
    """An in-process log for tests and throwaway servers; nothing survives ``close()``."""

    def __init__(self) -> None:
        super().__init__()
        self._envelopes: list[Envelope] = []
        self._raw: list[bytes] = []
        self._snapshots: list[tuple[int, bytes]] = []
        self._trimmed_through = 0

    async def open(self) -> None:
        self._closed = False

    async def close(self) -> None:
        # Appends complete synchronously, so nothing is in flight.
        self._closed = True
        self._end_subscribers()

    async def append(self, events: Sequence[tuple[str | None, Event]]) -> list[Envelope]:
        if self._closed:
            raise LogClosed("the event log is closed")
        if not events:
            return []
        seq = self._last_seq
        ts = time.time()
        envs: list[Envelope] = []
        raws: list[bytes] = []
        for session_id, event in events:
            _tag(event)  # refuse what the SQLite log would refuse
            seq += 1
            env = Envelope(seq=seq, ts=ts, session_id=session_id, event=event)
            raws.append(encode(env))
            envs.append(env)
        self._envelopes.extend(envs)
        self._raw.extend(raws)
        self._publish(envs)
        return envs

    def _slice(self, after_seq: int, limit: int | None) -> slice:
        # seqs are ascending (with holes after a trim): find the first one after after_seq
        start = bisect.bisect_right(self._envelopes, after_seq, key=lambda env: env.seq)
        return slice(start, None if limit is None or limit < 0 else start + limit)

    async def read(self, after_seq: int, limit: int | None = None) -> list[Envelope]:
        return self._envelopes[self._slice(after_seq, limit)]

    async def read_session(self, session_id: str) -> list[Envelope]:
        return [env for env in self._envelopes if env.session_id == session_id]

    async def read_raw(self, after_seq: int, limit: int) -> list[bytes]:
        return self._raw[self._slice(after_seq, limit)]

    async def save_snapshot(self, seq: int, data: bytes) -> None:
        if self._closed:
            raise LogClosed("the event log is closed")
        kept = {s: d for s, d in self._snapshots if s != seq}
        kept[seq] = bytes(data)
        self._snapshots = sorted(kept.items())[-SNAPSHOTS_KEPT:]

    async def latest_snapshot(self) -> tuple[int, bytes] | None:
        return self._snapshots[-1] if self._snapshots else None

    async def first_seq(self) -> int:
        if self._trimmed_through:
            return self._trimmed_through + 1
        return self._envelopes[0].seq if self._envelopes else 0

    async def trim(self, keep: Collection[str], through_seq: int) -> int:
        if self._closed:
            raise LogClosed("the event log is closed")
        kept = set(keep)
        pairs = [(env, raw) for env, raw in zip(self._envelopes, self._raw, strict=True)
                 if env.seq > through_seq or env.session_id is None or env.session_id in kept]
        gone = len(self._envelopes) - len(pairs)
        if gone:
            self._trimmed_through = max(self._trimmed_through, through_seq)
        self._envelopes = [env for env, _ in pairs]
        self._raw = [raw for _, raw in pairs]
        self._snapshots = [(s, d) for s, d in self._snapshots if s >= through_seq]
        return gone


# ---------------------------------------------------------------------------------------------
# sqlite


def _trimmed_through(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'trimmed_through'").fetchone()
    return int(row[0]) if row else 0


_INSERT = "INSERT INTO events (seq, ts, session_id, type, envelope) VALUES (?, ?, ?, ?, ?)"


# An append request is a plain tuple: building it is on the hot path of every append.
_AppendRequest = tuple[list[tuple[str | None, Event]], "asyncio.Future[list[Envelope]]"]


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

    async def append(self, events: Sequence[tuple[str | None, Event]]) -> list[Envelope]:
        if self._closed or self._loop is None or self._broken is not None:
            raise self._refusal()
        if not events:
            return []
        future: asyncio.Future[list[Envelope]] = self._loop.create_future()
        self._queue.put((list(events), future))
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
            db = sqlite_utils.Database(conn)
            db.table("events").create(
                {"seq": int, "ts": float, "session_id": str, "type": str, "envelope": bytes},
                pk="seq",
                if_not_exists=True,
            )
            db.table("events").create_index(["session_id"], if_not_exists=True)
            db.table("snapshots").create({"seq": int, "data": bytes}, pk="seq", if_not_exists=True)
            db.table("meta").create({"key": str, "value": int}, pk="key", if_not_exists=True)
            last = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
            trimmed = _trimmed_through(conn)
        except BaseException:
            conn.close()
            raise
        # a trim may have deleted the newest events: never hand their seqs out again
        self._next_seq = max(last or 0, trimmed) + 1
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
                for req in requests:
                    if type(req) is _CallRequest:
                        self._run_call(conn, loop, req)
            if stop:
                return

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
        for events, future in requests:
            envs: list[Envelope] = []
            mark = len(rows)
            try:
                for session_id, event in events:
                    env = Envelope(seq=seq, ts=ts, session_id=session_id, event=event)
                    rows.append((seq, ts, session_id, _tag(event), encode(env)))
                    envs.append(env)
                    seq += 1
            except Exception as exc:
                # Only this request is refused; its seqs go to the next one (no gap).
                del rows[mark:]
                seq -= len(envs)
                refused.append((future, exc))
                continue
            answers.append((future, envs))
            batch.extend(envs)
        failed: BaseException | None = None
        if rows:
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_INSERT, rows)
                conn.execute("COMMIT")
            except Exception as exc:
                failed = exc
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
            else:
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
            _reject(future, exc)
        if failed is not None:
            for future, _ in answers:
                _reject(future, failed)
            return
        for future, envs in answers:
            if not future.done():  # done if the caller was cancelled
                future.set_result(envs)
        if batch:
            self._publish(batch)

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
        return _decode_many(await self.read_raw(after_seq, -1 if limit is None else limit))

    async def read_session(self, session_id: str) -> list[Envelope]:
        def query(conn: sqlite3.Connection) -> list[bytes]:
            cur = conn.execute(
                "SELECT envelope FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
            )
            return [row[0] for row in cur]

        return _decode_many(await self._read(query))

    async def read_raw(self, after_seq: int, limit: int) -> list[bytes]:
        def query(conn: sqlite3.Connection) -> list[bytes]:
            cur = conn.execute(
                "SELECT envelope FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, limit),
            )
            return [row[0] for row in cur]

        return await self._read(query)

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
