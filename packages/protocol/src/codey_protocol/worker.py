"""Messages between codey-server and codey-worker over ``WS /ws/worker``.

Two tagged unions, tag field ``type``:

* :data:`ServerToWorker` — the handshake challenge and every *action* the server asks the
  worker to execute. Every action carries an ``action_id`` (unique, chosen by the server) and the
  ``session_id`` it belongs to; the worker answers an action it has seen before from its record
  instead of running it again.
* :data:`WorkerToServer` — the handshake answer, ``Hello``, acknowledgements, streamed progress,
  results, errors, heartbeats and workspace changes.

Connection order: server sends :class:`AuthChallenge`; worker answers :class:`AuthResponse`;
server sends :class:`Welcome` (or closes with a 4000-range code); worker sends :class:`Hello`;
then actions flow down and events flow up.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from codey_protocol._tags import snake as _snake

PROTOCOL_VERSION = 1


class ServerToWorkerMessage(msgspec.Struct, tag_field="type", tag=_snake, kw_only=True):
    """Base of every server→worker message."""


class WorkerToServerMessage(msgspec.Struct, tag_field="type", tag=_snake, kw_only=True):
    """Base of every worker→server message."""


# ---------------------------------------------------------------------------------------------
# shared structures


class McpTool(msgspec.Struct, kw_only=True):
    """An MCP tool as its server lists it. The hints are the server's own ``annotations``
    (``readOnlyHint``, ``destructiveHint``; None when it gave none, which MCP reads as "not
    read-only" and "destructive"); the approval gate goes by them."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None


class McpServerInfo(msgspec.Struct, kw_only=True):
    name: str
    tools: list[McpTool] = msgspec.field(default_factory=list)
    error: str | None = None


#: How a command is confined (``RunCommand.sandbox``): ``read-only`` writes nowhere but a
#: throwaway ``/tmp``; ``workspace-write`` (the default) may write the workdir and the
#: session's private ``/tmp``; ``full-access`` runs without the OS sandbox.
SandboxMode = Literal["read-only", "workspace-write", "full-access"]

#: A sandbox mode as an event records it: a :data:`SandboxMode`, or ``none`` — recorded before
#: Codey had an OS sandbox, when every command and MCP server ran without one. Only an event
#: stored by such a release reads ``none`` (its upcaster, :mod:`codey_protocol.upcasting`,
#: says so rather than claim today's default); nothing decided now is ``none``.
RecordedSandbox = Literal["none", "read-only", "workspace-write", "full-access"]


def runs_in(sandbox: RecordedSandbox) -> SandboxMode:
    """The mode an action recorded with ``sandbox`` runs in: ``none`` ran without a sandbox,
    and a worker given it again (a command in flight across the upgrade, re-sent) runs it
    so, as it was decided — ``full-access``."""
    return "full-access" if sandbox == "none" else sandbox


class SandboxInfo(msgspec.Struct, kw_only=True):
    """The OS sandbox this worker can enforce: ``bwrap`` (bubblewrap, Linux), ``seatbelt``
    (``sandbox-exec``, macOS) or ``none`` — then ``reason`` says why (bwrap missing, user
    namespaces off, ...), and commands other than ``full-access`` are refused."""

    kind: Literal["bwrap", "seatbelt", "none"] = "none"
    version: str = ""
    reason: str = ""


class Capabilities(msgspec.Struct, kw_only=True):
    executors: list[str] = msgspec.field(default_factory=list)
    mcp_servers: list[McpServerInfo] = msgspec.field(default_factory=list)
    terminal: bool = False  # the owner enabled the web terminal (``"terminal": true``)
    #: external agents this worker can run over ACP (``acp_agents`` in its config), by name
    acp_agents: list[str] = msgspec.field(default_factory=list)
    #: what a command's ``sandbox`` mode can rely on here (an older worker: none)
    sandbox: SandboxInfo = msgspec.field(default_factory=SandboxInfo)
    #: the allowed roots as the worker reads its config now, as configured and resolved
    #: (an older worker: none; the server then knows only those it paired with)
    roots: list[str] = msgspec.field(default_factory=list)


class DirEntry(msgspec.Struct, kw_only=True):
    path: str  # relative to the listed directory, "/" separated
    kind: Literal["file", "dir", "symlink", "other"]
    size: int = 0


class InstructionFile(msgspec.Struct, kw_only=True):
    """An ``AGENTS.md`` that applies to a workdir, as read by the worker."""

    path: str  # absolute, on the worker's machine
    text: str
    truncated: bool = False  # cut at the worker's size cap
    scope: Literal["user", "project"] = "project"


class SkillInfo(msgspec.Struct, kw_only=True):
    """A skill: a folder with a ``SKILL.md`` whose front matter names and describes it."""

    name: str
    description: str
    path: str  # the SKILL.md, absolute
    scope: Literal["user", "project"] = "project"


class Environment(msgspec.Struct, kw_only=True):
    """Where the agent works, as the worker sees it when the context is loaded."""

    os: str = ""
    os_version: str = ""
    shell: str = ""
    workdir: str = ""
    git_branch: str | None = None
    git_dirty: bool | None = None
    #: the folder of the repository's main checkout (for a linked worktree, not the
    #: worktree): the project memory is kept per repository. None: no repository (or an
    #: older worker)
    repo_root: str | None = None
    date: str = ""  # ISO date and time, local
    timezone: str = ""


class FileChange(msgspec.Struct, kw_only=True):
    path: str
    op: Literal["add", "delete", "update", "move"]
    moved_to: str | None = None
    added: int = 0
    removed: int = 0


# ---------------------------------------------------------------------------------------------
# server → worker


class AuthChallenge(ServerToWorkerMessage, kw_only=True):
    """First frame on a worker socket: sign ``nonce`` to prove who you are."""

    nonce: str
    server_time: float
    protocol_version: int = PROTOCOL_VERSION


class Welcome(ServerToWorkerMessage, kw_only=True):
    """The signature checked out; the worker may send ``Hello``."""

    worker_id: str
    heartbeat_s: float = 5.0


class Action(ServerToWorkerMessage, kw_only=True):
    """Base of every action. ``action_id`` is unique across the server's lifetime."""

    action_id: str
    session_id: str


class AttachSession(Action, kw_only=True):
    """Create ``workdir`` (inside the worker's allowed roots) and start watching it."""

    workdir: str


class DetachSession(Action, kw_only=True):
    """The session is closed: stop watching its workdir (its files are left as they are)."""


class LoadContext(Action, kw_only=True):
    """Read what applies to ``workdir``: ``AGENTS.md`` files (``$CODEY_HOME/AGENTS.md``, then
    each from the allowed root down to the workdir), skills, and the environment."""

    workdir: str


#: The git settings every command the model runs gets, as git's own ``GIT_CONFIG_COUNT`` /
#: ``GIT_CONFIG_KEY_<n>`` / ``GIT_CONFIG_VALUE_<n>`` (command-line scope: above any
#: repository's config, and inherited by every git the command starts): no fsmonitor hook, no
#: hooks at all, no bare repository found by walking up (a folder laid out as one is not a
#: repository), no untracked cache written. The worker appends them to a command's
#: environment itself (after any the action's ``env`` sets, so they win); the server sends
#: them with ``git`` too.
GIT_HARDENING: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null"),
    ("safe.bareRepository", "explicit"), ("core.untrackedCache", "false"))

