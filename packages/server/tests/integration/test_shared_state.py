"""Three replicas on one real PostgreSQL behind the test kit's nginx (three upstreams, taken in
turn), sharing their state as rows: one access token, a login that works on the next request
wherever it lands, a worker that pairs through the proxy, and deletes that hold — a logged-out
cookie, a revoked MCP token, a removed worker's key are refused by every replica as soon as
the request that deleted them has answered, also while another replica is writing. A hostile
client replays each deleted credential on every replica. Files and provider logins (sealed in
their rows) uploaded or made on one replica are used by the others, and a provider token is
refreshed by one replica at a time.

Addresses as in test_behind_nginx.py: nginx connects from 127.0.0.2 (the one trusted proxy);
a client poses as another machine by connecting to nginx from 127.0.0.3 and up.
"""

from __future__ import annotations

import asyncio
import base64
import json
import platform
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from codey_server.cluster.crypto import SecretKey
from codey_server.cluster.db import SharedDb
from codey_server.cluster.errors import SecretKeyError
from codey_server.providers.store import PgCredentialStore
from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.nginx import NginxProcess, require_nginx
from codey_testkit.oidc.process import OIDCProviderProcess
from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import Deadline, WaitTimedOut, wait_until

pytestmark = pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed")

PROXY_ADDRESS = "127.0.0.2"
SECRET_KEY = base64.b64encode(secrets.token_bytes(32)).decode()
API_KEY = "sk-shared-" + "k3y" * 8
SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"any": True}, "reply": {"text": "the model answers"}}]}
ROUNDS = 5


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Replicas:
    """The stack: PostgreSQL, three replicas, nginx in front, an identity provider and a
    model server that takes the API key or the identity provider's tokens."""

    def __init__(self, root: Path, pg: PostgresCluster) -> None:
        self.root = root
        self.pg = pg
        self.dsn = pg.create_database("shared")
        self.oidc = OIDCProviderProcess(log_dir=root / "logs", access_token_ttl=4).start()
        self.model: ModelServerHandle = start_model_server(
            SCRIPT, root / "model", api_key=API_KEY, oidc_issuer=self.oidc.issuer)
        self.proxy = NginxProcess(bind=PROXY_ADDRESS, root=root / "nginx")
        self.config = {
            "providers": [
                {"name": "keyed", "kind": "chat", "base_url": self.model.base_url,
                 "models": ["scripted-1"], "auth": "api_key"},
                {"name": "idp", "kind": "chat", "base_url": self.model.base_url,
                 "models": ["scripted-1"], "auth": "oauth", "issuer": self.oidc.issuer,
                 "client_id": "codey"}],
            "default_provider": "keyed",
            "trusted_proxies": [f"{PROXY_ADDRESS}/32"]}
        self.replicas = [self.server(f"r{n}", self.dsn) for n in range(3)]

    def server(self, name: str, dsn: str) -> ServerProcess:
        return ServerProcess(self.root / name, config=self.config, env={
            "CODEY_SECRET_KEY": SECRET_KEY}, extra_args=[
            "--database-url", dsn, "--replica-id", name, "--public-url", self.proxy.url])

    def start(self) -> None:
        for replica in self.replicas:
            replica.start()
        self.proxy.start([r.url for r in self.replicas])
        self.oidc.add_client("codey", [f"{self.proxy.url}/api/auth/callback"])

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()
        self.proxy.stop()
        self.model.stop()
        self.oidc.stop()

    @property
    def token(self) -> str:
        assert self.replicas[0].token is not None
        return self.replicas[0].token

    @property
    def cookie_name(self) -> str:
        return next(iter(self.replicas[0].http.cookies.keys()))

    def client(self, base: str, source: str = "127.0.0.1") -> httpx.Client:
        """A client with no credentials of its own, reaching ``base`` from ``source``; its
        ``Origin`` is the public URL, which every replica counts as its own."""
        return httpx.Client(base_url=base, timeout=30.0, headers={"Origin": self.proxy.url},
                            transport=httpx.HTTPTransport(local_address=source))

    def login(self, base: str) -> str:
        """A fresh browser login through ``base`` (the proxy or a replica): its cookie."""
        with self.client(base) as http:
            r = http.get(f"/?token={self.token}", follow_redirects=False)
            assert r.status_code == 303, (r.status_code, r.text)
            return str(r.cookies[self.cookie_name])

    def with_cookie(self, cookie: str) -> dict[str, str]:
        return {"Cookie": f"{self.cookie_name}={cookie}", "Origin": self.proxy.url}

    def status_with(self, base: str, cookie: str, path: str = "/api/sessions") -> int:
        """What a request with this cookie gets from ``base``: 200 or 401."""
        return httpx.get(base + path, headers=self.with_cookie(cookie), timeout=30).status_code

    def upstreams(self, needle: str) -> set[str]:
        """The replicas nginx sent the requests whose line holds ``needle`` to."""
        return {line.rsplit("upstream=", 1)[1].split()[0]
                for line in self.proxy.access_lines() if needle in line}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    require_nginx()
    with PostgresCluster() as pg:
        replicas = Replicas(tmp_path_factory.mktemp("shared"), pg)
        try:
            replicas.start()
            yield replicas
        finally:
            replicas.stop()


