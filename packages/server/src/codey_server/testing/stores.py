"""The side stores' contract, importable: every backend's tests subclass
:class:`StoresContract`, as the event log's backends subclass
:class:`~codey_server.eventlog.contract.EventLogContract`.

The seven side stores (:class:`~codey_server.deployment.Stores`: the access token and browser
sessions, worker keys, pair requests, MCP tokens, provider credentials and OAuth logins begun,
files sent with prompts, the Telegram token and pairing code) each have a port and two
backends: one server's files and memory, and the rows every replica reads. One subclass
gives a whole set of backends the whole suite::

    class TestFileStores(StoresContract):
        async def open_stores(self, tmp_path): return file_stores(tmp_path)
        async def backdate(self, stores, kind, key, seconds): ...
        async def kept_sessions(self, stores): ...

Expiry is judged by each backend's clock (the process's, or the database's ``now()``), so a
test makes a thing older through :meth:`StoresContract.backdate` rather than waiting.

It is test code (it needs pytest), kept in the package so that a backend outside this
repository can run it too.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

import pytest

from codey_protocol.worker import PairRequest
from codey_server.deployment import Stores
from codey_server.http.access_store import SESSION_MAX_AGE_S
from codey_server.mcp.tokens import McpToken
from codey_server.providers.store import Credential, PendingLogin
from codey_server.workers.pair_store import PairingError, PairRecord

__all__ = ["Body", "Kind", "StoresContract"]

Body = Callable[[Stores], Awaitable[None]]
#: what :meth:`StoresContract.backdate` makes older: a browser session (by digest), a pair
#: request (by id), an OAuth login begun (by its state), the Telegram pairing code (key "")
Kind = Literal["session", "pair_request", "login", "telegram_code"]

_WAIT_S = 5.0


def _pair_record(request_id: str, source: str = "10.0.0.5") -> PairRecord:
    request = PairRequest(public_key="cHVibGlj", hostname="box", os="Linux",
                          python_version="3.11", worker_version="0.1.0", roots=["/src"])
    return PairRecord(request=request, request_id=request_id, code="BCDF-GHJK",
                      poll_hash=hashlib.sha256(b"poll " + request_id.encode()).hexdigest(),
                      source=source)


def _login(provider: str = "idp") -> PendingLogin:
    return PendingLogin(provider=provider, session_hash=None, binder="b1nd3r",
                        verifier="v" * 43, nonce="n0nce", redirect_uri="http://x/cb",
                        created=time.time())


def _token(token_id: str, sha256: str) -> McpToken:
    return McpToken(token_id=token_id, name="agent", created_at=time.time(), sha256=sha256,
                    scope="read", max_policy="suggest")


class StoresContract(abc.ABC):
    """Tests every backend of the side stores must pass (see the module)."""

    @abc.abstractmethod
    async def open_stores(self, tmp_path: Path) -> Stores:
        """Fresh, empty stores of the backend under test, ready to use."""

    async def close_stores(self, stores: Stores) -> None:
        """Release what :meth:`open_stores` opened (nothing by default)."""
        return None

    @abc.abstractmethod
    async def backdate(self, stores: Stores, kind: Kind, key: str, seconds: float) -> None:
        """Make the stored ``kind`` named ``key`` ``seconds`` older by the store's clock
        (made earlier, or expiring earlier)."""

    @abc.abstractmethod
    async def kept_sessions(self, stores: Stores) -> set[str]:
        """The digests of the browser sessions the backend still keeps (expired or not):
        what is on disk or in the rows, not what counts."""

    def run(self, tmp_path: Path, body: Body) -> None:
        async def main() -> None:
            stores = await self.open_stores(tmp_path)
            try:
                await body(stores)
            finally:
                await self.close_stores(stores)

        asyncio.run(main())

    # the access token and browser sessions ---------------------------------------------------

    def test_the_access_token_is_made_once_and_kept(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            token = await stores.access.load_token()
            assert len(token) >= 32
            assert await stores.access.load_token() == token

        self.run(tmp_path, body)

    def test_a_session_counts_until_it_is_removed(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            access = stores.access
            assert not await access.has_session("d1")
            await access.add_session("d1")
            await access.add_session("d2")
            assert await access.has_session("d1")
            assert await access.existing(["d1", "d2", "d3"]) == {"d1", "d2"}
            assert await access.existing([]) == set()
            assert await access.remove_session("d1") is True
            assert await access.remove_session("d1") is False
            assert not await access.has_session("d1")
            assert await access.existing(["d1", "d2"]) == {"d2"}

        self.run(tmp_path, body)

    def test_an_expired_session_does_not_count_and_is_swept(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            access = stores.access
            for digest in ("old", "new"):
                await access.add_session(digest)
            await self.backdate(stores, "session", "old", SESSION_MAX_AGE_S + 60)
            assert not await access.has_session("old")
            assert await access.existing(["old", "new"]) == {"new"}
            assert await self.kept_sessions(stores) == {"old", "new"}  # not counted, yet kept
            await access.forget_expired()
            assert await self.kept_sessions(stores) == {"new"}
            assert await access.has_session("new")

        self.run(tmp_path, body)

    # worker keys -----------------------------------------------------------------------------

    def test_a_key_opens_only_with_its_credential_set_once(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            keys = stores.worker_keys
            await keys.add("w1", "pk1")
            assert await keys.check("w1", "") is None  # approved, not collected: nothing
            assert await keys.check("w1", "anything") is None
            assert await keys.set_credential("w1", "cred-1") is True
            assert await keys.set_credential("w1", "cred-2") is False  # once
            assert await keys.check("w1", "cred-1") == "pk1"
            assert await keys.check("w1", "cred-2") is None
            assert await keys.check("w2", "cred-1") is None
            assert await keys.set_credential("w2", "cred-1") is False  # no such key

        self.run(tmp_path, body)

    def test_a_key_added_again_replaces_it_and_a_removed_key_opens_nothing(
            self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            keys = stores.worker_keys
            await keys.add("w1", "pk1", "cred-1")
            assert await keys.check("w1", "cred-1") == "pk1"
            await keys.add("w1", "pk2")
            assert await keys.check("w1", "cred-1") is None
            assert await keys.set_credential("w1", "cred-2") is True
            assert await keys.check("w1", "cred-2") == "pk2"
            await keys.remove("w1")
            await keys.remove("w1")  # none: fine
            assert await keys.check("w1", "cred-2") is None

        self.run(tmp_path, body)

    # pair requests ---------------------------------------------------------------------------

    def test_a_pair_request_moves_by_compare_and_set(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            pairs = stores.pair_requests
            stored = await pairs.add(_pair_record("p1"), ttl_s=600, max_pending=50,
                                     max_per_source=5)
            assert stored.status == "pending" and stored.attempts == 0 and not stored.lapsed
            assert 590 <= stored.expires_at - stored.requested_at <= 610
            got = await pairs.get("p1")
            assert got is not None and got.code == "BCDF-GHJK" and got.request == stored.request
            assert await pairs.get("nope") is None
            assert [p.request_id for p in await pairs.pending()] == ["p1"]
            assert await pairs.wrong_code("p1") == 1
            assert await pairs.wrong_code("p1") == 2
            changed = pairs.watch("p1")
            assert await pairs.move("p1", ("pending",), "approving") is True
            await asyncio.wait_for(changed.wait(), _WAIT_S)
            assert await pairs.move("p1", ("pending",), "denied") is False  # another won
            assert await pairs.wrong_code("p1") is None  # not pending
            assert await pairs.move("p1", ("approving",), "approved", worker_id="w1") is True
            got = await pairs.get("p1")
            assert got is not None and (got.status, got.worker_id, got.attempts) == (
                "approved", "w1", 2)
            assert await pairs.pending() == []

        self.run(tmp_path, body)

    def test_pending_pair_requests_are_limited_in_all_and_per_source(
            self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            async def add(request_id: str, source: str) -> None:
                await stores.pair_requests.add(_pair_record(request_id, source), ttl_s=600,
                                               max_pending=2, max_per_source=1)

            pairs = stores.pair_requests
            await add("p1", "10.0.0.5")
            with pytest.raises(PairingError) as here:
                await add("p2", "10.0.0.5")
            assert here.value.code == "too_many"
            await add("p3", "10.0.0.6")
            with pytest.raises(PairingError) as total:
                await add("p4", "10.0.0.7")
            assert total.value.code == "too_many"
            assert sorted(p.request_id for p in await pairs.pending()) == ["p1", "p3"]

        self.run(tmp_path, body)

    def test_a_pair_request_past_its_expiry_is_expired_then_forgotten(
            self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            pairs = stores.pair_requests
            for request_id in ("old", "new"):
                await pairs.add(_pair_record(request_id, request_id), ttl_s=600,
                                max_pending=50, max_per_source=5)
            await self.backdate(stores, "pair_request", "old", 601)
            old = await pairs.get("old")
            assert old is not None and old.lapsed and old.status == "pending"
            assert [p.request_id for p in await pairs.pending()] == ["new"]
            assert await pairs.expire(forget_after_s=600) == ["old"]
            old = await pairs.get("old")
            assert old is not None and old.status == "expired"
            assert await pairs.expire(forget_after_s=600) == []
            await self.backdate(stores, "pair_request", "old", 600)
            await pairs.expire(forget_after_s=600)
            assert await pairs.get("old") is None  # answered long ago: forgotten
            new = await pairs.get("new")
            assert new is not None and new.status == "pending" and not new.lapsed

        self.run(tmp_path, body)

    # MCP tokens ------------------------------------------------------------------------------

    def test_an_mcp_token_is_found_by_its_hash_until_it_is_removed(
            self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            tokens = stores.mcp_tokens
            assert await tokens.all() == []
            await tokens.add(_token("mt_1", "a" * 64))
            await tokens.add(_token("mt_2", "b" * 64))
            assert sorted(t.token_id for t in await tokens.all()) == ["mt_1", "mt_2"]
            found = await tokens.find("a" * 64)
            assert found is not None and (found.token_id, found.scope) == ("mt_1", "read")
            assert await tokens.find("c" * 64) is None
            await tokens.used(found, 1234.5)
            again = await tokens.find("a" * 64)
            assert again is not None and again.last_used_at == 1234.5
            removed = await tokens.remove("mt_1")
            assert removed is not None and removed.token_id == "mt_1"
            assert await tokens.remove("mt_1") is None
            assert await tokens.find("a" * 64) is None
            assert [t.token_id for t in await tokens.all()] == ["mt_2"]

        self.run(tmp_path, body)

    # provider credentials and OAuth logins begun ---------------------------------------------

    def test_a_credential_is_kept_per_provider_until_removed(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            creds = stores.credentials
            assert await creds.get("openai") is None
            assert await creds.names() == []
            await creds.put("openai", Credential(method="api_key", api_key="sk-1"))
            await creds.put("idp", Credential(method="oauth", access_token="at",
                                              refresh_token="rt", expires_at=99.0))
            await creds.put("openai", Credential(method="api_key", api_key="sk-2"))
            got = await creds.get("openai")
            assert got is not None and got.api_key == "sk-2"
            idp = await creds.get("idp")
            assert idp is not None and (idp.access_token, idp.refresh_token,
                                        idp.expires_at) == ("at", "rt", 99.0)
            assert sorted(await creds.names()) == ["idp", "openai"]
            assert await creds.remove("openai") is True
            assert await creds.remove("openai") is False
            assert await creds.get("openai") is None
            assert await creds.names() == ["idp"]

        self.run(tmp_path, body)

    def test_an_oauth_login_begun_is_taken_once(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            logins = stores.logins
            login = _login()
            await logins.put("state-1", login)
            assert await logins.take("state-2") is None
            assert await logins.take("state-1") == login
            assert await logins.take("state-1") is None

        self.run(tmp_path, body)

    def test_oauth_logins_begun_long_ago_are_forgotten(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            logins = stores.logins
            await logins.put("old", _login("a"))
            await logins.put("new", _login("b"))
            await self.backdate(stores, "login", "old", 700)
            await logins.expire(600)
            assert await logins.take("old") is None
            taken = await logins.take("new")
            assert taken is not None and taken.provider == "b"

        self.run(tmp_path, body)

    # files sent with prompts -----------------------------------------------------------------

    def test_a_file_is_kept_by_its_hash(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            blobs = stores.blobs
            data = b"a file sent with a prompt\n"
            digest = blobs.put(data)
            assert digest == hashlib.sha256(data).hexdigest()
            assert blobs.put(data) == digest  # once
            assert blobs.get(digest) == data and blobs.exists(digest)
            missing = hashlib.sha256(b"never sent").hexdigest()
            assert blobs.get(missing) is None and not blobs.exists(missing)
            for bad in ("", "../../etc/passwd", digest[:-1], digest.upper()):
                assert blobs.get(bad) is None and not blobs.exists(bad)

        self.run(tmp_path, body)

    # Web Push: the VAPID key and the subscriptions ---------------------------------------------

    def test_the_vapid_key_is_made_once_and_subscriptions_are_kept_per_device(
            self, tmp_path: Path) -> None:
        from codey_server.push.store import Subscription

        async def body(stores: Stores) -> None:
            push = stores.push
            pem = await push.vapid_pem()
            assert pem.startswith(b"-----BEGIN") and await push.vapid_pem() == pem
            assert await push.get("dev_a") is None
            first = Subscription(endpoint="https://push.example/a", p256dh="K", auth="A")
            await push.put("dev_a", first)
            await push.put("dev_b", Subscription(endpoint="https://push.example/b",
                                                 p256dh="K2", auth="A2"))
            assert await push.get("dev_a") == first
            again = Subscription(endpoint="https://push.example/a", p256dh="K3", auth="A3")
            await push.put("dev_a", again)  # subscribed again: replaced
            assert await push.get("dev_a") == again
            await push.remove("dev_a")
            await push.remove("dev_a")  # none: fine
            assert await push.get("dev_a") is None
            assert (await push.get("dev_b") or again).auth == "A2"

        self.run(tmp_path, body)

    # the Telegram token and pairing code -----------------------------------------------------

    def test_a_telegram_token_is_kept_and_a_change_wakes_the_watchers(
            self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            telegram = stores.telegram
            assert await telegram.token() is None
            changed = telegram.watch()
            await telegram.put_token("123:AAtoken")
            await asyncio.wait_for(changed.wait(), _WAIT_S)
            assert await telegram.token() == "123:AAtoken"
            removed = telegram.watch()
            await telegram.remove_token()
            await asyncio.wait_for(removed.wait(), _WAIT_S)
            await telegram.remove_token()  # none: fine
            assert await telegram.token() is None

        self.run(tmp_path, body)

    def test_a_telegram_code_is_taken_once_and_dies_after_the_wrong_tries(
            self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            telegram = stores.telegram
            assert await telegram.take_code("ABCDEFGH", 5) is False  # none yet
            expires = await telegram.new_code("ABCDEFGH", 600)
            assert abs(expires - (time.time() + 600)) < 60
            assert await telegram.take_code("abcd-efgh", 5) is True  # typed loosely
            assert await telegram.take_code("ABCDEFGH", 5) is False  # used
            await telegram.new_code("AAAAAAAA", 600)
            for _ in range(4):
                assert await telegram.take_code("WRONGONE", 5) is False
            await telegram.new_code("BBBBBBBB", 600)  # replaces the old, resets the tries
            assert await telegram.take_code("AAAAAAAA", 5) is False
            for _ in range(3):
                assert await telegram.take_code("WRONGONE", 5) is False
            assert await telegram.take_code("BBBBBBBB", 5) is True
            await telegram.new_code("CCCCCCCC", 600)
            for _ in range(5):
                assert await telegram.take_code("WRONGONE", 5) is False
            assert await telegram.take_code("CCCCCCCC", 5) is False  # guessed at: dead

        self.run(tmp_path, body)

    def test_a_telegram_code_past_its_expiry_is_refused(self, tmp_path: Path) -> None:
        async def body(stores: Stores) -> None:
            telegram = stores.telegram
            await telegram.new_code("ABCDEFGH", 600)
            await self.backdate(stores, "telegram_code", "", 601)
            assert await telegram.take_code("ABCDEFGH", 5) is False

        self.run(tmp_path, body)
