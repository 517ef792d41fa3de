"""The side stores' contract (``codey_server.testing.stores``) on their PostgreSQL backends,
the rows every replica reads (a throwaway cluster, a database per test), and what the server
does with expired rows there: a browser session past its age is deleted when a server starts
and at each login, not only refused."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from codey_server.cluster.crypto import SecretKey
from codey_server.cluster.db import SharedDb
from codey_server.deployment import Stores, row_stores
from codey_server.http.access import BrowserAccess
from codey_server.http.access_store import SESSION_MAX_AGE_S, PgAccessStore
from codey_server.settings import Settings
from codey_server.testing.stores import Kind, StoresContract
from codey_testkit.postgres import PostgresCluster, pg_bin

pytestmark = pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed")

_NAMES = itertools.count()


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    with PostgresCluster() as pg:  # one cluster per module: starting one takes seconds
        yield pg


class TestPgStores(StoresContract):
    @pytest.fixture(autouse=True)
    def _database(self, cluster: PostgresCluster) -> None:
        self.dsn = cluster.create_database(f"s{next(_NAMES)}")

    async def open_stores(self, tmp_path: Path) -> Stores:
        self.db = SharedDb(self.dsn)
        await self.db.open()
        return row_stores(self.db, tmp_path, SecretKey(secrets.token_bytes(32)))

    async def close_stores(self, stores: Stores) -> None:
        await self.db.close()

    async def backdate(self, stores: Stores, kind: Kind, key: str, seconds: float) -> None:
        if kind == "session":
            query = "UPDATE codey_browser_sessions SET created = created - %s WHERE digest = %s"
            params: tuple[object, ...] = (seconds, key)
        elif kind == "pair_request":
            query = ("UPDATE codey_pair_requests SET requested_at = requested_at - %s, "
                     "expires_at = expires_at - %s WHERE request_id = %s")
            params = (seconds, seconds, key)
        elif kind == "login":
            query = "UPDATE codey_oauth_logins SET created = created - %s WHERE state_hash = %s"
            params = (seconds, hashlib.sha256(key.encode()).hexdigest())
        else:
            query = "UPDATE codey_telegram_pairing SET expires_at = expires_at - %s"
            params = (seconds,)
        rows = await self.db.execute(query + " RETURNING 1", params)
        assert rows, f"no {kind} {key!r} to backdate"

    async def kept_sessions(self, stores: Stores) -> set[str]:
        return {str(r[0]) for r in await self.db.execute(
            "SELECT digest FROM codey_browser_sessions")}


def test_an_expired_browser_session_is_swept_at_start_and_at_each_login(
        cluster: PostgresCluster, tmp_path: Path) -> None:
    dsn = cluster.create_database("sweep")

    async def main() -> None:
        db = SharedDb(dsn)
        await db.open()
        store = PgAccessStore(db, tmp_path)

        async def kept() -> set[str]:
            return {str(r[0]) for r in await db.execute(
                "SELECT digest FROM codey_browser_sessions")}

        async def expire(digest: str) -> None:
            await db.execute("UPDATE codey_browser_sessions SET created = created - %s "
                             "WHERE digest = %s", (SESSION_MAX_AGE_S + 60, digest))

        access = BrowserAccess(Settings(data_dir=tmp_path, database_url=dsn), store)
        try:
            for digest in ("old", "new"):
                await store.add_session(digest)
            await expire("old")
            await access.start()  # a server starting on the database
            assert await kept() == {"new"}
            await expire("new")
            session = await access.login(access.token)
            assert session is not None
            assert await kept() == {hashlib.sha256(session.encode()).hexdigest()}
        finally:
            await access.stop()
            await db.close()

    asyncio.run(main())
