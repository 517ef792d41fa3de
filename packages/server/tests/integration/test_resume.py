"""Subscribe-then-read over a real server process: resume, restart, kill -9."""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
import pytest

from codey_protocol import codec
from codey_protocol.events import Envelope
from codey_protocol.state import State
from codey_server.testing.folding import fold_frames
from codey_testkit.stack import ServerProcess
from codey_testkit.waiting import Deadline, wait_until
from codey_testkit.wsclient import BrowserSocket

WORKER_ID = "wrk_test"


@pytest.fixture
def server(seeded_server) -> ServerProcess:  # type: ignore[no-untyped-def]
    """A server with a paired worker (``WORKER_ID``) in its log and no model provider."""
    proc: ServerProcess = seeded_server({})
    return proc


def _create_session(server: ServerProcess, prompt: str = "") -> str:
    # no prompt: no agent turn, so the only events are the ones a test makes
    r = server.http.post("/api/sessions", json={"worker_id": WORKER_ID, "workdir": "/tmp/w",
                                                "prompt": prompt})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def _bump(server: ServerProcess, session_id: str, i: int) -> int:
    """One command, exactly one event: switch the approval policy."""
    policy = ("auto-edit", "suggest")[i % 2]
    r = server.http.post(f"/api/sessions/{session_id}/policy", json={"policy": policy})
    assert r.status_code == 200, r.text
    return int(r.json()["seq"])


def _prompt(server: ServerProcess, session_id: str, text: str) -> int:
    r = server.http.post(f"/api/sessions/{session_id}/prompt", json={"text": text})
    assert r.status_code == 202, r.text
    return int(r.json()["seq"])


def test_first_subscribe_gets_snapshot_then_live(server: ServerProcess) -> None:
    sid = _create_session(server)
    client = BrowserSocket(server, after_seq=0)
    frame = client.recv(10)
    assert frame is not None and frame["type"] == "snapshot"
    assert sid in frame["state"]["sessions"]
    seq = _bump(server, sid, 0)
    client.until_seq(seq)
    assert client.envelopes[-1]["event"] == {"type": "session_policy_changed",
                                             "policy": "auto-edit"}
    client.close()


def test_resume_after_disconnect_gets_exactly_the_missed_events(server: ServerProcess) -> None:
    sid = _create_session(server)
    first = BrowserSocket(server, after_seq=0)
    n_seq = 0
    for i in range(20):
        n_seq = _bump(server, sid, i)
    first.until_seq(n_seq)
    first.close()

    missed = [("auto-edit", "suggest")[i % 2] for i in range(20, 50)]
    for i in range(20, 50):
        last = _bump(server, sid, i)

    second = BrowserSocket(server, after_seq=n_seq)
    second.until_seq(last)
    second.drain(0.3)
    assert second.snapshot is None
    seqs = [e["seq"] for e in second.envelopes]
    assert seqs == list(range(n_seq + 1, n_seq + 31))
    assert [e["event"]["policy"] for e in second.envelopes] == missed
    second.close()


def test_bad_frames_get_typed_errors_and_the_socket_stays(server: ServerProcess) -> None:
    client = BrowserSocket(server, after_seq=0)
    client.recv(10)  # snapshot
    client.ws.send("not json")
    client.ws.send('{"type":"no_such_thing"}')
    client.ws.send('{"type":"send_prompt","session_id":"x","text":"a","extra":1}')
    client.send({"type": "send_prompt", "session_id": "nope", "text": "hi", "request_id": "r1"})
    codes = []
    while len(codes) < 4:
        frame = client.recv(5)
        assert frame is not None, f"only got {codes}"
        if frame["type"] == "error":
            codes.append(frame["code"])
    assert codes == ["bad_frame", "unknown_type", "bad_field", "not_found"]
    assert server.http.get("/api/health").json()["status"] == "ok"
    client.close()


def test_commands_over_the_socket_are_acked(server: ServerProcess) -> None:
    client = BrowserSocket(server, after_seq=0)
    client.recv(10)
    client.send({"type": "create_session", "request_id": "c1", "worker_id": WORKER_ID,
                 "workdir": "/tmp/x", "prompt": "do it"})
    ack = None
    for _ in range(20):
        frame = client.recv(5)
        if frame and frame["type"] == "ack":
            ack = frame
            break
    assert ack is not None and ack["request_id"] == "c1" and ack["session_id"].startswith("ses_")
    client.close()


