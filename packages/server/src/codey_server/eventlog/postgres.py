"""The event log in PostgreSQL (``--database-url postgresql://…``), psycopg 3 async with a pool.

The same contract as the SQLite log (``codey_server.eventlog.contract``):

- **Gapless seq in commit order.** The seq comes from one counter row (``codey_meta``,
  ``last_seq``) locked with ``SELECT … FOR UPDATE`` inside the appending transaction, never
  from a sequence: a sequence hands out numbers that a rolled-back transaction loses (gaps)
  and that commit out of order. A failed commit rolls the counter back with the rows.
- **Group commit.** One writer task per process takes every append queued while the last
  transaction ran and commits them together: throughput does not fall to one round trip per
  append. Each ``append`` call still gets consecutive seqs of its own.
- **Several servers (replicas) on one database.** Each process publishes to its subscribers
  every committed event, its own and the other replicas', in seq order and without gaps: a
  commit NOTIFYs ``codey_events`` inside its transaction (the wake-up), and a follower reads the
  rows after the last seq it published (the data). It also polls every
  :data:`POLL_S` seconds, so a lost notification or a dropped listener costs latency, never an
  event. Its own groups are published at once when nothing is missing before them; otherwise
  they wait for the follower to read the rows in between. The engine gets the other
  replicas' events through :meth:`follow` and folds them like its own.
- **Fenced appends.** An append that carries a :class:`~codey_server.eventlog.base.Fence`
  is checked inside the group's transaction, after the counter row is locked: its lease row
  (``codey_leases``, which the cluster creates) is locked ``FOR SHARE`` and must still have
  the fence's owner and epoch. A take-over's ``UPDATE`` of that row therefore waits for the
  append to commit, and its new holder reads it; an append after the take-over sees the new
  epoch and fails with :class:`~codey_server.errors.LeaseLost` before it takes a seq, while
  the rest of its group commits.
- **Appends decided on a position** (``expected``, optimistic concurrency): in the same
  transaction, once the counter row is locked, the last seq of each session the checked
  appends touch is known — kept from this process's last commit when no other process
  appended since (the counter is where that commit left it), else read (an index lookup
  per session, in the statement that takes the locks when its snapshot is current); an append whose
  session has an event after its ``expected`` — committed by any replica, or earlier in
  its own group — fails with :class:`~codey_server.errors.AppendConflict` before it takes a
  seq, while the rest of its group commits. Every replica's append locks the counter row
  first, so no commit can come between that read and the insert: two replicas cannot both
  commit a decision taken on the same state of a session.
- **A paused process does not stall the others for long.** A process stopped (``SIGSTOP``,
  a debugger) inside an append's transaction would hold the counter row, and every
  replica's appends with it; the server ends such a transaction after
  :data:`IDLE_IN_TRANSACTION_S` (``idle_in_transaction_session_timeout`` on this log's
  connections), and the stopped process's append fails when it wakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from codey_protocol.codec import encode
from codey_protocol.events import Envelope, Event
from codey_protocol.upcasting import current_json_many, decode_stored
from codey_server.errors import AppendConflict, LeaseLost, LogClosed, ServerError
from codey_server.eventlog.base import (
    SNAPSHOTS_KEPT,
    EventLog,
    Fence,
    _decode_many,
    _envelope,
    _tag,
    sessions_of,
)

__all__ = ["CHANNEL", "PostgresEventLog", "listen"]

log = logging.getLogger("codey.eventlog")

#: the advisory lock taken while a process creates the schema ("codey" in ASCII)
SCHEMA_LOCK = 0x636F646579
#: the channel a commit notifies with its last seq
CHANNEL = "codey_events"
#: the follower reads the table at least this often (a missed NOTIFY costs at most this)
POLL_S = 1.0
#: rows the follower reads at once
FOLLOW_BATCH = 2000
#: a transaction of this log left idle this long (its process paused) is ended by the server
IDLE_IN_TRANSACTION_S = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS codey_events (
    seq bigint PRIMARY KEY, ts double precision NOT NULL, session_id text, type text NOT NULL,
    envelope bytea NOT NULL);
-- Each change below only when it is missing: a replica opening the log while the others
-- append must not lock their table (an ALTER TABLE or CREATE INDEX that has nothing to do
-- still takes the table's lock, and an append reads the table before it inserts).
DO $$ BEGIN
    -- the process that appended the row (its replica id, then a token of the process): a
    -- follower knows its own commits by it
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'codey_events'::regclass
                   AND attname = 'origin' AND NOT attisdropped) THEN
        ALTER TABLE codey_events ADD COLUMN origin text;
    END IF;
    -- a session's events in order, and its last seq (the expected-position check) at the
    -- top of the index; it replaces the index on session_id alone of earlier releases
    IF to_regclass('codey_events_session_seq') IS NULL THEN
        CREATE INDEX codey_events_session_seq ON codey_events (session_id, seq);
    END IF;
    IF to_regclass('codey_events_session') IS NOT NULL THEN
        DROP INDEX codey_events_session;
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS codey_snapshots (seq bigint PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS codey_meta (key text PRIMARY KEY, value bigint NOT NULL);
INSERT INTO codey_meta (key, value) VALUES ('last_seq', 0), ('trimmed_through', 0)
    ON CONFLICT (key) DO NOTHING;
"""

