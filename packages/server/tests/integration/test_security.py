"""Hostile requests against a real server: each test is named for the defence it proves."""

from __future__ import annotations

import base64
import contextlib
import json
import platform
import socket
import stat
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from codey_protocol import MAX_FRAME_BYTES
from codey_protocol import client as cl
from codey_protocol import worker as wk
from codey_protocol.handshake import signed_message
from codey_protocol.worker import PROTOCOL_VERSION
from codey_testkit.procs import ProcessExitedError
from codey_testkit.stack import ServerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.wsclient import BrowserSocket

EVIL = "http://evil.example"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path / "server") as proc:
        yield proc


def _ws(url: str, headers: dict[str, str] | None = None) -> ClientConnection:
    return connect(url, additional_headers=headers or {}, open_timeout=10, max_size=None,
                   legacy=True)


def _close_code(ws: ClientConnection, timeout: float = 5.0) -> int | None:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=timeout)
    return closed.value.rcvd.code if closed.value.rcvd else None


def _anonymous(server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=10, headers={"Origin": server.url})


# --- access token and cookie ------------------------------------------------------------------


def test_printed_url_carries_a_192_bit_token_kept_0600_in_the_data_dir(
        server: ServerProcess) -> None:
    assert server.token is not None and len(server.token) >= 32
    path = server.data_dir / "access_token"
    assert path.read_text().strip() == server.token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"/?token={server.token} in your browser" in server.log_text()


def test_token_link_sets_a_strict_httponly_cookie_and_redirects_to_the_clean_url(
        server: ServerProcess) -> None:
    with _anonymous(server) as http:
        r = http.get(f"/?token={server.token}")
        assert r.status_code == 303 and r.headers["location"] == "/"
        set_cookie = r.headers["set-cookie"]
        assert "HttpOnly" in set_cookie and "SameSite=strict" in set_cookie.replace(
            "Strict", "strict")
        assert server.token not in set_cookie
        assert http.get("/api/sessions").status_code == 200


def test_wrong_token_gets_401_and_no_cookie(server: ServerProcess) -> None:
    with _anonymous(server) as http:
        r = http.get(f"/?token={server.token}x")
        assert r.status_code == 401 and "set-cookie" not in r.headers
        # the page (which shows the login screen), never a JSON error
        assert r.headers["content-type"].startswith("text/html") and "<title>Codey" in r.text
        assert http.get("/api/sessions").status_code == 401


def test_no_cookie_gets_401_on_every_api_route(server: ServerProcess) -> None:
    with _anonymous(server) as http:
        for method, path in [("GET", "/api/state/bootstrap"), ("GET", "/api/sessions"),
                             ("GET", "/api/config"), ("POST", "/api/sessions"),
                             ("GET", "/api/pairing/requests"),
                             ("POST", "/api/pairing/requests/req_x/approve"),
                             ("POST", "/api/workers/wrk_x/revoke"),
                             ("GET", "/api/auth/status"), ("POST", "/api/logout"),
                             ("GET", "/api/telegram"), ("PUT", "/api/telegram/token"),
                             ("POST", "/api/telegram/pairing-code"),
                             ("DELETE", "/api/telegram/chats/42")]:
            assert http.request(method, path, json={}).status_code == 401, path
        forged = {"Cookie": "codey_0123456789=not-a-session"}
        assert http.get("/api/sessions", headers=forged).status_code == 401
        # what stays open: health, the static page (no secrets in it), and Telegram's webhook,
        # which checks Telegram's secret header instead of a login
        assert http.get("/api/health").status_code == 200
        assert http.get("/").status_code == 200
        assert http.post("/api/telegram/webhook", json={"update_id": 1}).status_code == 403


def test_no_cookie_on_client_socket_closes_4401(server: ServerProcess) -> None:
    ws = _ws(server.ws_url, {"Origin": server.url})
    assert _close_code(ws) == 4401


