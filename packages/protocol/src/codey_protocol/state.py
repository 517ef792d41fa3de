"""The state every fold produces — the server's ``apply`` and the web client's store alike.

It crosses the boundary as :class:`~codey_protocol.client.Snapshot` and as
``GET /api/state/bootstrap``; that is why it lives in the protocol package. So do the few
constants both folds use (caps, lists of codes): the browser's copy of them is generated into
``web/fold_constants.js`` (see :mod:`codey_protocol.foldjs`).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from codey_protocol.events import (
    AgentCommand,
    ApprovalPolicy,
    AuthState,
    BudgetScope,
    BudgetUnit,
    Item,
    ModelPrice,
    PlanStep,
    ProcessStopper,
    ProviderEntry,
    ReasoningEffort,
    RewindMode,
    ScheduleSpec,
    SessionStatus,
    TaskStatus,
    TriggerOutcome,
    TriggerSpec,
    Worktree,
)
from codey_protocol.worker import (
    AcpConfigOption,
    AcpMode,
    ActionMessage,
    Capabilities,
    Environment,
    HookFile,
    InstructionFile,
    SandboxMode,
    SkillInfo,
)

#: ``SessionInfo.changed_paths`` keeps the most recent paths only.
MAX_CHANGED_PATHS = 200
#: runs kept per schedule in ``ScheduleInfo.runs`` (the log keeps them all)
SCHEDULE_RUNS_KEPT = 20
#: deliveries kept per trigger in ``TriggerInfo.deliveries`` (the log keeps them all)
TRIGGER_DELIVERIES_KEPT = 30
#: notice codes that end a requested compaction without a summary
COMPACTION_ENDED: tuple[str, ...] = ("compaction_skipped", "compaction_failed")
#: characters of a process's output a session keeps (the newest; both folds count code
#: points)
PROCESS_OUTPUT_KEPT = 64 * 1024
#: characters of a process's live output tail the server keeps and sends to browsers (in
#: memory, not in the log; the worker keeps the newest PROCESS_TAIL_BYTES bytes of it)
PROCESS_TAIL_KEPT = 16 * 1024
PROCESS_TAIL_BYTES = 16 * 1024
#: ended processes a session keeps listed (the oldest ended ones leave first)
PROCESSES_ENDED_KEPT = 20
#: session statuses in which the board task it works on counts as in progress
WORKING_STATUSES: tuple[SessionStatus, ...] = (
    "running", "waiting_approval", "waiting_worker", "waiting_user")

#: the code of the notice both folds add to a session's items where its model changed (from
#: ``session_model_changed``, which carries no item of its own: old logs get their marks too)
MODEL_CHANGED = "model_changed"

#: Session statuses in which the agent itself is at work (a model call, a command, a machine
#: it waits for), not waiting for the user: the time a session "took" is the time spent in them.
BUSY_STATUSES: tuple[SessionStatus, ...] = ("running", "waiting_worker")


class WorkerInfo(msgspec.Struct, kw_only=True):
    worker_id: str
    hostname: str
    os: str
    python_version: str = ""
    worker_version: str = ""
    roots: list[str] = msgspec.field(default_factory=list)
    connected: bool = False
    revoked: bool = False
    paired_at: float = 0.0
    last_seen: float | None = None
    capabilities: Capabilities = msgspec.field(default_factory=Capabilities)
    #: the replica holding its socket (several servers on PostgreSQL), else ""
    replica: str = ""
    #: the name the user gave it ("": none, its hostname is shown)
    name: str = ""
    #: its key's short hash (``SHA256:xxxx-xxxx-xxxx``; "" when paired before it was kept)
    fingerprint: str = ""


class PairRequestInfo(msgspec.Struct, kw_only=True):
    request_id: str
    hostname: str
    os: str
    python_version: str
    worker_version: str
    roots: list[str]
    fingerprint: str
    requested_at: float
    expires_at: float


class Approval(msgspec.Struct, kw_only=True):
    approval_id: str
    item_id: str
    kind: str
    status: Literal["pending", "approved", "rejected", "expired", "cancelled"] = "pending"
    command: list[str] | None = None
    patch: str | None = None
    path: str | None = None
    reason: str = ""
    message: str = ""
    requested_at: float = 0.0
    decided_at: float | None = None
    #: the reviewer model's verdict (``approval_reviewed``), when it judged this one
    review: ApprovalReview | None = None


class ApprovalReview(msgspec.Struct, kw_only=True):
    """The reviewer's verdict on an approval (see ``ApprovalReviewed``)."""

    decision: str
    risk: int = 100
    reason: str = ""
    reviewer: str = ""
    approved: bool = False