#: each session's last seq, for the sessions in %s (a text[]): an index lookup per session
_HEADS = ("SELECT s, (SELECT seq FROM codey_events WHERE session_id = s "
          "ORDER BY seq DESC LIMIT 1) FROM unnest(%s::text[]) AS s")

# (events, future, fence, expected)
_Request = tuple[list[tuple[str | None, Event]], "asyncio.Future[list[Envelope]]",
                 Fence | None, int | None]


class PostgresEventLog(EventLog):
    def __init__(self, url: str, *, pool_size: int = 4, name: str = "") -> None:
        """``name``: who this process is among the replicas (its replica id): each row it
        appends carries it in ``origin`` as ``<name>/<random>``, unique to the process."""
        super().__init__()
        self.url = url
        self.pool_size = pool_size
        self._pool: Any = None
        self._queue: asyncio.Queue[_Request | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._own: dict[int, list[Envelope]] = {}  # committed here, waiting for earlier seqs
        self._on_foreign: Callable[[list[Envelope]], None] | None = None
        self._following = False
        self._origin = f"{name}/{secrets.token_hex(6)}" if name else secrets.token_hex(8)
        # sessions' last seqs as this process last saw them in an appending transaction, and
        # the counter they hold at (None: not to be trusted); a trim of its own forgets them
        self._heads: dict[str, int] = {}
        self._heads_at: int | None = None
        self._generation = 0

    # -- lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        import psycopg
        from psycopg_pool import AsyncConnectionPool

        try:
            conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        except psycopg.OperationalError as err:
            raise ServerError(f"cannot reach the database: {err}") from None
        async with conn:
            async with conn.transaction():
                # replicas starting together: one creates the tables, the others wait
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                await conn.execute(_SCHEMA)
            last = await (await conn.execute(
                "SELECT value FROM codey_meta WHERE key = 'last_seq'")).fetchone()
        self._last_seq = int(last[0]) if last else 0
        self._own = {}
        self._heads, self._heads_at = {}, None
        self._wake = asyncio.Event()
        self._pool = AsyncConnectionPool(self.url, min_size=1, max_size=self.pool_size,
                                         open=False, kwargs={"autocommit": True},
                                         configure=_configure)
        await self._pool.open(wait=True)
        self._closed = False
        self._queue = asyncio.Queue()
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    async def close(self) -> None:
        if self._closed:
            if self._writer is not None:
                await asyncio.shield(self._writer)
            return
        self._closed = True
        if self._writer is not None:
            self._queue.put_nowait(None)  # after what is queued: in-flight appends finish
            await asyncio.shield(self._writer)
        for task in (self._follower, self._listener):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._follower = self._listener = None
        self._end_subscribers()
        if self._pool is not None:
            await self._pool.close()

    # -- appends ----------------------------------------------------------------------------------

    async def append(self, events: Sequence[tuple[str | None, Event]], *,
                     fence: Fence | None = None,
                     expected: int | None = None) -> list[Envelope]:
        if self._closed:
            raise LogClosed("the event log is closed")
        if not events:
            return []
        for _, event in events:
            _tag(event)  # refuse what cannot be stored before it takes a seq
        future: asyncio.Future[list[Envelope]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((list(events), future, fence, expected))
        return await future

    async def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                break
            group = [first]
            while not self._queue.empty():
                more = self._queue.get_nowait()
                if more is None:
                    stopping = True
                    break
                group.append(more)
            await self._commit(group)

    async def _commit(self, group: list[_Request]) -> None:
        ready: list[_Request] = []
        for request in group:
            try:
                for _, event in request[0]:
                    encode(event)
            except Exception as err:  # this append only: the others go on
                request[1].set_exception(err)
                continue
            ready.append(request)
        if not ready:
            return
        try:
            done = await self._insert(ready)
        except Exception as err:
            log.exception("event-log commit failed")
            for request in ready:
                if not request[1].done():
                    request[1].set_exception(err)
            return
        for request, envs in zip(ready, done, strict=True):
            future = request[1]
            if isinstance(envs, Exception):  # LeaseLost, AppendConflict: this one only
                if not future.done():
                    future.set_exception(envs)
                continue
            self._publish_own(envs)
            if not future.done():
                future.set_result(envs)

    async def _insert(self, ready: list[_Request]
                      ) -> list[list[Envelope] | LeaseLost | AppendConflict]:
        """One transaction for the group: the counter row locked, the fences and expected
        positions checked, the rows of the appends that pass inserted; per append, its
        envelopes or the LeaseLost or AppendConflict that refused it."""
        fences = [r[2] for r in ready if r[2] is not None]
        checked = sessions_of([e for r in ready if r[3] is not None for e in r[0]])
        # the last seqs this process knows hold while the counter is still the one its last
        # commit left (no other process appended since): only the others are read
        at, generation = self._heads_at, self._generation
        self._heads_at = None  # (until this transaction is known to have committed)
        known = {sid: self._heads[sid] for sid in checked if sid in self._heads} \
            if at is not None else {}
        unknown = [sid for sid in checked if sid not in known]
        async with self._pool.connection() as conn, conn.transaction():
            # one round trip for the locks, the fences and the sessions' last seqs
            seq, stale, read = await _locked(conn, fences, unknown)
            if seq != at:  # another process appended meanwhile: what was known may be old
                self._heads.clear()
                known = {}
                if unknown != checked:
                    read, unknown = None, checked
            if read is None:
                # another process committed between that statement's snapshot and its lock,
                # or what this one knew is old: read them now that no replica can commit
                # before this insert
                found = await (await conn.execute(_HEADS, (unknown,))).fetchall()
                read = {sid: int(head or 0) for sid, head in found}
            heads = {sid: read[sid] if sid in read else known[sid] for sid in checked}
            last: dict[str, int] = {}  # each session's last seq among the rows inserted
            ts = time.time()
            out: list[list[Envelope] | LeaseLost | AppendConflict] = []
            rows: list[tuple[int, float, str | None, str, bytes, str]] = []
            for events, _, fence, expected in ready:
                if fence is not None and fence in stale:
                    out.append(LeaseLost(fence.lease, stale[fence]))
                    continue
                if expected is not None:
                    conflict = next((AppendConflict(sid, heads[sid], expected)
                                     for sid in sessions_of(events)
                                     if heads[sid] > expected), None)
                    if conflict is not None:
                        out.append(conflict)
                        continue
                envs = []
                for session_id, event in events:
                    seq += 1
                    tag = _tag(event)
                    env = _envelope(seq, ts, session_id, event, tag)
                    rows.append((seq, ts, session_id, tag, encode(env), self._origin))
                    envs.append(env)
                    if session_id is not None:
                        last[session_id] = seq
                        if session_id in heads:  # the appends after this one in the group
                            heads[session_id] = seq
                out.append(envs)
            if rows:  # (else every append was refused: nothing to write)
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO codey_events (seq, ts, session_id, type, envelope, "
                        "origin) VALUES (%s, %s, %s, %s, %s, %s)", rows)
                await conn.execute("UPDATE codey_meta SET value = %s WHERE key = 'last_seq'",
                                   (seq,))
                # delivered at commit, to the other replicas' followers
                await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(seq)))
        # committed: the counter is ``seq``, and these are the sessions' last seqs at it
        if generation == self._generation:  # (no trim of this process's came in between)
            self._heads.update(read)
            self._heads.update(last)
            self._heads_at = seq
        return out

    async def committed_seq(self) -> int:
        rows = await self._rows("SELECT value FROM codey_meta WHERE key = 'last_seq'", ())
        return int(rows[0][0])

    # -- following the other replicas -------------------------------------------------------------

    def follow(self, after_seq: int, on_foreign: Callable[[list[Envelope]], None]) -> None:
        """Publish every event committed after ``after_seq`` by any process, in seq order, and
        hand those of other processes to ``on_foreign`` (the engine's fold) first."""
        self._last_seq = max(self._last_seq, after_seq)
        self._on_foreign = on_foreign
        self._following = True
        loop = asyncio.get_running_loop()
        self._listener = loop.create_task(listen(self.url, CHANNEL, self._notified),
                                          name="eventlog-listen")
        self._follower = loop.create_task(self._follow(), name="eventlog-follow")

    def _publish_own(self, envs: list[Envelope]) -> None:
        if envs[0].seq <= self._last_seq:
            return  # cannot happen: the follower waits for its own rows' commits to return
        if not self._following or envs[0].seq == self._last_seq + 1:
            self._publish(envs)
            self._drain_own()
            return
        # another replica committed the seqs before these: publish once they are read
        self._own[envs[0].seq] = envs
        self._wake.set()

    def _drain_own(self) -> None:
        while self._own:
            envs = self._own.pop(self._last_seq + 1, None)
            if envs is None:
                return
            self._publish(envs)

    def _notified(self, payload: str) -> None:
        # "" after a (re)connection: what was committed while not listening
        if not payload or int(payload) > self._last_seq:
            self._wake.set()

    async def _follow(self) -> None:
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)
            self._wake.clear()
            try:
                while await self._catch_up():
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the next poll tries again
                if not self._closed:
                    log.warning("event-log follower failed (%s); retrying", err)

    async def _catch_up(self) -> bool:
        """Read and publish what was committed after the last published seq; True when a full
        batch came (read again)."""
        after = self._last_seq
        rows = await self._rows(
            "SELECT seq, origin, envelope FROM codey_events WHERE seq > %s ORDER BY seq "
            "LIMIT %s", (after, FOLLOW_BATCH))
        run: list[Envelope] = []
        foreign: list[Envelope] = []
        for seq, origin, blob in rows:
            seq = int(seq)
            if seq <= self._last_seq:
                continue  # published while this read ran
            if seq != self._last_seq + 1:
                break  # trimmed or not yet visible: the next poll reads it
            if origin == self._origin:  # one of ours: publish it as its own group
                own = self._own.pop(seq, None)
                if own is None:
                    break  # its commit has not returned yet: it publishes itself then
                if run:
                    self._hand_over(run, foreign)
                    run, foreign = [], []
                self._publish(own)
                continue
            env = decode_stored(bytes(blob))
            run.append(env)
            foreign.append(env)
            self._last_seq = seq  # the next row must follow this one
        if run:
            self._hand_over(run, foreign)
        self._drain_own()
        return len(rows) == FOLLOW_BATCH

    def _hand_over(self, run: list[Envelope], foreign: list[Envelope]) -> None:
        if self._on_foreign is not None:
            try:
                self._on_foreign(foreign)
            except Exception:  # the fold's own errors are logged there; publishing goes on
                log.exception("folding other replicas' events failed")
        self._publish(run)

    # -- reads ------------------------------------------------------------------------------------

    async def _rows(self, query: str, params: Sequence[Any]) -> list[Any]:
        if self._closed or self._pool is None:
            raise LogClosed("the event log is closed")
        async with self._pool.connection() as conn:
            return list(await (await conn.execute(query, params)).fetchall())

    async def read(self, after_seq: int, limit: int | None = None) -> list[Envelope]:
        return _decode_many(await self._read_stored(after_seq, -1 if limit is None else limit))

    async def read_raw(self, after_seq: int, limit: int) -> list[bytes]:
        return current_json_many(await self._read_stored(after_seq, limit))

    async def _read_stored(self, after_seq: int, limit: int) -> list[bytes]:
        rows = await self._rows(
            "SELECT envelope FROM codey_events WHERE seq > %s ORDER BY seq LIMIT %s",
            (after_seq, None if limit < 0 else limit))
        return [bytes(r[0]) for r in rows]

    async def read_session(self, session_id: str) -> list[Envelope]:
        return _decode_many(await self.read_session_stored(session_id))

    async def read_session_stored(self, session_id: str) -> list[bytes]:
        rows = await self._rows(
            "SELECT envelope FROM codey_events WHERE session_id = %s ORDER BY seq",
            (session_id,))
        return [bytes(r[0]) for r in rows]

    async def save_snapshot(self, seq: int, data: bytes) -> None:
        if self._closed or self._pool is None:
            raise LogClosed("the event log is closed")
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO codey_snapshots (seq, data) VALUES (%s, %s) "
                "ON CONFLICT (seq) DO UPDATE SET data = excluded.data", (seq, bytes(data)))
            await conn.execute(
                "DELETE FROM codey_snapshots WHERE seq NOT IN "
                "(SELECT seq FROM codey_snapshots ORDER BY seq DESC LIMIT %s)",
                (SNAPSHOTS_KEPT,))

    async def latest_snapshot(self) -> tuple[int, bytes] | None:
        rows = await self._rows(
            "SELECT seq, data FROM codey_snapshots ORDER BY seq DESC LIMIT 1", ())
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    async def first_seq(self) -> int:
        rows = await self._rows(
            "SELECT (SELECT value FROM codey_meta WHERE key = 'trimmed_through'), "
            "(SELECT min(seq) FROM codey_events)", ())
        trimmed, low = rows[0]
        if trimmed:
            return int(trimmed) + 1
        return int(low or 0)

    async def trim(self, keep: Collection[str], through_seq: int) -> int:
        if self._closed or self._pool is None:
            raise LogClosed("the event log is closed")
        # the trimmed sessions' last seqs go back (another process's trim leaves them higher
        # here than stored until another process appends: that can refuse an append decided
        # before the trimmed seq — which a decision taken on the state never is — and never
        # lets one through)
        self._generation += 1
        self._heads.clear()
        self._heads_at = None
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "DELETE FROM codey_events WHERE seq <= %s AND session_id IS NOT NULL "
                "AND NOT (session_id = ANY(%s))", (through_seq, sorted(keep)))
            gone = cur.rowcount
            if gone:
                await conn.execute(
                    "UPDATE codey_meta SET value = GREATEST(value, %s) "
                    "WHERE key = 'trimmed_through'", (through_seq,))
            await conn.execute("DELETE FROM codey_snapshots WHERE seq < %s", (through_seq,))
        return int(gone)


