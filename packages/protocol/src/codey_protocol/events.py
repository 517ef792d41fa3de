"""Events: every state change, stored in the log and sent to browsers as-is.

An :class:`Envelope` wraps each event with its global ``seq``, ``ts`` and ``session_id``
(``None`` for global events such as a worker connecting). Events are tagged by ``type``.

Session items (what a session view shows, and what the model's conversation is rebuilt from)
are a second tagged union, :data:`Item`, tagged by ``kind``.

Evolution: new fields get defaults; a field's type never changes; a tag is never reused.
Each event type has a version, stored in its envelope; an event stored in an older shape is
read through that type's upcasters (:mod:`codey_protocol.upcasting`), which say what its
missing fields meant then, so no default is presented as something recorded. A change of an
event's shape raises its type's version and adds the upcaster from the one before.
Secrets (API keys, tokens, credentials) never appear in an event.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from codey_protocol._tags import snake
from codey_protocol.worker import (
    AcpConfigOption,
    AcpMode,
    ActionMessage,
    Capabilities,
    Environment,
    FileChange,
    HookFile,
    InstructionFile,
    RecordedSandbox,
    SandboxMode,
    SkillInfo,
)

SessionStatus = Literal[
    "idle", "running", "waiting_approval", "waiting_worker", "waiting_user", "interrupted",
    "error", "closed",
]
#: ``reviewer``: what would ask the user under ``suggest`` goes to the reviewer model first
#: (docs/attention.md); its verdict approves below the risk threshold, else the user is asked
ApprovalPolicy = Literal["suggest", "auto-edit", "full-auto", "reviewer"]
#: what the attention ladder does to an approval nobody answered by T2: reject it and tell
#: the model, park the session, or hand it to the reviewer model (which, unless it approves,
#: rejects and tells)
AttentionOnApproval = Literal["reject", "park", "reviewer"]
#: what it does to a question nobody answered by T2: answer "no answer; use your best
#: judgement", or park the session
AttentionOnQuestion = Literal["answer", "park"]
#: what a ladder's T2 did (``answer``: a question answered for the user)
AttentionThen = Literal["reject", "park", "reviewer", "answer"]
#: the wire API a model provider speaks
ProviderKind = Literal["responses", "chat", "ollama", "anthropic"]
#: how a provider's calls are authorised: nothing, a pasted key, or an OAuth login
ProviderAuth = Literal["none", "api_key", "oauth"]
#: how hard a reasoning model thinks (None: the model's own default)
ReasoningEffort = Literal["minimal", "low", "medium", "high"]
ApprovalDecision = Literal["approved", "rejected", "expired", "cancelled"]
ToolStatus = Literal[
    "pending", "waiting_approval", "waiting_user", "running", "done", "failed", "rejected",
    "cancelled",
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


#: attachments of these types go to the model as images; others are written into the workdir
IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class Attachment(msgspec.Struct, kw_only=True):
    """A file sent with a prompt, stored once on the server by content hash (``/api/blobs``).
    Images go to the model as images; other files are written into the workdir first."""

    hash: str  # sha256 of the content, hex
    name: str
    mime: str
    size: int


class TurnSettings(msgspec.Struct, kw_only=True):
    """What a slash command's front matter set for the one turn its prompt starts: its
    ``model`` (as a configured provider's model) and its ``allowed-tools`` (as Codey's tool
    names). The session's own model and tools are untouched."""

    slash: str = ""  # the prompt file's command, without the slash
    provider: str = ""  # "": the session's provider and model
    model: str = ""
    #: the tools offered to the model in that turn; None: all the session's
    tools: list[str] | None = None


class UserMessage(ItemBase, kw_only=True):
    text: str
    queued: bool = False  # sent during a turn; injected before the next model call
    attachments: list[Attachment] = msgspec.field(default_factory=list)
    #: the non-image attachments are in the workdir (``.codey/attachments/``)
    attachments_written: bool = False
    #: who sent it, when not a browser (as ``SessionCreated.origin``); ``unknown``: sent
    #: before origins were recorded; ``hook``: a hook's words for the model (issue 39)
    origin: str = ""
    #: why a UserPromptSubmit hook kept it from the model ("": it was not): never sent to it
    blocked: str = ""
    #: the model and tools of the turn it starts, when a slash command set them
    for_turn: TurnSettings | None = None


class AssistantMessage(ItemBase, kw_only=True):
    text: str = ""
    streaming: bool = False
    refusal: bool = False  # the model declined; ``text`` is its refusal
    #: the stream was cut before the answer completed: shown, but never sent back to the model
    partial: bool = False


class Reasoning(ItemBase, kw_only=True):
    """The model's reasoning: ``text`` is its summary (or raw reasoning text, where a provider
    streams that). ``encrypted_content`` is the provider's opaque reasoning, sent back on the
    next calls so a stateless (``store: false``) reasoning model keeps its chain of thought."""

    #: the summary (or raw reasoning text)
    text: str = ""
    streaming: bool = False
    partial: bool = False
    reasoning_id: str | None = None  # the provider's id of the reasoning item
    #: sent back on later calls (Responses API, ``store: false``)
    encrypted_content: str | None = None


class ToolCall(ItemBase, kw_only=True):
    """One tool call of the model and everything that happened to it.

    ``result`` is exactly the text the model was given back; ``None`` until there is one.
    """

    call_id: str
    name: str  # the tool's: ``shell``, ``read_file``, …, ``mcp__<server>__<tool>``
    arguments: str  # the JSON text the model produced
    #: ``waiting_user`` while an ``ask_user`` question waits
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
    #: an image the call gave the model to look at (``view_image``), kept in the server's
    #: blob store: shown in the transcript and sent with the call's result
    image: Attachment | None = None


