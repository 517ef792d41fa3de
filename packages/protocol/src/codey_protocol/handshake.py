"""The worker socket's handshake, both ends, as state machines with no I/O.

::

    server                                              worker
    auth_challenge{nonce, server_time, protocol_version} ─▶
                          ◀─ auth_response{worker_id, ts, signature, credential}
    welcome{worker_id, heartbeat_s}                     ─▶   (or close 4401 / 4403 / 4426)
                          ◀─ hello{protocol_version, hostname, ...}

The signature is Ed25519 over :func:`signed_message` (``f"{nonce}:{worker_id}:{ts!r}"``, the
``repr`` of the float sent), base64url without padding. Each end feeds the frames it received
into its machine and sends, or closes with, what the machine answers; the sockets, the clock,
the key store and the crypto stay with the callers (``codey_server.workers.sockets``,
``codey_worker.connection``), which pass in what the machine needs to decide.

Protocol versions: one integer, the major version. Two ends with different versions refuse
each other with a reason that names both (close 4426 on the server; the worker stops before
answering a challenge from a server it cannot speak to).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

from codey_protocol import close_codes
from codey_protocol.worker import (
    PROTOCOL_VERSION,
    AuthChallenge,
    AuthResponse,
    Hello,
    ServerToWorker,
    Welcome,
    WorkerToServer,
)

__all__ = ["CLOCK_SKEW_S", "HELLO_LIMITS", "Refuse", "ServerHandshake", "WorkerHandshake",
           "hello_problem", "signed_message",
           "version_refusal"]

#: how far the worker's clock may be from the server's (its ``ts`` is signed)
CLOCK_SKEW_S = 300.0


def signed_message(nonce: str, worker_id: str, ts: float) -> bytes:
    """What the worker signs and the server verifies."""
    return f"{nonce}:{worker_id}:{ts!r}".encode()


def version_refusal(ours: int, theirs: int, *, we: str, they: str) -> str | None:
    """Why two ends cannot talk (None when they can): a different major version."""
    if ours == theirs:
        return None
    newer = we if ours > theirs else they
    older = they if ours > theirs else we
    return (f"the {they} speaks protocol {theirs} and the {we} protocol {ours}: upgrade the "
            f"{older} to the {newer}'s version")


#: what one hello may carry: its fields go into a ``worker_connected`` event at every connect,
#: so a paired but hostile worker must not be able to fill the log (a 900 kB hostname, five
#: times, wrote 4.8 MB); the frame cap alone is far larger
HELLO_LIMITS = {
    "hostname": 255, "os": 255, "version": 64, "known_sessions": 10_000, "id": 128,
    "executors": 64, "name": 128, "acp_agents": 64, "mcp_servers": 64, "tools": 512,
    "description": 8192, "error": 2000, "input_schema_bytes": 64 * 1024,
    "capabilities_bytes": 1024 * 1024,
}


def hello_problem(msg: Hello) -> str | None:
    """What in ``msg`` is past :data:`HELLO_LIMITS`, or None."""
    lim = HELLO_LIMITS

    def long(value: str, limit: int) -> bool:
        return len(value) > limit

    for field, limit in (("hostname", lim["hostname"]), ("os", lim["os"]),
                         ("worker_version", lim["version"]),
                         ("python_version", lim["version"])):
        if long(getattr(msg, field), limit):
            return f"{field} is longer than {limit} characters"
    if len(msg.known_sessions) > lim["known_sessions"] or any(
            long(s, lim["id"]) for s in msg.known_sessions):
        return "known_sessions is too long"
    caps = msg.capabilities
    if len(caps.executors) > lim["executors"] or any(long(e, lim["name"]) for e in caps.executors):
        return "capabilities.executors is too long"
    if len(caps.acp_agents) > lim["acp_agents"] or any(
            long(a, lim["name"]) for a in caps.acp_agents):
        return "capabilities.acp_agents is too long"
    if len(caps.mcp_servers) > lim["mcp_servers"]:
        return "capabilities.mcp_servers is too long"
    for server in caps.mcp_servers:
        if long(server.name, lim["name"]) or long(server.error or "", lim["error"]) \
                or len(server.tools) > lim["tools"]:
            return f"the MCP server {server.name[:40]!r} is described at too great a length"
        for tool in server.tools:
            if long(tool.name, lim["name"]) or long(tool.description, lim["description"]) or \
                    len(msgspec.json.encode(tool.input_schema)) > lim["input_schema_bytes"]:
                return f"the MCP tool {tool.name[:40]!r} is described at too great a length"
    if len(msgspec.json.encode(caps)) > lim["capabilities_bytes"]:
        return "capabilities are larger than 1 MiB"
    return None


@dataclass(frozen=True)
class Refuse:
    """Close the socket with ``code``; ``reason`` says why (it is sent as the close reason)."""

    code: int
    reason: str


Verify = Callable[[str, bytes, str], bool]  # (public key, message, signature) -> valid


class ServerHandshake:
    """The server's end. ``challenge()`` first, then the worker's frames in order::

        hs = ServerHandshake(nonce, heartbeat_s=5.0)
        send(hs.challenge(now))
        answer = hs.receive_auth(frame, now=..., revoked=..., public_key=..., verify=...)
        # Welcome → send it; Refuse → close
        hello = hs.receive_hello(frame)   # Hello → connected; Refuse → close
    """

    def __init__(self, nonce: str, *, heartbeat_s: float = 5.0,
                 protocol_version: int = PROTOCOL_VERSION) -> None:
        self.nonce = nonce
        self.heartbeat_s = heartbeat_s
        self.protocol_version = protocol_version
        self.state: Literal["new", "challenged", "welcomed", "done", "refused"] = "new"
        self.worker_id: str | None = None
        self.credential: str | None = None

    def challenge(self, now: float) -> AuthChallenge:
        self._expect("new")
        self.state = "challenged"
        return AuthChallenge(nonce=self.nonce, server_time=now,
                             protocol_version=self.protocol_version)

    def receive_auth(self, msg: WorkerToServer | None, *, now: float, known: bool,
                     revoked: bool, public_key: str | None, verify: Verify) -> Welcome | Refuse:
        """The worker's answer to the challenge (None: it sent nothing usable in time).

        ``known``: the worker is in the state; ``revoked``: it was revoked; ``public_key``:
        its key when ``credential`` matches the stored one, else None."""
        self._expect("challenged")
        if not isinstance(msg, AuthResponse):
            return self._refuse(close_codes.UNAUTHORIZED, "expected a signed auth response")
        if revoked:
            return self._refuse(close_codes.REVOKED, "this worker was revoked")
        if (not known or public_key is None or abs(now - msg.ts) > CLOCK_SKEW_S
                or not verify(public_key, signed_message(self.nonce, msg.worker_id, msg.ts),
                              msg.signature)):
            return self._refuse(close_codes.UNAUTHORIZED, "unknown worker or bad signature")
        self.worker_id, self.credential = msg.worker_id, msg.credential
        self.state = "welcomed"
        return Welcome(worker_id=msg.worker_id, heartbeat_s=self.heartbeat_s)

    def receive_hello(self, msg: WorkerToServer | None) -> Hello | Refuse:
        self._expect("welcomed")
        if not isinstance(msg, Hello):
            return self._refuse(close_codes.BAD_FIRST_FRAME, "expected hello")
        why = version_refusal(self.protocol_version, msg.protocol_version, we="server",
                              they="worker")
        if why is not None:
            return self._refuse(close_codes.UPGRADE_REQUIRED, why)
        too_big = hello_problem(msg)
        if too_big is not None:
            return self._refuse(close_codes.BAD_FIRST_FRAME, f"hello refused: {too_big}")
        self.state = "done"
        return msg

    def _refuse(self, code: int, reason: str) -> Refuse:
        self.state = "refused"
        return Refuse(code, reason)

    def _expect(self, state: str) -> None:
        if self.state != state:
            raise RuntimeError(f"handshake step out of order: in state {self.state!r}, "
                               f"expected {state!r}")


class WorkerHandshake:
    """The worker's end: feed it the server's frames until it says ``done``::

        hs = WorkerHandshake(worker_id, credential, sign)
        out = hs.receive(frame, now)   # AuthResponse → send; Refuse → stop with its reason
        out = hs.receive(frame, now)   # Welcome → send hello; heartbeat in out.heartbeat_s
    """

    def __init__(self, worker_id: str, credential: str, sign: Callable[[bytes], str], *,
                 protocol_version: int = PROTOCOL_VERSION) -> None:
        self.worker_id = worker_id
        self.credential = credential
        self.sign = sign
        self.protocol_version = protocol_version
        self.state: Literal["new", "answered", "done", "refused"] = "new"

    def receive(self, msg: ServerToWorker, now: float) -> AuthResponse | Welcome | Refuse:
        if self.state == "new":
            if not isinstance(msg, AuthChallenge):
                return self._refuse(f"expected auth_challenge, got {type(msg).__name__}")
            why = version_refusal(self.protocol_version, msg.protocol_version, we="worker",
                                  they="server")
            if why is not None:
                self.state = "refused"
                return Refuse(close_codes.UPGRADE_REQUIRED, why)
            self.state = "answered"
            return AuthResponse(worker_id=self.worker_id, ts=now, credential=self.credential,
                                signature=self.sign(signed_message(msg.nonce, self.worker_id,
                                                                   now)))
        if self.state == "answered":
            if not isinstance(msg, Welcome):
                return self._refuse(f"expected welcome, got {type(msg).__name__}")
            self.state = "done"
            return msg
        raise RuntimeError(f"handshake already {self.state}")

    def _refuse(self, reason: str) -> Refuse:
        self.state = "refused"
        return Refuse(close_codes.BAD_FIRST_FRAME, reason)