async def _configure(conn: Any) -> None:
    await conn.execute(f"SET idle_in_transaction_session_timeout = "
                       f"{int(IDLE_IN_TRANSACTION_S * 1000)}")


async def _locked(conn: Any, fences: list[Fence], checked: list[str]
                  ) -> tuple[int, dict[Fence, str], dict[str, int] | None]:
    """Lock the counter row (``FOR UPDATE``) and the fences' lease rows (``FOR SHARE``, in
    name order) until the transaction ends, so no append or take-over commits in between;
    return the last seq, the ``fences`` that are not current (with why), and the last seq of
    each ``checked`` session — or None for those when they cannot be trusted.

    They are read in the same statement, as of its snapshot, which may be older than the
    lock (the lock waited for another append, or one committed just before it was taken):
    only when the counter as of the snapshot is the counter the lock returned (every append
    that stores rows raises it) did no append commit in between, and they hold."""
    if not fences and not checked:  # the lock alone (the common case: all known)
        row = await (await conn.execute(
            "SELECT value FROM codey_meta WHERE key = 'last_seq' FOR UPDATE")).fetchone()
        return int(row[0]), {}, {}
    names = sorted({fence.lease for fence in fences})
    held = ("held AS (SELECT name, owner, epoch FROM codey_leases WHERE name = ANY(%(names)s) "
            "ORDER BY name FOR SHARE), " if fences else "")
    cur = await conn.execute(
        "WITH counter AS (SELECT value FROM codey_meta WHERE key = 'last_seq' FOR UPDATE), "
        f"{held}"
        "seen AS (SELECT (SELECT value FROM codey_meta WHERE key = 'last_seq') AS seq, "
        "(SELECT array_agg((SELECT seq FROM codey_events WHERE session_id = s "
        "ORDER BY seq DESC LIMIT 1) ORDER BY n) "
        "FROM unnest(%(checked)s::text[]) WITH ORDINALITY AS u(s, n)) AS heads) "
        "SELECT (SELECT value FROM counter), seen.seq, seen.heads, "
        + ("held.name, held.owner, held.epoch FROM seen LEFT JOIN held ON true"
           if fences else "NULL, NULL, NULL FROM seen"),
        {"names": names, "checked": checked})
    found = await cur.fetchall()
    seq, seen, last = int(found[0][0]), int(found[0][1]), found[0][2]
    heads: dict[str, int] | None = None
    if not checked:
        heads = {}
    elif seen == seq:
        heads = {sid: int(head or 0) for sid, head in zip(checked, last, strict=True)}
    rows = {name: (owner, int(epoch)) for *_, name, owner, epoch in found if name is not None}
    stale: dict[Fence, str] = {}
    for fence in fences:
        holding = rows.get(fence.lease)
        if holding is None:
            stale[fence] = "it has no holder"
        elif holding != (fence.owner, fence.epoch):
            stale[fence] = f"{holding[0]} holds it now (epoch {holding[1]}, this write's " \
                           f"{fence.epoch})"
    return seq, stale, heads


async def listen(url: str, channel: str, on_payload: Callable[[str], None]) -> None:
    """LISTEN on ``channel`` until cancelled, calling ``on_payload`` with each notification's
    payload, and with "" after each (re)connection. A lost connection is tried again after
    :data:`POLL_S`; what was notified meanwhile is for the caller's own poll to find."""
    import psycopg

    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {channel}")
                on_payload("")
                async for note in conn.notifies():
                    try:
                        on_payload(note.payload)
                    except Exception:  # a bad payload or a hook's bug: the next one counts
                        log.exception("handling a notification on %s failed", channel)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("listener on %s lost its connection (%s); reconnecting", channel, err)
            await asyncio.sleep(POLL_S)
