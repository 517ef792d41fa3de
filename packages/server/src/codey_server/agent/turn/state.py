"""Codey's turn as a value: :class:`CodeyTurn` and its parts, all immutable.

A step never changes a turn: it makes the next one (:func:`~codey_server.agent.machine.evolve`).
The maps in it (``parsed``, ``children``) are never changed in place either: a step that
changes one makes a new one. The step a ``Proceed`` goes on with is ``core.then`` (a
:class:`Then`); what the turn waits for reads from its fields: :attr:`CodeyTurn.phase` names
it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.errors import ModelError
from codey_server.agent.machine import Core, Limits, Streamed
from codey_server.agent.route import ProviderInfo
from codey_server.agent.stream import Finished, ToolCallRequested
from codey_server.agent.tools import Ask, BadToolCall, ParsedCall, ToolSpec, WorkerTool
from codey_server.settings import RoleConfig

__all__ = [
    "CONTEXT_TIMEOUT_S",
    "After",
    "Answer",
    "Attaching",
    "Call",
    "CodeyTurn",
    "Compacted",
    "Compaction",
    "Hooking",
    "Loading",
    "Previewing",
    "Reason",
    "Route",
    "Running",
    "Then",
    "TurnConfig",
    "codey_turn",
]

Reason = Literal["threshold", "context_exceeded", "manual"]

#: how long a turn waits for the worker to read what it needs (the context, a preview)
CONTEXT_TIMEOUT_S = 30.0


class Then(Enum):
    """The step a ``Proceed`` goes on with (the turn asked to read its own events first)."""

    #: load the workdir's context, then LOOP (a turn's first step)
    CONTEXT_THEN_LOOP = "context_then_loop"
    #: status running, settle the open calls
    LOOP = "loop"
    SETTLE = "settle"
    #: un-queue prompts done: call the model, or stop
    BEFORE_CALL = "before_call"
    #: the session went idle: a prompt that came meanwhile starts the loop again
    AFTER_IDLE = "after_idle"
    #: the prompts' files are written: the model call
    MODEL_STEP = "model_step"
    #: build a fresh body and send it (after a fallback)
    SEND_NEW_BODY = "send_new_body"
    #: the input was over the model's window: compact (``CodeyTurn.error`` says why)
    COMPACT_FOR_LENGTH = "compact_for_length"
    #: a compaction is over (``CodeyTurn.compacted``): go on as it asked
    COMPACTED = "compacted"


class After(Enum):
    """What a compaction goes on with."""

    #: the user asked for it alone: restore the status, the turn ends
    ALONE = "alone"
    #: asked for before this call: build the body
    PREPARE = "prepare"
    #: the input was over the window: send a fresh body, or fail with the error
    SEND_OR_FAIL = "send_or_fail"
    #: the body was near the window: send a fresh body, or the one built before
    THRESHOLD = "threshold"


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """What a turn is started with and never changes."""

    limits: Limits = field(default_factory=Limits)
    roles: Mapping[str, RoleConfig] = field(default_factory=dict)
    resume: bool = False
    compact_only: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    """Where this turn's model calls go: a provider (its settings) and a model."""

    info: ProviderInfo
    model: str


@dataclass(frozen=True, slots=True)
class Call:
    """The model call being prepared or made: where it goes, what it sends, what it tried."""

    route: Route
    body: bytes = b""
    compacted: bool = False
    cuts: int = 0


_TEXT, _REFUSAL, _REASONING = Streamed("text"), Streamed("refusal"), Streamed("reasoning")


@dataclass(frozen=True, slots=True)
class Answer:
    """What the model said so far in this call."""

    text: Streamed = _TEXT
    refusal: Streamed = _REFUSAL
    reasoning: Streamed = _REASONING
    calls: tuple[ToolCallRequested, ...] = ()
    tail: tuple[ev.Event, ...] = ()  # usage and rate limits
    finished: Finished | None = None


@dataclass(frozen=True, slots=True)
class Compaction:
    """A summary being made of the older items."""

    reason: Reason
    after: After
    restore: tuple[ev.SessionStatus, str]
    start: int
    cut: int
    previous: ev.Summary | None
    budget: int
    tokens_before: int
    #: SEND_OR_FAIL: the error to fail with; THRESHOLD: the body to send when not compacted
    error: ModelError | None = None
    body: bytes = b""
    attempt: int = 0
    parts: tuple[str, ...] = ()
    tail: tuple[ev.Event, ...] = ()


@dataclass(frozen=True, slots=True)
class Compacted:
    """A compaction is over (``ok``: a summary was appended); ``Then.COMPACTED`` reads it."""

    after: After
    ok: bool
    restore: tuple[ev.SessionStatus, str]
    error: ModelError | None = None
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Loading:
    """The workdir's context being loaded, and the step after it."""

    action_id: str
    then: Then


@dataclass(frozen=True, slots=True)
class Running:
    """The tool call whose action runs on the worker (its output is coalesced under its
    item's id)."""

    item_id: str
    action_id: str
    tool: WorkerTool[Any]
    streamed: int = 0
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Previewing:
    """A call whose approval waits for what the worker reads first (the file a write
    replaces)."""

    item_id: str
    parsed: ParsedCall[Any]
    ask: Ask
    action_id: str


