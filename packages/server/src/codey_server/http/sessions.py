"""``/api/sessions``: list, create, read and steer sessions; download a session's log.

Commands go through ``Engine.execute``, exactly like the browser socket's, so both paths have
the same effect; a refused command (``CommandRejected``) is answered by
:mod:`codey_server.http.errors`. Each body is the fields of its ``ClientToServer`` command
without ``type``, ``request_id`` and the ids the path carries (a unit test keeps them in step).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, ClassVar, Literal

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody
from litestar.response import Stream

from codey_protocol import client as cl
from codey_protocol.events import (
    ApprovalPolicy,
    Attachment,
    Envelope,
    ReasoningEffort,
    RewindMode,
    SessionStatus,
    TurnSettings,
    WorktreeRequest,
)
from codey_protocol.state import SessionInfo
from codey_protocol.worker import SandboxMode
from codey_server.core import rewind
from codey_server.core.decide import ATTACHMENTS_MAX
from codey_server.core.engine import Engine
from codey_server.core.goals import MAX_TURNS_LIMIT
from codey_server.core.rules import CommandRejected
from codey_server.http.errors import errors
from codey_server.http.fields import (
    GOAL_COMMAND_OR_NONE,
    NOT_BLANK,
    GoalText,
    LadderSeconds,
    NonBlank,
)
from codey_server.http.resource import Resource

__all__ = ["ApprovalChoice", "Created", "GoalChoice", "NewSession", "PolicyChoice", "Prompt",
           "RewindRequest", "Rewound", "SandboxChoice", "Seq",
           "SessionSummary", "SessionsController"]

NDJSON = "application/x-ndjson"


#: the files of one message, uploaded first (``POST /api/blobs``)
Attachments = Annotated[list[Attachment], msgspec.Meta(max_length=ATTACHMENTS_MAX)]


class NewSession(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions``: a ``create_session`` command."""

    #: plan mode and worktrees are Codey's own: not with an ACP agent (``create_session``
    #: refuses them too)
    __schema_rules__: ClassVar[dict[str, Any]] = {"allOf": [
        {"anyOf": [{"properties": {"agent": {"type": "null"}}},
                   {"properties": {"plan_mode": {"const": False}}}]},
        {"anyOf": [{"properties": {"agent": {"type": "null"}}},
                   {"properties": {"worktree": {"type": "null"}}}]},
        # an external agent cannot call goal_met: its goal, if any, is a command
        {"anyOf": [{"properties": {"agent": {"type": "null"}}},
                   {"properties": {"goal": {"pattern": GOAL_COMMAND_OR_NONE}}}]},
    ]}

    worker_id: str
    workdir: NonBlank
    prompt: str = ""
    provider: str | None = None  # None: the server's default provider
    model: str | None = None  # None: the provider's default model
    policy: ApprovalPolicy = "suggest"
    title: str | None = None  # None: from the prompt
    plan_mode: bool = False  # the model proposes a plan and waits for its approval
    #: an external ACP agent of the worker runs the session (its ``acp_agents``)
    agent: str | None = None
    attachments: Attachments = msgspec.field(default_factory=list)
    #: the OS sandbox its commands run in; full-access: none (shown as a warning)
    sandbox: SandboxMode = "workspace-write"
    network: bool = False  # whether its sandboxed commands may use the network
    #: in a git worktree of its own, on a new branch (None: in the folder as it is)
    worktree: WorktreeRequest | None = None
    #: a goal to work towards, checked after each turn (``$ argv``: a command that must exit 0
    #: in the sandbox; else the model proves it with ``goal_met``); "": none
    goal: GoalText = ""
    #: at most this many turns towards the goal (None: the server's ``goal_max_turns``)
    goal_max_turns: Annotated[int, msgspec.Meta(ge=1, le=MAX_TURNS_LIMIT)] | None = None


class GoalChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/goal``: a ``set_goal`` command (``/goal``)."""

    #: ``$ argv`` (a command that must exit 0), a condition the model proves with
    #: ``goal_met``, or ``clear``
    condition: GoalText
    max_turns: Annotated[int, msgspec.Meta(ge=1, le=MAX_TURNS_LIMIT)] | None = None


class Prompt(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/prompt``: a ``send_prompt`` command."""

    #: some text or some files (``send_prompt`` refuses an empty prompt too)
    __schema_rules__: ClassVar[dict[str, Any]] = {"anyOf": [
        {"properties": {"text": {"pattern": NOT_BLANK}}},
        {"properties": {"attachments": {"minItems": 1}}, "required": ["attachments"]},
    ]}

    text: str
    attachments: Attachments = msgspec.field(default_factory=list)
    #: the model and tools of the turn it starts (what a slash command's front matter sets:
    #: ``/commands/run`` fills it in); ignored when it joins a running turn
    for_turn: TurnSettings | None = None


class ApprovalChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/approvals/{approval_id}``: a ``decide_approval`` command."""

    decision: Literal["approve", "approve_for_session", "reject"]
    message: str = ""


class PolicyChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/policy``: a ``set_approval_policy`` command."""

    policy: ApprovalPolicy


class AttentionChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/attention``: a ``set_attention`` command (None: that step
    of the ladder off)."""

    nudge_after_s: LadderSeconds | None = None
    act_after_s: LadderSeconds | None = None
    on_approval: Literal["reject", "park", "reviewer"] = "reject"
    on_question: Literal["answer", "park"] = "answer"


class SandboxChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/sandbox``: a ``set_sandbox`` command."""

    sandbox: SandboxMode
    network: bool = False


class ModelChoice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/model``: a ``set_session_model`` command."""

    provider: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    model: Annotated[str, msgspec.Meta(max_length=200)] = ""  # empty: the provider's default
    effort: ReasoningEffort | None = None


class SessionSummary(msgspec.Struct, kw_only=True):
    session_id: str
    title: str
    worker_id: str
    workdir: str
    provider: str
    model: str
    policy: ApprovalPolicy
    sandbox: SandboxMode
    network: bool
    status: SessionStatus
    created_at: float
    updated_at: float
    items: int  # how many items the session holds


class Created(msgspec.Struct, kw_only=True):
    session_id: str
    seq: int  # the last event the command appended


class Seq(msgspec.Struct, kw_only=True):
    seq: int  # the last event the command appended (or the current seq when it changed nothing)


class RewindRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/rewind``: back to just before the prompt ``turn``."""

    #: the prompt's item id
    turn: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    #: files and conversation, files only, or conversation only
    mode: RewindMode = "both"
    #: files left as they are; omitted (None): the ones changed by hand since the checkpoint,
    #: so that a client that names none never loses a hand edit
    keep: Annotated[list[str], msgspec.Meta(max_length=10_000)] | None = None


class Rewound(msgspec.Struct, kw_only=True):
    seq: int  # the conversation's rewind (or the current seq when only files were rewound)
    restored: list[str] = msgspec.field(default_factory=list)  # files put back
    kept: list[str] = msgspec.field(default_factory=list)  # hand-edited files left as they are


#: the refusal when the server has no file checkpoints (the ``checkpoints`` part)
NO_CHECKPOINTS = ("file checkpoints are unavailable on this server: rewind the conversation "
                  "only")


def _paths(result: Any, name: str) -> list[str]:
    """``restored`` or ``kept`` of the checkpoints' answer (a struct or a mapping)."""
    value = result.get(name) if isinstance(result, dict) else getattr(result, name, None)
    return [str(p) for p in value] if isinstance(value, list | tuple) else []


_LOG = ResponseSpec(Envelope, media_type=NDJSON, generate_examples=False,
                    description="The session's envelopes in seq order, one JSON `Envelope` per "
                                "line (NDJSON), as an attachment: each as it was stored, so "
                                "one stored by an older release has that release's shape "
                                "(no `version`, fields added since missing).")


