"""Messages between browsers and codey-server over ``WS /ws/client``.

* :data:`ClientToServer` — commands from a browser. They forbid unknown fields: a browser that
  sends a field we do not know gets an :class:`Error`, not a silently ignored request.
* :data:`ServerToClient` — frames to a browser: :class:`Events` (a batch of envelopes in seq
  order), :class:`Snapshot`, :class:`Resync`, :class:`Ack`, :class:`Error`, :class:`Shutdown`.

Order on a socket: the browser sends ``Subscribe{after_seq}`` first; the server answers either
``Snapshot`` (then live ``Events``) or catch-up ``Events`` (then live ``Events``). Commands may be
sent at any time after that; each gets an ``Ack`` or an ``Error`` carrying its ``request_id``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from codey_protocol._tags import snake
from codey_protocol.events import ApprovalPolicy, Envelope
from codey_protocol.state import State


class ClientToServerMessage(
    msgspec.Struct, tag_field="type", tag=snake, kw_only=True, forbid_unknown_fields=True
):
    """Base of every browser→server command."""

    request_id: str | None = None


class Subscribe(ClientToServerMessage, kw_only=True):
    after_seq: int = 0


class CreateSession(ClientToServerMessage, kw_only=True):
    worker_id: str
    workdir: str
    prompt: str = ""
    provider: str | None = None  # None: the server's default provider
    model: str | None = None  # None: the provider's default model
    policy: ApprovalPolicy = "suggest"
    title: str | None = None


class SendPrompt(ClientToServerMessage, kw_only=True):
    session_id: str
    text: str


class DecideApproval(ClientToServerMessage, kw_only=True):
    session_id: str
    approval_id: str
    decision: Literal["approve", "approve_for_session", "reject"]
    message: str = ""


class SetApprovalPolicy(ClientToServerMessage, kw_only=True):
    session_id: str
    policy: ApprovalPolicy


class Interrupt(ClientToServerMessage, kw_only=True):
    session_id: str


ClientToServer = (
    Subscribe | CreateSession | SendPrompt | DecideApproval | SetApprovalPolicy | Interrupt
)


class ServerToClientMessage(msgspec.Struct, tag_field="type", tag=snake, kw_only=True):
    """Base of every server→browser frame."""


class Events(ServerToClientMessage, kw_only=True):
    events: list[Envelope]


class Snapshot(ServerToClientMessage, kw_only=True):
    """Replace your state with ``state``; live events after ``seq`` follow."""

    seq: int
    state: State


class Resync(ServerToClientMessage, kw_only=True):
    """Throw your state away and subscribe again with ``after_seq=0``."""

    reason: str = ""


class Ack(ServerToClientMessage, kw_only=True):
    request_id: str | None = None
    session_id: str | None = None
    seq: int | None = None


class Error(ServerToClientMessage, kw_only=True):
    code: str  # bad_frame, unknown_type, bad_field, not_found, conflict, forbidden, internal
    message: str
    request_id: str | None = None


class Shutdown(ServerToClientMessage, kw_only=True):
    reason: str = "server shutting down"


ServerToClient = Events | Snapshot | Resync | Ack | Error | Shutdown