# --- one token, logins --------------------------------------------------------------------------


def test_one_token_for_the_cluster_and_a_login_works_on_the_next_request_anywhere(
        stack: Replicas) -> None:
    tokens = {r.token for r in stack.replicas}
    assert len(tokens) == 1 and None not in tokens, "each replica printed its own token"
    names = {next(iter(r.http.cookies.keys())) for r in stack.replicas}
    assert len(names) == 1, f"cookie names differ between replicas: {names}"
    # a fresh login through the proxy, then at once its next requests (a browser's page load):
    # taken in turn by the three replicas, each must know it
    for _ in range(6):
        cookie = stack.login(stack.proxy.url)
        assert [stack.status_with(stack.proxy.url, cookie) for _ in range(3)] == [200] * 3
    # and without the proxy: logged in on one replica, known to the others on the next request
    for n, replica in enumerate(stack.replicas):
        cookie = stack.login(replica.url)
        others = [r for r in stack.replicas if r is not replica]
        assert [stack.status_with(r.url, cookie) for r in others] == [200, 200], f"r{n}"
    assert len(stack.upstreams("GET /api/sessions")) == 3  # the proxy did spread them


# --- pairing ---------------------------------------------------------------------------------


class _WorkerKey:
    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.public = _b64(self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def body(self) -> dict[str, Any]:
        return {"public_key": self.public, "hostname": "far-host", "os": "Linux",
                "python_version": platform.python_version(), "worker_version": "0.1.0",
                "roots": ["/tmp"]}

    def handshake(self, ws_url: str, worker_id: str, credential: str) -> ClientConnection:
        ws = connect(ws_url, open_timeout=10, legacy=True)
        challenge = json.loads(ws.recv(timeout=10))
        ts = time.time()
        sig = _b64(self.key.sign(f"{challenge['nonce']}:{worker_id}:{ts!r}".encode()))
        ws.send(json.dumps({"type": "auth_response", "worker_id": worker_id, "ts": ts,
                            "signature": sig, "credential": credential}))
        return ws


def _closed_within(ws: ClientConnection, seconds: float) -> int | None:
    """The close code the server ends ``ws`` with within ``seconds`` (frames before it are
    read and dropped); None if it stays open."""
    deadline = Deadline(seconds, what="the socket to close")
    try:
        while True:
            try:
                ws.recv(timeout=deadline.left())
            except TimeoutError:
                continue  # the deadline says when to stop
            except ConnectionClosed as closed:
                return closed.rcvd.code if closed.rcvd else -1
    except WaitTimedOut:
        return None


def _refused_with(ws: ClientConnection) -> int | None:
    """The close code of a handshake the server refused; None if it was welcomed."""
    try:
        frame = json.loads(ws.recv(timeout=10))
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else -1
    assert frame["type"] == "welcome", frame
    ws.close()
    return None


def _worker_ws(base: str) -> str:
    return "ws" + base[len("http"):] + "/ws/worker"


def test_a_real_worker_pairs_and_connects_through_the_proxy(
        stack: Replicas, tmp_path: Path) -> None:
    # what WorkerProcess uses of a server: its URL and a logged-in client, both the proxy's
    through_proxy = SimpleNamespace(url=stack.proxy.url, http=stack.client(stack.proxy.url))
    through_proxy.http.cookies.set(stack.cookie_name, stack.login(stack.proxy.url))
    try:
        worker = WorkerProcess(through_proxy, tmp_path / "worker")  # type: ignore[arg-type]
        worker.start(timeout=60)
        try:
            for replica in stack.replicas:  # each replica's fold has it connected
                _until(lambda r=replica: r.http.get("/api/state/bootstrap").json()["state"][
                    "workers"].get(worker.worker_id, {}).get("connected") is True,
                    what=f"the worker on {replica.url}")
        finally:
            worker.stop()
    finally:
        through_proxy.http.close()
    # the worker's request, its polls and the browser's approval did not all reach one replica
    pairing = stack.upstreams("/api/pairing/requests")
    assert len(pairing) >= 2, pairing


def test_request_poll_and_approval_on_three_replicas_and_the_limits_hold_across_them(
        stack: Replicas) -> None:
    r0, r1, r2 = stack.replicas
    key = _WorkerKey()
    ticket = r0.http.post("/api/pairing/requests", json=key.body()).json()
    # the browser lists it on another replica, and the long poll waits on a third
    assert ticket["request_id"] in {p["request_id"] for p in
                                    r1.http.get("/api/pairing/requests").json()}
    answer: dict[str, Any] = {}

    def poll() -> None:
        with stack.client(r2.url) as http:
            answer.update(http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                                   params={"secret": ticket["poll_secret"],
                                           "timeout": 20}).json())

    poller = threading.Thread(target=poll)
    poller.start()
    # deliberate: the approval must land while the poll waits, and a waiting poll shows
    # nothing outside its replica (as in test_pairing.py)
    time.sleep(0.5)
    t0 = time.monotonic()
    approved = r1.http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                            json={"code": ticket["code"]})
    assert approved.status_code == 200, approved.text
    poller.join(20)
    woke_in = time.monotonic() - t0
    assert answer["status"] == "approved" and answer["credential"], answer
    print(f"the poll on r2 answered {woke_in * 1000:.0f} ms after the approval was sent to r1")
    assert woke_in < 2.0, f"the poll on another replica woke {woke_in:.1f} s after approval"
    # its credential opens every replica; it is delivered once
    for replica in stack.replicas:
        assert _refused_with(key.handshake(replica.worker_ws_url, answer["worker_id"],
                                           answer["credential"])) is None
    again = r0.http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                        params={"secret": ticket["poll_secret"], "timeout": 0})
    assert again.status_code == 404
    # nothing of the credential is stored in the clear
    with psycopg.connect(stack.dsn) as conn:
        stored = conn.execute("SELECT credential FROM codey_worker_keys WHERE worker_id = %s",
                              (answer["worker_id"],)).fetchone()
    assert stored is not None and answer["credential"] not in str(stored[0])

    # five wrong codes lock a request, whichever replicas they reach; the right code is then
    # refused on the sixth
    locked = r0.http.post("/api/pairing/requests", json=_WorkerKey().body()).json()
    codes = [stack.replicas[n % 3].http.post(
        f"/api/pairing/requests/{locked['request_id']}/approve",
        json={"code": "BBBB-BBBB"}).status_code for n in range(5)]
    assert codes == [403, 403, 403, 403, 423]
    assert r2.http.post(f"/api/pairing/requests/{locked['request_id']}/approve",
                        json={"code": locked["code"]}).status_code == 423

    # five pending requests from one client behind the proxy, wherever they land: the sixth
    # is refused, and another client still gets in
    with stack.client(stack.proxy.url, "127.0.0.3") as one, \
            stack.client(stack.proxy.url, "127.0.0.4") as other:
        codes = [one.post("/api/pairing/requests", json=_WorkerKey().body()).status_code
                 for _ in range(6)]
        assert codes == [201] * 5 + [429]
        assert other.post("/api/pairing/requests", json=_WorkerKey().body()).status_code == 201
    assert len(stack.upstreams("POST /api/pairing/requests")) >= 2