def test_bearer_access_token_works_for_scripts(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        headers = {"Authorization": f"Bearer {server.token}"}
        assert http.get("/api/sessions", headers=headers).status_code == 200
        bad = {"Authorization": f"Bearer {server.token}0"}
        assert http.get("/api/sessions", headers=bad).status_code == 401


def test_a_browser_session_survives_a_server_restart(server: ServerProcess) -> None:
    cookies = dict(server.http.cookies.items())
    server.restart()
    with httpx.Client(base_url=server.url, timeout=10, cookies=cookies) as http:
        assert http.get("/api/sessions").status_code == 200


# --- Host and Origin ----------------------------------------------------------------------------


def test_foreign_host_header_gets_403_dns_rebinding(server: ServerProcess) -> None:
    headers = {"Host": "evil.example", **server.cookie_header()}
    assert server.http.get("/api/sessions", headers=headers).status_code == 403
    assert server.http.get("/", headers=headers).status_code == 403
    assert server.http.get(f"/?token={server.token}", headers={"Host": "evil.example"}
                           ).status_code == 403
    assert _raw_upgrade_status(server, "evil.example", server.cookie_header()) == 403
    # the same request under the loopback name passes
    port = server.url.rsplit(":", 1)[1]
    ok = server.http.get("/api/sessions", headers={"Host": f"localhost:{port}",
                                                   "Origin": f"http://localhost:{port}"})
    assert ok.status_code == 200


def test_foreign_origin_on_client_socket_is_refused_before_the_101(
        server: ServerProcess) -> None:
    headers = {**server.cookie_header(), "Origin": EVIL}
    with pytest.raises(InvalidStatus) as refused:
        _ws(server.ws_url, headers)
    assert refused.value.response.status_code == 403
    # no Origin at all is refused too: browsers always send one
    headers.pop("Origin")
    with pytest.raises(InvalidStatus) as missing:
        _ws(server.ws_url, headers)
    assert missing.value.response.status_code == 403


def test_foreign_origin_on_worker_socket_is_refused_before_the_101(
        server: ServerProcess) -> None:
    with pytest.raises(InvalidStatus) as refused:
        _ws(server.worker_ws_url, {"Origin": EVIL})
    assert refused.value.response.status_code == 403
    # a worker sends no Origin: it gets the signed challenge
    ws = _ws(server.worker_ws_url)
    assert json.loads(ws.recv(timeout=5))["type"] == "auth_challenge"
    ws.close()


def test_state_changing_request_needs_same_origin_proof(server: ServerProcess) -> None:
    cookie = {"Cookie": server.cookie_header()["Cookie"]}
    body = {"worker_id": "wrk_none", "workdir": "/tmp"}
    with httpx.Client(base_url=server.url, timeout=10) as http:
        r = http.post("/api/sessions", json=body, headers={**cookie, "Origin": EVIL})
        assert r.status_code == 403
        assert http.post("/api/sessions", json=body, headers=cookie).status_code == 403
        cross = {**cookie, "Sec-Fetch-Site": "cross-site"}
        assert http.post("/api/sessions", json=body, headers=cross).status_code == 403
        same = {**cookie, "Sec-Fetch-Site": "same-origin"}
        assert http.post("/api/sessions", json=body, headers=same).status_code not in (401, 403)
        # reads need no proof (SameSite=Strict already keeps the cookie off cross-site requests)
        assert http.get("/api/sessions", headers=cookie).status_code == 200


def test_worker_pairing_routes_need_no_cookie_but_refuse_a_foreign_origin(
        server: ServerProcess) -> None:
    keys = _Keys()
    with httpx.Client(base_url=server.url, timeout=10) as http:
        evil = http.post("/api/pairing/requests", json=keys.body(), headers={"Origin": EVIL})
        assert evil.status_code == 403
        r = http.post("/api/pairing/requests", json=keys.body())
        assert r.status_code == 201, r.text
        ticket = r.json()
        wait = http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                        params={"secret": ticket["poll_secret"], "timeout": 0})
        assert wait.status_code == 200 and wait.json()["status"] == "pending"
        # the browser side of pairing is not open
        approve = http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                            json={"code": ticket["code"]})
        assert approve.status_code == 401


# --- logout -------------------------------------------------------------------------------------


def test_logout_ends_the_cookie_and_closes_its_sockets(server: ServerProcess) -> None:
    other = _anonymous(server)
    assert other.get(f"/?token={server.token}").status_code == 303  # a second browser
    stale = {"Cookie": server.cookie_header()["Cookie"], "Origin": server.url}
    client = BrowserSocket(server)
    assert client.recv(10) is not None  # snapshot
    r = server.http.post("/api/logout")
    assert r.status_code == 200
    assert "Max-Age=0" in r.headers["set-cookie"] or "max-age=0" in r.headers["set-cookie"]
    client.until_closed(5)
    assert client.close_code == 4401
    with httpx.Client(base_url=server.url, timeout=10) as http:
        assert http.get("/api/sessions", headers=stale).status_code == 401
    assert other.get("/api/sessions").status_code == 200  # the other browser stays in
    other.close()


