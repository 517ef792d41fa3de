"""The test kit's nginx: proxies HTTP and WebSockets with the forwarding headers, stops
cleanly, and says why when nginx is not installed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect
from websockets.sync.server import Server, ServerConnection, serve

from codey_testkit import nginx
from codey_testkit.errors import TestkitError
from codey_testkit.nginx import NginxMissing, NginxProcess, require_nginx


def _echo(ws: ServerConnection) -> None:
    """Answers each message with it and what the proxy told the upstream."""
    assert ws.request is not None
    seen = {k: ws.request.headers.get(k) for k in ("Host", "X-Forwarded-For",
                                                   "X-Forwarded-Proto")}
    for message in ws:
        ws.send(json.dumps({"echo": message, "headers": seen,
                            "peer": ws.remote_address[0]}))


@pytest.fixture
def upstream() -> Iterator[Server]:
    with serve(_echo, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield server
        server.shutdown()


def test_proxies_websockets_with_the_forwarding_headers_and_stops_cleanly(
        tmp_path: Path, upstream: Server) -> None:
    require_nginx()
    port = upstream.socket.getsockname()[1]
    proxy = NginxProcess(bind="127.0.0.2")
    root = proxy.root
    with proxy.start([f"http://127.0.0.1:{port}"]):
        with connect(f"{proxy.ws_url}/anything", open_timeout=10,
                     additional_headers={"X-Forwarded-For": "203.0.113.9"}) as ws:
            ws.send("hi")
            got = json.loads(ws.recv(timeout=10))
        assert got["echo"] == "hi"
        assert got["peer"] == "127.0.0.2"  # proxy_bind
        # the client's own claim stays left of the address nginx saw
        assert got["headers"] == {"Host": "127.0.0.1", "X-Forwarded-For": "203.0.113.9, 127.0.0.1",
                                  "X-Forwarded-Proto": "http"}
        # plain HTTP reaches the same upstream (a WebSocket server answers it with 426)
        assert httpx.get(proxy.url + "/plain", timeout=10).status_code == 426
    assert proxy.proc is not None and proxy.proc.returncode == 0
    assert not root.exists()  # a directory it made itself is removed


def test_a_given_directory_is_kept_with_its_logs(tmp_path: Path, upstream: Server) -> None:
    require_nginx()
    port = upstream.socket.getsockname()[1]
    with NginxProcess(root=tmp_path / "n").start([f"127.0.0.1:{port}"]) as proxy:
        httpx.get(proxy.url + "/x", timeout=10)
    assert (tmp_path / "n" / "nginx.conf").exists()
    assert '"GET /x HTTP/1.1" 426' in (tmp_path / "n" / "access.log").read_text()


def test_a_bad_upstream_is_a_clear_error(tmp_path: Path) -> None:
    require_nginx()
    proxy = NginxProcess(root=tmp_path / "n")
    with pytest.raises(TestkitError, match="nginx exited"):
        proxy.start(["127.0.0.1:notaport"])
    proxy.stop()


def test_without_nginx_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nginx, "nginx_bin", lambda: None)
    with pytest.raises(NginxMissing, match="apt-get install -y nginx"):
        NginxProcess()
    with pytest.raises(pytest.skip.Exception, match="nginx is not installed"):
        require_nginx()