def _fold(client: BrowserSocket) -> State:
    assert client.snapshot is not None
    return fold_frames(client.snapshot["state"], client.envelopes)


def test_kill9_mid_stream_then_restart_resumes_without_gap_or_duplicate(
        server: ServerProcess) -> None:
    sid = _create_session(server)
    client = BrowserSocket(server, after_seq=0)
    client.recv(10)
    stop = threading.Event()
    written: list[int] = []

    def writer() -> None:
        i = 0
        with httpx.Client(base_url=server.url, headers={"Origin": server.url},
                          cookies=server.http.cookies, timeout=5) as http:
            while not stop.is_set():
                try:
                    r = http.post(f"/api/sessions/{sid}/policy",
                                  json={"policy": ("auto-edit", "suggest")[i % 2]})
                except httpx.HTTPError:
                    return  # the server is gone
                if r.status_code == 200:
                    written.append(r.json()["seq"])
                i += 1

    t = threading.Thread(target=writer)
    t.start()
    deadline = Deadline(10)
    while len(written) < 40 and not deadline.passed:  # (checked below, once it is stopped)
        client.recv(0.2)
    server.kill9()
    stop.set()
    t.join(10)
    client.until_closed()  # what was sent before the server died
    client.close()
    assert len(written) >= 40

    server.start()
    resumed = BrowserSocket(server, after_seq=client.last_seq)
    final = server.http.get("/api/state/bootstrap").json()
    resumed.until_seq(final["seq"])
    resumed.close()

    seqs = [e["seq"] for e in client.envelopes] + [e["seq"] for e in resumed.envelopes]
    first = client.snapshot["seq"] if client.snapshot else 0
    assert seqs == list(range(first + 1, final["seq"] + 1)), "gap or duplicate"
    # every acknowledged write survived the crash
    assert max(written) <= final["seq"]
    client.envelopes.extend(resumed.envelopes)
    mine = _fold(client)
    theirs = codec.decode_state(msgspec.json.encode(final["state"]))
    assert msgspec.to_builtins(mine) == msgspec.to_builtins(theirs)


def test_sigterm_tells_browsers_shutdown_and_exits_zero(server: ServerProcess) -> None:
    client = BrowserSocket(server, after_seq=0)
    client.recv(10)
    assert server.stop() == 0
    types = []
    for _ in range(5):
        try:
            frame = client.recv(2)
        except Exception:
            break
        if frame is None:
            break
        types.append(frame["type"])
    assert "shutdown" in types


def test_session_log_is_ndjson_of_the_sessions_events(server: ServerProcess) -> None:
    sid = _create_session(server)
    for i in range(3):
        _bump(server, sid, i)
    r = server.http.get(f"/api/sessions/{sid}/log")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    envs = [codec.decode_envelope(line) for line in r.content.splitlines()]
    assert all(isinstance(e, Envelope) and e.session_id == sid for e in envs)
    assert [e.seq for e in envs] == sorted(e.seq for e in envs)
    assert len(envs) == 1 + 3  # created, three policy changes
    assert server.http.get("/api/sessions/ses_nope/log").status_code == 404



class _StalledBrowser:
    """A browser socket over a raw TCP socket that subscribes and then stops reading."""

    def __init__(self, server: ServerProcess) -> None:
        url = urlsplit(server.url)
        self.sock = socket.create_connection((url.hostname, url.port))
        # a smallish receive buffer so the kernel holds less for us; not tiny, or reading
        # the backlog afterwards crawls
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        headers = "".join(f"{k}: {v}\r\n" for k, v in server.cookie_header().items())
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /ws/client HTTP/1.1\r\nHost: {url.netloc}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           f"{headers}\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(4096)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        payload = json.dumps({"type": "subscribe", "after_seq": 0}).encode()
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)

    def read_all(self, timeout: float = 20.0) -> tuple[list[dict[str, Any]], int | None]:
        """Read every frame until the server closes; returns the data frames and close code."""
        self.sock.settimeout(timeout)
        frames: list[dict[str, Any]] = []
        while True:
            while True:
                parsed = self._frame()
                if parsed is None:
                    break
                opcode, data = parsed
                if opcode == 0x8:
                    return frames, int.from_bytes(data[:2], "big") if data else None
                if opcode == 0x1:
                    frames.append(json.loads(data))
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return frames, None
            self.buf += chunk

    def _frame(self) -> tuple[int, bytes] | None:
        if len(self.buf) < 2:
            return None
        opcode, length, offset = self.buf[0] & 0x0F, self.buf[1] & 0x7F, 2
        if length == 126:
            if len(self.buf) < 4:
                return None
            length, offset = int.from_bytes(self.buf[2:4], "big"), 4
        elif length == 127:
            if len(self.buf) < 10:
                return None
            length, offset = int.from_bytes(self.buf[2:10], "big"), 10
        if len(self.buf) < offset + length:
            return None
        data = self.buf[offset:offset + length]
        self.buf = self.buf[offset + length:]
        return opcode, data