class Attention(msgspec.Struct, kw_only=True):
    """The attention ladder of the session's latest wait for the user (``target_id``: an
    approval or a question id): when it nudges, when it acts and how, and how far it got."""

    target_id: str
    target: str
    nudge_at: float | None = None
    act_at: float | None = None
    then: str = "reject"
    nudged: bool = False
    acted: bool = False


class AttentionSetting(msgspec.Struct, kw_only=True):
    """A session's own "when nobody answers" (``session_attention_changed``)."""

    nudge_after_s: float | None = None
    act_after_s: float | None = None
    on_approval: str = "reject"
    on_question: str = "answer"


class PendingAction(msgspec.Struct, kw_only=True):
    action_id: str
    item_id: str
    worker_id: str
    action: ActionMessage
    #: the session's sandbox mode and network toggle when it was requested (None: in a
    #: snapshot from before they were kept): a process it starts after the user narrowed
    #: them is stopped as a running one would have been
    sandbox: SandboxMode | None = None
    #: the session's network toggle then
    network: bool | None = None


class PortForward(msgspec.Struct, kw_only=True):
    """A port of a process made reachable on its worker's loopback on the user's click:
    ``opening`` (asked), ``open`` (at ``address``), ``failed`` (``error``), ``closed`` (the
    process ended)."""

    port: int
    #: ``closed`` once the process ended
    status: Literal["opening", "open", "failed", "closed"] = "opening"
    #: ``127.0.0.1:<port>`` on the worker's machine, when ``open``
    address: str = ""
    #: when ``failed``
    error: str = ""


class SessionProcess(msgspec.Struct, kw_only=True):
    """A process of the session (``exec``): ``running``; ``stopping`` (a stop was asked for,
    ``stop_by`` who); ``ended`` (``exit_code`` / ``signal``, ``stopped_by``); ``gone`` (the
    worker no longer knows it). ``output`` is the newest :data:`PROCESS_OUTPUT_KEPT`
    characters read from it (``output_cut``: older ones were dropped). ``ports``: the TCP
    ports it listens on inside a network of its own (started sandboxed with the network
    off), which only ``forwards`` reach from outside."""

    process_id: str
    #: the ``exec`` call that started it
    item_id: str
    worker_id: str
    argv: list[str]
    cwd: str | None = None
    tty: bool = False
    status: Literal["running", "stopping", "ended", "gone"] = "running"
    #: what it runs with (see ``ProcessStarted``; None: not recorded)
    sandbox: SandboxMode | None = None
    network: bool | None = None
    #: who asked it to stop
    stop_by: ProcessStopper = ""
    exit_code: int | None = None
    signal: int | None = None
    stopped_by: ProcessStopper = ""
    output: str = ""
    output_cut: bool = False
    started_at: float = 0.0
    ended_at: float | None = None
    #: the TCP ports it listens on inside a network of its own (``process_listening``); ``[]`` once
    #: it ended
    ports: list[int] = msgspec.field(default_factory=list)
    #: the ports the user asked to reach
    forwards: list[PortForward] = msgspec.field(default_factory=list)


