"""``SharedDb``: the PostgreSQL tables the replicas keep their shared state in.

Order of calls: ``SharedDb(url)`` (no I/O) → ``await open()`` (creates the tables, opens a
pool and a LISTEN connection) → the stores' queries → ``await close()``.

Every store reads its rows when asked (a session check, a token check, a key check) instead of
keeping a copy that a delete on another replica would leave behind: a delete is committed
before its request answers, so from then on no replica finds the row. What a replica must do
at once when another one deletes something it holds open (a logged-out browser's sockets) it
hears on the channel :data:`CHANNEL` (``pg_notify`` in the deleting transaction, so only a
committed delete is told), and a poll of its own covers a lost notification.

The tables (one place to read them all):

- ``codey_secrets``: the cluster's access token (one row, made by the first replica);
- ``codey_shared_meta``: which files were imported from a data dir or ``codey_files`` once;
- ``codey_browser_sessions``: SHA-256 of each browser-session id, with its creation time;
- ``codey_mcp_tokens``: the MCP tokens' records (their SHA-256, never the token);
- ``codey_worker_keys``: each worker's public key and its credential's SHA-256;
- ``codey_pair_requests``: pending pair requests, their poll secret's SHA-256, their state;
- ``codey_credentials``: provider logins, sealed with AES-256-GCM (``crypto.py``);
- ``codey_oauth_logins``: OAuth logins begun and not yet called back, sealed likewise;
- ``codey_blobs``: files sent with prompts, by SHA-256;
- ``codey_telegram_token``: a pasted Telegram bot token (one row), sealed likewise;
- ``codey_telegram_pairing``: the current Telegram pairing code (one row): its HMAC, its
  expiry and its wrong tries;
- ``codey_push_vapid``: the Web Push VAPID private key (one row, made by the first replica
  that needs it), sealed likewise;
- ``codey_push_subscriptions``: each push device's subscription (endpoint, p256dh, auth).

Times that decide an expiry are the database's (``now()``), so replicas' clocks may differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from codey_server.errors import ServerError
from codey_server.eventlog.postgres import listen

log = logging.getLogger("codey.shared")

__all__ = ["CHANNEL", "SCHEMA", "SharedDb", "lock_key"]

#: notifications between replicas: ``<topic>:<key>`` (``logout:<sha256>``, ``pair:<id>``)
CHANNEL = "codey_shared"
#: the advisory lock held while a replica creates the tables ("codeyS" in ASCII)
_SCHEMA_LOCK = 0x636F64657953
#: a sync query (the blob store, from threads and from the loop on a cache miss) waits at
#: most this long for a connection
_CONNECT_TIMEOUT_S = 5.0
#: connections for sync queries: an upload in one thread does not hold up another's read
_SYNC_POOL_SIZE = 4

SCHEMA = """
CREATE TABLE IF NOT EXISTS codey_secrets (name text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS codey_shared_meta (name text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS codey_browser_sessions (
    digest text PRIMARY KEY,
    created double precision NOT NULL DEFAULT extract(epoch FROM now()));
CREATE TABLE IF NOT EXISTS codey_mcp_tokens (
    token_id text PRIMARY KEY, sha256 text NOT NULL UNIQUE, record bytea NOT NULL,
    last_used_at double precision);
CREATE TABLE IF NOT EXISTS codey_worker_keys (
    worker_id text PRIMARY KEY, public_key text NOT NULL, credential text NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS codey_pair_requests (
    request_id text PRIMARY KEY, code text NOT NULL, poll_hash text NOT NULL,
    request bytea NOT NULL, source text NOT NULL,
    requested_at double precision NOT NULL, expires_at double precision NOT NULL,
    attempts integer NOT NULL DEFAULT 0, status text NOT NULL DEFAULT 'pending',
    worker_id text);
CREATE INDEX IF NOT EXISTS codey_pair_requests_status ON codey_pair_requests (status);
CREATE TABLE IF NOT EXISTS codey_credentials (
    provider text PRIMARY KEY, sealed bytea NOT NULL,
    updated double precision NOT NULL DEFAULT extract(epoch FROM now()));
CREATE TABLE IF NOT EXISTS codey_oauth_logins (
    state_hash text PRIMARY KEY, sealed bytea NOT NULL,
    created double precision NOT NULL DEFAULT extract(epoch FROM now()));
CREATE TABLE IF NOT EXISTS codey_blobs (
    sha256 text PRIMARY KEY, data bytea NOT NULL,
    created double precision NOT NULL DEFAULT extract(epoch FROM now()));
CREATE TABLE IF NOT EXISTS codey_telegram_token (
    id smallint PRIMARY KEY CHECK (id = 1), sealed bytea NOT NULL,
    updated double precision NOT NULL DEFAULT extract(epoch FROM now()));
CREATE TABLE IF NOT EXISTS codey_telegram_pairing (
    id smallint PRIMARY KEY CHECK (id = 1), digest text NOT NULL,
    expires_at double precision NOT NULL, tries integer NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS codey_push_vapid (
    id smallint PRIMARY KEY CHECK (id = 1), sealed bytea NOT NULL);
CREATE TABLE IF NOT EXISTS codey_push_subscriptions (
    device_id text PRIMARY KEY, record bytea NOT NULL);
"""


def lock_key(name: str) -> int:
    """The advisory-lock key of a named lock (a signed 64-bit int, as PostgreSQL takes)."""
    return int.from_bytes(hashlib.sha256(b"codey:" + name.encode()).digest()[:8], "big",
                          signed=True)


class SharedDb:
    """A pool on the shared database, its tables, and the notifications between replicas."""

    def __init__(self, url: str, *, pool_size: int = 6) -> None:
        self.url = url
        self.pool_size = pool_size
        self.pool: Any = None
        self._subscribers: dict[str, list[Callable[[str], None]]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._sync_pool: Any = None
        self._sync_lock = threading.Lock()

    async def open(self) -> None:
        import psycopg
        from psycopg_pool import AsyncConnectionPool

        try:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn, \
                    conn.transaction():
                # replicas starting together: one creates the tables, the others wait
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                await conn.execute(SCHEMA)
        except psycopg.OperationalError as err:
            raise ServerError(f"cannot reach the database: {err}") from None
        self.pool = AsyncConnectionPool(self.url, min_size=1, max_size=self.pool_size,
                                        open=False, kwargs={"autocommit": True})
        await self.pool.open(wait=True)
        self._listener = asyncio.get_running_loop().create_task(
            listen(self.url, CHANNEL, self._notified), name="shared-listen")

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        if self.pool is not None:
            await self.pool.close()
        with self._sync_lock:
            if self._sync_pool is not None:
                with contextlib.suppress(Exception):
                    self._sync_pool.close()
                self._sync_pool = None

    # queries ---------------------------------------------------------------------------------

    async def execute(self, query: str, params: Any = ()) -> list[Any]:
        """Run one statement (its own transaction); the rows it returned, if any."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return list(await cur.fetchall()) if cur.description else []

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A connection inside one transaction, committed when the block ends (rolled back
        when it raises). Row locks (``FOR UPDATE``) and ``pg_notify`` hold until then."""
        async with self.pool.connection() as conn, conn.transaction():
            yield conn

    @contextlib.asynccontextmanager
    async def locked(self, name: str) -> AsyncIterator[None]:
        """Hold the named lock (one holder among all replicas) for the block. It holds a
        pooled connection meanwhile; queries in the block use others."""
        key = lock_key(name)
        async with self.pool.connection() as conn:
            await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def sync_execute(self, query: str, params: Any = ()) -> list[Any]:
        """:meth:`execute` for sync callers (a thread, or the loop on a rare path), on a
        small pool of its own, opened when first needed. A connection is checked before it
        is handed out, so one the database closed meanwhile is replaced, not failed on."""
        with self._sync_lock:
            if self._sync_pool is None:
                from psycopg_pool import ConnectionPool

                self._sync_pool = ConnectionPool(
                    self.url, min_size=1, max_size=_SYNC_POOL_SIZE, timeout=_CONNECT_TIMEOUT_S,
                    kwargs={"autocommit": True}, check=ConnectionPool.check_connection,
                    open=True, name="shared-sync")
            pool = self._sync_pool
        with pool.connection() as conn:
            cur = conn.execute(query, params)
            return list(cur.fetchall()) if cur.description else []

    # notifications ---------------------------------------------------------------------------

    def subscribe(self, topic: str, callback: Callable[[str], None]) -> None:
        """Call ``callback(key)`` for each ``<topic>:<key>`` notified, and ``callback("")``
        after the listener (re)connected: something may have been missed, look again."""
        self._subscribers.setdefault(topic, []).append(callback)

    @staticmethod
    def notify_sql(topic: str, key_sql: str = "%s") -> str:
        """A select-list expression that notifies ``<topic>:<key>``, the key being the SQL
        expression ``key_sql`` (a parameter by default, or a column): put it in a statement's
        ``RETURNING`` so the notification goes with that statement's commit, once per row."""
        return f"pg_notify('{CHANNEL}', '{topic}:' || {key_sql})"

    async def notify(self, topic: str, key: str) -> None:
        await self.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{topic}:{key}"))

    def _notified(self, payload: str) -> None:
        if not payload:
            topics = list(self._subscribers.items())
            for _, callbacks in topics:
                for callback in callbacks:
                    self._call(callback, "")
            return
        topic, _, key = payload.partition(":")
        for callback in self._subscribers.get(topic, ()):
            self._call(callback, key)

    @staticmethod
    def _call(callback: Callable[[str], None], key: str) -> None:
        try:
            callback(key)
        except Exception:
            log.exception("a shared-state notification hook failed")