#: what the worker itself adds to every command it runs for the model, whatever the server
#: sent: the settings by which a repository's config runs a program on its own (an fsmonitor,
#: a hook). Not ``safe.bareRepository``: tools keep bare caches they enter without
#: ``--git-dir`` (cargo's git fetch, Bundler, SwiftPM) and would break; it comes with ``git``
#: commands, from the server (:data:`GIT_HARDENING`).
GIT_COMMAND_HARDENING: tuple[tuple[str, str], ...] = tuple(
    pair for pair in GIT_HARDENING if pair[0] != "safe.bareRepository")


class RunCommand(Action, kw_only=True):
    argv: list[str]
    workdir: str
    cwd: str | None = None  # relative to workdir, or absolute inside it
    timeout_s: float = 600.0
    env: dict[str, str] = msgspec.field(default_factory=dict)
    output_cap: int = 1024 * 1024
    #: the OS sandbox around the command; a worker without one refuses anything but
    #: ``full-access`` (``sandbox_unavailable``) rather than run it bare. ``none``: recorded
    #: before the sandbox existed (it ran without one, as ``full-access`` runs: :func:`runs_in`)
    sandbox: RecordedSandbox = "workspace-write"
    #: network access inside the sandbox (ignored under ``full-access``, which has it)
    network: bool = False


class ApplyPatch(Action, kw_only=True):
    workdir: str
    patch: str


class ReadFile(Action, kw_only=True):
    workdir: str
    path: str
    offset: int = 0  # first line, 0-based
    limit: int | None = None  # number of lines


class WriteFile(Action, kw_only=True):
    workdir: str
    path: str
    content: str
    create_dirs: bool = True
    #: "base64": ``content`` is base64 of the file's bytes (an attached binary file)
    encoding: Literal["utf-8", "base64"] = "utf-8"


class ListDir(Action, kw_only=True):
    workdir: str
    path: str = "."
    depth: int = 1


class McpList(Action, kw_only=True):
    """List the tools of every configured MCP server, each as its process started in
    ``workdir`` sees them (the one a session's calls there use, left running for them: a
    server that confines itself to its cwd starts only in a real workdir). Empty
    ``workdir``: a process started in an empty scratch directory for the purpose (what
    ``hello`` reports)."""

    workdir: str = ""


class McpCall(Action, kw_only=True):
    """Call ``tool`` on the worker's MCP server ``server`` for the session in ``workdir``:
    the server runs there (its cwd and its declared MCP root). Empty ``workdir``: the one the
    session was attached with."""

    server: str
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    workdir: str = ""
    #: the sandbox the server's process runs in (one process per mode and workdir); its
    #: network is the worker owner's choice per server (``network`` in its config), not the
    #: action's. ``none``: recorded before the sandbox existed (:func:`runs_in`)
    sandbox: RecordedSandbox = "workspace-write"


class Cancel(Action, kw_only=True):
    """Stop the running action ``target_action_id`` (SIGTERM, grace, SIGKILL)."""

    target_action_id: str


class FrameRejected(ServerToWorkerMessage, kw_only=True):
    """The server could not use a frame this worker sent (``code``: ``bad_frame``,
    ``bad_json``, ...); the connection stays open. Sent instead of only logging it, so the
    worker's owner sees it too."""

    code: str
    message: str


# -- the web terminal (worker config ``"terminal": true``): a shell in tmux, bytes both ways.
# ``terminal_id`` names the tmux session (it outlives every browser); ``client_id`` one
# browser's view of it (a tmux client), so two browsers can watch one terminal.


class TerminalOpen(ServerToWorkerMessage, kw_only=True):
    """Attach ``client_id`` to terminal ``terminal_id``, starting its shell in ``workdir``
    first when it is not running."""

    terminal_id: str
    client_id: str
    workdir: str
    cols: int = 80
    rows: int = 24


class TerminalInput(ServerToWorkerMessage, kw_only=True):
    client_id: str
    data: str  # what the user typed (xterm.js gives text)


class TerminalResize(ServerToWorkerMessage, kw_only=True):
    client_id: str
    cols: int
    rows: int


class TerminalAck(ServerToWorkerMessage, kw_only=True):
    """``nbytes`` of this client's output reached its browser: the worker may send more (it
    keeps at most a window of unacknowledged output, so a slow browser slows the shell)."""

    client_id: str
    nbytes: int


class TerminalDetach(ServerToWorkerMessage, kw_only=True):
    """The browser left: end this client; the shell goes on."""

    client_id: str


class TerminalKill(ServerToWorkerMessage, kw_only=True):
    """End the terminal's shell and every client of it."""

    terminal_id: str


class AcpPrompt(Action, kw_only=True):
    """One turn of the external ACP agent ``agent`` for the session in ``workdir``: the
    worker starts the agent (once per session), opens or loads its ACP session, sends
    ``prompt``, and streams what the agent does as ``ActionProgress{stream: "acp"}``. The
    agent's permission requests arrive the same way and wait for an :class:`AcpPermission`."""

    agent: str
    workdir: str
    prompt: str


class AcpPermission(Action, kw_only=True):
    """The user's answer to permission request ``request_id`` of the running
    :class:`AcpPrompt` ``target_action_id``: the option chosen, or None to refuse."""

    target_action_id: str
    request_id: str
    option_id: str | None = None


# -- processes that outlive an action (issue 27): started by ``exec_start``, read and written
# by ``exec_write``, stopped by ``exec_kill``, listed by ``exec_list``. A process belongs to its
# session: detaching the session, or the worker stopping, stops it. A ``process_id`` the worker
# does not know (it restarted, the session was detached) is answered ``action_errored{code:
# "process_gone"}``.


class ExecStart(Action, kw_only=True):
    """Start ``argv`` as a process of the session that outlives this action, and answer after
    ``yield_ms`` (or sooner, when it exits) with its output so far (:class:`ExecOutput`).

    ``cwd``, ``env``, ``sandbox`` and ``network`` are as for :class:`RunCommand`. ``tty``: in
    a pseudo-terminal of ``cols`` × ``rows`` (a REPL, a program that wants a terminal; stdout
    and stderr are one stream either way). ``output_cap``: how much output not yet read is
    kept (its head and tail). ``timeout_s``: stop it after this long (None: when killed, the
    session detached or the worker stops).

    ``live``: while it runs the worker also pushes, unasked and apart from what ``exec_write``
    reads, the tail of its output (:class:`ProcessTail`), the TCP ports it listens on when its
    network is its own (:class:`ProcessPorts`) and its end (:class:`ProcessExited`). Only a
    server that reads those frames sets it."""

    argv: list[str]
    workdir: str
    cwd: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    tty: bool = False
    cols: int = 80
    rows: int = 24
    yield_ms: int = 1000
    output_cap: int = 1024 * 1024
    timeout_s: float | None = None
    sandbox: SandboxMode = "workspace-write"
    network: bool = False
    #: push its tail, ports and end (``process_tail``, ``process_ports``, ``process_exited``)
    live: bool = False