# --- frame size and fuzzing ---------------------------------------------------------------------


def test_oversized_frame_on_client_socket_closes_1009_and_server_keeps_serving(
        server: ServerProcess) -> None:
    for size in (MAX_FRAME_BYTES + 10, 2 * MAX_FRAME_BYTES):
        client = BrowserSocket(server)
        assert client.recv(10) is not None
        client.ws.send("x" * size)
        client.until_closed(10)
        assert client.close_code == 1009, size
    assert server.http.get("/api/health").status_code == 200
    fresh = BrowserSocket(server)
    assert (fresh.recv(10) or {}).get("type") == "snapshot"
    fresh.close()


def test_oversized_frame_on_worker_socket_closes_1009_and_server_keeps_serving(
        server: ServerProcess) -> None:
    worker = _PairedWorker(server)
    ws = worker.connect()
    ws.send(json.dumps({"type": "log", "level": "info", "message": "x" * (MAX_FRAME_BYTES + 10)}))
    assert _close_code(ws, 10) == 1009
    assert server.http.get("/api/health").status_code == 200
    again = worker.connect()
    again.send(json.dumps({"type": "heartbeat"}))
    again.close()


def _tags(union: Any) -> list[str]:
    return [t.__struct_config__.tag for t in typing.get_args(union)]


def _field_names(union: Any) -> list[str]:
    return sorted({f for t in typing.get_args(union) for f in t.__struct_fields__})


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=24),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=8)


def _frames(tags: list[str], fields: list[str]) -> st.SearchStrategy[str | bytes]:
    command = st.builds(
        lambda tag, body: json.dumps({**body, "type": tag}),
        st.sampled_from([*tags, "nope", ""]) | st.text(max_size=8),
        st.dictionaries(st.sampled_from(fields) | st.text(max_size=8), _JSON, max_size=5))
    return st.one_of(command, command, _JSON.map(json.dumps), st.text(max_size=120),
                     st.binary(max_size=120))


# hypothesis draws small examples fast and large ones very slowly (its choice buffer
# overruns), so 10,000 frames come as 1,000 examples of 10, all over one socket
_FUZZ_BATCH = 10
_FUZZ_BATCHES = 1000
_FUZZ_SETTINGS = settings(max_examples=_FUZZ_BATCHES, deadline=None, database=None,
                          derandomize=True, suppress_health_check=list(HealthCheck))
#: the typed codes a browser may get: ProtocolError's and CommandRejected's
_CLIENT_ERROR_CODES = {"bad_frame", "unknown_type", "bad_field", "conflict", "not_found",
                       "forbidden", "bad_request"}


