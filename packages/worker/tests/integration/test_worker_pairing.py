"""The pairing client against a scripted HTTP server: expired codes, refusals, retries."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rich.console import Console

from codey_worker import pairing as pairing_module
from codey_worker.console import WorkerConsole
from codey_worker.pairing import PairingRefused, b64url_decode, pair, public_key_b64

pytestmark = pytest.mark.integration


class Script:
    """What the fake server answers: tickets for POSTs, (status, body) for waits."""

    def __init__(self, waits: list[tuple[int, dict[str, Any]]]) -> None:
        self.waits = waits
        self.requests: list[dict[str, Any]] = []
        self.polls: list[str] = []
        self.tickets = 0


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            script.requests.append(json.loads(self.rfile.read(length)))
            script.tickets += 1
            n = script.tickets
            self._reply(201, {"request_id": f"pr_{n}", "code": f"BCDF-GHJ{'KLMN'[n % 4]}",
                              "expires_at": 0.0, "poll_secret": f"secret{n}"})

        def do_GET(self) -> None:
            script.polls.append(self.path)
            status, body = script.waits.pop(0)
            self._reply(status, body)

    return Handler


@pytest.fixture()
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(script: Script) -> str:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def capture() -> tuple[WorkerConsole, io.StringIO]:
    out = io.StringIO()
    return WorkerConsole(Console(file=out, width=80, force_terminal=False)), out


def test_expired_code_is_replaced_with_the_same_key_then_approved(serve: Any) -> None:
    script = Script([
        (200, {"status": "pending"}),
        (200, {"status": "expired"}),
        (500, {"detail": "oops"}),  # retried
        (200, {"status": "approved", "worker_id": "wrk_1", "credential": "cred"}),
    ])
    url = serve(script)
    console, out = capture()
    identity = pair(url, ["/srv"], console, sleep=lambda s: None)
    assert (identity.worker_id, identity.credential, identity.server) == ("wrk_1", "cred", url)
    assert len(b64url_decode(identity.private_key)) == 32
    # both requests carried the same public key, the one of the returned identity
    keys = {r["public_key"] for r in script.requests}
    assert keys == {public_key_b64(identity.private_key)}
    assert script.requests[0]["roots"] == ["/srv"]
    assert set(script.requests[0]) == {"public_key", "hostname", "os", "python_version",
                                       "worker_version", "roots"}
    assert script.polls[0] == "/api/pairing/requests/pr_1/wait?secret=secret1&timeout=25"
    assert script.polls[-1].startswith("/api/pairing/requests/pr_2/wait?secret=secret2")
    lines = out.getvalue().splitlines()
    assert lines[0] == f"Open {url}/#/pair/BCDF-GHJL to link this machine"
    assert lines[1] == "The pairing code expired; here is a new one."
    assert lines[2] == f"Open {url}/#/pair/BCDF-GHJM to link this machine"
    assert lines[3].startswith("reconnecting in ")


@pytest.mark.parametrize("status", ["denied", "locked"])
def test_denied_or_locked_raises(serve: Any, status: str) -> None:
    url = serve(Script([(200, {"status": status})]))
    console, _ = capture()
    with pytest.raises(PairingRefused) as info:
        pair(url, [], console, sleep=lambda s: None)
    assert info.value.status == status


def test_unreachable_server_is_retried_until_it_answers(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = serve(Script([(200, {"status": "approved", "worker_id": "w", "credential": "c"})]))
    dead = "http://127.0.0.1:1"  # nothing listens on port 1
    target = {"url": dead}
    slept: list[float] = []

    def sleep(delay: float) -> None:
        slept.append(delay)
        if len(slept) == 3:  # the server "comes up" after three failed tries
            target["url"] = url

    real_request = pairing_module._request

    def redirected(method: str, where: str, body: bytes | None, timeout: float) -> Any:
        return real_request(method, where.replace(dead, target["url"]), body, timeout)

    monkeypatch.setattr(pairing_module, "_request", redirected)
    console, out = capture()
    identity = pair(dead, [], console, sleep=sleep)
    assert identity.worker_id == "w"
    assert len(slept) == 3
    assert all(0 <= d <= cap for d, cap in zip(slept, [0.5, 1.0, 2.0], strict=True))
    assert out.getvalue().count("reconnecting in") == 3
    # each wait is said before it is waited, with the delay then waited
    said = [line for line in out.getvalue().splitlines() if "reconnecting in" in line]
    assert [line.split()[2] for line in said] == [f"{d:.1f}" for d in slept]