class TokenUsage(msgspec.Struct, kw_only=True):
    """Totals over the session's model calls, and the context the last call used."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    turns: int = 0  # model calls (named before compaction existed; kept for compatibility)
    #: input + output tokens of the last model call: how full the context is
    context_tokens: int = 0
    context_window: int | None = None
    #: what its priced calls cost, in millionths of a US dollar
    cost_micros: int = 0
    #: calls with no price (no price known for the model then, or recorded before prices)
    unpriced_calls: int = 0


class Budget(msgspec.Struct, kw_only=True):
    """Limits on what is spent; None: no limit in that unit."""

    max_tokens: int | None = None
    max_micros: int | None = None


class BudgetStop(msgspec.Struct, kw_only=True):
    """Why a session stopped at a budget (``budget_reached``), until it goes on."""

    scope: BudgetScope
    unit: BudgetUnit
    limit: int
    spent: int
    at: float = 0.0


class Spend(msgspec.Struct, kw_only=True):
    """What one provider's calls used in one UTC day."""

    tokens: int = 0
    cost_micros: int = 0
    calls: int = 0
    unpriced_calls: int = 0


class RateLimit(msgspec.Struct, kw_only=True):
    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests: str | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens: str | None = None
    updated_at: float = 0.0


class Question(msgspec.Struct, kw_only=True):
    question_id: str
    item_id: str
    question: str
    choices: list[str] = msgspec.field(default_factory=list)
    status: Literal["pending", "answered", "cancelled"] = "pending"
    answer: str = ""
    asked_at: float = 0.0
    answered_at: float | None = None


class ProjectMemory(msgspec.Struct, kw_only=True):
    """Notes that outlive a session, kept per worker and workdir (key ``worker_id:workdir``)."""

    worker_id: str
    workdir: str
    text: str = ""
    updated_at: float = 0.0


class TaskInfo(msgspec.Struct, kw_only=True):
    task_id: str
    title: str
    description: str = ""
    status: TaskStatus = "todo"
    order: float = 0.0
    depends_on: list[str] = msgspec.field(default_factory=list)
    #: the sessions that worked on it, oldest first; the last one is the one it follows
    session_ids: list[str] = msgspec.field(default_factory=list)
    created_at: float = 0.0
    updated_at: float = 0.0


class ScheduleRun(msgspec.Struct, kw_only=True):
    due_at: float
    fired_at: float
    #: how the firing went (``started``: a run began; what it did is in its session)
    outcome: Literal["started", "failed", "skipped"]
    session_id: str | None = None
    error: str = ""
    skipped: int = 0
    #: the run's prompt in ``session_id`` (``ScheduleFired.item_id``; "" when unknown)
    item_id: str = ""


class ScheduleInfo(msgspec.Struct, kw_only=True):
    spec: ScheduleSpec
    #: the latest due time dealt with: a due time at or before it never fires again
    last_due: float = 0.0
    #: the latest runs, newest last (at most :data:`SCHEDULE_RUNS_KEPT`)
    runs: list[ScheduleRun] = msgspec.field(default_factory=list)
    created_at: float = 0.0
    #: a one-time schedule whose ``at`` was dealt with (it ran, failed or was skipped): it
    #: never fires again unless saved with a later ``at``
    done: bool = False


class TriggerDelivery(msgspec.Struct, kw_only=True):
    """One delivery as ``trigger_delivered`` said it (``at``: when it was dealt with)."""

    delivery_id: str
    at: float
    outcome: TriggerOutcome
    event: str = ""
    reason: str = ""
    session_id: str | None = None
    task_id: str | None = None
    payload: str = ""
    replay_of: str = ""
    missing: list[str] = msgspec.field(default_factory=list)


class TriggerInfo(msgspec.Struct, kw_only=True):
    spec: TriggerSpec
    created_at: float = 0.0
    #: the latest deliveries, newest last (at most :data:`TRIGGER_DELIVERIES_KEPT`)
    deliveries: list[TriggerDelivery] = msgspec.field(default_factory=list)