class ExecWrite(Action, kw_only=True):
    """Write ``input`` to process ``process_id`` (to its terminal when it has one: ``"\\x03"``
    is Ctrl-C there), then wait up to ``yield_ms`` for more output (sooner if it exits) and
    answer with what it wrote since the last read. Empty ``input``: only a poll.
    ``close_stdin``: then close its input (end of file; not for a terminal)."""

    process_id: str
    input: str = ""
    yield_ms: int = 1000
    close_stdin: bool = False


class ExecKill(Action, kw_only=True):
    """Stop process ``process_id`` (SIGTERM, a grace period, SIGKILL on its process group or
    sandbox) and answer with its last output."""

    process_id: str


class ExecList(Action, kw_only=True):
    """The session's processes (running, and recently ended): :class:`ExecProcesses`."""


class ExecForward(Action, kw_only=True):
    """On the user's click: make ``port``, on which sandboxed process ``process_id`` listens
    inside a network of its own (it started with the network off), reachable on this
    machine's loopback: ``127.0.0.1:<host_port>`` (:class:`PortForwarded`). Refused for a
    process that has the machine's network, does not listen on ``port``, or has ended. The
    forward ends with the process. Sent again for the same port, it answers the same one."""

    process_id: str
    port: int


# -- searching and editing the workdir (read-only but ``edit``)


class Grep(Action, kw_only=True):
    """Search files under ``path`` (a folder or a file of the workdir) for the regular
    expression ``pattern`` (Rust ``regex`` syntax, as ripgrep; ``literal``: a plain string).

    ``include``/``exclude``: glob patterns a file's path must / must not match (``*.py``,
    ``src/**/*.ts``; a pattern without ``/`` matches the file name). ``.gitignore`` files are
    respected and hidden files skipped unless ``hidden``. ``before``/``after``: context lines.
    ``mode``: ``content`` (matching lines), ``files`` (the files with a match), ``count``
    (matches per file). At most ``max_matches`` lines and ``max_bytes`` of text come back
    (``truncated`` says when there were more)."""

    workdir: str
    pattern: str
    path: str = "."
    include: list[str] = msgspec.field(default_factory=list)
    exclude: list[str] = msgspec.field(default_factory=list)
    ignore_case: bool = False
    literal: bool = False
    before: int = 0
    after: int = 0
    hidden: bool = False
    mode: Literal["content", "files", "count"] = "content"
    max_matches: int = 200
    max_bytes: int = 64 * 1024


class Glob(Action, kw_only=True):
    """Paths under ``path`` matching the glob ``pattern`` (``**/*.py``, ``src/*.ts``;
    relative to ``path``), newest first, at most ``max_results``. ``.gitignore`` is respected
    and hidden files are skipped unless ``hidden``."""

    workdir: str
    pattern: str
    path: str = "."
    hidden: bool = False
    max_results: int = 500


class Edit(Action, kw_only=True):
    """Replace ``old_string`` by ``new_string`` in the file ``path``: ``old_string`` must
    occur exactly once (``edit_not_unique`` otherwise), or any number of times with
    ``replace_all``; absent, ``edit_no_match``. Written atomically, like ``write_file``."""

    workdir: str
    path: str
    old_string: str
    new_string: str
    replace_all: bool = False


class ViewImage(Action, kw_only=True):
    """Read the image file ``path`` (PNG, JPEG, GIF or WebP, recognised by its first bytes)
    for the model to look at: :class:`ImageContent`."""

    workdir: str
    path: str



# git workspaces: a worktree per session, its whole change, and shipping it (issue 26). These
# are the worker's own git operations on the user's say-so (never a model's command), so they
# run outside the sandbox that keeps ``.git`` read-only for the model, confined to the roots.


class WorkspaceCreate(Action, kw_only=True):
    """Make a git worktree for a session: branch ``branch`` from ``base``, in the worker's
    worktrees folder (its ``worktrees_dir``, by default ``~/.codey-worktrees``: outside the
    repository and outside ``$CODEY_HOME``, an allowed root of its own), then run the
    project's setup script there if it has one (``setup``); the script's output comes as
    progress (``stdout``/``stderr``)."""

    repo: str  # a folder inside the repository (the folder the user picked)
    branch: str  # e.g. ``codey/fix-login-3f2a``
    base: str = ""  # a branch, tag or commit; empty: the repository's current branch
    setup: bool = True
    #: the worktree is made again: ``branch`` exists and is checked out as it is (not made
    #: from ``base``); ``branch_gone`` when it does not exist any more
    existing: bool = False
    #: the setup script runs as a command of the session: in its sandbox (it is the
    #: project's code, chosen by whoever picked ``base``) and with its network toggle
    sandbox: SandboxMode = "workspace-write"
    network: bool = False
    timeout_s: float = 900.0


class WorkspaceDiff(Action, kw_only=True):
    """Everything the session's worktree changed against its base: committed and not, from
    the merge base of HEAD and ``base``."""

    workdir: str
    base: str  # the branch (or commit) it started from
    diff_cap: int = 512 * 1024  # characters of unified diff at most


class WorkspaceRemove(Action, kw_only=True):
    """Remove the worktree. Refused (``dirty``, ``unmerged``) unless ``force``, when it has
    uncommitted changes or commits its base does not have; the branch stays unless
    ``delete_branch`` (and then only when merged, or ``force``)."""

    workdir: str
    base: str = ""
    force: bool = False
    delete_branch: bool = False


class WorkspaceCommit(Action, kw_only=True):
    """Commit the chosen files of the worktree with ``message``: ``paths`` (relative to it, as
    ``workspace_diff`` names them, a rename's old path too), and nothing else; a chosen path
    without uncommitted changes is passed over. ``paths`` None: everything (``git add -A``),
    as before paths could be chosen."""

    workdir: str
    message: str
    paths: list[str] | None = None


class WorkspaceMerge(Action, kw_only=True):
    """Merge the worktree's branch into ``base`` in the main checkout: ``ff`` (fast-forward
    only) or ``rebase`` (rebase the branch onto ``base``, then fast-forward). A conflict
    leaves nothing half-done (the rebase is aborted) and names the files.

    ``into_branch`` goes the other way, for the agent to resolve a conflict: ``base`` is merged
    into the worktree's branch and a conflict is left in the files, with its markers (the merge
    stays in progress; ``workspace_commit`` concludes it once the files are resolved)."""

    workdir: str
    base: str
    mode: Literal["ff", "rebase", "into_branch"] = "rebase"


