"""Pairing over HTTP and the signed worker handshake, against a real server process."""

from __future__ import annotations

import base64
import json
import platform
import re
import threading
import time
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from codey_testkit.stack import ServerProcess
from codey_testkit.waiting import wait_until


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class FakeWorkerKeys:
    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.public = _b64(self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def request_body(self) -> dict[str, Any]:
        return {"public_key": self.public, "hostname": "test-host", "os": "Linux 6.1",
                "python_version": platform.python_version(), "worker_version": "0.1.0",
                "roots": ["/tmp"]}


def _request(server: ServerProcess, keys: FakeWorkerKeys) -> dict[str, Any]:
    r = server.http.post("/api/pairing/requests", json=keys.request_body())
    assert r.status_code == 201, r.text
    return dict(r.json())


def _pair(server: ServerProcess, keys: FakeWorkerKeys) -> tuple[str, str]:
    ticket = _request(server, keys)
    r = server.http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                         json={"code": ticket["code"]})
    assert r.status_code == 200, r.text
    status = server.http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                             params={"secret": ticket["poll_secret"], "timeout": 1}).json()
    assert status["status"] == "approved"
    return status["worker_id"], status["credential"]


def _handshake(server: ServerProcess, keys: FakeWorkerKeys, worker_id: str, credential: str):  # type: ignore[no-untyped-def]
    ws = connect(server.worker_ws_url, open_timeout=10, legacy=True)
    challenge = json.loads(ws.recv(timeout=5))
    assert challenge["type"] == "auth_challenge"
    ts = time.time()
    sig = _b64(keys.key.sign(f"{challenge['nonce']}:{worker_id}:{ts!r}".encode()))
    ws.send(json.dumps({"type": "auth_response", "worker_id": worker_id, "ts": ts,
                        "signature": sig, "credential": credential}))
    return ws


@pytest.fixture
def server(tmp_path):  # type: ignore[no-untyped-def]
    with ServerProcess(tmp_path / "server") as proc:
        yield proc


def test_pair_request_has_code_from_the_alphabet_and_shows_in_the_list(server) -> None:  # type: ignore[no-untyped-def]
    ticket = _request(server, FakeWorkerKeys())
    assert re.fullmatch(r"[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}", ticket["code"])
    listed = server.http.get("/api/pairing/requests").json()
    assert [p["request_id"] for p in listed] == [ticket["request_id"]]
    assert listed[0]["hostname"] == "test-host"
    by_code = server.http.get(f"/api/pairing/code/{ticket['code'].lower()}").json()
    assert by_code["request_id"] == ticket["request_id"]
    state = server.http.get("/api/state/bootstrap").json()["state"]
    assert ticket["request_id"] in state["pair_requests"]


def test_long_poll_wakes_on_approval(server) -> None:  # type: ignore[no-untyped-def]
    keys = FakeWorkerKeys()
    ticket = _request(server, keys)
    answer: dict[str, Any] = {}

    def poll() -> None:
        import httpx
        r = httpx.get(f"{server.url}/api/pairing/requests/{ticket['request_id']}/wait",
                      params={"secret": ticket["poll_secret"], "timeout": 20}, timeout=30)
        answer.update(r.json())
        answer["elapsed"] = time.monotonic() - t0

    t0 = time.monotonic()
    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)  # not a wait for something: the approval must land while the poll waits
    r = server.http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                         json={"code": ticket["code"]})
    assert r.status_code == 200
    t.join(10)
    assert answer["status"] == "approved" and answer["credential"]
    assert answer["elapsed"] < 5
    state = server.http.get("/api/state/bootstrap").json()["state"]
    assert answer["worker_id"] in state["workers"] and not state["pair_requests"]


