"""Messages between browsers and codey-server over ``WS /ws/client``.

* :data:`ClientToServer` — commands from a browser. They forbid unknown fields: a browser that
  sends a field we do not know gets an :class:`Error`, not a silently ignored request.
* :data:`ServerToClient` — frames to a browser: :class:`Events` (a batch of envelopes in seq
  order), :class:`Snapshot`, :class:`Resync`, :class:`Ack`, :class:`Error`, :class:`Shutdown`,
  and :class:`ProcessTails` (processes' live output, which is not in the log).

Order on a socket: the browser sends ``Subscribe{after_seq}`` first; the server answers either
``Snapshot`` (then live ``Events``) or catch-up ``Events`` (then live ``Events``). Commands may be
sent at any time after that; each gets an ``Ack`` or an ``Error`` carrying its ``request_id``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from codey_protocol._tags import snake
from codey_protocol.events import (
    ApprovalPolicy,
    Attachment,
    AttentionOnApproval,
    AttentionOnQuestion,
    Envelope,
    ModelPrice,
    ProviderEntry,
    ReasoningEffort,
    TaskStatus,
    TurnSettings,
    WorktreeRequest,
)
from codey_protocol.state import State
from codey_protocol.worker import SandboxMode


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
    #: propose a plan first; nothing changes before the user approves it
    plan_mode: bool = False
    attachments: list[Attachment] = msgspec.field(default_factory=list)
    #: run the session with this external ACP agent of the worker instead of Codey's loop
    agent: str | None = None
    #: the OS sandbox its commands run in (``full-access``: none, a choice shown as a warning)
    sandbox: SandboxMode = "workspace-write"
    #: whether its sandboxed commands may use the network
    network: bool = False
    #: work in a git worktree of its own, on a new branch (None: in the folder as it is)
    worktree: WorktreeRequest | None = None
    #: a goal to work towards (as ``/goal`` takes it: ``$ argv`` for a command that must exit
    #: 0, else a condition the model proves with ``goal_met``); "" for none
    goal: str = ""
    #: at most this many turns towards the goal (None: the server's ``goal_max_turns``)
    goal_max_turns: int | None = None


class SendPrompt(ClientToServerMessage, kw_only=True):
    session_id: str
    text: str
    attachments: list[Attachment] = msgspec.field(default_factory=list)
    #: the model and tools of the turn it starts (a slash command's front matter); ignored
    #: when it is queued into a running turn
    for_turn: TurnSettings | None = None


class DecideApproval(ClientToServerMessage, kw_only=True):
    session_id: str
    approval_id: str
    decision: Literal["approve", "approve_for_session", "reject"]
    message: str = ""


class SetApprovalPolicy(ClientToServerMessage, kw_only=True):
    session_id: str
    policy: ApprovalPolicy


class SetAttention(ClientToServerMessage, kw_only=True):
    """A session's own "when nobody answers" (the attention ladder; None: that step off)."""

    session_id: str
    nudge_after_s: float | None = None
    act_after_s: float | None = None
    on_approval: AttentionOnApproval = "reject"
    on_question: AttentionOnQuestion = "answer"


class SetSandbox(ClientToServerMessage, kw_only=True):
    """Change a session's sandbox mode and network toggle (from its next command on)."""

    session_id: str
    sandbox: SandboxMode
    network: bool = False


class SetSessionModel(ClientToServerMessage, kw_only=True):
    """Switch a session's provider, model and reasoning effort (from its next turn on)."""

    session_id: str
    provider: str
    model: str = ""  # empty: the provider's default model
    effort: ReasoningEffort | None = None


class SaveProvider(ClientToServerMessage, kw_only=True):
    """Add or change a provider of Settings → Models (its key goes to ``/api/auth/api-key``)."""

    provider: ProviderEntry


class RemoveProvider(ClientToServerMessage, kw_only=True):
    name: str


class Interrupt(ClientToServerMessage, kw_only=True):
    session_id: str


class StopProcess(ClientToServerMessage, kw_only=True):
    """Stop a process of the session (the Stop button of its processes panel)."""

    session_id: str
    process_id: str