class WorkspacePush(Action, kw_only=True):
    """Push the branch to ``remote``; with ``open_pr``, open a pull request with ``gh`` (when
    it is installed and logged in on this machine; otherwise ``gh_missing`` /
    ``gh_not_logged_in`` say so)."""

    workdir: str
    remote: str = "origin"
    open_pr: bool = False
    base: str = ""
    title: str = ""
    body: str = ""


# checkpoints (issue 38): the workdir kept as git commits on private refs, by turn; see
# ``codey_worker/checkpoints.py``. A turn is named by the item id of its prompt.


class CheckpointRecord(Action, kw_only=True):
    """Keep the workdir as it is now as turn ``turn``'s checkpoint: ``start`` (before its
    first change) or ``end`` (its end state, which finds the files changed by hand later).
    ``keep`` > 0: only the session's last ``keep`` turns' checkpoints stay."""

    workdir: str
    turn: str
    phase: Literal["start", "end"] = "start"
    max_file_bytes: int = 10 * 1024 * 1024
    keep: int = 0


class CheckpointPreview(Action, kw_only=True):
    """What restoring ``turn``'s checkpoint would change, with the diffs, and which of those
    files were changed by hand since the session's turns left them."""

    workdir: str
    turn: str


class CheckpointRestore(Action, kw_only=True):
    """Make the workdir equal ``turn``'s checkpoint, but for ``keep`` (None: the hand-edited
    files); ``path``: that one file only (relative to the workdir)."""

    workdir: str
    turn: str
    keep: list[str] | None = None
    path: str | None = None


class CheckpointDiff(Action, kw_only=True):
    """The change from ``from_turn``'s checkpoint to ``to_turn``'s (empty: the workdir now)."""

    workdir: str
    from_turn: str
    to_turn: str = ""


class CheckpointPrune(Action, kw_only=True):
    """Delete the session's checkpoints but its last ``keep`` turns' (0: all of them, and its
    shadow repository). ``workdir`` empty: only the shadow repository goes."""

    workdir: str = ""
    keep: int = 0
class ListPromptFiles(Action, kw_only=True):
    """Read the prompt files (slash commands) that apply to ``workdir``: ``.claude/commands``,
    ``.codex/prompts`` and ``.codey/commands`` of the project and of the user's home."""

    workdir: str
# moving a session to another machine (issue 38 §3): the source bundles the session's work
# (its files as they are, uncommitted changes included, and its checkpoints), the server reads
# the bundle in chunks (a frame from the worker is 1 MiB at most) into its blob store, and the
# target unpacks it into a new folder. The worker's own git, as for the worktrees.


class SessionBundle(Action, kw_only=True):
    """Bundle the session's ``workdir``: a git bundle of a snapshot commit of its files as
    they are (tracked and untracked, not ignored; made with a temporary index: the user's
    index, HEAD, stash and branches stay as they are), of HEAD, and of the session's
    checkpoint refs; for a folder that is not in a repository, of a shadow repository under
    ``$CODEY_HOME/moves/``. The bundle stays in the worker's memory for
    :class:`SessionBundleRead` (``bundle_id``: this action's id)."""

    workdir: str
    max_bytes: int = 40 * 1024 * 1024


class SessionBundleRead(Action, kw_only=True):
    """``length`` bytes of a bundle made by :class:`SessionBundle`, from ``offset``."""

    bundle_id: str
    offset: int = 0
    length: int = 512 * 1024


class SessionUnpack(Action, kw_only=True):
    """Unpack a bundle of :class:`SessionBundle` into ``workdir`` (new, or an empty folder,
    inside the worker's allowed roots): the files as they were on the source, uncommitted
    changes as uncommitted changes (and ``branch`` checked out at ``head`` for a repository);
    refs outside the session's namespace are refused."""

    workdir: str
    bundle_b64: str  # the bundle's bytes, base64
    #: "git": the source was a repository; "plain": a folder (no ``.git`` is made)
    source: Literal["git", "plain"] = "git"
    branch: str = ""  # the source's branch ("" : detached or none)
    head: str = ""  # the source's HEAD commit ("" : none)
    snapshot: str = ""  # the commit holding the files as they were
# hooks, in Claude Code's format (issue 39): settings files the worker reads, hook commands it
# runs in the session's sandbox, their parsed answers

#: the moments a hook can run at (Claude Code's names)
HookEvent = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SubagentStop",
                    "SessionStart", "SessionEnd", "Notification", "PreCompact",
                    "PermissionRequest"]
HOOK_EVENTS: tuple[str, ...] = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop",
                                "SubagentStop", "SessionStart", "SessionEnd", "Notification",
                                "PreCompact", "PermissionRequest")


class HookCommand(msgspec.Struct, kw_only=True):
    """One ``{"type": "command"}`` hook of a settings file, under its event and matcher."""

    event: str
    matcher: str = ""
    #: the shell command, as the file has it
    command_line: str
    timeout_s: float = 60.0


class HookFile(msgspec.Struct, kw_only=True):
    """A settings file with hooks. ``scope``: ``project`` (from the repository: runs only once
    the user trusted this exact content, its ``sha256``) or ``user`` (the worker's home).
    ``error``: why it was not read (it then has no hooks)."""

    path: str
    scope: Literal["project", "user"]
    sha256: str = ""
    hooks: list[HookCommand] = msgspec.field(default_factory=list)
    error: str = ""


class RunHooks(Action, kw_only=True):
    """Run the hooks of ``event`` whose matcher matches ``match`` (a tool name; a source or
    trigger for the events that have one), from the settings files of ``workdir`` and the
    worker's home, with ``payload`` (the event's JSON fields) on their stdin. Project files
    run only if their sha256 is in ``trusted``; the worker reads the files again now, so a
    file changed since it was trusted does not run."""

    workdir: str
    event: str
    match: str = ""
    payload: str = "{}"
    trusted: list[str] = msgspec.field(default_factory=list)
    sandbox: RecordedSandbox = "workspace-write"
    network: bool = False


class AcpConfigure(Action, kw_only=True):
    """Set a mode (``mode_id``: ``session/set_mode``) or a config option (``config_id`` to
    ``value``: ``session/set_config_option``) of the session's ACP agent ``agent``, started
    in ``workdir`` when it is not running yet. Answered with :class:`AcpConfigured`."""

    agent: str
    workdir: str
    mode_id: str | None = None
    config_id: str | None = None
    value: str | bool | None = None


