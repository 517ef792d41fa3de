"""One server behind a real nginx (the test kit's, with docs/deploy.md's configuration): a
browser logs in through it, a worker pairs and connects through it, a session runs, and the
pairing limit counts the real client, not the proxy.

Addresses: every local client comes from 127.0.0.1, so trusting 127.0.0.1 would trust them
all and nothing could show that a client reaching the server directly is not believed.
nginx therefore connects to the server from 127.0.0.2 (``proxy_bind``), the one trusted
proxy; a test client poses as another machine by connecting to nginx from 127.0.0.3 or
127.0.0.4 (any 127.x.y.z is this machine on Linux), and nginx appends that address to
``X-Forwarded-For``.
"""

from __future__ import annotations

import base64
import json
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from websockets.sync.client import connect

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.nginx import NginxProcess, require_nginx
from codey_testkit.scenarios import create_session, idle, provider_config, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

PROXY_ADDRESS = "127.0.0.2"

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "through the proxy"},
     "reply": {"calls": [{"name": "shell", "arguments": {
         "command": ["python3", "-c", "print('ran-behind-nginx')"]}}]}},
    {"match": {"tool": "shell", "tool_output": "ran-behind-nginx"},
     "reply": {"text": "done behind nginx"}},
    {"match": {"any": True}, "reply": {"text": "done"}},
]}


class Proxied:
    """The server as a browser or worker elsewhere sees it: every request through nginx.

    Duck-types what ``WorkerProcess`` and ``scenarios`` use of a ``ServerProcess`` (``url``,
    ``http``), so the worker is given the proxy's URL and the helpers go through the proxy.
    """

    def __init__(self, proxy: NginxProcess, token: str, source: str = "127.0.0.1") -> None:
        self.url = proxy.url
        self.token = token
        self.http = _client(proxy, source)
        r = self.http.get(f"/?token={token}", follow_redirects=False)
        assert r.status_code == 303, (r.status_code, r.text)

    def close(self) -> None:
        self.http.close()


def _client(proxy: NginxProcess, source: str) -> httpx.Client:
    """A client of the proxy whose connections come from ``source`` (a 127.x address)."""
    return httpx.Client(base_url=proxy.url, timeout=30.0, headers={"Origin": proxy.url},
                        transport=httpx.HTTPTransport(local_address=source))


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[NginxProcess]:
    require_nginx()
    with NginxProcess(bind=PROXY_ADDRESS, root=tmp_path / "nginx") as n:
        yield n


@pytest.fixture
def server(tmp_path: Path, model: ModelServerHandle,
           proxy: NginxProcess) -> Iterator[ServerProcess]:
    """One server, its public URL the proxy's, trusting only the proxy's address; nginx
    started in front of it."""
    config = {**provider_config(model), "trusted_proxies": [f"{PROXY_ADDRESS}/32"]}
    with ServerProcess(tmp_path / "server", config=config,
                       extra_args=["--public-url", proxy.url]) as proc:
        proxy.start([proc.url])
        yield proc


@pytest.fixture
def via_proxy(proxy: NginxProcess, server: ServerProcess) -> Iterator[Proxied]:
    assert server.token is not None
    view = Proxied(proxy, server.token)
    try:
        yield view
    finally:
        view.close()


def _pair_body() -> dict[str, Any]:
    raw = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"public_key": base64.urlsafe_b64encode(raw).rstrip(b"=").decode(),
            "hostname": "far-host", "os": "Linux", "python_version": platform.python_version(),
            "worker_version": "0.1.0", "roots": ["/tmp"]}


def _pair_codes(http: httpx.Client, n: int, headers: dict[str, str] | None = None) -> list[int]:
    return [http.post("/api/pairing/requests", json=_pair_body(),
                      headers=headers or {}).status_code for _ in range(n)]


# --- logging in -------------------------------------------------------------------------------


def test_a_browser_logs_in_through_the_proxy_on_the_first_try(
        proxy: NginxProcess, server: ServerProcess) -> None:
    assert server.token is not None
    with _client(proxy, "127.0.0.3") as browser:
        r = browser.get(f"/?token={server.token}", follow_redirects=False)
        assert r.status_code == 303, r.text
        assert any(c.startswith("codey_") for c in browser.cookies), r.headers
        # the cookie works on the next requests, reads and a write (Origin: the proxy's URL)
        for _ in range(3):
            r = browser.get("/api/state/bootstrap")
            assert r.status_code == 200, r.text
        r = browser.post("/api/mcp/tokens", json={"name": "from-behind-nginx"})
        assert r.status_code in (200, 201), r.text
        # the page itself, through the proxy
        assert browser.get("/").status_code == 200
    with _client(proxy, "127.0.0.3") as stranger:
        assert stranger.get("/api/state/bootstrap").status_code == 401
    # every request went through nginx, from the client's own address
    lines = proxy.access_lines()
    assert lines and all(line.startswith("127.0.0.3 ") for line in lines), lines


# --- a worker and a session through the proxy -------------------------------------------------