class ForwardPort(ClientToServerMessage, kw_only=True):
    """Make ``port`` of a process that listens inside its sandbox's own network reachable on
    its machine's loopback (the Forward button of its processes panel)."""

    session_id: str
    process_id: str
    port: int


class SetGoal(ClientToServerMessage, kw_only=True):
    """``/goal <condition>``: work towards it, checked after each turn (``$ argv``: a command
    that must exit 0 in the sandbox; else the model proves it with ``goal_met``). An empty
    ``condition`` (``/goal clear``) drops the session's goal."""

    session_id: str
    condition: str
    max_turns: int | None = None


class CompactSession(ClientToServerMessage, kw_only=True):
    """Summarize the session's older conversation into one summary item."""

    session_id: str


class RewindConversation(ClientToServerMessage, kw_only=True):
    """``/rewind`` (conversation only): take the conversation back to just before the prompt
    ``turn`` (its item id). Its files are rewound through ``POST /api/sessions/{id}/rewind``."""

    session_id: str
    turn: str


class RetryTurn(ClientToServerMessage, kw_only=True):
    """Try the turn again after it failed (a model error) or was interrupted."""

    session_id: str


class AnswerQuestion(ClientToServerMessage, kw_only=True):
    session_id: str
    question_id: str
    answer: str


class ApprovePlan(ClientToServerMessage, kw_only=True):
    """Approve the proposed plan, optionally edited (``steps``), and start the work."""

    session_id: str
    steps: list[str] | None = None
    note: str = ""


class RenameSession(ClientToServerMessage, kw_only=True):
    session_id: str
    title: str


class RenameWorker(ClientToServerMessage, kw_only=True):
    """Name a machine (at most 80 characters); "" gives it back its hostname."""

    worker_id: str
    name: str


class ArchiveSession(ClientToServerMessage, kw_only=True):
    session_id: str
    archived: bool = True


class CloseSession(ClientToServerMessage, kw_only=True):
    """Stop the turn, cancel what waits for the user, detach from the worker; no more
    prompts."""

    session_id: str
    reason: str = ""


class DeleteSession(ClientToServerMessage, kw_only=True):
    """Remove the session from the state (its events stay in the log)."""

    session_id: str


class ForkSession(ClientToServerMessage, kw_only=True):
    """A new session whose conversation is this one's up to ``item_id`` (the last item when
    omitted), on the same worker and workdir; with ``worktree``, in a git worktree of its own
    on a new branch from ``worktree.base`` (empty: the session's worktree's branch while it
    exists, else its base; a session without a worktree: the repository's current branch).
    A session whose worktree was removed is always forked into a new one: its folder is
    gone."""

    session_id: str
    item_id: str | None = None
    title: str | None = None
    prompt: str = ""
    worktree: WorktreeRequest | None = None


class MoveSession(ClientToServerMessage, kw_only=True):
    """Go on with the same workdir path on another worker (for when a machine is gone)."""

    session_id: str
    worker_id: str


class SetMemory(ClientToServerMessage, kw_only=True):
    """Replace the project memory of ``workdir`` on ``worker_id``; with ``session_id``, the
    memory that session has (its repository's, with its folders' older notes: those are
    moved into it), and ``worker_id``/``workdir`` are not used."""

    worker_id: str
    workdir: str
    text: str
    session_id: str = ""


class CreateTask(ClientToServerMessage, kw_only=True):
    title: str
    description: str = ""
    depends_on: list[str] = msgspec.field(default_factory=list)


class UpdateTask(ClientToServerMessage, kw_only=True):
    task_id: str
    title: str
    description: str = ""
    depends_on: list[str] = msgspec.field(default_factory=list)


class MoveTask(ClientToServerMessage, kw_only=True):
    """Into column ``status``, before task ``before`` (None: at the end)."""

    task_id: str
    status: TaskStatus
    before: str | None = None


class DeleteTask(ClientToServerMessage, kw_only=True):
    task_id: str