ServerToWorker = (
    AuthChallenge
    | Welcome
    | AttachSession
    | DetachSession
    | LoadContext
    | RunCommand
    | ApplyPatch
    | ReadFile
    | WriteFile
    | ListDir
    | McpList
    | McpCall
    | Cancel
    | FrameRejected
    | TerminalOpen
    | TerminalInput
    | TerminalResize
    | TerminalAck
    | TerminalDetach
    | TerminalKill
    | AcpPrompt
    | AcpPermission
    | ExecStart
    | ExecWrite
    | ExecKill
    | ExecList
    | ExecForward
    | Grep
    | Glob
    | Edit
    | ViewImage
    | WorkspaceCreate
    | WorkspaceDiff
    | WorkspaceRemove
    | WorkspaceCommit
    | WorkspaceMerge
    | WorkspacePush
    | CheckpointRecord
    | CheckpointPreview
    | CheckpointRestore
    | CheckpointDiff
    | CheckpointPrune
    | ListPromptFiles
    | SessionBundle
    | SessionBundleRead
    | SessionUnpack
    | RunHooks
    | AcpConfigure
)

ActionMessage = (
    AttachSession | DetachSession | LoadContext | RunCommand | ApplyPatch | ReadFile
    | WriteFile | ListDir | McpList | McpCall | Cancel | AcpPrompt | AcpPermission
    | ExecStart | ExecWrite | ExecKill | ExecList | ExecForward | Grep | Glob | Edit
    | ViewImage
    | WorkspaceCreate | WorkspaceDiff | WorkspaceRemove | WorkspaceCommit | WorkspaceMerge
    | WorkspacePush
    | CheckpointRecord | CheckpointPreview | CheckpointRestore | CheckpointDiff | CheckpointPrune
    | ListPromptFiles
    | SessionBundle | SessionBundleRead | SessionUnpack
    | RunHooks
    | AcpConfigure
)


# ---------------------------------------------------------------------------------------------
# results of actions (tagged by ``kind``)


class ResultBase(msgspec.Struct, tag_field="kind", tag=_snake, kw_only=True):
    pass


class CommandResult(ResultBase, kw_only=True):
    exit_code: int | None  # None when killed by a signal
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    timed_out: bool = False
    cancelled: bool = False
    signal: int | None = None
    duration_ms: int = 0
    #: the command failed and its output looks like the sandbox stopped it (a read-only file
    #: system, a permission denied outside the writable roots, no network): the server may
    #: offer to run it again with more access. ``sandbox_hint`` says what was seen.
    sandbox_denied: bool = False
    sandbox_hint: str = ""
    #: the worker stopped the command because it was stopping itself (``cancelled`` is set
    #: too): why, e.g. "signal SIGTERM". Not a cancel anyone asked for: the command did not
    #: finish because its worker went away.
    worker_stopped: str = ""


class PatchResult(ResultBase, kw_only=True):
    files: list[FileChange] = msgspec.field(default_factory=list)
    diff: str = ""


class FileContent(ResultBase, kw_only=True):
    path: str
    content: str = ""
    binary: bool = False
    size: int = 0
    total_lines: int = 0
    truncated: bool = False
    #: the 0-based number of the first line of ``content`` (the action's ``offset``)
    offset: int = 0


class WriteResult(ResultBase, kw_only=True):
    path: str
    bytes_written: int
    created: bool = False


class DirListing(ResultBase, kw_only=True):
    path: str
    entries: list[DirEntry] = msgspec.field(default_factory=list)
    truncated: bool = False


class McpTools(ResultBase, kw_only=True):
    servers: list[McpServerInfo] = msgspec.field(default_factory=list)


class McpCallResult(ResultBase, kw_only=True):
    content: list[dict[str, Any]] = msgspec.field(default_factory=list)
    text: str = ""  # the text parts joined, for the model
    is_error: bool = False


class Attached(ResultBase, kw_only=True):
    workdir: str  # the realpath the worker will use
    created: bool = False
    #: the MCP servers' tools as listed in ``workdir`` (an older worker listed them in a
    #: scratch directory): the session's, which may differ from ``hello``'s
    mcp_servers: list[McpServerInfo] = msgspec.field(default_factory=list)


class Detached(ResultBase, kw_only=True):
    was_attached: bool = False


class ProjectContext(ResultBase, kw_only=True):
    """What ``load_context`` found. ``warnings``: what was skipped and why (a malformed skill,
    an unreadable file), for the session to show."""

    instructions: list[InstructionFile] = msgspec.field(default_factory=list)
    skills: list[SkillInfo] = msgspec.field(default_factory=list)
    environment: Environment = msgspec.field(default_factory=Environment)
    warnings: list[str] = msgspec.field(default_factory=list)
    #: the hook settings files found for the workdir (Claude Code's format, issue 39)
    hooks: list[HookFile] = msgspec.field(default_factory=list)


class Cancelled(ResultBase, kw_only=True):
    target_action_id: str
    was_running: bool


class AcpTurnEnded(ResultBase, kw_only=True):
    """The ACP agent's turn ended: ``stop_reason`` as the agent said (``end_turn``,
    ``max_tokens``, ``refusal``, ``cancelled``, …)."""

    stop_reason: str
    acp_session_id: str
    loaded: bool = False  # the agent's session was loaded again (``session/load``)
    #: the turn's token usage, when the agent reported it (the prompt's ``usage``)
    usage: AcpUsage | None = None


class PermissionAnswered(ResultBase, kw_only=True):
    """An :class:`AcpPermission` reached its request (False: no such request waits)."""

    delivered: bool


#: who stopped a process (``""``: it exited by itself, or still runs)
StoppedBy = Literal["", "exec_kill", "cancel", "timeout", "detach", "worker_exit"]


class ExecOutput(ResultBase, kw_only=True):
    """A process of the session after ``exec_start``, ``exec_write`` or ``exec_kill``:
    ``output`` is what it wrote since the last read (stdout and stderr together), its middle
    cut out (``truncated``) when more than its ``output_cap`` piled up unread. ``exit_code``
    and ``signal`` are set once it has ended (``running`` false)."""

    process_id: str
    output: str = ""
    running: bool = False
    exit_code: int | None = None
    signal: int | None = None
    truncated: bool = False
    total_bytes: int = 0  # everything it has written since it started
    duration_ms: int = 0  # since it started
    stopped_by: StoppedBy = ""
    #: it ended with a failure that looks like the sandbox's doing (as in CommandResult)
    sandbox_denied: bool = False
    sandbox_hint: str = ""


class ProcessInfo(msgspec.Struct, kw_only=True):
    """One process of a session, for ``exec_list``."""

    process_id: str
    argv: list[str]
    cwd: str  # relative to the workdir
    tty: bool = False
    sandbox: SandboxMode = "workspace-write"
    running: bool = False
    exit_code: int | None = None
    signal: int | None = None
    started_at: float = 0.0  # Unix time
    ended_at: float | None = None
    unread_bytes: int = 0  # output not yet read by exec_write
    stopped_by: StoppedBy = ""


class ExecProcesses(ResultBase, kw_only=True):
    processes: list[ProcessInfo] = msgspec.field(default_factory=list)