def test_sixth_wrong_code_finds_the_request_locked(server) -> None:  # type: ignore[no-untyped-def]
    ticket = _request(server, FakeWorkerKeys())
    url = f"/api/pairing/requests/{ticket['request_id']}/approve"
    codes = [server.http.post(url, json={"code": "BBBB-BBBB"}).status_code for _ in range(5)]
    assert codes == [403, 403, 403, 403, 423]  # a wrong code is a failed proof
    # the right code no longer works: the request is locked
    assert server.http.post(url, json={"code": ticket["code"]}).status_code == 423
    status = server.http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                             params={"secret": ticket["poll_secret"], "timeout": 1}).json()
    assert status["status"] == "locked"


def test_code_is_single_use(server) -> None:  # type: ignore[no-untyped-def]
    keys = FakeWorkerKeys()
    ticket = _request(server, keys)
    url = f"/api/pairing/requests/{ticket['request_id']}/approve"
    assert server.http.post(url, json={"code": ticket["code"]}).status_code == 200
    assert server.http.post(url, json={"code": ticket["code"]}).status_code == 404


def test_deny_tells_the_waiting_worker(server) -> None:  # type: ignore[no-untyped-def]
    ticket = _request(server, FakeWorkerKeys())
    assert server.http.post(f"/api/pairing/requests/{ticket['request_id']}/deny").status_code == 200
    status = server.http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                             params={"secret": ticket["poll_secret"], "timeout": 1}).json()
    assert status["status"] == "denied" and status["credential"] is None


def test_bad_pair_request_is_refused_clearly(server) -> None:  # type: ignore[no-untyped-def]
    body = FakeWorkerKeys().request_body()
    body["public_key"] = "not-a-key"
    r = server.http.post("/api/pairing/requests", json=body)
    assert r.status_code == 400 and "Ed25519" in r.json()["detail"]
    r = server.http.post("/api/pairing/requests", json={"hostname": "x"})
    assert r.status_code == 400


def test_signed_handshake_connects_and_revocation_closes_and_refuses(server) -> None:  # type: ignore[no-untyped-def]
    keys = FakeWorkerKeys()
    worker_id, credential = _pair(server, keys)
    ws = _handshake(server, keys, worker_id, credential)
    welcome = json.loads(ws.recv(timeout=5))
    assert welcome == {"type": "welcome", "worker_id": worker_id, "heartbeat_s": 5.0}
    ws.send(json.dumps({"type": "hello", "worker_version": "0.1.0", "hostname": "test-host",
                        "os": "Linux"}))
    w = wait_until(
        lambda: server.http.get("/api/state/bootstrap").json()["state"]["workers"][worker_id],
        ok=lambda w: w["connected"], timeout=5, interval=0.05, what="the worker to connect")
    assert w["connected"]

    t0 = time.monotonic()
    assert server.http.post(f"/api/workers/{worker_id}/revoke").status_code == 200
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=5)
    assert time.monotonic() - t0 < 1.0
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403

    again = _handshake(server, keys, worker_id, credential)
    with pytest.raises(ConnectionClosed) as refused:
        again.recv(timeout=5)
    assert refused.value.rcvd is not None and refused.value.rcvd.code == 4403


def test_wrong_signature_is_refused_with_4401(server) -> None:  # type: ignore[no-untyped-def]
    keys = FakeWorkerKeys()
    worker_id, credential = _pair(server, keys)
    other = FakeWorkerKeys()
    ws = _handshake(server, other, worker_id, credential)  # signed with the wrong key
    with pytest.raises(ConnectionClosed) as refused:
        ws.recv(timeout=5)
    assert refused.value.rcvd is not None and refused.value.rcvd.code == 4401
    ws = _handshake(server, keys, "wrk_unknown", credential)
    with pytest.raises(ConnectionClosed) as unknown:
        ws.recv(timeout=5)
    assert unknown.value.rcvd is not None and unknown.value.rcvd.code == 4401