class RunTask(ClientToServerMessage, kw_only=True):
    """Start a session on the task, its prompt built from the task's title and text."""

    task_id: str
    worker_id: str
    workdir: str
    policy: ApprovalPolicy = "suggest"
    #: in a git worktree of its own (the default: several attempts run side by side); a
    #: folder that is no git repository is worked in as it is
    worktree: bool = True
    base: str = ""  # the worktree's base (empty: the repository's current branch)


class SaveSchedule(ClientToServerMessage, kw_only=True):
    """Create (``schedule_id`` None) or change a schedule: ``cron`` or ``at``, not both."""

    schedule_id: str | None = None
    name: str
    cron: str | None = None
    at: float | None = None
    timezone: str = "UTC"
    worker_id: str
    workdir: str
    prompt: str
    policy: ApprovalPolicy = "suggest"
    target_session: str | None = None
    enabled: bool = True


class DeleteSchedule(ClientToServerMessage, kw_only=True):
    schedule_id: str


class RunSchedule(ClientToServerMessage, kw_only=True):
    """Run a schedule now, whatever its times (a run like the others)."""

    schedule_id: str


class DismissUpgradeNotice(ClientToServerMessage, kw_only=True):
    """The user read an upgrade's notice (``State.upgrades``): no browser shows it again."""

    upgrade_id: str


class SetBudget(ClientToServerMessage, kw_only=True):
    """Set (or, with both limits None, remove) a session's budget (``session_id``) or the
    day's, every session together (``session_id`` None). Money in millionths of a dollar."""

    session_id: str | None = None
    max_tokens: int | None = None
    max_micros: int | None = None


class RaiseBudget(ClientToServerMessage, kw_only=True):
    """"Raise by …" on a session stopped at a budget: the budget it stopped at (its own or
    the day's) is raised by ``by`` (tokens, or micros for ``usd``) over what was spent, and
    the sessions it stopped go on."""

    session_id: str
    by: int


class SetPrices(ClientToServerMessage, kw_only=True):
    """Settings → Usage: the user's whole price table (model name or prefix → price)."""

    prices: dict[str, ModelPrice]


class TrustHooks(ClientToServerMessage, kw_only=True):
    """Trust the project hook settings file ``path`` of the session in this exact content
    (``sha256``, as ``hooks_found`` showed it): its hooks run from now on. A file changed since
    has another sha256 and is refused (``conflict``): the user sees the new commands first."""

    session_id: str
    path: str
    sha256: str


ClientToServer = (
    Subscribe | CreateSession | SendPrompt | DecideApproval | SetApprovalPolicy | SetSandbox
    | SetSessionModel | SaveProvider | RemoveProvider | Interrupt | StopProcess | ForwardPort
    | CompactSession | AnswerQuestion | RenameSession | ArchiveSession | CloseSession
    | DeleteSession | ForkSession | MoveSession | SetMemory | ApprovePlan | RetryTurn
    | RenameWorker | TrustHooks
    | SaveSchedule | DeleteSchedule | RunSchedule
    | CreateTask | UpdateTask | MoveTask | DeleteTask | RunTask
    | DismissUpgradeNotice | SetAttention
    | SetGoal | SetBudget | RaiseBudget | SetPrices
    | RewindConversation
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


class ProcessTailText(msgspec.Struct, kw_only=True):
    """Output of a process, live (whoever reads it). ``reset``: ``text`` is its whole tail
    (the newest :data:`~codey_protocol.state.PROCESS_TAIL_KEPT` characters at most),
    replacing what the browser had; else it follows what the browser has."""

    session_id: str
    process_id: str
    #: its whole tail (``reset``), or what follows what the browser has
    text: str
    reset: bool = False


class ProcessTails(ServerToClientMessage, kw_only=True):
    """The live tails of processes' output, outside the event log: every tail the server
    keeps (all ``reset``) once the catch-up is sent, then what each process writes, as it
    comes. Not part of the state: a browser keeps them beside it."""

    tails: list[ProcessTailText] = msgspec.field(default_factory=list)


ServerToClient = Events | Snapshot | Resync | Ack | Error | Shutdown | ProcessTails