def test_a_removed_worker_is_refused_by_every_replica(stack: Replicas) -> None:
    r0, r1, r2 = stack.replicas
    key = _WorkerKey()
    ticket = r2.http.post("/api/pairing/requests", json=key.body()).json()
    worker_id = r0.http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                             json={"code": ticket["code"]}).json()["worker_id"]
    status = r1.http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                         params={"secret": ticket["poll_secret"], "timeout": 5}).json()
    credential = status["credential"]
    connected = key.handshake(r2.worker_ws_url, worker_id, credential)
    assert json.loads(connected.recv(timeout=10))["type"] == "welcome"
    connected.send(json.dumps({"type": "hello", "worker_version": "0.1.0",
                               "hostname": "far-host", "os": "Linux"}))
    assert r1.http.post(f"/api/workers/{worker_id}/revoke").status_code == 200
    # the hostile worker replays its credential on each replica at once: refused (4403)
    for replica in stack.replicas:
        assert _refused_with(key.handshake(replica.worker_ws_url, worker_id,
                                           credential)) == 4403, replica.url
    # and the socket it had open on another replica is closed
    assert _closed_within(connected, 5) == 4403


# --- deletes that hold -----------------------------------------------------------------------


def _client_socket(stack: Replicas, base: str, cookie: str) -> ClientConnection:
    """A browser socket with this cookie, subscribed (a refused one raises ConnectionClosed
    here or on its first read)."""
    url = "ws" + base[len("http"):] + "/ws/client"
    ws = connect(url, open_timeout=10, legacy=True, additional_headers=stack.with_cookie(cookie))
    ws.send(json.dumps({"type": "subscribe", "after_seq": 0}))
    return ws