# websockets draws frame masks from `random` inside the hypothesis-driven body
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_10000_fuzzed_frames_on_client_socket_get_typed_errors_and_no_crash(
        server: ServerProcess) -> None:
    client = BrowserSocket(server)
    assert client.recv(10) is not None
    replies: list[dict[str, Any]] = []
    tags = [t for t in _tags(cl.ClientToServer) if t not in ("interrupt",)]

    @_FUZZ_SETTINGS
    @given(st.lists(_frames(tags, _field_names(cl.ClientToServer)),
                    min_size=_FUZZ_BATCH, max_size=_FUZZ_BATCH))
    def batch(frames: list[str | bytes]) -> None:
        for frame in frames:
            client.ws.send(frame)
        answered = 0
        while answered < len(frames):
            frame = client.recv(10)
            assert frame is not None, f"socket closed ({client.close_code}) or silent"
            if frame["type"] in ("error", "ack"):
                answered += 1
                replies.append(frame)
            else:
                assert frame["type"] == "events", frame

    batch()
    assert len(replies) == _FUZZ_BATCH * _FUZZ_BATCHES
    errors = [r for r in replies if r["type"] == "error"]
    assert errors and {r["code"] for r in errors} <= _CLIENT_ERROR_CODES
    assert not client.closed
    assert server.http.get("/api/health").status_code == 200
    log = server.log_text()
    assert "Traceback" not in log and " 500" not in log


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_10000_fuzzed_frames_on_worker_socket_no_crash_and_the_socket_stays(
        server: ServerProcess) -> None:
    tags = [t for t in _tags(wk.WorkerToServer) if t != "disconnect"]
    batches: list[list[str | bytes]] = []

    # drawn before the socket opens: hypothesis sometimes stops for seconds between examples
    # (7 s seen on a busy machine), longer than a worker may stay silent (15 s) on a slower one
    @_FUZZ_SETTINGS
    @given(st.lists(_frames(tags, _field_names(wk.WorkerToServer)),
                    min_size=_FUZZ_BATCH, max_size=_FUZZ_BATCH))
    def draw(frames: list[str | bytes]) -> None:
        # a valid goodbye would end the socket on purpose
        batches.append([f for f in frames if not (isinstance(f, str) and '"disconnect"' in f)])

    draw()
    assert len(batches) == _FUZZ_BATCHES
    worker = _PairedWorker(server)
    ws = worker.connect()
    for frames in batches:
        for frame in frames:
            ws.send(frame)
        # paced, as the browser's fuzz is by its answers: the pong comes once the server took
        # every frame before it (unpaced, thousands of frames queued ahead of the keepalive
        # pings, and a busy server reached them after the ping timeout)
        assert ws.ping().wait(30), "the server stopped taking frames"
    marker = f"fuzz-done-{time.monotonic_ns()}"
    # (a warning: a worker's routine info lines go to the server's log at debug only)
    ws.send(json.dumps({"type": "log", "level": "warning", "message": marker}))
    # frames are handled in order: once the marker is in the log, all were taken
    wait_until(lambda: marker in server.log_text(), timeout=30, interval=0.1,
               what="the server to get through the frames (the marker in its log)")
    state = server.http.get("/api/state/bootstrap").json()["state"]
    assert state["workers"][worker.worker_id]["connected"]
    ws.ping().wait(5)
    log = server.log_text()
    assert "Traceback" not in log
    # bad frames were answered with a typed frame (once a second at most), not only logged
    answers = []
    with contextlib.suppress(TimeoutError):
        while True:
            answers.append(json.loads(ws.recv(timeout=0.5)))
    rejected = [a for a in answers if a["type"] == "frame_rejected"]
    assert rejected and all(a["code"] and a["message"] for a in rejected)
    ws.close()