def test_a_worker_pairs_and_connects_through_the_proxy_and_a_session_runs(
        tmp_path: Path, proxy: NginxProcess, server: ServerProcess, via_proxy: Proxied) -> None:
    worker = WorkerProcess(cast(ServerProcess, via_proxy), tmp_path / "worker")
    with worker.start(timeout=60):
        # the worker knows only the proxy's URL; the pair request, its poll and the approval
        # went through nginx
        # (waited for: nginx logs a request just after its response is sent)
        paths = " ".join(wait_until(
            proxy.access_lines, timeout=10, show=lambda lines: lines[-5:],
            ok=lambda lines: all(p in " ".join(lines) for p in (
                "POST /api/pairing/requests ", "/wait?", "/approve ")),
            what="the pairing's requests in nginx's log"))
        assert "POST /api/pairing/requests " in paths
        assert "/wait?" in paths and "/approve " in paths
        wd = Path(worker.workdir("p"))
        wd.mkdir(parents=True)
        sid = create_session(cast(ServerProcess, via_proxy), worker, str(wd),
                             "through the proxy")
        s = wait_for(cast(ServerProcess, via_proxy), sid, idle, what="the turn to end")
        assert tools(s)[0]["status"] == "done", json.dumps(tools(s))
        assert "ran-behind-nginx" in (tools(s)[0].get("result") or ""), tools(s)
        assert s["items"][-1]["text"] == "done behind nginx"
        # the browser's socket through the proxy too (its Origin is the public URL): the
        # state it is sent holds the session
        cookie = "; ".join(f"{k}={v}" for k, v in via_proxy.http.cookies.items())
        with connect(f"{proxy.ws_url}/ws/client", open_timeout=10,
                     additional_headers={"Origin": proxy.url, "Cookie": cookie}) as ws:
            ws.send(json.dumps({"type": "subscribe", "after_seq": 0}))
            first = json.loads(ws.recv(timeout=10))
            assert first["type"] == "snapshot", first
            assert sid in json.dumps(first)
    # nginx logs a WebSocket when it closes: the worker's socket was upgraded through it
    wait_until(proxy.access_lines,
               ok=lambda lines: any('"GET /ws/worker HTTP/1.1" 101' in line for line in lines),
               timeout=30, show=lambda lines: lines[-8:],
               what="the worker's socket in nginx's access log")


# --- the pairing limit counts the client ------------------------------------------------------


def test_each_client_behind_the_proxy_has_its_own_pairing_budget(
        proxy: NginxProcess, server: ServerProcess) -> None:
    with _client(proxy, "127.0.0.3") as one, _client(proxy, "127.0.0.4") as two:
        assert _pair_codes(one, 6) == [201] * 5 + [429]
        # not nginx's address: another client through the same proxy is not refused
        assert _pair_codes(two, 5) == [201] * 5
        assert _pair_codes(two, 1) == [429]


def test_a_header_forged_through_the_proxy_does_not_dodge_the_limit(
        proxy: NginxProcess, server: ServerProcess) -> None:
    """The client writes its own X-Forwarded-For; nginx appends the address it really came
    from ($proxy_add_x_forwarded_for), so the right-most untrusted entry is the real one."""
    with _client(proxy, "127.0.0.3") as client:
        codes = [client.post("/api/pairing/requests", json=_pair_body(),
                             headers={"X-Forwarded-For": f"203.0.113.{n}"}).status_code
                 for n in range(7)]
        assert codes == [201] * 5 + [429, 429]
    # nginx logs a request after its response is sent: the client may read it first
    wait_until(proxy.access_lines,
               ok=lambda lines: any('xff="203.0.113.6"' in line for line in lines),
               timeout=10, show=lambda lines: lines[-3:], what="the last request's log line")
    # the budget was 127.0.0.3's, not everyone's behind the proxy
    with _client(proxy, "127.0.0.4") as other:
        assert _pair_codes(other, 1) == [201]


def test_a_client_reaching_the_server_directly_is_not_believed(
        proxy: NginxProcess, server: ServerProcess) -> None:
    """The attack: a client that bypasses the proxy (127.0.0.1 is not a trusted proxy) names
    a new address in each request, hoping for a fresh budget each time."""
    with httpx.Client(base_url=server.url, timeout=30.0) as direct:
        codes = [direct.post("/api/pairing/requests", json=_pair_body(),
                             headers={"X-Forwarded-For": f"203.0.113.{n}"}).status_code
                 for n in range(7)]
    assert codes == [201] * 5 + [429, 429]
    # nor does naming a client that has budget left, or the trusted proxy itself, help
    with httpx.Client(base_url=server.url, timeout=30.0) as direct:
        assert _pair_codes(direct, 1, {"X-Forwarded-For": "127.0.0.4"}) == [429]
        assert _pair_codes(direct, 1, {"X-Forwarded-For": PROXY_ADDRESS}) == [429]
    # clients behind the proxy keep their own budgets
    with _client(proxy, "127.0.0.4") as other:
        assert _pair_codes(other, 1) == [201]