def _socket_refused(stack: Replicas, base: str, cookie: str) -> bool:
    """A browser socket with this cookie is closed with 4401 (or refused before the 101)."""
    try:
        ws = _client_socket(stack, base, cookie)
        code = _closed_within(ws, 10)
    except InvalidStatus:
        return True
    except ConnectionClosed as closed:
        code = closed.rcvd.code if closed.rcvd else None
    return code == 4401


def test_a_logout_racing_a_login_elsewhere_holds_on_every_replica(stack: Replicas) -> None:
    r0, r1, r2 = stack.replicas
    bases = [r.url for r in stack.replicas] + [stack.proxy.url]
    closed_after: list[float] = []
    with ThreadPoolExecutor(2) as pool:
        for n in range(ROUNDS):
            leaving = stack.login(r0.url)
            # the browser that leaves has a socket open on another replica
            open_socket = _client_socket(stack, r2.url, leaving)
            assert json.loads(open_socket.recv(timeout=10))["type"] == "snapshot"

            def log_out(cookie: str = leaving) -> int:
                return httpx.post(r0.url + "/api/logout", headers=stack.with_cookie(cookie),
                                  timeout=30).status_code

            out, coming = pool.submit(log_out), pool.submit(stack.login, r1.url)
            assert out.result() == 200
            answered = time.monotonic()
            # the socket it had open on r2 is closed by the logout on r0
            assert _closed_within(open_socket, 3) == 4401, f"round {n}"
            closed_after.append(time.monotonic() - answered)
            arrived = coming.result()
            # once the logout answered: refused everywhere, at once, by HTTP and socket
            assert [stack.status_with(b, leaving) for b in bases] == [401] * 4, f"round {n}"
            assert all(_socket_refused(stack, b, leaving) for b in bases[:3]), f"round {n}"
            assert [stack.status_with(b, arrived) for b in bases] == [200] * 4, f"round {n}"
    print("a logged-out browser's socket on another replica closed "
          f"{', '.join(f'{t * 1000:.0f}' for t in closed_after)} ms after the logout answered")
    # still refused a while later (nothing brings it back, as the old union merge did).
    # Deliberate: no event would show a writer bringing the row back, since none should exist
    time.sleep(1.5)
    assert [stack.status_with(b, leaving) for b in bases] == [401] * 4


