"""Both ends of the worker handshake as state machines: the happy path, and every refusal
with its close code, without a socket."""

from __future__ import annotations

import pytest

from codey_protocol import close_codes
from codey_protocol import worker as wk
from codey_protocol.handshake import (
    CLOCK_SKEW_S,
    Refuse,
    ServerHandshake,
    WorkerHandshake,
    signed_message,
    version_refusal,
)

KEYS = {"wrk_1": "pub-1"}


def fake_sign(message: bytes) -> str:
    return "sig:" + message.decode()


def fake_verify(public_key: str, message: bytes, signature: str) -> bool:
    return public_key == "pub-1" and signature == fake_sign(message)


def hello(version: int = wk.PROTOCOL_VERSION) -> wk.Hello:
    return wk.Hello(worker_version="1", hostname="h", os="Linux", protocol_version=version)


def run_server(auth: wk.WorkerToServer | None, *, now: float = 1000.0, revoked: bool = False,
               known: bool = True) -> tuple[ServerHandshake, wk.Welcome | Refuse]:
    server = ServerHandshake("n0nce", heartbeat_s=2.0)
    server.challenge(1000.0)
    worker_id = auth.worker_id if isinstance(auth, wk.AuthResponse) else ""
    return server, server.receive_auth(auth, now=now, known=known, revoked=revoked,
                                       public_key=KEYS.get(worker_id), verify=fake_verify)


def test_the_two_ends_complete_a_handshake() -> None:
    server = ServerHandshake("n0nce", heartbeat_s=2.0)
    worker = WorkerHandshake("wrk_1", "cred", fake_sign)
    challenge = server.challenge(1000.0)
    answer = worker.receive(challenge, 1001.5)
    assert isinstance(answer, wk.AuthResponse)
    assert answer.signature == fake_sign(signed_message("n0nce", "wrk_1", 1001.5))
    welcome = server.receive_auth(answer, now=1002.0, known=True, revoked=False,
                                  public_key="pub-1", verify=fake_verify)
    assert isinstance(welcome, wk.Welcome) and welcome.heartbeat_s == 2.0
    assert worker.receive(welcome, 1002.1) == welcome and worker.state == "done"
    assert server.receive_hello(hello()) == hello()
    assert server.state == "done" and server.credential == "cred"


def test_the_signed_message_is_the_repr_of_the_float_sent() -> None:
    assert signed_message("n", "w", 0.1) == b"n:w:0.1"
    assert signed_message("n", "w", 1e21) == b"n:w:1e+21"


@pytest.mark.parametrize(("auth", "kwargs", "code"), [
    (None, {}, close_codes.UNAUTHORIZED),  # nothing usable in time
    (hello(), {}, close_codes.UNAUTHORIZED),  # the wrong frame
    (wk.AuthResponse(worker_id="wrk_1", ts=1000.0, signature="x", credential="c"), {},
     close_codes.UNAUTHORIZED),  # a bad signature
    (wk.AuthResponse(worker_id="wrk_9", ts=1000.0, signature=fake_sign(b"n0nce:wrk_9:1000.0"),
                     credential="c"), {"known": False}, close_codes.UNAUTHORIZED),
    (wk.AuthResponse(worker_id="wrk_1", ts=1000.0, signature=fake_sign(b"n0nce:wrk_1:1000.0"),
                     credential="c"), {"revoked": True}, close_codes.REVOKED),
    (wk.AuthResponse(worker_id="wrk_1", ts=1000.0, signature=fake_sign(b"n0nce:wrk_1:1000.0"),
                     credential="c"), {"now": 1000.0 + CLOCK_SKEW_S + 1},
     close_codes.UNAUTHORIZED),  # clock skew
])
def test_the_server_refuses_with_the_right_close_code(
        auth: wk.WorkerToServer | None, kwargs: dict[str, object], code: int) -> None:
    server, answer = run_server(auth, **kwargs)  # type: ignore[arg-type]
    assert isinstance(answer, Refuse) and answer.code == code
    assert server.state == "refused"


def test_a_worker_of_another_major_version_is_refused_with_both_versions_named() -> None:
    good = wk.AuthResponse(worker_id="wrk_1", ts=1000.0, credential="c",
                           signature=fake_sign(b"n0nce:wrk_1:1000.0"))
    server, welcome = run_server(good)
    assert isinstance(welcome, wk.Welcome)
    refused = server.receive_hello(hello(wk.PROTOCOL_VERSION + 1))
    assert isinstance(refused, Refuse) and refused.code == close_codes.UPGRADE_REQUIRED
    assert f"protocol {wk.PROTOCOL_VERSION + 1}" in refused.reason
    assert "upgrade the server" in refused.reason
    server2, _ = run_server(good)
    assert isinstance(server2.receive_hello(wk.Log(message="x")), Refuse)


def test_the_worker_stops_before_answering_a_server_of_another_version() -> None:
    worker = WorkerHandshake("wrk_1", "cred", fake_sign)
    challenge = wk.AuthChallenge(nonce="n", server_time=0.0,
                                 protocol_version=wk.PROTOCOL_VERSION - 1)
    refused = worker.receive(challenge, 1.0)
    assert isinstance(refused, Refuse) and refused.code == close_codes.UPGRADE_REQUIRED
    assert "upgrade the server" in refused.reason


def test_the_worker_refuses_frames_out_of_order() -> None:
    worker = WorkerHandshake("wrk_1", "cred", fake_sign)
    assert isinstance(worker.receive(wk.Welcome(worker_id="wrk_1"), 1.0), Refuse)
    worker = WorkerHandshake("wrk_1", "cred", fake_sign)
    worker.receive(wk.AuthChallenge(nonce="n", server_time=0.0), 1.0)
    assert isinstance(worker.receive(wk.AuthChallenge(nonce="n", server_time=0.0), 1.0),
                      Refuse)
    with pytest.raises(RuntimeError):
        worker.receive(wk.Welcome(worker_id="wrk_1"), 1.0)
    server = ServerHandshake("n")
    with pytest.raises(RuntimeError):  # a caller bug, not a peer's: loud
        server.receive_hello(hello())


def test_version_refusal_names_the_side_to_upgrade() -> None:
    assert version_refusal(2, 2, we="server", they="worker") is None
    assert version_refusal(3, 2, we="server", they="worker") == (
        "the worker speaks protocol 2 and the server protocol 3: upgrade the worker to the "
        "server's version")