@dataclass(frozen=True, slots=True)
class Hooking:
    """Hooks of ``event`` running on the worker: a call's ``PreToolUse`` (before the gate
    judges it), ``PostToolUse`` (after its result) or ``PermissionRequest`` (its approval
    asked), or a moment of the turn (``UserPromptSubmit``, ``Stop``: ``item_id`` is the
    prompt's, or "")."""

    item_id: str
    action_id: str
    event: str = "PreToolUse"


@dataclass(frozen=True, slots=True)
class Attaching:
    """Files sent with prompts, being written into the workdir: per message, its files."""

    messages: tuple[tuple[str, tuple[ev.Attachment, ...]], ...]
    index: int = 0  # the file of the first message being written
    action_id: str | None = None


@dataclass(frozen=True, slots=True)
class CodeyTurn:
    """One turn of a Codey session, as a value (see :mod:`codey_server.agent.turn`)."""

    core: Core
    config: TurnConfig = field(default_factory=TurnConfig)
    iterations: int = 0
    #: a resumed turn whose answer was cut calls the model again
    force_call: bool = False
    context_stale: bool = False
    #: the provider and model of this turn (the fallback's once it took over)
    route: Route | None = None
    on_fallback: bool = False
    #: the tools a slash command allowed for this turn (None: all the session's)
    only_tools: frozenset[str] | None = None
    #: each tool call's parse, by item id
    parsed: Mapping[str, ParsedCall[Any] | BadToolCall] = field(default_factory=dict)
    context: Loading | None = None
    #: the worker said the session's folder, a worktree, is gone (``worktree_gone``): the
    #: turn stops before the model is called again
    gone: str | None = None
    call: Call | None = None
    #: a body asked for (``BuildBody``): to check against the window first, or to send
    building: Literal["check", "send"] | None = None
    answer: Answer | None = None
    #: the model error a COMPACT_FOR_LENGTH step fails with when nothing can be compacted
    error: ModelError | None = None
    compaction: Compaction | None = None
    compacted: Compacted | None = None
    running: Running | None = None
    #: a call whose outcome's bytes are being kept in the blob store before it settles
    storing: tuple[Running, wk.ActionOutcome] | None = None
    attaching: Attaching | None = None
    asking: tuple[str, str] | None = None  # (question id, item id)
    children: Mapping[str, str] = field(default_factory=dict)  # sub-agent session → item id
    approving: str | None = None  # the item whose approval is waited for
    #: the item whose call waits for its machine's hello to this server before it is judged
    #: (its approval, if pending, waited for meanwhile: ``approving``)
    hello: str | None = None
    previewing: Previewing | None = None  # read before asking
    #: the item whose web tool's request (``WebCall``) is under way on the server
    fetching: str | None = None
    #: a call whose PreToolUse hooks run (issue 39), and the calls whose hooks ran this turn
    hooking: Hooking | None = None
    hooked: frozenset[str] = frozenset()
    #: calls a PreToolUse hook said ``ask`` about (item id → its reason): they go to the
    #: approval gate even where the policy would run them
    hook_asks: Mapping[str, str] = field(default_factory=dict)
    #: a hook's ``additionalContext`` for a call (item id → text), added to its result
    hook_context: Mapping[str, str] = field(default_factory=dict)
    #: the prompts whose UserPromptSubmit hooks ran this turn (item ids)
    prompted: frozenset[str] = frozenset()
    #: how many times Stop hooks kept this turn going
    stop_blocks: int = 0
    #: hooks nothing waits for (Notification, PreCompact), by action id: their event, and
    #: the item their runs are shown on
    fired: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: the MCP servers as the worker listed them in the session's workdir (its attach)
    mcp_servers: list[wk.McpServerInfo] = field(default_factory=list)
    #: (the hello's capabilities, the attach's list, the two laid together)
    laid: tuple[wk.Capabilities, list[wk.McpServerInfo], wk.Capabilities] | None = None
    #: the tools of the last call and their encoding, kept while nothing they depend on
    #: changes: (key, capabilities, specs, encoded)
    tools: tuple[Any, wk.Capabilities | None, list[ToolSpec], bytes] | None = None

    @property
    def phase(self) -> str:
        """What the turn is doing, in a word (for logs, tests and the curious)."""
        core = self.core
        if core.done:
            return "done"
        if core.then is not None:
            return f"then:{core.then.value}"
        for name in ("context", "attaching", "building", "compaction", "answer", "running",
                     "storing", "previewing", "hello", "approving", "asking", "fetching",
                     "hooking"):
            if getattr(self, name) is not None:
                return name
        if self.children:
            return "children"
        return "starting" if self.iterations == 0 and self.call is None else "waiting"


def codey_turn(session_id: str, *, limits: Limits,
               roles: Mapping[str, RoleConfig] | None = None, resume: bool = False,
               compact_only: bool = False) -> CodeyTurn:
    """A new turn of ``session_id``: ``resume`` after a restart (pick up what the session's
    items say was under way); ``compact_only``: only compact the conversation."""
    return CodeyTurn(Core(session_id, approval_timeout_s=limits.approval_timeout_s,
                          ladder=limits.ladder, reviewer=limits.reviewer),
                     TurnConfig(limits, roles or {}, resume, compact_only))