def test_approving_twice_at_once_pairs_one_worker(server) -> None:  # type: ignore[no-untyped-def]
    import concurrent.futures

    import httpx

    ticket = _request(server, FakeWorkerKeys())
    url = f"{server.url}/api/pairing/requests/{ticket['request_id']}/approve"

    def approve() -> int:
        with httpx.Client(cookies=server.http.cookies, headers={"Origin": server.url}) as http:
            return http.post(url, json={"code": ticket["code"]}).status_code

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        codes = sorted(pool.map(lambda _: approve(), range(4)))
    assert codes.count(200) == 1, codes
    state = server.http.get("/api/state/bootstrap").json()["state"]
    assert len(state["workers"]) == 1


def test_one_address_cannot_fill_the_pairing_queue(server) -> None:  # type: ignore[no-untyped-def]
    codes = [server.http.post("/api/pairing/requests",
                              json=FakeWorkerKeys().request_body()).status_code
             for _ in range(7)]
    assert codes == [201] * 5 + [429, 429]


def test_a_forged_x_forwarded_for_does_not_dodge_the_limit(server) -> None:  # type: ignore[no-untyped-def]
    """No proxy is trusted by default: a client naming a new address in each request is
    still one address. (uvicorn on its own believes the header from 127.0.0.1, which would
    have given this local client a fresh budget per request.)"""
    codes = [server.http.post("/api/pairing/requests", json=FakeWorkerKeys().request_body(),
                              headers={"X-Forwarded-For": f"203.0.113.{n}",
                                       "Forwarded": f"for=203.0.113.{n}",
                                       "X-Real-IP": f"203.0.113.{n}"}).status_code
             for n in range(7)]
    assert codes == [201] * 5 + [429, 429]


# --- hostile pair requests: bounded, 4xx, never a 500, never in the log ----------------------


_OUT_OF_BOUNDS: list[tuple[str, Any, str]] = [
    # the bounds are in the body's schema, so msgspec says them
    ("roots", ["/r"] * 33, "Expected `array` of length <= 32 - at `roots`"),
    ("roots", ["/" + "x" * 4096], "Expected `str` of length <= 4096 - at `roots[0]`"),
    ("roots", [""], "Expected `str` of length >= 1 - at `roots[0]`"),
    ("python_version", "3" * 65, "Expected `str` of length <= 64 - at `python_version`"),
    ("worker_version", "0" * 65, "Expected `str` of length <= 64 - at `worker_version`"),
    ("hostname", "h" * 256, "Expected `str` of length <= 255 - at `hostname`"),
    ("hostname", " ", "must not be empty - at `hostname`"),
]


def test_pair_request_fields_are_bounded(server) -> None:  # type: ignore[no-untyped-def]
    for field, value, message in _OUT_OF_BOUNDS:
        body = {**FakeWorkerKeys().request_body(), field: value}
        r = server.http.post("/api/pairing/requests", json=body)
        assert r.status_code == 400, (field, r.text)
        assert message in r.json()["detail"], (field, r.text)
    assert server.http.get("/api/pairing/requests").json() == []
    # the limits themselves are allowed
    ok = {**FakeWorkerKeys().request_body(), "roots": ["/" + "x" * 4095] * 32,
          "python_version": "3" * 64, "worker_version": "0" * 64}
    assert server.http.post("/api/pairing/requests", json=ok).status_code == 201


def test_a_public_key_hidden_in_junk_is_refused(server) -> None:  # type: ignore[no-untyped-def]
    keys = FakeWorkerKeys()
    # base64 decoding skips characters outside its alphabet: this would decode to the key
    junk = {**keys.request_body(), "public_key": "!" * 5000 + keys.public}
    r = server.http.post("/api/pairing/requests", json=junk)
    assert r.status_code == 400 and "public_key" in r.json()["detail"], r.text
    padded = {**keys.request_body(), "public_key": keys.public + "="}
    assert server.http.post("/api/pairing/requests", json=padded).status_code == 201


