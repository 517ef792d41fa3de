"""The event log: every state change, in one gapless sequence (design §3).

Each event is stored as an :class:`~codey_protocol.events.Envelope` with a global ``seq``
(1, 2, 3, … with no gaps), ``ts`` (unix time of its commit), ``session_id`` (``None`` for global
events), the event itself, tagged by ``type``, and the ``version`` of its type's shape
(:func:`codey_protocol.upcasting.version_of`).

What is stored is never rewritten, and what is read is the current shape: :meth:`~EventLog.read`,
:meth:`~EventLog.read_session` and :meth:`~EventLog.read_raw` pass an envelope stored in an
older shape (by an older release) through its type's upcasters
(:mod:`codey_protocol.upcasting`); :meth:`~EventLog.read_session_stored` returns the stored
bytes as they were written (a session's export).

Order of calls::

    log = SqliteEventLog(path)        # or MemoryEventLog()
    await log.open()
    sub = log.subscribe()             # attach live first …
    missed = await log.read(after_seq)   # … then catch up; drop live duplicates by seq
    envs = await log.append([(session_id, event), ...])
    async for batch in sub: ...
    await log.close()                 # finishes in-flight appends, then ends subscriptions

Guarantees every implementation gives (checked by ``codey_server.eventlog.contract``,
which each backend's tests subclass):

- one :meth:`EventLog.append` call is one atomic group: its events get consecutive seqs and are
  committed together, or not at all (then the caller gets the exception and no seq is used);
- subscribers receive exactly the committed events, in seq order, and only after their commit,
  so an event a subscriber sees is already readable;
- a subscriber that falls ``maxsize`` batches behind is dropped with :class:`SubscriberOverflow`
  and resumes from the log with ``after_seq`` — the log is the buffer;
- an append that carries a :class:`Fence` is committed only if the fence is current when its
  transaction commits; otherwise it raises :class:`~codey_server.errors.LeaseLost`, stores
  nothing and uses no seq, and the other appends of its group commit as if it had not been
  there. Only a log that several servers share has leases (PostgreSQL checks the fence
  against ``codey_leases`` in the appending transaction); the others (SQLite, memory: one
  server, no leases) cannot prove any fence current, so they refuse every fence;
- an envelope is stored with its type's current version, and read back upcast to the current
  shape (the stored bytes unchanged); a snapshot comes back byte for byte as it was saved;
- an append that carries ``expected`` (the seq of the log its events were decided on) is
  committed only if no session among its events has an event after ``expected`` when its
  transaction commits — counting the appends committed before it in its own group;
  otherwise it raises :class:`~codey_server.errors.AppendConflict`, stores nothing and uses
  no seq, and the rest of its group commits. That is optimistic concurrency, per session
  (pyeventsourcing's aggregate version, with the log's own seq as the version): two
  decisions taken on the same state of a session cannot both commit. Events of no session
  are never checked. The check holds among every process that appends to the store (on
  PostgreSQL it runs under the counter row's lock, which every replica's append takes).

Retention (:meth:`EventLog.trim`, driven by :mod:`~codey_server.core.retention`) deletes the
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
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass

from codey_protocol.events import Envelope, Event
from codey_protocol.upcasting import decode_stored_many, version_of
from codey_server.errors import AppendConflict, LeaseLost, LogClosed, SubscriberOverflow

__all__ = ["SNAPSHOTS_KEPT", "AppendConflict", "EventLog", "Fence", "LogClosed",
           "SubscriberOverflow", "Subscription"]

#: How many snapshots :meth:`EventLog.save_snapshot` keeps (the newest ones).
SNAPSHOTS_KEPT = 3

def _decode_many(blobs: list[bytes]) -> list[Envelope]:
    """Stored envelopes, read in the current shape (upcast where stored in an older one)."""
    return decode_stored_many(blobs)


def _envelope(seq: int, ts: float, session_id: str | None, event: Event,
              tag: str) -> Envelope:
    """The envelope an append stores: with the current version of its type's shape."""
    return Envelope(seq=seq, ts=ts, session_id=session_id, event=event,
                    version=version_of(tag))


@dataclass(frozen=True, slots=True)
class Fence:
    """A lease as one holding of it (:mod:`codey_server.core.leases`): current while the
    lease row still has this ``owner`` and this ``epoch``. A value; the log checks it."""

    lease: str
    epoch: int
    owner: str


def sessions_of(events: Sequence[tuple[str | None, Event]]) -> list[str]:
    """The sessions among ``events``, each once, in the order they first appear."""
    return list(dict.fromkeys(sid for sid, _ in events if sid is not None))


def no_leases(fence: Fence) -> LeaseLost:
    """The refusal of a log without leases: no fence can be shown current there."""
    return LeaseLost(fence.lease, "this event log has no leases (one server, not PostgreSQL)")


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
    async def append(self, events: Sequence[tuple[str | None, Event]], *,
                     fence: Fence | None = None,
                     expected: int | None = None) -> list[Envelope]:
        """Append ``(session_id, event)`` pairs as one atomic group; return their envelopes.

        The events get consecutive seqs and are committed together. Returns after the commit;
        subscribers get the group as one batch after the commit. If the commit fails, the
        exception is raised here, nothing is published and no seq is used up.

        ``fence``: commit only while that lease holding is current, else raise
        :class:`~codey_server.errors.LeaseLost` (nothing stored, no seq used). A log without
        leases refuses every fence that way (see the module docstring).

        ``expected``: the seq of the log these events were decided on. Commit only if no
        session among ``events`` has an event after it, else raise
        :class:`~codey_server.errors.AppendConflict` (nothing stored, no seq used) naming
        the first such session and its last seq: decide again once that seq is folded.
        ``None``: no check.

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
        """Like :meth:`read`, but each item is the Envelope's JSON in the current shape, what a
        browser is sent: the stored bytes when stored in it (no decode), else the envelope
        upcast and encoded (:func:`codey_protocol.upcasting.current_json_many`).

        A negative ``limit`` means no limit.
        """

    @abc.abstractmethod
    async def read_session_stored(self, session_id: str) -> list[bytes]:
        """Every stored envelope of one session, in seq order, byte for byte as it was
        written, never upcast: the session's export."""

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
