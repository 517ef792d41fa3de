"""Both ends of the worker handshake as state machines: the happy path, and every refusal
with its close code, without a socket."""

from __future__ import annotations

import pytest

from codey_protocol import close_codes
from codey_protocol import worker as wk
from codey_protocol.handshake import (
    CLOCK_SKEW_S,
    HELLO_LIMITS,
    Refuse,
    ServerHandshake,
    WorkerHandshake,
    hello_problem,
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


def _hello(**kw: object) -> wk.Hello:
    fields: dict[str, object] = {"worker_version": "0.1.0", "hostname": "h", "os": "Linux"}
    fields.update(kw)
    return wk.Hello(**fields)  # type: ignore[arg-type]


def _tool(**kw: object) -> wk.McpTool:
    return wk.McpTool(**{"name": "t", **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("hello", "said"), [
    (_hello(hostname="h" * 256), "hostname"),
    (_hello(os="o" * 900_000), "os"),
    (_hello(worker_version="1" * 65), "worker_version"),
    (_hello(known_sessions=["s"] * 10_001), "known_sessions"),
    (_hello(capabilities=wk.Capabilities(executors=["x" * 129])), "executors"),
    (_hello(capabilities=wk.Capabilities(acp_agents=["a"] * 65)), "acp_agents"),
    (_hello(capabilities=wk.Capabilities(mcp_servers=[
        wk.McpServerInfo(name="git", tools=[_tool(description="d" * 8193)])])), "MCP tool"),
    (_hello(capabilities=wk.Capabilities(mcp_servers=[
        wk.McpServerInfo(name="git", tools=[_tool(input_schema={"x": "y" * 70_000})])])),
     "MCP tool"),
    (_hello(capabilities=wk.Capabilities(mcp_servers=[
        wk.McpServerInfo(name="git", tools=[_tool()] * 513)])), "MCP server"),
])
def test_a_hello_past_its_bounds_is_refused_before_it_reaches_the_log(
        hello: wk.Hello, said: str) -> None:
    """A paired worker sending a 900 kB hostname five times wrote 4.8 MB of events."""
    assert said in (hello_problem(hello) or "")
    server = ServerHandshake("nonce")
    server.state = "welcomed"
    refused = server.receive_hello(hello)
    assert isinstance(refused, Refuse) and refused.code == close_codes.BAD_FIRST_FRAME
    assert said in refused.reason


def test_a_hello_at_its_bounds_is_accepted() -> None:
    hello = _hello(hostname="h" * HELLO_LIMITS["hostname"], known_sessions=["s"] * 100,
                   capabilities=wk.Capabilities(mcp_servers=[wk.McpServerInfo(
                       name="git", tools=[_tool(description="d" * 8192)] * 10)]))
    assert hello_problem(hello) is None
