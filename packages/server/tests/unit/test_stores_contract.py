"""The side stores' contract (``codey_server.testing.stores``) on one server's backends: the
data dir's files and this process's memory. The PostgreSQL backends run the same suite in
``tests/integration/test_stores_pg.py``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import msgspec

from codey_server.channels.telegram_store import FileTelegramStore
from codey_server.deployment import Stores, file_stores
from codey_server.http.access_store import SESSIONS_FILE, FileAccessStore
from codey_server.providers.store import MemoryLoginStore
from codey_server.testing.stores import Kind, StoresContract
from codey_server.workers.pair_store import MemoryPairStore


class TestFileStores(StoresContract):
    async def open_stores(self, tmp_path: Path) -> Stores:
        self.data_dir = tmp_path
        return file_stores(tmp_path)

    async def backdate(self, stores: Stores, kind: Kind, key: str, seconds: float) -> None:
        if kind == "session":
            assert isinstance(stores.access, FileAccessStore)
            stores.access._store()[key] -= seconds
            stores.access._save()
        elif kind == "pair_request":
            assert isinstance(stores.pair_requests, MemoryPairStore)
            p = stores.pair_requests._requests[key]
            stores.pair_requests._requests[key] = replace(
                p, requested_at=p.requested_at - seconds, expires_at=p.expires_at - seconds)
        elif kind == "login":
            assert isinstance(stores.logins, MemoryLoginStore)
            login = stores.logins._logins[key]
            stores.logins._logins[key] = msgspec.structs.replace(
                login, created=login.created - seconds)
        else:
            assert isinstance(stores.telegram, FileTelegramStore)
            assert stores.telegram._code is not None
            digest, expires, wrong = stores.telegram._code
            stores.telegram._code = (digest, expires - seconds, wrong)

    async def kept_sessions(self, stores: Stores) -> set[str]:
        path = self.data_dir / SESSIONS_FILE
        return set(json.loads(path.read_text())) if path.exists() else set()
