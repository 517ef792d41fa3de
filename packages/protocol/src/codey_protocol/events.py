"""Events: every state change, stored in the log and sent to browsers as-is.

An :class:`Envelope` wraps each event with its global ``seq``, ``ts`` and ``session_id``
(``None`` for global events such as a worker connecting). Events are tagged by ``type``.

Session items (what a session view shows, and what the model's conversation is rebuilt from)
are a second tagged union, :data:`Item`, tagged by ``kind``.

Evolution: new fields get defaults; a field's type never changes; a tag is never reused.
Secrets (API keys, tokens, credentials) never appear in an event.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from codey_protocol._tags import snake
from codey_protocol.worker import ActionMessage, Capabilities, FileChange

SessionStatus = Literal[
    "idle", "running", "waiting_approval", "waiting_worker", "waiting_user", "interrupted",
    "error", "closed",
]
ApprovalPolicy = Literal["suggest", "auto-edit", "full-auto"]
ApprovalDecision = Literal["approved", "rejected", "expired", "cancelled"]
ToolStatus = Literal[
    "pending", "waiting_approval", "running", "done", "failed", "rejected", "cancelled",
]
PlanStatus = Literal["pending", "in_progress", "done"]
AuthState = Literal["logged_out", "pending", "logged_in", "expired", "error"]


class PlanStep(msgspec.Struct, kw_only=True):
    step: str
    status: PlanStatus = "pending"


# ---------------------------------------------------------------------------------------------
# items


class ItemBase(msgspec.Struct, tag_field="kind", tag=snake, kw_only=True):
    id: str
    ts: float


class UserMessage(ItemBase, kw_only=True):
    text: str
    queued: bool = False  # sent during a turn; injected before the next model call


class AssistantMessage(ItemBase, kw_only=True):
    text: str = ""
    streaming: bool = False


class Reasoning(ItemBase, kw_only=True):
    text: str = ""
    streaming: bool = False


class ToolCall(ItemBase, kw_only=True):
    """One tool call of the model and everything that happened to it.

    ``result`` is exactly the text the model was given back; ``None`` until there is one.
    """

    call_id: str
    name: str  # shell, apply_patch, read_file, list_dir, write_file, update_plan, mcp__s__t
    arguments: str  # the JSON text the model produced
    status: ToolStatus = "pending"
    command: list[str] | None = None
    patch: str | None = None
    path: str | None = None
    mcp_server: str | None = None
    mcp_tool: str | None = None
    output: str = ""  # streamed command output (stdout and stderr interleaved)
    exit_code: int | None = None
    truncated: bool = False
    diff: str | None = None
    files: list[FileChange] | None = None
    error: str | None = None
    result: str | None = None
    action_id: str | None = None
    approval_id: str | None = None
    #: the model answer this call came in; calls of one answer go back to the model together
    response_id: str | None = None


class ErrorItem(ItemBase, kw_only=True):
    message: str
    code: str = "error"


class PlanItem(ItemBase, kw_only=True):
    steps: list[PlanStep]
    explanation: str = ""


Item = UserMessage | AssistantMessage | Reasoning | ToolCall | ErrorItem | PlanItem


# ---------------------------------------------------------------------------------------------
# events


class EventBase(msgspec.Struct, tag_field="type", tag=snake, kw_only=True):
    pass


# workers ----------------------------------------------------------------------------------


class WorkerPairRequested(EventBase, kw_only=True):
    request_id: str
    hostname: str
    os: str
    python_version: str
    worker_version: str
    roots: list[str]
    fingerprint: str  # short hash of the public key, to compare by eye
    expires_at: float


class WorkerPairResolved(EventBase, kw_only=True):
    request_id: str
    outcome: Literal["approved", "denied", "expired", "locked"]
    worker_id: str | None = None


class WorkerPaired(EventBase, kw_only=True):
    worker_id: str
    request_id: str
    hostname: str
    os: str
    python_version: str
    worker_version: str
    roots: list[str]
    public_key: str


class WorkerRevoked(EventBase, kw_only=True):
    worker_id: str


class WorkerConnected(EventBase, kw_only=True):
    worker_id: str
    hostname: str
    os: str
    worker_version: str
    capabilities: Capabilities = msgspec.field(default_factory=Capabilities)


class WorkerDisconnected(EventBase, kw_only=True):
    worker_id: str
    reason: str = ""


# sessions ---------------------------------------------------------------------------------


class SessionCreated(EventBase, kw_only=True):
    title: str
    worker_id: str
    workdir: str
    provider: str
    model: str
    policy: ApprovalPolicy = "suggest"


class SessionStatusChanged(EventBase, kw_only=True):
    status: SessionStatus
    reason: str = ""


class SessionTitleChanged(EventBase, kw_only=True):
    title: str


class SessionPolicyChanged(EventBase, kw_only=True):
    policy: ApprovalPolicy


class SessionItemAppended(EventBase, kw_only=True):
    item: Item


class SessionItemUpdated(EventBase, kw_only=True):
    """Change one item. ``*_delta`` fields append; other fields, when not ``None``, replace."""

    item_id: str
    text_delta: str = ""
    output_delta: str = ""
    status: ToolStatus | None = None
    streaming: bool | None = None
    queued: bool | None = None
    exit_code: int | None = None
    truncated: bool | None = None
    diff: str | None = None
    files: list[FileChange] | None = None
    error: str | None = None
    result: str | None = None
    action_id: str | None = None
    approval_id: str | None = None
    output: str | None = None  # replaces the streamed output (e.g. after truncation)


class PlanUpdated(EventBase, kw_only=True):
    steps: list[PlanStep]
    explanation: str = ""


class ApprovalRequested(EventBase, kw_only=True):
    approval_id: str
    item_id: str
    kind: Literal["command", "patch", "write", "mcp"]
    command: list[str] | None = None
    patch: str | None = None
    path: str | None = None
    reason: str = ""


class ApprovalResolved(EventBase, kw_only=True):
    approval_id: str
    decision: ApprovalDecision
    message: str = ""
    for_session: bool = False  # remember this command prefix for the rest of the session


class ActionRequested(EventBase, kw_only=True):
    """The server sent (or will send) ``action`` to ``worker_id``; re-sent until finished."""

    action_id: str
    item_id: str
    worker_id: str
    action: ActionMessage


class ActionFinished(EventBase, kw_only=True):
    action_id: str
    outcome: Literal["result", "errored", "cancelled", "lost"]


class SessionWorkspaceChanged(EventBase, kw_only=True):
    paths: list[str]


class TokenUsageRecorded(EventBase, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0


class RateLimitUpdated(EventBase, kw_only=True):
    provider: str
    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests: str | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens: str | None = None


# auth -------------------------------------------------------------------------------------


class AuthStatusUpdated(EventBase, kw_only=True):
    provider: str
    state: AuthState
    method: Literal["oauth", "device_code", "api_key", "none"] = "none"
    account: str | None = None
    expires_at: float | None = None
    error: str | None = None
    verification_uri: str | None = None  # device code flow: where the user goes
    user_code: str | None = None  # device code flow: what the user types there


Event = (
    WorkerPairRequested
    | WorkerPairResolved
    | WorkerPaired
    | WorkerRevoked
    | WorkerConnected
    | WorkerDisconnected
    | SessionCreated
    | SessionStatusChanged
    | SessionTitleChanged
    | SessionPolicyChanged
    | SessionItemAppended
    | SessionItemUpdated
    | PlanUpdated
    | ApprovalRequested
    | ApprovalResolved
    | ActionRequested
    | ActionFinished
    | SessionWorkspaceChanged
    | TokenUsageRecorded
    | RateLimitUpdated
    | AuthStatusUpdated
)


class Envelope(msgspec.Struct, kw_only=True):
    """One stored event. ``seq`` is global, gapless and monotonic, starting at 1."""

    seq: int
    ts: float
    session_id: str | None
    event: Event