class TerminalInfo(msgspec.Struct, kw_only=True):
    """A web terminal: a shell in tmux on a worker (its bytes are never in the log)."""

    terminal_id: str
    worker_id: str
    workdir: str
    session_id: str | None = None
    created_at: float = 0.0
    created_by: str = ""
    viewers: int = 0  # browsers attached now
    closed: bool = False
    closed_reason: str = ""
    updated_at: float = 0.0


def memory_key(worker_id: str, workdir: str) -> str:
    return f"{worker_id}:{workdir}"


class CheckpointMark(msgspec.Struct, kw_only=True):
    """A turn's checkpoint (``checkpoint_recorded``): the workdir before the turn's first
    change, kept by the session's worker; ``at``: when it was recorded."""

    turn: str
    commit: str
    files: int = 0
    skipped: list[str] = msgspec.field(default_factory=list)
    shadow: bool = False
    at: float = 0.0


class GoalInfo(msgspec.Struct, kw_only=True):
    """A session's goal and how its checks went (``goal_set`` … ``goal_given_up``)."""

    goal_id: str
    condition: str
    #: the check's argv (None: the model's ``goal_met``, judged by a model)
    command: list[str] | None = None
    max_turns: int = 10
    #: active (checked after each turn), met, given_up
    status: Literal["active", "met", "given_up"] = "active"
    #: checks done so far
    attempts: int = 0
    #: the last check: met or not, what it saw (trimmed), its exit code
    last_met: bool | None = None
    last_output: str = ""
    last_exit_code: int | None = None
    #: the session's last item when the last check began ("": none yet)
    checked_item: str = ""
    #: why it was met or given up
    reason: str = ""
    set_at: float = 0.0
    updated_at: float = 0.0


class SessionContext(msgspec.Struct, kw_only=True):
    """What applies to the session's workdir (see ``session_context_updated``)."""

    instructions: list[InstructionFile] = msgspec.field(default_factory=list)
    skills: list[SkillInfo] = msgspec.field(default_factory=list)
    environment: Environment = msgspec.field(default_factory=Environment)
    warnings: list[str] = msgspec.field(default_factory=list)
    loaded_at: float = 0.0


class RewoundBranch(msgspec.Struct, kw_only=True):
    """Turns a rewind took back (``conversation_rewound``): the items from the prompt ``turn``
    on, as they were, kept to be shown folded where they stood (after the live item ``after``;
    "": at the start) and never sent to the model."""

    turn: str
    after: str = ""
    at: float = 0.0
    mode: RewindMode = "conversation"
    items: list[Item] = msgspec.field(default_factory=list)
#: the hook runs a session keeps (the oldest go first)
HOOK_RUNS_KEPT = 200


class HookRunInfo(msgspec.Struct, kw_only=True):
    """One hook run as a session shows it (see ``hook_ran``)."""

    item_id: str = ""
    event: str
    path: str
    command_line: str
    exit_code: int | None = None
    duration_ms: int = 0
    output: str = ""
    timed_out: bool = False
    decision: str = ""
    reason: str = ""
    problem: str = ""
    at: float = 0.0