def _raw_upgrade_status(server: ServerProcess, host: str, headers: dict[str, str]) -> int:
    """The status line's code for a WebSocket upgrade sent with this exact Host header."""
    address = server.url.removeprefix("http://")
    name, port = address.rsplit(":", 1)
    lines = ["GET /ws/client HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
             *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection((name, int(port)), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


# --- secrets at rest and in the log ------------------------------------------------------------


def test_the_access_token_never_reaches_the_log_even_at_debug_level(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "server", extra_args=["--log-level", "debug"]) as server:
        token = server.token
        assert token is not None
        with _anonymous(server) as http:
            assert http.get(f"/nope?token={token}").status_code == 404
            assert http.get(f"/?token={token}").status_code == 303
            assert http.get("/api/sessions",
                            headers={"Authorization": f"Bearer {token}"}).status_code == 200
        text = wait_until(server.log_text, ok=lambda t: t.count("[redacted]") >= 2, timeout=5,
                          interval=0.05, show=lambda t: t[-2000:],
                          what="the two request lines, masked, in the log")
    # the request lines were logged (so --log-level debug is honoured), each one masked
    assert "GET /nope?token=[redacted]" in text, text
    assert "GET /?token=[redacted]" in text, text
    # the only place the token appears is the URL printed for the owner to open
    assert [line for line in text.splitlines() if token in line] == [
        line for line in text.splitlines() if line.startswith("Open http")]


def test_data_dir_and_event_log_are_private_to_the_user(tmp_path: Path) -> None:
    data = tmp_path / "server"
    data.mkdir(mode=0o755)
    data.chmod(0o755)  # as a hand-made dir, or an older server, would have left it
    with ServerProcess(data) as server:
        r = server.http.post("/api/sessions", json={"worker_id": "wrk_none", "workdir": "/tmp"})
        assert r.status_code in (201, 400, 404, 409), r.text  # anything that touches the log
        files = [p for p in data.iterdir() if p.name.startswith("events.db")]
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert "events.db" in modes
    assert all(mode == 0o600 for mode in modes.values()), modes


def test_a_world_readable_event_log_from_before_is_tightened_at_start(tmp_path: Path) -> None:
    data = tmp_path / "server"
    with ServerProcess(data):
        pass
    db = data / "events.db"
    db.chmod(0o644)
    with ServerProcess(data) as server:
        assert server.http.get("/api/health").status_code == 200
        assert stat.S_IMODE(db.stat().st_mode) == 0o600


# --- helpers ------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _Keys:
    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.public = _b64(self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def body(self) -> dict[str, Any]:
        return {"public_key": self.public, "hostname": "fuzz-host", "os": "Linux",
                "python_version": platform.python_version(), "worker_version": "0.1.0",
                "roots": ["/tmp"]}


class _PairedWorker:
    """A worker paired over HTTP (the browser approves with the cookie)."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.keys = _Keys()
        ticket = server.http.post("/api/pairing/requests", json=self.keys.body()).json()
        r = server.http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                             json={"code": ticket["code"]})
        assert r.status_code == 200, r.text
        status = server.http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                                 params={"secret": ticket["poll_secret"], "timeout": 1}).json()
        self.worker_id: str = status["worker_id"]
        self.credential: str = status["credential"]

    def connect(self, protocol_version: int = PROTOCOL_VERSION,
                hostname: str = "fuzz-host") -> ClientConnection:
        ws = _ws(self.server.worker_ws_url)
        challenge = json.loads(ws.recv(timeout=5))
        ts = time.time()
        signed = signed_message(challenge["nonce"], self.worker_id, ts)
        ws.send(msgspec.json.encode({"type": "auth_response", "worker_id": self.worker_id,
                                     "ts": ts, "signature": _b64(self.keys.key.sign(signed)),
                                     "credential": self.credential}).decode())
        assert json.loads(ws.recv(timeout=5))["type"] == "welcome"
        ws.send(json.dumps({"type": "hello", "worker_version": "0.1.0",
                            "hostname": hostname, "os": "Linux",
                            "protocol_version": protocol_version}))
        return ws


def test_a_worker_of_another_protocol_version_is_refused_with_4426_and_both_versions(
        server: ServerProcess) -> None:
    ws = _PairedWorker(server).connect(protocol_version=PROTOCOL_VERSION + 1)
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4426
    assert f"protocol {PROTOCOL_VERSION + 1}" in closed.value.rcvd.reason
    state = server.http.get("/api/state/bootstrap").json()["state"]
    assert not any(w["connected"] for w in state["workers"].values())


def test_direct_actions_are_refused_unless_the_server_was_started_for_them(
        server: ServerProcess) -> None:
    """They bypass approvals and the event log: a flag for benchmarks, off by default."""
    r = server.http.post("/api/workers/wrk_any/actions",
                         json={"type": "read_file", "workdir": "/tmp", "path": "x"})
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["extra"] == {"code": "forbidden"} and "--direct-actions" in body["detail"]


# --- the audit of issue 22: each confirmed finding, kept as a test -----------------------------


def test_no_page_of_another_origin_can_frame_the_ui_and_no_third_party_script_runs(
        server: ServerProcess) -> None:
    """A page on another loopback port iframed the logged-in UI (the cookie is same-site), so
    approve buttons and the terminal could be clickjacked."""
    for path in ("/", "/app.js", "/api/sessions", "/api/health", "/nope"):
        r = server.http.get(path)
        csp = r.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp, (path, csp)
        assert "script-src 'self';" in csp, (path, csp)
        assert r.headers.get("x-frame-options") == "DENY", path
    with _anonymous(server) as anonymous:  # the refusals carry them too
        r = anonymous.get("/api/sessions")
        assert r.status_code == 401 and r.headers.get("x-frame-options") == "DENY"


def test_the_api_document_is_served_without_viewers_that_load_scripts_from_cdns(
        server: ServerProcess) -> None:
    with _anonymous(server) as anonymous:
        document = anonymous.get("/schema/openapi.json")
        assert document.status_code == 200 and document.json()["openapi"].startswith("3.")
        for viewer in ("/schema/swagger", "/schema/redoc", "/schema/elements",
                       "/schema/rapidoc", "/schema/scalar"):
            r = anonymous.get(viewer)
            assert r.status_code == 404 or "<script" not in r.text, viewer
            assert "cdn." not in r.text and "unpkg" not in r.text, viewer


def test_a_paired_worker_cannot_fill_the_log_with_a_huge_hello(server: ServerProcess) -> None:
    """A worker sending a 900 kB hostname five times wrote 4.8 MB of worker_connected
    events."""
    worker = _PairedWorker(server)
    for _ in range(3):
        ws = worker.connect(hostname="h" * 900_000)
        assert _close_code(ws, 10) == 4400
    state = server.http.get("/api/state/bootstrap").json()["state"]
    info = state["workers"][worker.worker_id]
    assert not info["connected"] and len(info["hostname"]) <= 255
    log = server.http.get("/api/sessions")  # the server still answers
    assert log.status_code == 200
    ok = worker.connect(hostname="h" * 255)  # at the bound: accepted
    state = wait_until(lambda: server.http.get("/api/state/bootstrap").json()["state"],
                       ok=lambda state: state["workers"][worker.worker_id]["connected"],
                       timeout=10, interval=0.05, show=lambda state: state["workers"],
                       what="the worker with the longest hostname allowed to connect")
    assert state["workers"][worker.worker_id]["hostname"] == "h" * 255
    ok.close()


def test_a_worker_log_frame_cannot_forge_a_line_of_the_servers_log(
        server: ServerProcess) -> None:
    worker = _PairedWorker(server)
    ws = worker.connect()
    forged = "2026-01-01 00:00:00 INFO codey.access a browser logged in as admin"
    ws.send(json.dumps({"type": "log", "level": "warning",
                        "message": f"innocent\n{forged}\r\x1b[2Kalso forged"}))
    text = wait_until(server.log_text, ok=lambda t: "innocent" in t, timeout=10, interval=0.05,
                      show=lambda t: t[-2000:], what="the worker's log line in the server's log")
    assert "innocent\\x0a" + forged in text, text[-2000:]
    assert not any(line.startswith(forged) for line in text.splitlines())
    assert "\x1b" not in text
    ws.close()


def test_a_pairing_poll_secret_never_reaches_the_log_even_at_debug_level(
        tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "server", extra_args=["--log-level", "debug"]) as server:
        ticket = server.http.post("/api/pairing/requests", json=_Keys().body()).json()
        secret = ticket["poll_secret"]
        r = server.http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                            params={"secret": secret, "timeout": 0})
        assert r.status_code == 200
        text = wait_until(server.log_text, ok=lambda t: "/wait?secret=[redacted]" in t,
                          timeout=5, interval=0.05, show=lambda t: t[-3000:],
                          what="the poll's request line, masked, in the log")
    assert "/wait?secret=[redacted]" in text, text[-3000:]
    assert secret not in text


def test_no_auth_refuses_a_public_url_that_is_not_loopback(tmp_path: Path) -> None:
    """With --public-url it started, and then anyone could make MCP tokens and Telegram
    pairing codes."""
    server = ServerProcess(tmp_path / "server",
                           extra_args=["--no-auth", "--public-url", "https://codey.example"])
    with pytest.raises(ProcessExitedError):
        server.start()
    text = server.log_text()
    server.stop()
    assert "refusing --no-auth with the public URL https://codey.example" in text, text
    with ServerProcess(tmp_path / "local",
                       extra_args=["--no-auth", "--public-url", "http://127.0.0.1:9"]) as ok:
        assert ok.http.get("/api/health").status_code == 200


def test_a_file_of_the_documented_10_mib_is_accepted_and_one_byte_more_is_not(
        server: ServerProcess) -> None:
    """/api/blobs answered 413 from 10,000,000 bytes, Litestar's default body limit."""
    ten_mib = 10 * 1024 * 1024
    r = server.http.post("/api/blobs", params={"name": "big.bin"}, content=b"x" * ten_mib)
    assert r.status_code == 201, r.text
    assert r.json()["size"] == ten_mib
    r = server.http.post("/api/blobs", params={"name": "big.bin"},
                         content=b"x" * (ten_mib + 1))
    assert r.status_code == 413, r.text