class PortForwarded(ResultBase, kw_only=True):
    """``exec_forward``: ``host:host_port`` on the worker's machine reaches ``port`` inside
    the process's sandbox."""

    process_id: str
    port: int
    host: str = "127.0.0.1"
    host_port: int


class GrepLine(msgspec.Struct, kw_only=True):
    line: int  # 1-based
    text: str  # without its newline, cut when very long
    match: bool = True  # False: a context line


class GrepFile(msgspec.Struct, kw_only=True):
    path: str  # relative to the workdir
    count: int = 0  # matching lines in this file (mode "count" and "content")
    lines: list[GrepLine] = msgspec.field(default_factory=list)  # mode "content"


class GrepResult(ResultBase, kw_only=True):
    files: list[GrepFile] = msgspec.field(default_factory=list)
    matches: int = 0  # matching lines returned
    truncated: bool = False  # more matches (or bytes) than the caps let through
    engine: Literal["rg", "python"] = "rg"


class GlobResult(ResultBase, kw_only=True):
    paths: list[str] = msgspec.field(default_factory=list)  # relative, newest first
    truncated: bool = False


class EditResult(ResultBase, kw_only=True):
    path: str
    replacements: int
    diff: str = ""  # unified diff of the change
    added: int = 0
    removed: int = 0


class ImageContent(ResultBase, kw_only=True):
    """An image for the model: ``data`` is base64 of the file's bytes; ``width`` and
    ``height`` when its header says them."""

    path: str
    mime: Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
    data: str
    size: int
    width: int | None = None
    height: int | None = None


class AcpOption(msgspec.Struct, kw_only=True):
    option_id: str
    name: str
    kind: str  # allow_once | allow_always | reject_once | reject_always


class AcpMode(msgspec.Struct, kw_only=True):
    """One of an ACP agent's session modes (``session/new``'s ``modes``)."""

    id: str
    name: str
    description: str = ""


class AcpConfigChoice(msgspec.Struct, kw_only=True):
    """A value a ``select`` config option can take (its group's name, if grouped)."""

    value: str
    name: str
    group: str = ""


class AcpConfigOption(msgspec.Struct, kw_only=True):
    """One of an ACP agent's session config options (``configOptions``): a ``select`` of
    ``choices`` or a ``boolean``; ``current`` is its value now. ``category``: ``mode``,
    ``model``, ``thought_level``, … (for display only)."""

    id: str
    name: str
    type: Literal["select", "boolean"] = "select"
    current: str | bool = ""
    choices: list[AcpConfigChoice] = msgspec.field(default_factory=list)
    description: str = ""
    category: str = ""