class SessionInfo(msgspec.Struct, kw_only=True):
    session_id: str
    title: str
    worker_id: str
    workdir: str
    provider: str
    model: str
    #: the reasoning effort its calls ask for (None: the model's default)
    effort: ReasoningEffort | None = None
    #: its git worktree, when it has one of its own
    worktree: Worktree | None = None
    policy: ApprovalPolicy = "suggest"
    status: SessionStatus = "idle"
    status_reason: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    items: list[Item] = msgspec.field(default_factory=list)
    plan: list[PlanStep] = msgspec.field(default_factory=list)
    plan_explanation: str = ""
    approvals: dict[str, Approval] = msgspec.field(default_factory=dict)
    approved_prefixes: list[list[str]] = msgspec.field(default_factory=list)
    #: commands the user let run outside the sandbox "for this session" (a later escalation
    #: whose command starts with one goes ahead)
    escalated_prefixes: list[list[str]] = msgspec.field(default_factory=list)
    pending_actions: dict[str, PendingAction] = msgspec.field(default_factory=dict)
    changed_paths: list[str] = msgspec.field(default_factory=list)
    usage: TokenUsage = msgspec.field(default_factory=TokenUsage)
    compaction_requested: bool = False
    context: SessionContext | None = None
    questions: dict[str, Question] = msgspec.field(default_factory=dict)
    parent_id: str | None = None
    parent_item: str | None = None
    role: str | None = None
    read_only: bool = False
    turn_cap: int | None = None
    plan_mode: bool = False
    #: none; proposed (plan mode: waits for the user's approval); approved
    plan_status: Literal["none", "proposed", "approved"] = "none"
    archived: bool = False
    forked_from: str | None = None
    #: the external ACP agent that runs this session (None: Codey's own loop)
    agent: str | None = None
    #: the board task this session works on (its status follows this session)
    task_id: str | None = None
    #: the OS sandbox its commands run in, and whether they may use the network
    sandbox: SandboxMode = "workspace-write"
    network: bool = False
    #: the processes the model started (``exec``), running and recently ended, oldest first
    #: (a list, so both folds drop the same oldest ended one)
    processes: list[SessionProcess] = msgspec.field(default_factory=list)
    #: seconds spent in BUSY_STATUSES over all its turns, the stretch under way not counted
    #: (what a card says the session "took": its own turns, not its last activity)
    busy_seconds: float = 0.0
    #: when the stretch in BUSY_STATUSES under way began (None: not busy now)
    busy_since: float | None = None
    #: the goal it works towards, checked after each turn (None: none set)
    goal: GoalInfo | None = None
    #: its own budget (None: none; the day's applies anyway)
    budget: Budget | None = None
    #: set while it is stopped at a budget (cleared when a turn goes on)
    budget_stop: BudgetStop | None = None
    #: the ladder of its latest wait for the user (None: none yet)
    attention: Attention | None = None
    #: its own "when nobody answers" (None: the server's default)
    attention_setting: AttentionSetting | None = None
    #: parked on this approval or question (its answer resumes the turn); None: not parked
    parked_on: str | None = None
    #: the reviewer's denials in a row (an approval that is granted ends the run)
    reviewer_denials: int = 0
    #: its turns' checkpoints, oldest first (one per turn that changed files)
    checkpoints: list[CheckpointMark] = msgspec.field(default_factory=list)
    #: the branches its rewinds took back, oldest first (``items`` is the live branch only)
    rewound: list[RewoundBranch] = msgspec.field(default_factory=list)
    #: an ACP agent's own slash commands, as it last listed them
    agent_commands: list[AgentCommand] = msgspec.field(default_factory=list)
    #: the hook settings files found for its workdir (``hooks_found``)
    hook_files: list[HookFile] = msgspec.field(default_factory=list)
    #: the sha256 of each project hook file the user trusted for it (``hooks_trusted``)
    trusted_hooks: list[str] = msgspec.field(default_factory=list)
    #: the latest hook runs (``hook_ran``), oldest first, at most HOOK_RUNS_KEPT
    hook_runs: list[HookRunInfo] = msgspec.field(default_factory=list)
    #: an ACP agent's session modes (``agent_mode_updated``), and the one it is in
    agent_modes: list[AcpMode] = msgspec.field(default_factory=list)
    agent_mode: str = ""
    #: an ACP agent's session config options and their values (``agent_config_updated``)
    agent_config: list[AcpConfigOption] = msgspec.field(default_factory=list)