class SessionsController(Resource):
    path = "/api/sessions"
    tags = ["sessions"]

    @get(sync_to_thread=False, responses=errors())
    def list_sessions(self, engine: NamedDependency[Engine]) -> list[SessionSummary]:
        """Every session, without its items."""
        return [
            SessionSummary(session_id=s.session_id, title=s.title, worker_id=s.worker_id,
                           workdir=s.workdir, provider=s.provider, model=s.model, policy=s.policy,
                           sandbox=s.sandbox, network=s.network, status=s.status,
                           created_at=s.created_at, updated_at=s.updated_at,
                           items=len(s.items))
            for s in engine.state.sessions.values()
        ]

    @post(status_code=201, responses=errors(400, 403, 404, 409, 413))
    async def create_session(self, data: JSONBody[NewSession],
                             engine: NamedDependency[Engine]) -> Created:
        """Create a session on a worker; a non-empty ``prompt`` starts its first turn."""
        envs = await engine.execute(cl.CreateSession(**msgspec.structs.asdict(data)))
        return Created(session_id=envs[0].session_id or "", seq=envs[-1].seq)

    @get("/{session_id:str}", sync_to_thread=False, responses=errors(404))
    def get_session(self, session_id: FromPath[str],
                    engine: NamedDependency[Engine]) -> SessionInfo:
        """One session with its items, plan, approvals and usage."""
        session = engine.state.sessions.get(session_id)
        if session is None:
            raise NotFoundException(f"no session {session_id!r}")
        return session

    @post("/{session_id:str}/prompt", status_code=202, responses=errors(400, 404, 409, 413))
    async def send_prompt(self, session_id: FromPath[str], data: JSONBody[Prompt],
                          engine: NamedDependency[Engine]) -> Seq:
        """Send a prompt: it starts a turn, or is queued for the running one."""
        envs = await engine.execute(cl.SendPrompt(
            session_id=session_id, **msgspec.structs.asdict(data)))
        return Seq(seq=envs[-1].seq)

    @post("/{session_id:str}/goal", status_code=200, responses=errors(400, 404, 409))
    async def set_goal(self, session_id: FromPath[str], data: JSONBody[GoalChoice],
                       engine: NamedDependency[Engine]) -> Seq:
        """Set the session's goal (``/goal``), checked after each turn; ``clear`` drops it."""
        envs = await engine.execute(cl.SetGoal(session_id=session_id, condition=data.condition,
                                               max_turns=data.max_turns))
        return Seq(seq=envs[-1].seq)

    @post("/{session_id:str}/approvals/{approval_id:str}", status_code=200,
          responses=errors(400, 404, 409))
    async def decide_approval(self, session_id: FromPath[str], approval_id: FromPath[str],
                              data: JSONBody[ApprovalChoice],
                                  engine: NamedDependency[Engine]) -> Seq:
        """Approve or reject a pending approval; the first decision wins."""
        envs = await engine.execute(cl.DecideApproval(
            session_id=session_id, approval_id=approval_id, decision=data.decision,
            message=data.message))
        return Seq(seq=envs[-1].seq)

    @post("/{session_id:str}/policy", status_code=200, responses=errors(400, 404))
    async def set_policy(self, session_id: FromPath[str], data: JSONBody[PolicyChoice],
                         engine: NamedDependency[Engine]) -> Seq:
        """Change the session's approval policy."""
        envs = await engine.execute(cl.SetApprovalPolicy(session_id=session_id,
                                                                  policy=data.policy))
        return Seq(seq=envs[-1].seq if envs else engine.state.seq)

    @post("/{session_id:str}/attention", status_code=200, responses=errors(400, 404))
    async def set_attention(self, session_id: FromPath[str], data: JSONBody[AttentionChoice],
                            engine: NamedDependency[Engine]) -> Seq:
        """Set the session's own "when nobody answers" (the attention ladder)."""
        envs = await engine.execute(cl.SetAttention(
            session_id=session_id, nudge_after_s=data.nudge_after_s,
            act_after_s=data.act_after_s, on_approval=data.on_approval,
            on_question=data.on_question))
        return Seq(seq=envs[-1].seq)

    @post("/{session_id:str}/sandbox", status_code=200, responses=errors(400, 404, 409))
    async def set_sandbox(self, session_id: FromPath[str], data: JSONBody[SandboxChoice],
                          engine: NamedDependency[Engine]) -> Seq:
        """Change the session's sandbox mode and network toggle (from its next command on)."""
        envs = await engine.execute(cl.SetSandbox(session_id=session_id, sandbox=data.sandbox,
                                                  network=data.network))
        return Seq(seq=envs[-1].seq if envs else engine.state.seq)

    @post("/{session_id:str}/model", status_code=200, responses=errors(404, 409))
    async def set_model(self, session_id: FromPath[str], data: JSONBody[ModelChoice],
                        engine: NamedDependency[Engine]) -> Seq:
        """Switch the session's provider, model and reasoning effort (from its next turn)."""
        envs = await engine.execute(cl.SetSessionModel(
            session_id=session_id, provider=data.provider, model=data.model,
            effort=data.effort))
        return Seq(seq=envs[-1].seq if envs else engine.state.seq)

    @post("/{session_id:str}/interrupt", status_code=200, responses=errors(404))
    async def interrupt(self, session_id: FromPath[str], engine: NamedDependency[Engine]) -> Seq:
        """Stop the running turn (its command is killed, open tool calls are cancelled)."""
        envs = await engine.execute(cl.Interrupt(session_id=session_id))
        return Seq(seq=envs[-1].seq if envs else engine.state.seq)

    @post("/{session_id:str}/retry", status_code=200, responses=errors(404, 409))
    async def retry(self, session_id: FromPath[str], engine: NamedDependency[Engine]) -> Seq:
        """Run the turn that failed or was interrupted again (a session whose provider is
        gone takes the server's default first)."""
        envs = await engine.execute(cl.RetryTurn(session_id=session_id))
        return Seq(seq=envs[-1].seq)

    @post("/{session_id:str}/compact", status_code=200, responses=errors(404, 409))
    async def compact(self, session_id: FromPath[str], engine: NamedDependency[Engine]) -> Seq:
        """Summarize the session's older conversation into one summary item now."""
        envs = await engine.execute(cl.CompactSession(session_id=session_id))
        return Seq(seq=envs[-1].seq if envs else engine.state.seq)

    @post("/{session_id:str}/rewind", status_code=200, responses=errors(400, 404, 409))
    async def rewind(self, session_id: FromPath[str], data: JSONBody[RewindRequest],
                     engine: NamedDependency[Engine], request: Request[Any, Any, Any]
                     ) -> Rewound:
        """Rewind to just before the prompt ``turn``: its files first (to the checkpoint, the
        hand-edited ``keep`` left as they are), then its conversation, only once the files
        step succeeded. 409 with the reason while a turn runs, for a turn a rewind already
        took back, or without file checkpoints (then rewind the conversation only)."""
        refused = rewind.refusal(engine.state, session_id, data.turn, data.mode)
        if refused is not None:
            raise refused
        restored: list[str] = []
        kept: list[str] = []
        if data.mode != "conversation":
            # the checkpoints' part, when this server has it (issue 38's checkpoints)
            services = getattr(request.app.state, "services", None)
            checkpoints = getattr(services, "checkpoints", None)
            if checkpoints is None:
                raise CommandRejected("conflict", NO_CHECKPOINTS)
            # a refusal (CheckpointError: turn_running, checkpoint_gone, worker_offline) is a
            # 409 with its reason, raised before the conversation is touched
            result = await checkpoints.restore(session_id, data.turn,
                                               None if data.keep is None else list(data.keep))
            restored, kept = _paths(result, "restored"), _paths(result, "kept")
        if data.mode == "files":
            return Rewound(seq=engine.state.seq, restored=restored, kept=kept)
        command = cl.RewindConversation(session_id=session_id, turn=data.turn)
        envs = await engine.submit(
            lambda state, c, ctx: rewind.rewind_conversation(state, c, ctx, data.mode),
            command)
        return Rewound(seq=envs[-1].seq, restored=restored, kept=kept)

    # no media_type here: Litestar would give it to the 404's JSON too; the doc says NDJSON
    @get("/{session_id:str}/log", responses={200: _LOG, **errors(404)})
    async def session_log(self, session_id: FromPath[str],
                          engine: NamedDependency[Engine]) -> Stream:
        """Download the session's events as NDJSON: each line an envelope exactly as it was
        stored (an event stored by an older release in its own shape, not upcast)."""
        if session_id not in engine.state.sessions:
            raise NotFoundException(f"no session {session_id!r}")
        stored = await engine.log.read_session_stored(session_id)

        async def lines() -> AsyncIterator[bytes]:
            for raw in stored:
                yield raw + b"\n"

        return Stream(lines(), media_type=NDJSON, headers={
            "content-disposition": f'attachment; filename="{session_id}.ndjson"'})
