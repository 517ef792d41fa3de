"""The test kit's Caddy: proxies HTTP and WebSockets to several upstreams, keeps to its own
directory, stops cleanly, and says why when Caddy is not installed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.http11 import Request, Response
from websockets.sync.client import connect
from websockets.sync.server import Server, ServerConnection, serve

from codey_testkit import caddy
from codey_testkit.caddy import CaddyMissing, CaddyProcess, require_caddy


def _echo(name: str):  # type: ignore[no-untyped-def]
    def handler(ws: ServerConnection) -> None:
        assert ws.request is not None
        xff = ws.request.headers.get("X-Forwarded-For")
        for message in ws:
            ws.send(json.dumps({"echo": message, "upstream": name, "xff": xff}))
    return handler


def _health(ws: ServerConnection, request: Request) -> Response | None:
    """Caddy's active health check (``health_uri /api/health``) gets a 200, as from Codey."""
    return ws.respond(200, "ok\n") if request.path == "/api/health" else None


@pytest.fixture
def upstreams() -> Iterator[list[Server]]:
    servers = [serve(_echo(f"u{n}"), "127.0.0.1", 0, process_request=_health)
               for n in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield servers
    for server in servers:
        server.shutdown()


def test_proxies_websockets_to_every_upstream_and_stops_cleanly(
        tmp_path: Path, upstreams: list[Server]) -> None:
    require_caddy()
    root = tmp_path / "caddy"
    proxy = CaddyProcess(root=root)
    addresses = [f"127.0.0.1:{s.socket.getsockname()[1]}" for s in upstreams]
    with proxy.start(addresses):
        seen = set()
        for _ in range(30):  # least_conn picks at random among the idle: each gets some
            with connect(proxy.url.replace("http://", "ws://") + "/ws/x") as ws:
                ws.send("hi")
                reply = json.loads(ws.recv(timeout=10))
            assert reply["echo"] == "hi" and reply["xff"] == "127.0.0.1"
            seen.add(reply["upstream"])
        assert seen == {"u0", "u1"}
        assert (root / "home" / "config").is_dir()  # its autosave stayed in the root
    assert proxy.proc is None and proxy.stop() is None  # stopped, idempotent


def test_says_how_to_install_caddy_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caddy, "caddy_bin", lambda: None)
    with pytest.raises(CaddyMissing, match="apt-get install -y caddy"):
        CaddyProcess()
