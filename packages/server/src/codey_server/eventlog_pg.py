"""The event log in PostgreSQL (``--database-url postgresql://…``), psycopg 3 async with a pool.

The same contract as the SQLite log (``codey_server.testing.eventlog_contract``):

- **Gapless seq in commit order.** The seq comes from one counter row (``codey_meta``,
  ``last_seq``) locked with ``SELECT … FOR UPDATE`` inside the appending transaction, never
  from a sequence: a sequence hands out numbers that a rolled-back transaction loses (gaps)
  and that commit out of order. A failed commit rolls the counter back with the rows.
- **Group commit.** One writer task per process takes every append queued while the last
  transaction ran and commits them together: throughput does not fall to one round trip per
  append. Each ``append`` call still gets consecutive seqs of its own.
- **Subscribers** of this process get each group after its commit, in seq order.
- **One server per database, for now.** The engine folds only its own appends, so a second
  server on the same database would serve a state that misses the first one's events: the log
  takes an exclusive advisory lock when it opens and a second server refuses to start, with
  a clear error. (Several replicas need the fold to follow other writers: see
  docs/deploy.md.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection, Sequence
from typing import Any

from codey_protocol.codec import encode
from codey_protocol.events import Envelope, Event
from codey_server.errors import LogClosed, ServerError
from codey_server.eventlog import SNAPSHOTS_KEPT, EventLog, _decode_many, _tag

__all__ = ["LOCK_KEY", "PostgresEventLog"]

log = logging.getLogger("codey.eventlog")

#: the advisory lock one server holds on its database ("codey" in ASCII)
LOCK_KEY = 0x636F646579

_SCHEMA = """
CREATE TABLE IF NOT EXISTS codey_events (
    seq bigint PRIMARY KEY, ts double precision NOT NULL, session_id text, type text NOT NULL,
    envelope bytea NOT NULL);
CREATE INDEX IF NOT EXISTS codey_events_session ON codey_events (session_id);
CREATE TABLE IF NOT EXISTS codey_snapshots (seq bigint PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS codey_meta (key text PRIMARY KEY, value bigint NOT NULL);
INSERT INTO codey_meta (key, value) VALUES ('last_seq', 0), ('trimmed_through', 0)
    ON CONFLICT (key) DO NOTHING;
"""

_Request = tuple[list[tuple[str | None, Event]], "asyncio.Future[list[Envelope]]"]


class PostgresEventLog(EventLog):
    def __init__(self, url: str, *, pool_size: int = 4) -> None:
        super().__init__()
        self.url = url
        self.pool_size = pool_size
        self._pool: Any = None
        self._lock_conn: Any = None
        self._queue: asyncio.Queue[_Request | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        import psycopg
        from psycopg_pool import AsyncConnectionPool

        try:
            self._lock_conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        except psycopg.OperationalError as err:
            raise ServerError(f"cannot reach the database: {err}") from None
        row = await (await self._lock_conn.execute("SELECT pg_try_advisory_lock(%s)",
                                                   (LOCK_KEY,))).fetchone()
        if not row or not row[0]:
            await self._lock_conn.close()
            raise ServerError("another codey-server is using this database: one server per "
                              "database (see docs/deploy.md)")
        await self._lock_conn.execute(_SCHEMA)
        last = await (await self._lock_conn.execute(
            "SELECT value FROM codey_meta WHERE key = 'last_seq'")).fetchone()
        self._last_seq = int(last[0])
        self._pool = AsyncConnectionPool(self.url, min_size=1, max_size=self.pool_size,
                                         open=False, kwargs={"autocommit": True})
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
        self._end_subscribers()
        if self._pool is not None:
            await self._pool.close()
        if self._lock_conn is not None:
            with contextlib.suppress(Exception):
                await self._lock_conn.close()  # releases the advisory lock

    # -- appends ----------------------------------------------------------------------------------

    async def append(self, events: Sequence[tuple[str | None, Event]]) -> list[Envelope]:
        if self._closed:
            raise LogClosed("the event log is closed")
        if not events:
            return []
        for _, event in events:
            _tag(event)  # refuse what cannot be stored before it takes a seq
        future: asyncio.Future[list[Envelope]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((list(events), future))
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
        ready: list[tuple[list[tuple[str | None, Event]], asyncio.Future[list[Envelope]]]] = []
        for events, future in group:
            try:
                for _, event in events:
                    encode(event)
            except Exception as err:  # this append only: the others go on
                future.set_exception(err)
                continue
            ready.append((events, future))
        if not ready:
            return
        try:
            done = await self._insert(ready)
        except Exception as err:
            log.exception("event-log commit failed")
            for _, future in ready:
                if not future.done():
                    future.set_exception(err)
            return
        for (_, future), envs in zip(ready, done, strict=True):
            self._publish(envs)
            if not future.done():
                future.set_result(envs)

    async def _insert(self, ready: list[tuple[list[tuple[str | None, Event]], Any]],
                      ) -> list[list[Envelope]]:
        async with self._pool.connection() as conn, conn.transaction():
            row = await (await conn.execute(
                "SELECT value FROM codey_meta WHERE key = 'last_seq' FOR UPDATE")).fetchone()
            seq = int(row[0])
            ts = time.time()
            out: list[list[Envelope]] = []
            rows: list[tuple[int, float, str | None, str, bytes]] = []
            for events, _ in ready:
                envs = []
                for session_id, event in events:
                    seq += 1
                    env = Envelope(seq=seq, ts=ts, session_id=session_id, event=event)
                    rows.append((seq, ts, session_id, _tag(event), encode(env)))
                    envs.append(env)
                out.append(envs)
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO codey_events (seq, ts, session_id, type, envelope) "
                    "VALUES (%s, %s, %s, %s, %s)", rows)
            await conn.execute("UPDATE codey_meta SET value = %s WHERE key = 'last_seq'",
                               (seq,))
        return out

    # -- reads ------------------------------------------------------------------------------------

    async def _rows(self, query: str, params: Sequence[Any]) -> list[Any]:
        if self._closed or self._pool is None:
            raise LogClosed("the event log is closed")
        async with self._pool.connection() as conn:
            return list(await (await conn.execute(query, params)).fetchall())

    async def read(self, after_seq: int, limit: int | None = None) -> list[Envelope]:
        return _decode_many(await self.read_raw(after_seq, -1 if limit is None else limit))

    async def read_raw(self, after_seq: int, limit: int) -> list[bytes]:
        rows = await self._rows(
            "SELECT envelope FROM codey_events WHERE seq > %s ORDER BY seq LIMIT %s",
            (after_seq, None if limit < 0 else limit))
        return [bytes(r[0]) for r in rows]

    async def read_session(self, session_id: str) -> list[Envelope]:
        rows = await self._rows(
            "SELECT envelope FROM codey_events WHERE session_id = %s ORDER BY seq",
            (session_id,))
        return _decode_many([bytes(r[0]) for r in rows])

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