class AcpUsage(msgspec.Struct, kw_only=True):
    """The token usage an ACP agent reported: a turn's counts (its prompt's answer) and/or
    how full its context is (``usage_update``: ``context_tokens`` of ``context_window``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    context_tokens: int | None = None
    context_window: int | None = None


class AcpUpdate(msgspec.Struct, kw_only=True):
    """One thing an ACP agent did, as the worker passes it on (JSON in ``ActionProgress.data``
    with ``stream: "acp"``).

    ``kind``: ``text`` / ``thought`` (a chunk of its answer or reasoning, in ``text``);
    ``tool`` (a tool call started or changed: ``tool_call_id``, ``title``, ``status``,
    ``tool_kind``, ``text`` = its content so far, or its raw output when it has no content,
    ``command`` = the argv it runs when its raw input names one); ``plan`` (``entries``);
    ``permission`` (``request_id``, ``tool_call_id``, ``title``, ``options``, ``command``,
    ``reason``: why the agent asks; answer with AcpPermission); ``mode`` (``current_mode``,
    and ``modes`` when the list is told); ``config`` (``config_options``, all of them);
    ``usage`` (``usage``: how full the agent's context is).
    """

    kind: Literal["text", "thought", "tool", "plan", "permission", "commands", "mode",
                  "config", "usage"]
    text: str = ""
    tool_call_id: str | None = None
    title: str | None = None
    status: str | None = None  # pending | in_progress | completed | failed
    tool_kind: str | None = None  # read | edit | execute | …
    request_id: str | None = None
    #: ``{"option_id", "name", "kind"}``, kind ``allow_once`` / ``allow_always`` / ``reject_once`` /
    #: ``reject_always``
    options: list[AcpOption] = msgspec.field(default_factory=list)
    entries: list[tuple[str, str]] = msgspec.field(default_factory=list)  # (text, status)
    command: list[str] | None = None  # the argv of an ``execute`` call (its raw input)
    reason: str = ""  # a permission's why (its raw input's ``reason``, or its content)
    #: ``commands``: the agent's own slash commands, (name, description, input hint)
    commands: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    #: ``mode``: the agent's mode now, and its modes (None: not told in this update)
    current_mode: str = ""
    modes: list[AcpMode] | None = None
    #: ``config``: every config option and its value now
    config_options: list[AcpConfigOption] | None = None
    #: ``usage``: what the agent reported
    usage: AcpUsage | None = None


class WorkspaceReady(ResultBase, kw_only=True):
    """A session's worktree, made (``workspace_create``)."""

    path: str  # the worktree: the session's workdir from now on
    branch: str
    base: str  # the base as resolved (a branch name, or the commit given)
    base_commit: str  # the commit the branch started from
    repo_root: str  # the main checkout
    setup: str = ""  # the setup script that ran ("" when there was none)
    setup_exit: int | None = None


class ChangedFile(msgspec.Struct, kw_only=True):
    path: str
    status: Literal["added", "modified", "deleted", "renamed"] = "modified"
    old_path: str | None = None  # for a rename
    added: int = 0
    deleted: int = 0
    binary: bool = False
    committed: bool = True  # False: only in the working tree (not committed yet)
    #: it has changes not committed yet (what a commit can take); an older worker: unknown
    uncommitted: bool = False
    #: a binary file's size in bytes at the merge base and in the working tree (None: it is
    #: not there, or not binary)
    old_size: int | None = None
    new_size: int | None = None


class CommitInfo(msgspec.Struct, kw_only=True):
    sha: str
    subject: str


class WorkspaceChanges(ResultBase, kw_only=True):
    """The worktree's whole change against its base (``workspace_diff``)."""

    base: str
    merge_base: str
    files: list[ChangedFile] = msgspec.field(default_factory=list)
    diff: str = ""  # unified, against the merge base, working tree included
    truncated: bool = False
    commits: list[CommitInfo] = msgspec.field(default_factory=list)
    dirty: bool = False  # uncommitted changes
    behind: int = 0  # commits of the base not in the branch
    #: the worker commits only the paths a ``workspace_commit`` names (an older one takes
    #: everything, whatever it is sent)
    can_pick: bool = False


class WorkspaceRemoved(ResultBase, kw_only=True):
    path: str
    branch_deleted: bool = False


class WorkspaceCommitted(ResultBase, kw_only=True):
    sha: str
    files: int = 0


class WorkspaceMerged(ResultBase, kw_only=True):
    """``merged``: the base now has the branch; else ``conflicts`` names the files."""

    merged: bool
    sha: str = ""  # the base's new head
    conflicts: list[str] = msgspec.field(default_factory=list)
    message: str = ""


class WorkspacePushed(ResultBase, kw_only=True):
    remote: str
    branch: str
    pr_url: str = ""
    message: str = ""


class CheckpointTaken(ResultBase, kw_only=True):
    """A checkpoint kept (``checkpoint_record``): its commit, how many files it holds, and
    what it left out (files over the size, ignored ones; named, up to a cap)."""

    turn: str
    phase: Literal["start", "end"] = "start"
    commit: str
    files: int = 0
    skipped: list[str] = msgspec.field(default_factory=list)
    shadow: bool = False  # kept in the worker's shadow repository (not a git folder)


class CheckpointFile(msgspec.Struct, kw_only=True):
    path: str  # relative to the workdir's checkout (or folder)
    #: from the workdir now to the checkpoint: ``added`` (the restore makes it),
    #: ``deleted`` (the restore deletes it), ``modified``
    status: Literal["added", "deleted", "modified"] = "modified"
    diff: str = ""


class CheckpointPlan(ResultBase, kw_only=True):
    """``checkpoint_preview`` and ``checkpoint_diff``: the files and their diffs."""

    commit: str = ""
    files: list[CheckpointFile] = msgspec.field(default_factory=list)
    hand_edited: list[str] = msgspec.field(default_factory=list)


class CheckpointRestored(ResultBase, kw_only=True):
    restored: list[str] = msgspec.field(default_factory=list)
    kept: list[str] = msgspec.field(default_factory=list)


class CheckpointsPruned(ResultBase, kw_only=True):
    removed: int = 0
class PromptFile(msgspec.Struct, kw_only=True):
    """A prompt file, as Claude Code's and Codex's custom slash commands: ``name`` is its path
    under the commands folder without ``.md``, subfolders joined by ``:`` (``a/b.md`` →
    ``a:b``); the front matter's fields as given (``""`` / ``[]`` when absent); ``body`` is
    the text after the front matter, cut at the worker's cap."""

    name: str
    body: str
    path: str  # absolute, on the worker's machine
    scope: Literal["user", "project"] = "project"
    description: str = ""
    argument_hint: str = ""
    model: str = ""
    allowed_tools: list[str] = msgspec.field(default_factory=list)
    truncated: bool = False


class PromptFiles(ResultBase, kw_only=True):
    """What ``list_prompt_files`` found; ``warnings``: what was skipped or read in part and
    why (garbage front matter, a symlink, a file over the cap)."""

    files: list[PromptFile] = msgspec.field(default_factory=list)
    warnings: list[str] = msgspec.field(default_factory=list)
class SessionBundled(ResultBase, kw_only=True):
    """A session's work, bundled (``session_bundle``); read it with ``session_bundle_read``."""

    bundle_id: str
    size: int
    sha256: str
    source: Literal["git", "plain"] = "git"
    branch: str = ""
    head: str = ""
    snapshot: str = ""
    files: int = 0  # files in the snapshot


class BundleChunk(ResultBase, kw_only=True):
    data_b64: str  # base64
    eof: bool = False


class SessionUnpacked(ResultBase, kw_only=True):
    path: str
    files: int = 0
    source: Literal["git", "plain"] = "git"
HookDecision = Literal["", "allow", "deny", "ask", "block"]


class HookRun(msgspec.Struct, kw_only=True):
    """One hook command run, and what its answer means. ``decision``: ``deny``/``block``
    (exit code 2, or the JSON said so: ``reason`` says why), ``allow``/``ask`` (a
    ``PreToolUse`` permission decision), or none. ``stop``: the JSON said ``continue:
    false`` (``stop_reason``). ``problem``: why the answer was not understood (a timeout,
    a crash, output that is not the JSON it claimed to be), shown and otherwise ignored."""

    path: str
    command: str
    exit_code: int | None = None
    duration_ms: int = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    decision: HookDecision = ""
    reason: str = ""
    additional_context: str = ""
    updated_input: dict[str, Any] | None = None
    stop: bool = False
    stop_reason: str = ""
    system_message: str = ""
    problem: str = ""


class HooksRan(ResultBase, kw_only=True):
    """What ``run_hooks`` ran, and the files it read (``untrusted``: project files with
    hooks for this event that did not run, for the user to trust)."""

    runs: list[HookRun] = msgspec.field(default_factory=list)
    files: list[HookFile] = msgspec.field(default_factory=list)
    untrusted: list[HookFile] = msgspec.field(default_factory=list)


class AcpConfigured(ResultBase, kw_only=True):
    """The ACP agent's modes and config options after an :class:`AcpConfigure` (None: the
    agent has none of that kind)."""

    current_mode: str = ""
    modes: list[AcpMode] | None = None
    config_options: list[AcpConfigOption] | None = None


ActionOutcome = (
    CommandResult
    | PatchResult
    | FileContent
    | WriteResult
    | DirListing
    | McpTools
    | McpCallResult
    | Attached
    | Detached
    | ProjectContext
    | Cancelled
    | AcpTurnEnded
    | PermissionAnswered
    | ExecOutput
    | ExecProcesses
    | PortForwarded
    | GrepResult
    | GlobResult
    | EditResult
    | ImageContent
    | WorkspaceReady
    | WorkspaceChanges
    | WorkspaceRemoved
    | WorkspaceCommitted
    | WorkspaceMerged
    | WorkspacePushed
    | CheckpointTaken
    | CheckpointPlan
    | CheckpointRestored
    | CheckpointsPruned
    | PromptFiles
    | SessionBundled
    | BundleChunk
    | SessionUnpacked
    | HooksRan
    | AcpConfigured
)


# ---------------------------------------------------------------------------------------------
# worker → server


class AuthResponse(WorkerToServerMessage, kw_only=True):
    """Ed25519 signature over ``f"{nonce}:{worker_id}:{ts}"`` (base64url, no padding)."""

    worker_id: str
    ts: float
    signature: str
    credential: str


class Hello(WorkerToServerMessage, kw_only=True):
    """After ``Welcome``. ``known_sessions``: sessions attached in this worker process (not
    attached again); ``running_actions``: actions it still runs from an earlier connection —
    the server does not send those again, their answers come on this one."""

    protocol_version: int = PROTOCOL_VERSION
    worker_version: str
    hostname: str
    os: str
    python_version: str = ""
    #: sessions attached in this worker process (not attached again)
    known_sessions: list[str] = msgspec.field(default_factory=list)
    #: actions still running from an earlier connection (not sent again)
    running_actions: list[str] = msgspec.field(default_factory=list)
    capabilities: Capabilities = msgspec.field(default_factory=Capabilities)


class ActionAccepted(WorkerToServerMessage, kw_only=True):
    """The worker has the action (delivered): the server does not send it again on this
    connection; its answer follows."""

    action_id: str
    replayed: bool = False  # answered from the worker's record, not executed again


class ActionProgress(WorkerToServerMessage, kw_only=True):
    action_id: str
    #: "acp": ``data`` is one :class:`AcpUpdate` as JSON (an ``acp_prompt`` action)
    stream: Literal["stdout", "stderr", "acp"]
    data: str


class ActionResult(WorkerToServerMessage, kw_only=True):
    action_id: str
    result: ActionOutcome


class ActionErrored(WorkerToServerMessage, kw_only=True):
    """The action could not be carried out. ``code`` is machine-readable."""

    action_id: str
    code: str  # e.g. "path_outside_workdir", "denied_command", "bad_request", "patch_failed"
    message: str


class Heartbeat(WorkerToServerMessage, kw_only=True):
    """A beat ("still here"), every ``Welcome.heartbeat_s``."""

    ts: float
    #: ignored, and no longer sent: older workers filled it in (the server reads the hello's)
    running_actions: list[str] = msgspec.field(default_factory=list)


class Log(WorkerToServerMessage, kw_only=True):
    level: Literal["debug", "info", "warning", "error"] = "info"
    message: str


class WorkspaceChanged(WorkerToServerMessage, kw_only=True):
    session_id: str
    paths: list[str]


class Disconnect(WorkerToServerMessage, kw_only=True):
    reason: str


class ProcessTail(WorkerToServerMessage, kw_only=True):
    """More output of a process started with ``live`` (coalesced: at most 16 KiB, every
    ~50 ms), whoever reads it; what ``exec_write`` reads is not touched. ``reset``: ``data``
    is its whole tail (the newest 16 KiB), to replace what the server has — after a
    reconnect, or when the server missed some."""

    session_id: str
    process_id: str
    data: str
    #: ``data`` is its whole tail (the newest 16 KiB)
    reset: bool = False


class ProcessPorts(WorkerToServerMessage, kw_only=True):
    """The TCP ports a ``live`` process listens on inside a network of its own (sandboxed,
    network off), each time they change: no one outside its sandbox can reach them."""

    session_id: str
    process_id: str
    ports: list[int] = msgspec.field(default_factory=list)


class ProcessExited(WorkerToServerMessage, kw_only=True):
    """A ``live`` process has ended (by itself, or stopped: ``stopped_by``), with what is
    left of its output already sent as :class:`ProcessTail`."""

    session_id: str
    process_id: str
    exit_code: int | None = None
    signal: int | None = None
    stopped_by: StoppedBy = ""


class TerminalOutput(WorkerToServerMessage, kw_only=True):
    client_id: str
    data: str  # base64 of the bytes the terminal wrote


class TerminalEnded(WorkerToServerMessage, kw_only=True):
    """The client ended: its shell exited, it was detached or killed, or it could not start
    (``code``: ``terminal_disabled``, ``no_tmux``, ``path_outside_workdir``, ...)."""

    client_id: str
    terminal_id: str
    code: str = "exited"
    message: str = ""
    shell_alive: bool = False  # the tmux session still runs (only the client ended)


WorkerToServer = (
    AuthResponse
    | Hello
    | ActionAccepted
    | ActionProgress
    | ActionResult
    | ActionErrored
    | Heartbeat
    | Log
    | WorkspaceChanged
    | Disconnect
    | TerminalOutput
    | TerminalEnded
    | ProcessTail
    | ProcessPorts
    | ProcessExited
)


# ---------------------------------------------------------------------------------------------
# pairing over HTTP (the worker has no socket yet)


class PairRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/pairing/requests`` body, sent by an unpaired worker."""

    public_key: str  # Ed25519 raw public key, base64url
    hostname: str
    os: str
    python_version: str
    worker_version: str
    roots: list[str]


class PairTicket(msgspec.Struct, kw_only=True):
    """The answer to a :class:`PairRequest`: the code to show and how to wait."""

    request_id: str
    code: str  # "XXXX-XXXX"
    expires_at: float
    poll_secret: str  # proves the poller is the worker that asked


class PairStatus(msgspec.Struct, kw_only=True):
    """``GET /api/pairing/requests/{id}/wait`` — long-poll answer."""

    status: Literal["pending", "approved", "denied", "expired", "locked"]
    worker_id: str | None = None
    credential: str | None = None


__all__ = [
    "GIT_COMMAND_HARDENING",
    "GIT_HARDENING",
    "PROTOCOL_VERSION",
    "AcpConfigChoice",
    "AcpConfigOption",
    "AcpConfigure",
    "AcpConfigured",
    "AcpMode",
    "AcpUsage",
    "Action",
    "ActionAccepted",
    "ActionErrored",
    "ActionMessage",
    "ActionOutcome",
    "ActionProgress",
    "ActionResult",
    "ApplyPatch",
    "AttachSession",
    "Attached",
    "AuthChallenge",
    "AuthResponse",
    "Cancel",
    "Cancelled",
    "Capabilities",
    "CommandResult",
    "DetachSession",
    "Detached",
    "DirEntry",
    "DirListing",
    "Disconnect",
    "Edit",
    "EditResult",
    "Environment",
    "ExecForward",
    "ExecKill",
    "ExecList",
    "ExecOutput",
    "ExecProcesses",
    "ExecStart",
    "ExecWrite",
    "FileChange",
    "FileContent",
    "FrameRejected",
    "Glob",
    "GlobResult",
    "Grep",
    "GrepFile",
    "GrepLine",
    "GrepResult",
    "Heartbeat",
    "Hello",
    "ImageContent",
    "InstructionFile",
    "ListDir",
    "ListPromptFiles",
    "LoadContext",
    "Log",
    "McpCall",
    "McpCallResult",
    "McpList",
    "McpServerInfo",
    "McpTool",
    "McpTools",
    "PairRequest",
    "PairStatus",
    "PairTicket",
    "PortForwarded",
    "ProcessExited",
    "ProcessInfo",
    "ProcessPorts",
    "ProcessTail",
    "ProjectContext",
    "PromptFile",
    "PromptFiles",
    "ReadFile",
    "RecordedSandbox",
    "RunCommand",
    "SandboxInfo",
    "SandboxMode",
    "ServerToWorker",
    "ServerToWorkerMessage",
    "SkillInfo",
    "StoppedBy",
    "TerminalAck",
    "TerminalDetach",
    "TerminalEnded",
    "TerminalInput",
    "TerminalKill",
    "TerminalOpen",
    "TerminalOutput",
    "TerminalResize",
    "ViewImage",
    "Welcome",
    "WorkerToServer",
    "WorkerToServerMessage",
    "WorkspaceChanged",
    "WriteFile",
    "WriteResult",
    "runs_in",
]