def _mcp(base: str, token: str) -> int:
    r = httpx.post(base + "/mcp", timeout=60, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"}}})
    return r.status_code


def test_a_revoked_mcp_token_racing_a_new_one_elsewhere_is_refused_everywhere(
        stack: Replicas) -> None:
    r0, r1, r2 = stack.replicas
    bases = [r.url for r in stack.replicas] + [stack.proxy.url]
    with ThreadPoolExecutor(2) as pool:
        for n in range(ROUNDS):
            made = r2.http.post("/api/mcp/tokens", json={"name": f"agent {n}"}).json()
            assert all(_mcp(b, made["token"]) == 200 for b in bases[:3])  # known everywhere
            revoking = pool.submit(r0.http.delete, f"/api/mcp/tokens/{made['token_id']}")
            making = pool.submit(r1.http.post, "/api/mcp/tokens", json={"name": f"new {n}"})
            assert revoking.result().status_code == 200
            new = making.result().json()
            assert [_mcp(b, made["token"]) for b in bases] == [401] * 4, f"round {n}"
            assert [_mcp(b, new["token"]) for b in bases] == [200] * 4, f"round {n}"
            listed = {t["token_id"] for t in r2.http.get("/api/mcp/tokens").json()}
            assert made["token_id"] not in listed and new["token_id"] in listed


# --- files and provider logins ---------------------------------------------------------------


def test_an_attachment_uploaded_on_one_replica_is_fetched_on_the_others(stack: Replicas) -> None:
    r0, r1, r2 = stack.replicas
    data = secrets.token_bytes(200_000)
    made = r0.http.post("/api/blobs", params={"name": "a.bin"}, content=data)
    assert made.status_code == 201, made.text
    digest = made.json()["hash"]
    for replica in (r1, r2):
        got = replica.http.get(f"/api/blobs/{digest}")
        assert got.status_code == 200 and got.content == data
    assert r1.http.get(f"/api/blobs/{'0' * 64}").status_code == 404


def _provider_test(replica: ServerProcess, name: str) -> dict[str, Any]:
    r = replica.http.post(f"/api/providers/{name}/test")
    assert r.status_code == 200, (replica.url, r.status_code, r.text)
    return dict(r.json())


def _row(stack: Replicas, provider: str) -> bytes | None:
    with psycopg.connect(stack.dsn) as conn:
        row = conn.execute("SELECT sealed FROM codey_credentials WHERE provider = %s",
                           (provider,)).fetchone()
    return bytes(row[0]) if row else None


def test_an_api_key_is_sealed_in_its_row_and_used_by_the_other_replicas(stack: Replicas) -> None:
    r0, r1, r2 = stack.replicas
    assert _provider_test(r1, "keyed")["ok"] is False  # no key yet: the model refuses
    r = r0.http.post("/api/auth/api-key", json={"provider": "keyed", "api_key": API_KEY})
    assert r.status_code == 200 and r.json()["state"] == "logged_in"
    row = _row(stack, "keyed")
    assert row is not None and API_KEY.encode() not in row and b"api_key" not in row
    # the next call on another replica uses it
    assert _provider_test(r1, "keyed")["ok"] is True
    status = {e["provider"]: e for e in r2.http.get("/api/auth/status").json()}
    assert status["keyed"]["state"] == "logged_in"

    # a replica with another key cannot read it, and says why
    async def with_other_key() -> str:
        db = SharedDb(stack.dsn)
        await db.open()
        try:
            await PgCredentialStore(db, SecretKey(secrets.token_bytes(32))).get("keyed")
        except SecretKeyError as err:
            return err.message
        finally:
            await db.close()
        return ""

    assert "another secret key" in asyncio.run(with_other_key())
    # a logout on one replica holds on the others at once
    assert r2.http.post("/api/auth/logout", json={"provider": "keyed"}).status_code == 200
    assert _row(stack, "keyed") is None
    assert _provider_test(r0, "keyed")["ok"] is False


def test_an_oauth_login_called_back_on_another_replica_is_refreshed_once_at_a_time(
        stack: Replicas) -> None:
    r0, r1, _ = stack.replicas
    link = r0.http.post("/api/auth/login-link", json={"provider": "idp"})
    assert link.status_code == 200, link.text
    back = httpx.get(link.json()["url"], follow_redirects=False, timeout=10)
    location = str(back.headers["location"])
    assert location.startswith(stack.proxy.url + "/api/auth/callback")
    # the provider sends the browser back through the proxy; here the same browser (its
    # cookies: cookies ignore ports) reaches another replica
    done = r0.http.get(r1.url + location.removeprefix(stack.proxy.url), follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/#/", done.headers
    key = SecretKey(base64.b64decode(SECRET_KEY))

    def access_token() -> str:
        row = _row(stack, "idp")
        assert row is not None, "the login is gone (a refresh token used twice?)"
        return str(json.loads(key.open(row, aad=b"credential:idp", what="idp"))["access_token"])

    # four-second tokens: every replica's refresher sees each one due, and calls to the
    # model on every replica at once ask for it on demand too; one replica refreshes, the
    # others read its row. The identity provider revokes the whole login when a refresh
    # token is used twice, so refreshes in a row that keep the login prove it.
    seen = [access_token()]
    stop = threading.Event()

    def call_the_model(replica: ServerProcess) -> list[bool]:
        results = []
        while not stop.is_set():
            results.append(bool(_provider_test(replica, "idp")["ok"]))
        return results

    with ThreadPoolExecutor(6) as pool:
        calls = [pool.submit(call_the_model, r) for r in stack.replicas * 2]
        try:
            for _ in range(3):
                _until(lambda: access_token() != seen[-1], timeout=15, what="a refresh")
                seen.append(access_token())
        finally:
            stop.set()
        results = [ok for call in calls for ok in call.result()]
    assert len(set(seen)) == 4
    assert len(results) > 30 and all(results), f"{results.count(False)} calls refused"
    assert str(seen[-1]).encode() not in (_row(stack, "idp") or b"")
    for replica in stack.replicas:
        status = {e["provider"]: e for e in replica.http.get("/api/auth/status").json()}
        assert status["idp"]["state"] == "logged_in", replica.url
    assert _provider_test(stack.replicas[2], "idp")["ok"] is True
    assert r0.http.post("/api/auth/logout", json={"provider": "idp"}).status_code == 200


# --- upgrading from the file copy ------------------------------------------------------------


def test_an_upgraded_cluster_imports_the_copied_files_once(stack: Replicas) -> None:
    dsn = stack.pg.create_database("upgraded")
    sessions = {"d" * 64: time.time()}
    mcp = [{"token_id": "mt_old", "name": "old agent", "created_at": 1.0,
            "sha256": "e" * 64, "scope": "read", "max_policy": "suggest"}]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE codey_files (name text PRIMARY KEY, data bytea NOT NULL, "
                     "version bigint NOT NULL)")
        for name, value in (("browser_sessions.json", sessions), ("mcp_tokens.json", mcp),
                            ("workers.json", {"wrk_old": {"public_key": "k",
                                                          "credential": "f" * 64}})):
            conn.execute("INSERT INTO codey_files VALUES (%s, %s, 1)",
                         (name, json.dumps(value).encode()))
    server = stack.server("upgraded", dsn)
    server.start()
    try:
        assert [t["token_id"] for t in server.http.get("/api/mcp/tokens").json()] == ["mt_old"]
        assert server.http.delete("/api/mcp/tokens/mt_old").status_code == 200
        server.restart()
        assert server.http.get("/api/mcp/tokens").json() == []  # not brought back
    finally:
        server.stop()
    with psycopg.connect(dsn) as conn:
        keys = conn.execute("SELECT worker_id FROM codey_worker_keys").fetchall()
        marks = {r[0] for r in conn.execute("SELECT name FROM codey_shared_meta").fetchall()}
    assert keys == [("wrk_old",)]
    assert {"imported:workers.json", "imported:mcp_tokens.json",
            "imported:browser_sessions.json", "imported:auth.json",
            "imported:access_token"} <= marks


def _until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "it") -> None:
    wait_until(predicate, timeout=timeout, interval=0.1, what=what)