class AuthInfo(msgspec.Struct, kw_only=True):
    provider: str
    state: AuthState = "logged_out"
    method: str = "none"
    account: str | None = None
    expires_at: float | None = None
    error: str | None = None
    verification_uri: str | None = None
    user_code: str | None = None


class TelegramChat(msgspec.Struct, kw_only=True):
    """A chat on the Telegram channel's allow list (key: the chat id as a string)."""

    chat_id: int
    title: str = ""
    paired_at: float = 0.0
    session_id: str | None = None  # where plain text goes
    #: what the bot already sent there: key (see ``telegram_message_sent``) → message id
    sent: dict[str, int] = msgspec.field(default_factory=dict)


class PushDevice(msgspec.Struct, kw_only=True):
    """A browser that receives Web Push notifications (key: its device id); its subscription
    is not here (see ``push_device_added``)."""

    device_id: str
    name: str = ""
    endpoint_host: str = ""
    #: what is pushed to it: notice kinds (approval, question, failed, finished, budget)
    kinds: list[str] = msgspec.field(default_factory=list)
    added_at: float = 0.0


class UpgradeNotice(msgspec.Struct, kw_only=True):
    """What an upgrade of the data changed for the user (``data_upgraded``), shown until
    dismissed."""

    upgrade_id: str
    from_format: int
    to_format: int
    version: str
    changes: list[str] = msgspec.field(default_factory=list)
    backup: str = ""
    upgraded_at: float = 0.0
    dismissed: bool = False


class State(msgspec.Struct, kw_only=True):
    """Everything a browser can see. ``seq`` is the last event folded in (0: none)."""

    seq: int = 0
    workers: dict[str, WorkerInfo] = msgspec.field(default_factory=dict)
    pair_requests: dict[str, PairRequestInfo] = msgspec.field(default_factory=dict)
    sessions: dict[str, SessionInfo] = msgspec.field(default_factory=dict)
    auth: dict[str, AuthInfo] = msgspec.field(default_factory=dict)
    #: model providers defined in Settings → Models (those of config.json are not here)
    providers: dict[str, ProviderEntry] = msgspec.field(default_factory=dict)
    rate_limits: dict[str, RateLimit] = msgspec.field(default_factory=dict)
    #: key ``worker_id:workdir``
    memories: dict[str, ProjectMemory] = msgspec.field(default_factory=dict)
    terminals: dict[str, TerminalInfo] = msgspec.field(default_factory=dict)
    schedules: dict[str, ScheduleInfo] = msgspec.field(default_factory=dict)
    triggers: dict[str, TriggerInfo] = msgspec.field(default_factory=dict)
    tasks: dict[str, TaskInfo] = msgspec.field(default_factory=dict)
    #: key: the chat id as a string; each ``{"chat_id", "title", "paired_at", "session_id", "sent":
    #: {key: message_id}}``
    telegram_chats: dict[str, TelegramChat] = msgspec.field(default_factory=dict)
    #: the next Telegram update id to ask for (every one before it was handled), of the bot
    #: ``telegram_bot_id``
    telegram_offset: int = 0
    #: the bot whose update ids ``telegram_offset`` counts
    telegram_bot_id: int = 0
    #: the upgrades of the data, oldest first, and whether the user dismissed their notice
    upgrades: list[UpgradeNotice] = msgspec.field(default_factory=list)
    #: the budget of every session together per UTC day
    day_budget: Budget = msgspec.field(default_factory=Budget)
    #: UTC day (``YYYY-MM-DD``) → provider → what was spent
    spend: dict[str, dict[str, Spend]] = msgspec.field(default_factory=dict)
    #: the user's prices by model name or prefix (Settings → Usage), over the defaults
    prices: dict[str, ModelPrice] = msgspec.field(default_factory=dict)
    #: the browsers Web Push reaches, by device id
    push_devices: dict[str, PushDevice] = msgspec.field(default_factory=dict)