def test_a_large_pair_request_body_is_refused_before_it_is_read(server) -> None:  # type: ignore[no-untyped-def]
    body = {**FakeWorkerKeys().request_body(), "hostname": "h" * (300 * 1024)}
    r = server.http.post("/api/pairing/requests", json=body)
    assert r.status_code == 413, r.text
    assert server.http.get("/api/pairing/requests").json() == []


def test_deeply_nested_json_gets_400_not_500(server) -> None:  # type: ignore[no-untyped-def]
    deep = b"[" * 5000 + b"]" * 5000
    for path in ("/api/pairing/requests", "/api/sessions", "/api/auth/api-key"):
        r = server.http.post(path, content=deep, headers={"content-type": "application/json"})
        assert r.status_code == 400, (path, r.status_code, r.text)
    assert server.http.get("/api/health").status_code == 200


def test_non_ascii_poll_secret_and_code_get_4xx_not_500(server) -> None:  # type: ignore[no-untyped-def]
    ticket = _request(server, FakeWorkerKeys())
    r = server.http.get(f"/api/pairing/requests/{ticket['request_id']}/wait",
                        params={"secret": "é" * 32, "timeout": 0})
    assert r.status_code == 404, r.text
    r = server.http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                         json={"code": "ÉÉÉÉ-ÉÉÉÉ"})
    assert r.status_code == 403 and r.json()["extra"]["code"] == "wrong_code", r.text
    # the request still works with its real secret and code
    r = server.http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                         json={"code": ticket["code"]})
    assert r.status_code == 200, r.text


def test_local_tools_names_uv_by_its_absolute_path_to_a_logged_in_browser(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # an executable where no PATH of a new terminal would look: `uv run` says it through $UV
    uv = tmp_path / "tools" / "bin" / "uv"
    uv.parent.mkdir(parents=True)
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    with ServerProcess(tmp_path / "server", env={"UV": str(uv)}) as server:
        assert server.http.get("/api/pairing/local-tools").json() == {"uv": str(uv)}
        # it names a path of the server's machine: not for a browser without a login
        anonymous = httpx.get(f"{server.url}/api/pairing/local-tools",
                              headers={"Origin": server.url})
        assert anonymous.status_code == 401, anonymous.text


def test_a_paired_machine_has_its_fingerprint_and_takes_a_name(server) -> None:  # type: ignore[no-untyped-def]
    keys = FakeWorkerKeys()
    _request(server, keys)
    (shown,) = server.http.get("/api/pairing/requests").json()
    r = server.http.post(f"/api/pairing/requests/{shown['request_id']}/approve",
                         json={"code": shown["code"]})
    worker_id = r.json()["worker_id"]

    def worker() -> dict[str, Any]:
        return dict(server.http.get("/api/state/bootstrap").json()["state"]["workers"][worker_id])

    # the fingerprint the user compared when approving, kept with the machine
    assert worker()["fingerprint"] == shown["fingerprint"]
    assert worker()["name"] == ""
    named = server.http.post(f"/api/workers/{worker_id}/name", json={"name": " build  box "})
    assert named.status_code == 200, named.text
    assert named.json()["name"] == "build box" and named.json()["seq"] is not None
    assert worker()["name"] == "build box"
    again = server.http.post(f"/api/workers/{worker_id}/name", json={"name": "build box"})
    assert again.json() == {"worker_id": worker_id, "name": "build box", "seq": None}

    too_long = server.http.post(f"/api/workers/{worker_id}/name", json={"name": "x" * 81})
    assert too_long.status_code == 400 and "at most 80" in too_long.json()["detail"]
    unknown = server.http.post("/api/workers/wrk_nope/name", json={"name": "x"})
    assert unknown.status_code == 404, unknown.text
    back = server.http.post(f"/api/workers/{worker_id}/name", json={"name": ""})
    assert back.json()["name"] == "" and worker()["name"] == ""