class ErrorItem(ItemBase, kw_only=True):
    """A turn that ended in an error, in words. Codes: ``model`` (the model's provider failed, or
    none is set up), ``acp`` (an ACP agent's), ``internal`` (a bug), ``worker_lost`` (a call was
    lost with its worker and the session waits for its user: not under full-auto, where a notice
    of that code says it went on)."""

    message: str
    code: str = "error"


class PlanItem(ItemBase, kw_only=True):
    steps: list[PlanStep]
    explanation: str = ""


class Notice(ItemBase, kw_only=True):
    """Something the user should know that is not an error, e.g. an empty or cut answer, a
    switch to a fallback model. ``code``: empty_answer, incomplete, fallback, compacted, …"""

    code: str
    text: str


class GitOp(ItemBase, kw_only=True):
    """One of the worker's own git operations on the session's worktree, done on the user's
    word (never a model's command): its creation (with the setup script's ``output``), a
    commit, a merge, a push, a removal. Not part of the model's conversation."""

    op: Literal["create", "commit", "merge", "update", "push", "remove"]
    title: str
    status: ToolStatus = "running"
    output: str = ""  # the setup script's output, as it ran
    exit_code: int | None = None  # the setup script's
    result: str | None = None  # what came of it, in words (a commit, a PR's URL, conflicts)
    error: str | None = None
    action_id: str | None = None


class Summary(ItemBase, kw_only=True):
    """Compaction: ``text`` stands for every item up to and including ``replaces_until`` (an
    item id). The model's conversation starts with the newest summary, then the items after
    that id. The items it replaces stay in the session and the log."""

    text: str
    replaces_until: str
    items_replaced: int = 0
    tokens_before: int = 0  # the context in use when compaction started
    reason: Literal["threshold", "context_exceeded", "manual"] = "threshold"


Item = (
    UserMessage | AssistantMessage | Reasoning | ToolCall | ErrorItem | PlanItem | Notice
    | Summary | GitOp
)


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
    #: the key's short hash the user compared when pairing (``SHA256:xxxx-xxxx-xxxx``), which
    #: tells two machines of the same name apart; "" in events from before it was kept
    fingerprint: str = ""


class WorkerRenamed(EventBase, kw_only=True):
    """The user named a machine; "" gives it back its hostname as its name."""

    worker_id: str
    #: ``""``: the machine goes by its hostname
    name: str


class WorkerRevoked(EventBase, kw_only=True):
    worker_id: str


class WorkerConnected(EventBase, kw_only=True):
    worker_id: str
    hostname: str
    os: str
    worker_version: str
    capabilities: Capabilities = msgspec.field(default_factory=Capabilities)
    #: the server (replica) holding the socket; "" for one server alone
    replica: str = ""


class WorkerDisconnected(EventBase, kw_only=True):
    worker_id: str
    reason: str = ""
    #: the replica whose socket ended; a disconnect from another replica than the one now
    #: holding the worker (it came back there first) changes nothing
    replica: str = ""


# model providers defined in the browser ----------------------------------------------------


class ProviderEntry(msgspec.Struct, kw_only=True):
    """A model provider defined in Settings → Models. Never a credential: a pasted key stays
    in the server's ``auth.json``, as every provider's does."""

    name: str
    kind: ProviderKind = "chat"
    base_url: str
    models: list[str] = msgspec.field(default_factory=list)
    default_model: str | None = None
    auth: ProviderAuth = "api_key"
    #: OAuth (``auth == "oauth"``): the issuer for OIDC discovery and the public client id
    issuer: str | None = None
    client_id: str | None = None
    updated_at: float = 0.0


class ProviderSaved(EventBase, kw_only=True):
    """A provider was added or changed in Settings → Models; it is used at once."""

    provider: ProviderEntry


class ProviderRemoved(EventBase, kw_only=True):
    name: str


# sessions ---------------------------------------------------------------------------------


class WorktreeRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Start a session in a git worktree of its own, on a new branch from ``base`` (empty:
    the repository's current branch); ``setup``: run the project's setup script there."""

    base: str = ""
    setup: bool = True


WorktreeStatus = Literal["creating", "ready", "in_place", "failed", "removed"]


class Worktree(msgspec.Struct, kw_only=True):
    """A session's git worktree. ``in_place``: the folder was no git repository, so the
    session works in it as it is."""

    repo: str  # the folder the user picked (in the repository)
    branch: str
    base: str = ""
    setup: bool = True
    status: WorktreeStatus = "creating"
    path: str = ""  # the worktree (the session's workdir once ready)
    base_commit: str = ""
    repo_root: str = ""
    #: its whole change against the base, as last counted (after each turn)
    files: int = 0
    added: int = 0
    deleted: int = 0
    merged: bool = False
    pr_url: str = ""
    error: str = ""
    #: its branch is known to be gone (deleted with the worktree, or found missing when it
    #: was to be made again): the worktree cannot be made again from it
    branch_deleted: bool = False


class WorktreeUpdated(EventBase, kw_only=True):
    """The session's worktree changed: each field that is not None replaces (``path``, once
    ready, is the session's workdir too)."""

    status: WorktreeStatus | None = None
    path: str | None = None
    base: str | None = None
    base_commit: str | None = None
    repo_root: str | None = None
    files: int | None = None
    added: int | None = None
    deleted: int | None = None
    merged: bool | None = None
    pr_url: str | None = None
    error: str | None = None
    branch_deleted: bool | None = None


class SessionCreated(EventBase, kw_only=True):
    title: str
    worker_id: str
    workdir: str
    provider: str
    model: str
    policy: ApprovalPolicy = "suggest"
    #: plan mode: the model explores read-only and proposes a plan, which the user approves
    #: (``plan_approved``) before anything is changed
    plan_mode: bool = False
    #: a sub-agent: the session that delegated to it, and the ``delegate`` call it answers
    parent_id: str | None = None
    parent_item: str | None = None
    role: str | None = None
    #: only reading tools (read_file, list_dir, known-safe commands)
    read_only: bool = False
    #: model calls per turn before it stops (None: the server's turn_iteration_cap)
    turn_cap: int | None = None
    #: an external ACP agent on the worker runs the session instead of Codey's loop
    agent: str | None = None
    #: who started it, when not a browser: ``mcp:<token id>`` (an MCP client's token),
    #: ``telegram:<chat id>``, ``schedule:<id>``; ``unknown``: started before origins were
    #: recorded
    origin: str = ""
    #: the OS sandbox its commands run in on the worker: read-only, workspace-write (writes
    #: only in the workdir and a private temp dir; .git and .codey read-only) or full-access
    #: (no sandbox: the user chose it). ``none``: created before Codey had a sandbox (its
    #: commands ran without one); such a session runs in workspace-write from the release that
    #: upcast it on (the fold says so, and the upgrade's notice tells the user)
    sandbox: RecordedSandbox = "workspace-write"
    #: whether its sandboxed commands may use the network (``true`` in a session created
    #: before the sandbox: its commands had the machine's network)
    network: bool = False
    #: a worktree of its own (``status: creating``): its first turn waits for it
    worktree: Worktree | None = None


class SessionStatusChanged(EventBase, kw_only=True):
    status: SessionStatus
    reason: str = ""


class SessionTitleChanged(EventBase, kw_only=True):
    title: str


class SessionPolicyChanged(EventBase, kw_only=True):
    policy: ApprovalPolicy


class SessionSandboxChanged(EventBase, kw_only=True):
    """The user changed the session's sandbox mode or its network toggle."""

    sandbox: SandboxMode
    network: bool


class SessionModelChanged(EventBase, kw_only=True):
    """The session's provider, model or reasoning effort changed (from its next turn on):
    the user picked another in the session header, or the session's provider was gone and a
    retry, follow-up or fork took the server's default (``reason`` says so)."""

    provider: str
    model: str
    effort: ReasoningEffort | None = None
    reason: str = ""


class SessionItemAppended(EventBase, kw_only=True):
    item: Item


class SessionItemUpdated(EventBase, kw_only=True):
    """Change one item. ``*_delta`` fields append; other fields, when not ``None``, replace.

    These fields ARE the list of what can change (``codey_protocol.updates`` derives both
    folds' lists from them): a field added here and on the item is updatable, no other edit.
    """

    item_id: str
    text_delta: str = ""
    output_delta: str = ""
    status: ToolStatus | None = None
    streaming: bool | None = None
    queued: bool | None = None
    attachments_written: bool | None = None
    exit_code: int | None = None
    truncated: bool | None = None
    diff: str | None = None
    files: list[FileChange] | None = None
    error: str | None = None
    result: str | None = None
    action_id: str | None = None
    approval_id: str | None = None
    output: str | None = None  # replaces the streamed output (e.g. after truncation)
    partial: bool | None = None
    reasoning_id: str | None = None
    encrypted_content: str | None = None
    image: Attachment | None = None
    #: a tool call's name, JSON arguments and argv, told late (an ACP agent's title and raw
    #: input arriving only in a ``tool_call_update``)
    name: str | None = None
    arguments: str | None = None
    command: list[str] | None = None
    #: a prompt a UserPromptSubmit hook kept from the model: why (issue 39)
    blocked: str | None = None


class PlanUpdated(EventBase, kw_only=True):
    steps: list[PlanStep]
    explanation: str = ""


class PlanApproved(EventBase, kw_only=True):
    """The user approved the proposed plan (as it stands after ``plan_updated``): plan mode
    ends and the work starts."""

    note: str = ""


class ApprovalRequested(EventBase, kw_only=True):
    approval_id: str
    item_id: str
    #: acp: an ACP agent asks; escalate: a command run outside the session's sandbox;
    #: delegate: a sub-agent given another folder or machine than the session's; web: the
    #: server fetches a page or searches (``command``: a mark and the host, ``path``: the URL)
    kind: Literal["command", "patch", "write", "mcp", "acp", "escalate", "delegate", "web"]
    command: list[str] | None = None
    patch: str | None = None
    path: str | None = None
    reason: str = ""


class ApprovalResolved(EventBase, kw_only=True):
    approval_id: str
    decision: ApprovalDecision
    message: str = ""
    for_session: bool = False  # remember this command prefix for the rest of the session


class SessionAttentionChanged(EventBase, kw_only=True):
    """The session's own "when nobody answers" (the attention ladder), over the server's
    default: nudge after ``nudge_after_s`` (T1), act after ``act_after_s`` (T2); None: that
    step is off."""

    nudge_after_s: float | None = None
    act_after_s: float | None = None
    on_approval: AttentionOnApproval = "reject"
    on_question: AttentionOnQuestion = "answer"


class AttentionScheduled(EventBase, kw_only=True):
    """A wait for the user (an approval or a question, ``target_id``) started its ladder: at
    ``nudge_at`` every device is told again, at ``act_at`` ``then`` is done (wall-clock
    times, so a restart keeps them; None: that step is off)."""

    target_id: str
    target: Literal["approval", "question"]
    nudge_at: float | None = None
    act_at: float | None = None
    then: AttentionThen = "reject"


class AttentionNudged(EventBase, kw_only=True):
    """The user is wanted (a push to every device): ``t1`` the wait reached T1; ``parked``
    T2 parked the session; ``denials`` the reviewer denied 3 actions in a row and the
    session parked."""

    target_id: str
    target: Literal["approval", "question"]
    step: Literal["t1", "parked", "denials"]
    text: str = ""


class AttentionActed(EventBase, kw_only=True):
    """T2 passed with the wait still open: ``then`` is done (its own events follow)."""

    target_id: str
    target: Literal["approval", "question"]
    then: AttentionThen
    #: how long the wait had lasted
    after_s: float = 0.0


class ApprovalReviewed(EventBase, kw_only=True):
    """The reviewer model's verdict on a pending approval. ``verdict`` ``error``: it failed
    (timeout, error, unparseable answer) and the user is asked. ``approved``: the verdict
    approves it (an ``approve`` below the session's risk threshold); else the user decides."""

    approval_id: str
    verdict: Literal["approve", "deny", "error"]
    risk: int = 100
    reason: str = ""
    #: ``provider/model`` that judged
    reviewer: str = ""
    approved: bool = False
    #: seconds the reviewer took
    latency_s: float = 0.0


class AgentCommand(msgspec.Struct, kw_only=True):
    """One of an ACP agent's own slash commands (its ``available_commands_update``)."""

    name: str
    description: str = ""
    hint: str = ""  # what to type after it; "" when it takes nothing


class AgentCommandsUpdated(EventBase, kw_only=True):
    """An ACP agent said which slash commands it offers now (the whole list)."""

    commands: list[AgentCommand] = msgspec.field(default_factory=list)
class HooksFound(EventBase, kw_only=True):
    """The hook settings files (Claude Code's format) the worker found for the session's
    workdir when it read its context: the project's, whose hooks run only once trusted
    (``hooks_trusted``), and the worker's own. Appended when they change."""

    files: list[HookFile] = msgspec.field(default_factory=list)


class HooksTrusted(EventBase, kw_only=True):
    """The user trusted a project's hook settings file ``path`` in this exact content (its
    ``sha256``) for the session: its hooks run from now on. The file changed has another
    sha256, and is asked about again."""

    path: str
    sha256: str


class HookRan(EventBase, kw_only=True):
    """A hook ran on the worker (``event``: its moment, Claude Code's name), for the tool
    call ``item_id`` ("" for a moment of the turn): its command, exit code, time, output
    (capped), and what it decided (``deny``, ``block``, ``allow``, ``ask``, or "") and why.
    ``problem``: a timeout, a crash, output that was not the JSON it claimed to be."""

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


class AgentModeUpdated(EventBase, kw_only=True):
    """An ACP agent's session mode now (``current_mode_update``, or its session's start or a
    ``session/set_mode`` it answered), with its modes when they were told (None: as before)."""

    current_mode: str
    modes: list[AcpMode] | None = None


class AgentConfigUpdated(EventBase, kw_only=True):
    """An ACP agent's session config options and their values now, all of them
    (``config_option_update``, its session's start, or a ``session/set_config_option``)."""

    options: list[AcpConfigOption] = msgspec.field(default_factory=list)


class ActionRequested(EventBase, kw_only=True):
    """The server sent (or will send) ``action`` to ``worker_id``; re-sent until finished."""

    action_id: str
    item_id: str
    worker_id: str
    action: ActionMessage


class ActionFinished(EventBase, kw_only=True):
    action_id: str
    outcome: Literal["result", "errored", "cancelled", "lost"]


# a session's processes ----------------------------------------------------------------------
# Processes the model started with ``exec`` that outlive the call (the worker's
# ``exec_start``). They belong to the session; their output here is what was read from them (by
# the model's calls, or by a stop). The live tail the browser watches is not in the log: the
# server keeps it in memory and sends it to browsers apart from the events (``process_tails``,
# docs/architecture.md, "A session's processes").

#: who stopped a process: ``""`` it ended by itself; ``exec_kill`` the model's ``kill``;
#: ``user`` the Stop button; ``interrupt`` / ``close`` the session was interrupted / closed;
#: ``settings`` the session's sandbox or network was narrowed while it ran with more;
#: ``timeout``, ``cancel``, ``detach``, ``worker_exit`` as the worker says (``StoppedBy``);
#: ``gone`` the worker no longer knows it (it restarted)
ProcessStopper = Literal["", "exec_kill", "user", "interrupt", "close", "timeout", "cancel",
                         "detach", "worker_exit", "gone", "settings"]


class ProcessStarted(EventBase, kw_only=True):
    """The model's ``exec`` call ``item_id`` started ``process_id`` on ``worker_id``;
    ``output`` is what it wrote before the call answered."""

    #: the worker's id (``proc_…``)
    process_id: str
    #: the ``exec`` call
    item_id: str
    worker_id: str
    argv: list[str]
    cwd: str | None = None
    tty: bool = False
    #: what it wrote before the call answered
    output: str = ""
    #: the sandbox mode and network it was started with (its ``exec_start``'s: an escalated
    #: one's are ``full-access``); None in events from before they were recorded
    sandbox: SandboxMode | None = None
    #: whether it was started with the network
    network: bool | None = None


class ProcessOutput(EventBase, kw_only=True):
    """More of a process's output, as a call (``write_stdin``, ``kill``) or a stop read it."""

    process_id: str
    output_delta: str


class ProcessStopRequested(EventBase, kw_only=True):
    """Someone asked the process to stop (``by``: ``user``, ``interrupt``, ``close``,
    ``settings``): the server sends the worker ``exec_kill``, again after a reconnect until it
    has ended."""

    process_id: str
    by: ProcessStopper = "user"


class ProcessEnded(EventBase, kw_only=True):
    """The process has ended (or is ``gone``: the worker no longer knows it), with its last
    output."""

    process_id: str
    exit_code: int | None = None
    signal: int | None = None
    #: ``''`` it ended by itself; ``exec_kill`` the model's ``kill``; ``user``, ``interrupt``,
    #: ``close`` whoever asked; ``settings`` a narrower sandbox or the network turned off;
    #: ``timeout``, ``cancel``, ``detach``, ``worker_exit`` as the worker says; ``gone`` the worker
    #: no longer knows it
    stopped_by: ProcessStopper = ""
    #: its last output
    output_delta: str = ""


class ProcessListening(EventBase, kw_only=True):
    """The process listens on TCP ``ports`` inside a network of its own (sandboxed, started
    with the network off): nothing outside its sandbox reaches them, but a forward the user
    asks for (``process_forward_requested``). Appended each time the worker sees the set
    change; ``[]``: it listens on none any more."""

    process_id: str
    #: all it listens on now (sorted, at most 32)
    ports: list[int] = msgspec.field(default_factory=list)


class ProcessForwardRequested(EventBase, kw_only=True):
    """The user asked to reach ``port`` of the process from the worker's machine (its
    loopback only): the server sends the worker ``exec_forward``."""

    process_id: str
    port: int


class ProcessForwarded(EventBase, kw_only=True):
    """The forward of ``port`` is open at ``address`` (``127.0.0.1:<port>`` on the worker's
    machine), or failed (``error`` says why)."""

    process_id: str
    port: int
    #: where it is reachable, on the worker's machine
    address: str = ""
    #: why it is not
    error: str = ""


class SessionWorkspaceChanged(EventBase, kw_only=True):
    paths: list[str]


class TokenUsageRecorded(EventBase, kw_only=True):
    """One model call's usage. ``input_tokens + output_tokens`` is the context that call
    used; ``context_window`` is the model's window (None when unknown)."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0  # input tokens served from the provider's prompt cache
    #: input tokens written to the provider's prompt cache (Anthropic bills them apart)
    cache_write_tokens: int = 0
    #: the model's window; ``input_tokens + output_tokens`` is the context this call used
    context_window: int | None = None
    model: str | None = None
    #: the provider the call went to (None: not recorded, before version 2: the session's
    #: provider then)
    provider: str | None = None
    #: what the call cost in millionths of a US dollar, priced when it was made by the price
    #: table then (None: not priced — no price known for the model, or recorded before
    #: version 2)
    cost_micros: int | None = None
    #: how full the context is, when the caller said so apart from the call's tokens (an
    #: ACP agent's ``usage_update``); None: ``input_tokens + output_tokens``
    context_tokens: int | None = None


class SessionArchived(EventBase, kw_only=True):
    """Archived sessions leave the dashboard's main list; they stay searchable and can be
    opened and unarchived."""

    archived: bool = True


class SessionDeleted(EventBase, kw_only=True):
    """The session leaves the state. Its events stay in the log (the log is append-only);
    ``GET /api/sessions/{id}/log`` still returns them."""

    reason: str = ""


class SessionForked(EventBase, kw_only=True):
    """A new session (the envelope's ``session_id``) whose conversation is ``from_session``'s
    up to and including ``until_item``: the fold copies those items (finished ones only).
    ``worktree``: it works in a git worktree of its own, made from the repository ``repo``
    (its workdir until the worktree is ready); None: in ``from_session``'s workdir."""

    from_session: str
    until_item: str
    title: str
    worktree: Worktree | None = None


class SessionMoved(EventBase, kw_only=True):
    """The session goes on on another worker: with the same workdir path (``workdir`` ""), or
    moved there with its files ("Move to…"): ``workdir`` on ``worker_id`` now holds what
    ``from_workdir`` on ``from_worker`` held, carried as the bundle ``bundle`` (its sha256 in
    the blob store) of ``bundle_size`` bytes. The source's files stay as they were."""

    worker_id: str
    from_worker: str = ""
    workdir: str = ""
    from_workdir: str = ""
    bundle: str = ""
    bundle_size: int = 0


class QuestionAsked(EventBase, kw_only=True):
    """The model asks the user (``ask_user``); the session waits for the answer."""

    question_id: str
    item_id: str
    question: str
    choices: list[str] = msgspec.field(default_factory=list)


class QuestionAnswered(EventBase, kw_only=True):
    """The answer (the first one wins), or ``cancelled`` when the turn stopped first."""

    question_id: str
    answer: str = ""
    cancelled: bool = False


class MemoryUpdated(EventBase, kw_only=True):
    """The project memory of ``workdir`` on ``worker_id``: its whole new text. Appended by the
    model's ``remember`` tool (with the session's id) or by the user (global)."""

    worker_id: str
    workdir: str
    text: str


# the task board -----------------------------------------------------------------------------

TaskStatus = Literal["todo", "in_progress", "review", "done"]


class TaskCreated(EventBase, kw_only=True):
    task_id: str
    title: str
    description: str = ""
    depends_on: list[str] = msgspec.field(default_factory=list)
    status: TaskStatus = "todo"
    order: float = 0.0  # within its column, ascending


class TaskUpdated(EventBase, kw_only=True):
    """The task's text or dependencies, whole."""

    task_id: str
    title: str
    description: str
    depends_on: list[str] = msgspec.field(default_factory=list)


class TaskMoved(EventBase, kw_only=True):
    """To a column (``status``) and a place in it (``order``); reordering is a move too."""

    task_id: str
    status: TaskStatus
    order: float


class TaskDeleted(EventBase, kw_only=True):
    task_id: str


class TaskRunStarted(EventBase, kw_only=True):
    """A session was started for the task (in the same append as its start); from now on the
    task follows that session: working → in_progress, finished → review."""

    task_id: str
    session_id: str


# schedules ----------------------------------------------------------------------------------


class ScheduleFields(msgspec.Struct, kw_only=True):
    """A prompt run on a worker at set times: ``cron`` (five fields, in ``timezone``) or once
    ``at`` (unix time). Each run starts a new session, or prompts ``target_session``. (The
    fields a schedule's event, its command and its REST body share.)"""

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


class ScheduleSpec(ScheduleFields, kw_only=True):
    """A schedule as stored: its fields and its id."""

    schedule_id: str


class ScheduleSaved(EventBase, kw_only=True):
    """A schedule created or changed: its whole definition."""

    spec: ScheduleSpec


class ScheduleDeleted(EventBase, kw_only=True):
    schedule_id: str


class ScheduleFired(EventBase, kw_only=True):
    """Due time ``due_at`` of a schedule was dealt with, once: a run ``started`` (its session,
    in the same append as the events that start it), ``failed`` (``error``), or ``skipped``
    (missed while the server was down, past the grace period; ``skipped`` counts them).
    ``started`` says the run began, not how it went: that is in its session's items, from
    ``item_id`` on (a command that failed is a tool call ``failed``)."""

    schedule_id: str
    due_at: float
    outcome: Literal["started", "failed", "skipped"]
    session_id: str | None = None
    error: str = ""
    skipped: int = 0
    #: the run's prompt, an item of ``session_id`` appended with this event: what the run did
    #: is that item and the ones after it, up to the next prompt ("": no run started, or
    #: recorded before runs named their prompt)
    item_id: str = ""


# triggers -----------------------------------------------------------------------------------
# A trigger is a schedule started by an event: a webhook delivery at its own URL. Its secret
# (the HMAC key of ``X-Hub-Signature-256``) is never in an event: only whether it has one.

#: what a delivery came to: a session or board task ``started``, ``refused`` (``reason``: a
#: signature that does not match, a worker gone, ...) or ``filtered`` (an event it ignores)
TriggerOutcome = Literal["started", "refused", "filtered"]


class TriggerFields(msgspec.Struct, kw_only=True):
    """What a webhook delivery starts: a new session on ``worker_id`` in ``workdir`` with
    ``prompt`` (a template: ``{{payload.issue.title}}``, ``{{payload.commits[0].id}}``,
    ``{{event}}``), or a board task (``target`` ``task``) with it as its description.
    ``events`` lets through only those ``X-GitHub-Event`` names, each with an optional
    ``.action`` (``issue_comment``, ``pull_request.opened``); empty: every event. A budget
    (tokens and/or US dollars) is set on each session it starts. (The fields a trigger's
    event and its REST body share.)"""

    name: str
    worker_id: str
    workdir: str
    prompt: str
    policy: ApprovalPolicy = "suggest"
    target: Literal["session", "task"] = "session"
    events: list[str] = msgspec.field(default_factory=list)
    budget_tokens: int | None = None
    budget_usd: float | None = None
    #: deliveries taken per minute at most (the rest answered 429, not recorded)
    per_minute: int = 30
    enabled: bool = True


class TriggerSpec(TriggerFields, kw_only=True):
    """A trigger as stored: its fields, its id, and its URL's own unguessable part
    (``/hooks/t/<hook_id>``)."""

    trigger_id: str
    hook_id: str
    #: deliveries must be signed (``X-Hub-Signature-256``) with the secret the server keeps
    has_secret: bool = False


class TriggerSet(EventBase, kw_only=True):
    """A trigger created or changed: its whole definition."""

    spec: TriggerSpec


class TriggerRemoved(EventBase, kw_only=True):
    trigger_id: str


class TriggerDelivered(EventBase, kw_only=True):
    """A webhook delivery to ``trigger_id`` was dealt with: its ``outcome``, and when it
    ``started`` something, the session (appended with this event) or the task. ``payload``
    is the body's sha256 in the blob store (what a replay runs again; "" when it was not
    kept: a refused delivery's body is not trusted). ``replay_of``: the delivery a replay
    re-ran. ``missing``: the template's fields the payload lacked (they rendered empty)."""

    trigger_id: str
    delivery_id: str
    outcome: TriggerOutcome
    #: ``X-GitHub-Event`` with the payload's ``action`` (``pull_request.opened``), if any
    event: str = ""
    reason: str = ""
    session_id: str | None = None
    task_id: str | None = None
    payload: str = ""
    replay_of: str = ""
    missing: list[str] = msgspec.field(default_factory=list)


# terminals ----------------------------------------------------------------------------------
# Who opened which shell on which machine, and when; never what was typed or printed.


class TerminalCreated(EventBase, kw_only=True):
    """A shell in tmux on ``worker_id``, started in ``workdir`` (from a session's view when
    ``session_id`` is set)."""

    terminal_id: str
    worker_id: str
    workdir: str
    by: str  # which browser: a short hash of its login, never the login itself


class TerminalAttached(EventBase, kw_only=True):
    terminal_id: str
    by: str


class TerminalDetached(EventBase, kw_only=True):
    terminal_id: str
    by: str


class TerminalClosed(EventBase, kw_only=True):
    """The shell ended: closed by a browser (``closed``), or it exited (``exited``), or its
    worker refused it (``reason`` says why)."""

    terminal_id: str
    reason: str = "closed"
    by: str = ""


class SessionContextUpdated(EventBase, kw_only=True):
    """What applies to the session's workdir, as its worker read it (``load_context``): part
    of every model call's instructions from then on. Appended when it changes."""

    instructions: list[InstructionFile] = msgspec.field(default_factory=list)
    skills: list[SkillInfo] = msgspec.field(default_factory=list)
    environment: Environment = msgspec.field(default_factory=Environment)
    warnings: list[str] = msgspec.field(default_factory=list)


class TurnRequested(EventBase, kw_only=True):
    """The user asked the agent to try again (after a model error, say): the turn starts
    over from where the conversation stands."""

    reason: Literal["retry"] = "retry"


class CompactionRequested(EventBase, kw_only=True):
    """The user asked to compact the session's context (``compact_session``); the agent
    compacts before the next model call, or at once when the session is idle."""

    reason: Literal["manual"] = "manual"


class RateLimitUpdated(EventBase, kw_only=True):
    provider: str
    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests: str | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens: str | None = None


# budgets ----------------------------------------------------------------------------------
# What a fleet of sessions may spend (issue 37, "Stay within budget"). Money is counted in
# millionths of a US dollar (``micros``), so every sum in both folds is an exact integer.

BudgetScope = Literal["session", "day"]
BudgetUnit = Literal["tokens", "usd"]


class ModelPrice(msgspec.Struct, kw_only=True):
    """What a model costs, in US dollars per million tokens. ``cache_write`` None: an input
    token's price times 1.25 (Anthropic's five-minute cache writes)."""

    input: float
    cached_input: float
    output: float
    cache_write: float | None = None


class BudgetSet(EventBase, kw_only=True):
    """A budget set, raised or removed. ``scope`` ``session``: the envelope's session's own
    total; ``day``: every session's together in one UTC day (a global event). A limit None
    is no limit in that unit."""

    scope: BudgetScope
    max_tokens: int | None = None
    max_micros: int | None = None


class BudgetReached(EventBase, kw_only=True):
    """The session stopped before a model call: ``spent`` reached ``limit`` (tokens, or
    micros for ``usd``) of its own budget or of the day's. Nothing was left half-done: the
    last call's answer and its tool calls were settled before."""

    scope: BudgetScope
    unit: BudgetUnit
    limit: int
    spent: int


class PricesSet(EventBase, kw_only=True):
    """Settings → Usage's price table: the user's prices by model name (or name prefix),
    over the built-in defaults; the whole table each time."""

    prices: dict[str, ModelPrice] = msgspec.field(default_factory=dict)


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


# telegram ---------------------------------------------------------------------------------
# The Telegram channel's memory, so a restart loses nothing and repeats nothing. The bot token
# never appears here.


class TelegramChatPaired(EventBase, kw_only=True):
    """A chat joined the allow list (its ``/pair CODE`` matched the code shown in the UI)."""

    chat_id: int
    title: str = ""  # the chat's title or the user's name, to recognise it in the UI


class TelegramChatRemoved(EventBase, kw_only=True):
    chat_id: int


class TelegramSessionChosen(EventBase, kw_only=True):
    """The chat's current session (``/new``, ``/use``): plain text goes there."""

    chat_id: int
    session_id: str


class TelegramMessageSent(EventBase, kw_only=True):
    """The bot sent (or edited) the message ``key`` (``approval:<id>``, ``answer:<item>``,
    ``question:<id>``, ``error:<seq>``, ``decided:<id>``) to the chat: never sent again."""

    chat_id: int
    key: str
    message_id: int = 0


class TelegramUpdateHandled(EventBase, kw_only=True):
    """Every update up to ``update_id`` of bot ``bot_id`` was handled: polling goes on after
    it. Update ids are per bot: another bot (a new token) starts over."""

    update_id: int
    bot_id: int = 0


# push -------------------------------------------------------------------------------------
# The browsers that receive Web Push notifications (codey_server/push/). What a device is
# called and what it wants pushed are here, so restarts and replicas keep them; its
# subscription (the push service's endpoint URL, the browser's p256dh key and auth secret) is
# not: those are capabilities, kept by the server's push store (a 0600 file, or among replicas
# a row), never sent to browsers.


class PushDeviceAdded(EventBase, kw_only=True):
    """A browser subscribed to Web Push (or subscribed again, replacing its subscription)."""

    device_id: str
    name: str = ""
    #: the push service's host (``fcm.googleapis.com``): to tell devices apart, nothing more
    endpoint_host: str = ""
    #: what is pushed to it (``codey_server.push.notices.KINDS``: approval, question, ...)
    kinds: list[str] = msgspec.field(default_factory=list)


class PushDeviceChanged(EventBase, kw_only=True):
    """The user renamed a device or changed what is pushed to it."""

    device_id: str
    name: str = ""
    kinds: list[str] = msgspec.field(default_factory=list)


class PushDeviceRemoved(EventBase, kw_only=True):
    """The user removed a device, or its push service said the subscription is gone
    (``reason``: ``gone``)."""

    device_id: str
    reason: str = ""


# upgrades ---------------------------------------------------------------------------------


class DataUpgraded(EventBase, kw_only=True):
    """At start the server brought the data from an older format to its own, after backing it
    up (``codey_server.upgrades``): ``changes`` says, one line each, what the user should know
    of it. Browsers show it until it is dismissed (``upgrade_notice_dismissed``)."""

    #: the upgrade's name: the backup's folder name (``<time>-format<N>``)
    upgrade_id: str
    from_format: int
    to_format: int
    #: the release that did it
    version: str
    changes: list[str] = msgspec.field(default_factory=list)
    #: the folder of the backup made before it ("": none)
    backup: str = ""


class UpgradeNoticeDismissed(EventBase, kw_only=True):
    """The user read the notice of an upgrade; no browser shows it again."""

    upgrade_id: str


# goals --------------------------------------------------------------------------------------
# A session's goal (``/goal``, or the New session dialog): after each turn it is checked, by a
# command in the session's sandbox or by a model judging the evidence of ``goal_met``; until it
# is met the next turn starts with what failed, up to a cap of turns.

GoalCheckKind = Literal["command", "judge"]


class GoalSet(EventBase, kw_only=True):
    """The session works towards ``condition`` from now on (a goal set before is replaced).
    ``command`` (an argv): met when it exits 0 in the session's sandbox; None: met when the
    model calls ``goal_met`` and a model judging its evidence agrees. At most ``max_turns``
    checks fail before the goal is given up."""

    goal_id: str
    condition: str
    command: list[str] | None = None
    max_turns: int = 10


class GoalChecked(EventBase, kw_only=True):
    """One check of the goal after a turn: ``met`` or not, and what it saw (the command's
    output or the judge's reason, trimmed). ``after_item``: the session's last item when the
    check began (the turn it checked)."""

    goal_id: str
    attempt: int
    met: bool
    by: GoalCheckKind = "command"
    output: str = ""
    exit_code: int | None = None
    after_item: str = ""


class GoalMet(EventBase, kw_only=True):
    goal_id: str
    reason: str = ""


class GoalGivenUp(EventBase, kw_only=True):
    """The loop stopped without the goal met: the cap of turns, the session stopped (an error,
    an interrupt, its budget), or the user cleared it."""

    goal_id: str
    reason: str = ""


# checkpoints (issue 38) ----------------------------------------------------------------------


class CheckpointRecorded(EventBase, kw_only=True):
    """The session's worker kept a checkpoint of its workdir before turn ``turn``'s first
    change (``turn``: the item id of the prompt that opened it): ``commit`` on the private ref
    ``refs/codey/checkpoints/<session>/<turn>`` (of the shadow repository under the worker's
    home, ``shadow``, for a folder that is not a repository), how many files it holds and
    what it skipped (files over the size limit, ignored ones; named, up to a cap)."""

    turn: str
    commit: str
    files: int = 0
    skipped: list[str] = msgspec.field(default_factory=list)
    shadow: bool = False
# rewind -------------------------------------------------------------------------------------
# Issue 38: a session's conversation taken back to just before one of its prompts.

RewindMode = Literal["both", "files", "conversation"]


class ConversationRewound(EventBase, kw_only=True):
    """The conversation went back to just before the prompt ``turn`` (a ``UserMessage``'s item
    id): that prompt and every item after it leave the live conversation for a rewound branch,
    shown folded where they stood and never sent to the model again. ``mode``: what the user
    asked to rewind (``both``: its files were restored first)."""

    turn: str
    mode: RewindMode = "conversation"


Event = (
    WorkerPairRequested
    | WorkerPairResolved
    | WorkerPaired
    | WorkerRevoked
    | WorkerRenamed
    | WorkerConnected
    | WorkerDisconnected
    | SessionCreated
    | SessionStatusChanged
    | SessionTitleChanged
    | SessionPolicyChanged
    | SessionSandboxChanged
    | SessionModelChanged
    | WorktreeUpdated
    | SessionItemAppended
    | SessionItemUpdated
    | PlanUpdated
    | PlanApproved
    | ApprovalRequested
    | ApprovalResolved
    | ActionRequested
    | ActionFinished
    | ProcessStarted
    | ProcessOutput
    | ProcessStopRequested
    | ProcessEnded
    | ProcessListening
    | ProcessForwardRequested
    | ProcessForwarded
    | SessionWorkspaceChanged
    | TokenUsageRecorded
    | CompactionRequested
    | TurnRequested
    | SessionContextUpdated
    | SessionArchived
    | SessionDeleted
    | SessionForked
    | SessionMoved
    | QuestionAsked
    | QuestionAnswered
    | MemoryUpdated
    | RateLimitUpdated
    | BudgetSet
    | BudgetReached
    | PricesSet
    | AuthStatusUpdated
    | ProviderSaved
    | ProviderRemoved
    | TaskCreated
    | TaskUpdated
    | TaskMoved
    | TaskDeleted
    | TaskRunStarted
    | ScheduleSaved
    | ScheduleDeleted
    | ScheduleFired
    | TriggerSet
    | TriggerRemoved
    | TriggerDelivered
    | TerminalCreated
    | TerminalAttached
    | TerminalDetached
    | TerminalClosed
    | TelegramChatPaired
    | TelegramChatRemoved
    | TelegramSessionChosen
    | TelegramMessageSent
    | TelegramUpdateHandled
    | PushDeviceAdded
    | PushDeviceChanged
    | PushDeviceRemoved
    | DataUpgraded
    | UpgradeNoticeDismissed
    | GoalSet
    | GoalChecked
    | GoalMet
    | GoalGivenUp
    | SessionAttentionChanged
    | AttentionScheduled
    | AttentionNudged
    | AttentionActed
    | ApprovalReviewed
    | CheckpointRecorded
    | ConversationRewound
    | AgentCommandsUpdated
    | HooksFound
    | HooksTrusted
    | HookRan
    | AgentModeUpdated
    | AgentConfigUpdated
)


class Envelope(msgspec.Struct, kw_only=True):
    """One stored event. ``seq`` is global, gapless and monotonic, starting at 1."""

    seq: int
    ts: float
    session_id: str | None
    event: Event
    #: the version of its event type's shape (``codey_protocol.upcasting.VERSIONS``): the one
    #: it was stored in, and the current one once read (a stored envelope is read through its
    #: type's upcasters). 0: stored before versions were kept, in the shape of its release.
    version: int = 0