def test_slow_browser_is_closed_with_4008_and_resumes_without_loss(seeded_server) -> None:  # type: ignore[no-untyped-def]
    server = seeded_server({"client_queue_max": 2})
    sid = _create_session(server)
    slow = _StalledBrowser(server)
    big = "x" * 250_000
    last = 0
    for i in range(64):  # ~16 MB: more than the socket buffers hold
        last = _prompt(server, sid, f"{i} {big}")
    frames, code = slow.read_all()
    assert code == 4008, "the lagging browser was not closed with 4008"
    got = [e["seq"] for f in frames if f["type"] == "events" for e in f["events"]]
    first = next(f["seq"] for f in frames if f["type"] == "snapshot")
    assert got == list(range(first + 1, first + 1 + len(got)))
    resumed = BrowserSocket(server, after_seq=got[-1] if got else first)
    final = server.http.get("/api/health").json()["seq"]
    resumed.until_seq(max(final, last), timeout=30)
    seqs = got + [e["seq"] for e in resumed.envelopes]
    assert seqs == list(range(first + 1, resumed.last_seq + 1)), "gap or duplicate"
    resumed.close()


def test_a_browser_that_reads_nothing_is_closed_with_4008_not_left_to_the_ping_timeout(
        seeded_server: Any) -> None:
    """Its full TCP window blocks the send itself, so the queue never overflows: the send's
    own deadline closes it, well before the 40 s of the ping timeout."""
    server: ServerProcess = seeded_server({"client_send_timeout_s": 1})
    sid = _create_session(server)
    stalled = _StalledBrowser(server)
    big = "x" * 250_000
    for i in range(32):  # ~8 MB: more than the socket buffers hold; far below 256 batches
        _prompt(server, sid, f"{i} {big}")
    wait_until(lambda: "read nothing" in server.log_text(), timeout=15, interval=0.1,
               what="the stalled browser to be closed")
    frames, code = stalled.read_all()  # what was sent before, then the close frame
    assert code == 4008
    assert frames and frames[0]["type"] == "snapshot"


def test_a_browser_that_slept_past_retention_gets_a_snapshot_not_a_gap(
        seeded_server: Any) -> None:
    """Retention trims a closed session's events; resuming from before the trim must not
    silently skip them: the server answers with the whole state instead."""
    server: ServerProcess = seeded_server({"retention": {"days": 0, "every_s": 0.3}})
    kept, closed = _create_session(server), _create_session(server)
    _bump(server, closed, 1)
    client = BrowserSocket(server, after_seq=0)
    client.until_seq(_bump(server, kept, 1))
    asleep_at = client.last_seq
    client.close()

    # the user closes a session while this browser sleeps; retention then trims its events
    other = BrowserSocket(server, after_seq=server.http.get("/api/state/bootstrap").json()["seq"])
    other.send({"type": "close_session", "session_id": closed})
    wait_until(lambda: not server.http.get(f"/api/sessions/{closed}/log").content, timeout=20,
               interval=0.2, what="retention to trim the closed session")
    other.close()
    stored = [codec.decode_envelope(line) for line in
              server.http.get(f"/api/sessions/{kept}/log").content.splitlines()]
    assert [e.seq for e in stored][:1] and stored[0].session_id == kept  # the open one stays

    woken = BrowserSocket(server, after_seq=asleep_at)
    frame = woken.recv(10)
    assert frame is not None and frame["type"] == "snapshot", frame
    state = msgspec.convert(frame["state"], State)
    assert state.sessions[closed].status == "closed"  # still listed, from the snapshot
    seq = server.http.get("/api/state/bootstrap").json()["seq"]
    woken.until_seq(seq)
    assert woken.last_seq == seq
    woken.close()

    # a browser that was awake through the trim resumes with plain events
    current = BrowserSocket(server, after_seq=woken.last_seq)
    assert current.recv(10) == {"type": "events", "events": []}
    current.close()
