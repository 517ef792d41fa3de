"""Exactly-once dispatch of the server's actions to the executors.

:class:`ActionDispatcher` does no socket I/O: it is given a ``send(frame_bytes)`` coroutine and
is fed decoded actions with :meth:`ActionDispatcher.handle`. For every action it sends::

    ActionAccepted{action_id}                         at once
    ActionProgress{action_id, stream, data} ...       (run_command; a workspace_create's setup)
    ActionResult{action_id, result} | ActionErrored{action_id, code, message}

Each action runs in its own task, so several run at once; ``handle`` returns as soon as the
action is accepted. One exception: a ``read_file`` of a small regular file (up to
:data:`INLINE_READ_BYTES`) is read at once, on the loop, and its answer — sent without an
``ActionAccepted`` before it — is its acknowledgement: an answer says the action arrived as
surely as an acknowledgement does, and the extra frame cost a third of the round trip.

Exactly once (with :class:`~codey_worker.records.ActionRecords`): ``mark_started`` before
running, ``finish(action_id, response frame)`` after. An ``action_id`` seen before is never run
again:

* finished → ``ActionAccepted{replayed: true}`` and the recorded response frame, byte for byte;
* started by an earlier worker process that died → ``ActionAccepted{replayed: true}`` and
  ``ActionErrored{code: "interrupted"}`` (recorded, so the answer stays the same);
* running now in this process → ``ActionAccepted`` only; the response follows when it ends.

A response produced while disconnected is recorded even if ``send`` fails; the server re-sends
the action after reconnecting and gets the recorded frame.

Errors: ``ActionRefused`` → its ``code``/``message``; ``PatchError`` → ``patch_failed``; anything
unexpected → ``internal`` with the exception's message. The worker never crashes on an action.
Every path is confined to the action's workdir, and the workdir must lie inside the owner's
allowed roots (:class:`~codey_worker.policy.LocalPolicy`), whatever the server sends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from codey_protocol import codec
from codey_protocol.worker import (
    AcpConfigure,
    AcpPermission,
    AcpPrompt,
    AcpUpdate,
    ActionAccepted,
    ActionErrored,
    ActionMessage,
    ActionOutcome,
    ActionProgress,
    ActionResult,
    ApplyPatch,
    Attached,
    AttachSession,
    Cancel,
    Cancelled,
    CheckpointDiff,
    CheckpointFile,
    CheckpointPlan,
    CheckpointPreview,
    CheckpointPrune,
    CheckpointRecord,
    CheckpointRestore,
    CheckpointRestored,
    CheckpointsPruned,
    CheckpointTaken,
    CommandResult,
    Detached,
    DetachSession,
    Edit,
    ExecForward,
    ExecKill,
    ExecList,
    ExecStart,
    ExecWrite,
    FileChange,
    Glob,
    Grep,
    ListDir,
    ListPromptFiles,
    LoadContext,
    McpCall,
    McpList,
    McpServerInfo,
    McpTools,
    PatchResult,
    ProjectContext,
    ReadFile,
    RunCommand,
    RunHooks,
    SessionBundle,
    SessionBundleRead,
    SessionUnpack,
    ViewImage,
    WorkspaceCommit,
    WorkspaceCreate,
    WorkspaceDiff,
    WorkspaceMerge,
    WorkspacePush,
    WorkspaceRemove,
    WriteFile,
    runs_in,
)
from codey_worker import fs
from codey_worker.acp import AcpAgents
from codey_worker.config import codey_home
from codey_worker.confine import ActionRefused, within
from codey_worker.console import WorkerConsole
from codey_worker.frames import encode_fitted
from codey_worker.git import GitRunner
from codey_worker.mcp import McpManager
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords
from codey_worker.sandbox import Sandbox
from codey_worker.shell import CommandRegistry, run_command
from codey_worker.warm import supervisor_env
from codey_worker.watch import WorkspaceWatcher

if TYPE_CHECKING:
    from codey_worker.checkpoints import Checkpoints, FileDelta
    from codey_worker.move import Mover
    from codey_worker.processes import ProcessTable
    from codey_worker.workspaces import Workspaces

# The executors below load with their first action, not with the worker (an idle worker's
# memory is mostly the code it imported): codey_worker.context, .edit, .images, .patch,
# .processes, .search and .workspaces (test_lazy_imports.py holds them to it).

__all__ = ["EXECUTORS", "ActionDispatcher", "Executor", "Send"]

log = logging.getLogger(__name__)

Send = Callable[[bytes], Awaitable[None]]
"""``await send(frame)``: one encoded worker→server frame. May raise when disconnected."""

READ_RESULTS_KEPT = 500
READ_RESULTS_BYTES = 32 * 1024 * 1024
#: how long attach_session waits for MCP servers to list their tools before answering with
#: what is known (a slow or hung MCP server must not hold up a session)
ATTACH_MCP_TIMEOUT_S = 20.0
#: files up to this size are read on the event loop, not in a thread
INLINE_READ_BYTES = 64 * 1024


A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class Executor(Generic[A]):
    """How :class:`ActionDispatcher` carries out one type of action: an entry of
    :data:`_EXECUTORS`, the one table from action type to executor."""

    #: ``await run(dispatcher, action)``: the action's outcome; raises ActionRefused & co.
    run: Callable[[ActionDispatcher, A], Awaitable[ActionOutcome]]
    #: its answer is kept in the record store, so a re-sent action is answered from there
    #: after a restart. False for actions that change nothing (running one again is
    #: harmless) and for those that act on a process of this worker (after a restart there
    #: is none: a re-sent one is answered process_gone, never carried out twice); their
    #: answers are kept in memory only (the last READ_RESULTS_KEPT of them,
    #: READ_RESULTS_BYTES in all at most), so a repeat within this process is answered from
    #: there
    recorded: bool = True
    #: it may change files of the workdir: what changes meanwhile is its session's
    changes_workdir: bool = True
    #: it runs in a thread: a cancel cannot stop it halfway
    threaded: bool = False


def _looks(run: Callable[[ActionDispatcher, A], Awaitable[ActionOutcome]],
           threaded: bool = False) -> Executor[A]:
    """An action that changes nothing."""
    return Executor(run, recorded=False, changes_workdir=False, threaded=threaded)


class ActionDispatcher:
    """Runs actions exactly once and reports them through ``send``. See the module docstring.

    ``mcp`` and ``watcher`` are optional so tests can leave them out: without them, MCP
    actions are refused (``mcp_unavailable``) and attached workdirs are not watched.
    ``sandbox`` wraps commands (default: this machine's, with ``home``'s temp dirs).
    """

    def __init__(
        self,
        send: Send,
        records: ActionRecords,
        policy: LocalPolicy,
        *,
        registry: CommandRegistry | None = None,
        mcp: McpManager | None = None,
        watcher: WorkspaceWatcher | None = None,
        console: WorkerConsole | None = None,
        kill_grace_s: float | None = None,
        home: Path | None = None,
        acp: AcpAgents | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self._send = send
        self.records = records
        self.policy = policy
        self.registry = registry or CommandRegistry()
        self.mcp = mcp
        self.watcher = watcher
        self.acp = acp
        self.console = console
        self._kill_grace_s = kill_grace_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._running_actions: dict[str, ActionMessage] = {}
        self._reads: OrderedDict[str, bytes] = OrderedDict()  # answers of recent reads
        self._reads_bytes = 0  # their total size
        self._cancel_requested: set[str] = set()
        #: why the worker is stopping (set by :meth:`shutdown`): the commands it stops say so
        self._stopping: str | None = None
        self._attached: dict[str, Path] = {}
        self._attached_as: dict[str, str] = {}  # each one's workdir as the server spelled it
        self._prewarming: set[asyncio.Task[None]] = set()
        #: $CODEY_HOME: where the user's own AGENTS.md and skills are
        self.home = home if home is not None else codey_home()
        self.sandbox = sandbox if sandbox is not None else Sandbox.detected(self.home)
        #: the one runner of the worker's own git (context, worktrees), in the sandbox
        self.git = GitRunner(self.sandbox)
        self._processes: ProcessTable | None = None
        self._workspaces: Workspaces | None = None
        self._checkpoints: Checkpoints | None = None
        self._mover: Mover | None = None

    @property
    def workspaces(self) -> Workspaces:
        """The sessions' git worktrees (workspace_create & co.), made with the first."""
        if self._workspaces is None:
            from codey_worker.workspaces import Workspaces

            self._workspaces = Workspaces(self.policy, self.sandbox, self.registry, self.git)
        return self._workspaces

    @property
    def processes(self) -> ProcessTable:
        """The sessions' long-lived processes (exec_start & co.), made with the first."""
        if self._processes is None:
            from codey_worker.processes import ProcessTable

            grace = {} if self._kill_grace_s is None else {"grace_s": self._kill_grace_s}
            self._processes = ProcessTable(self.policy, self.sandbox, registry=self.registry,
                                           send=self._send, **grace)
        return self._processes

    # -- what the connection asks ----------------------------------------------------------

    def running(self) -> list[str]:
        """Ids of actions running now in this process (for Hello and Heartbeat)."""
        return list(self._tasks)

    def connected(self) -> None:
        """The worker is connected (again), its hello sent: what it pushes on its own and
        could not send meanwhile is made up for (the processes' live tails)."""
        if self._processes is not None:
            self._processes.connected()

    def known_sessions(self) -> list[str]:
        """Session ids attached in this process."""
        return list(self._attached)

    async def handle(self, action: ActionMessage, raw: bytes | None = None) -> None:
        """Accept ``action`` (or answer it from the record) and start it; returns at once.

        ``raw`` is the frame as received, kept in the record; encoded again when omitted.
        """
        action_id = action.action_id
        if not _executor(action).recorded:
            await self._handle_read(action)
            return
        existing = self.records.mark_started(action_id, raw or codec.encode(action))
        if existing is None:
            # the task first: if sending the acknowledgement is interrupted, the action still
            # runs and is answered (a started record must always get its answer)
            self._running_actions[action_id] = action
            self._tasks[action_id] = asyncio.create_task(self._run(action),
                                                         name=f"action-{action_id}")
            await self._emit(codec.encode(ActionAccepted(action_id=action_id)))
            return
        if existing.status == "finished" and existing.response is not None:
            await self._emit(codec.encode(ActionAccepted(action_id=action_id, replayed=True)))
            await self._emit(existing.response)
        elif existing.live or action_id in self._tasks:
            await self._emit(codec.encode(ActionAccepted(action_id=action_id)))
        else:
            frame = codec.encode(ActionErrored(
                action_id=action_id, code="interrupted",
                message="the worker stopped while this action was running; it was not run again",
            ))
            self.records.finish(action_id, frame)
            # finish keeps the first response: send whatever the record now holds
            record = self.records.get(action_id)
            response = record.response if record and record.response else frame
            await self._emit(codec.encode(ActionAccepted(action_id=action_id, replayed=True)))
            await self._emit(response)

    async def shutdown(self, grace_s: float = 6.0, reason: str = "stopped") -> None:
        """Stop every running action: commands get SIGTERM (then SIGKILL), other actions are
        cancelled. Waits up to ``grace_s`` for commands to record their results, each with
        ``worker_stopped=reason`` (why the worker stops: "signal SIGTERM")."""
        self._stopping = reason
        self.registry.cancel_all()
        # the sessions' processes: SIGTERM now, SIGKILL after their grace
        closing = asyncio.ensure_future(
            self._processes.close() if self._processes is not None else asyncio.sleep(0))
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await closing
        self.sandbox.close_boxes()
        if self.watcher is not None:
            await self.watcher.close()
        if self.mcp is not None:
            await self.mcp.close()
        if self.acp is not None:
            await self.acp.close()

    async def _handle_read(self, action: ActionMessage) -> None:
        """An action not recorded on disk (:attr:`Executor.recorded`): answered from memory
        when repeated, else run.

        Reads change nothing, so they are not written to the record store: after a worker
        restart a repeated read simply runs again, with the same effect as answering it from
        a record — and each read saves two SQLite transactions.
        """
        action_id = action.action_id
        done = self._reads.get(action_id)
        if done is not None:
            await self._emit(codec.encode(ActionAccepted(action_id=action_id, replayed=True)))
            await self._emit(done)
        elif action_id in self._tasks:
            await self._emit(codec.encode(ActionAccepted(action_id=action_id)))
        elif (response := self._read_at_once(action)) is not None:
            # Answered at once, on the loop: the answer is the acknowledgement. An
            # ActionAccepted first would cost a frame each way and delay the answer for nothing.
            await self._finish(action, response)
        else:
            self._running_actions[action_id] = action
            self._tasks[action_id] = asyncio.create_task(self._run(action),
                                                         name=f"action-{action_id}")
            await self._emit(codec.encode(ActionAccepted(action_id=action_id)))

    def _read_at_once(self, action: ActionMessage) -> ActionResult | ActionErrored | None:
        """The answer to a read_file of a small file (or a refused one); None otherwise."""
        if not isinstance(action, ReadFile):
            return None
        try:
            self._pinned(action)
            content = fs.read_small_file(action, self.policy, INLINE_READ_BYTES,
                                         self.sandbox.boundary)
        except Exception as exc:
            return self._errored(action.action_id, exc)
        return None if content is None else ActionResult(action_id=action.action_id,
                                                         result=content)

    async def wait_idle(self) -> None:
        """Wait until no action is running (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    # -- running ---------------------------------------------------------------------------

    async def _emit(self, frame: bytes) -> None:
        try:
            await self._send(frame)
        except Exception:  # disconnected: the record answers when the server asks again
            log.debug("could not send a frame", exc_info=True)

    @staticmethod
    def _errored(action_id: str, exc: Exception) -> ActionErrored:
        """The answer for an action that raised: refusals keep their code, the rest are
        ``internal`` (the worker never crashes on an action)."""
        if isinstance(exc, ActionRefused):
            return ActionErrored(action_id=action_id, code=exc.code, message=exc.message)
        patch = sys.modules.get("codey_worker.patch")  # (not loaded: no patch ran)
        if patch is not None and isinstance(exc, patch.PatchError):
            return ActionErrored(action_id=action_id, code="patch_failed", message=exc.message)
        log.error("action %s failed", action_id, exc_info=exc)
        return ActionErrored(action_id=action_id, code="internal",
                             message=f"{type(exc).__name__}: {exc}")

    async def _run(self, action: ActionMessage) -> None:
        # what changes in the workdir while it runs is this session's (watch.py)
        watcher = self.watcher if _executor(action).changes_workdir else None
        if watcher is not None:
            watcher.acting(action.session_id)
        try:
            if watcher is not None:
                await watcher.until_ready(action.session_id)
            await self._run_action(action)
        finally:
            if watcher is not None:
                watcher.acted(action.session_id)

    async def _run_action(self, action: ActionMessage) -> None:
        action_id = action.action_id
        response: ActionResult | ActionErrored
        try:
            outcome = await self._execute(action)
            if isinstance(outcome, CommandResult) and outcome.cancelled \
                    and self._stopping is not None and action_id not in self._cancel_requested:
                # nobody asked for this cancel: the worker stopped it on its way out
                outcome.worker_stopped = self._stopping
            response = ActionResult(action_id=action_id, result=outcome)
        except asyncio.CancelledError:
            if action_id not in self._cancel_requested:
                # The worker is stopping: no response recorded, so a re-send after the
                # restart is answered "interrupted" — never run twice.
                self._tasks.pop(action_id, None)
                self._running_actions.pop(action_id, None)
                raise
            response = ActionErrored(action_id=action_id, code="cancelled",
                                     message="the action was cancelled")
        except Exception as exc:
            response = self._errored(action_id, exc)
        await self._finish(action, response)

    async def _finish(self, action: ActionMessage, response: ActionResult | ActionErrored) -> None:
        """Keep the answer (memory for reads, the record store for the rest), then send it."""
        action_id = action.action_id
        self._cancel_requested.discard(action_id)
        frame = encode_fitted(response)
        if not _executor(action).recorded:
            old = self._reads.pop(action_id, None)
            self._reads_bytes -= len(old) if old is not None else 0
            self._reads[action_id] = frame
            self._reads_bytes += len(frame)
            while len(self._reads) > READ_RESULTS_KEPT or (
                self._reads_bytes > READ_RESULTS_BYTES and len(self._reads) > 1
            ):
                _, dropped = self._reads.popitem(last=False)
                self._reads_bytes -= len(dropped)
        else:
            try:
                self.records.finish(action_id, frame)
            except Exception:
                log.exception("could not record the result of %s", action_id)
        self._tasks.pop(action_id, None)
        self._running_actions.pop(action_id, None)
        if isinstance(response, ActionErrored) and self.console is not None:
            self.console.error(f"{response.code}: {response.message}", action.session_id)
        await self._emit(frame)

    def _pinned(self, action: ActionMessage) -> None:
        """Refuse (``workdir_changed``) an action of an attached session whose workdir now
        leads to another folder than the one attached: a folder swapped for a symlink since
        (by another session's command, whose sandbox may write the folder holding it) does
        not carry the session, its file tools and its sandbox, somewhere else."""
        workdir = getattr(action, "workdir", None)
        if not workdir or isinstance(action, AttachSession):
            return
        pinned = self._attached.get(action.session_id)
        real = self.policy.check_workdir(workdir)
        # (by the workdir's spelling: a session moved into its worktree names a new folder)
        if pinned is None or workdir != self._attached_as.get(action.session_id):
            self._check_no_foreign_link(workdir, real)  # not attached: as an attach would
            return
        if real != pinned:
            raise ActionRefused("workdir_changed", f"{workdir} now leads to {real}, not to "
                                f"{pinned}, the folder this session was started in; nothing "
                                "was done (a folder on the way was replaced by a symlink)")

    async def _execute(self, action: ActionMessage) -> ActionOutcome:
        self._pinned(action)
        workdir = getattr(action, "workdir", None)
        if workdir:  # said as such, not as "not_found": the server stops the session's turns
            self.policy.check_not_gone(self.policy.check_workdir(workdir))
        return await _executor(action).run(self, action)

    # -- the executors (see _EXECUTORS) ------------------------------------------------------

    async def _read_file(self, action: ReadFile) -> ActionOutcome:
        # small files never get here: they are read at once
        return await asyncio.to_thread(fs.read_file, action, self.policy, fs.MAX_READ_BYTES,
                                       self.sandbox.boundary)

    async def _write_file(self, action: WriteFile) -> ActionOutcome:
        return await asyncio.to_thread(fs.write_file, action, self.policy,
                                       self.sandbox.boundary)

    async def _list_dir(self, action: ListDir) -> ActionOutcome:
        return await asyncio.to_thread(fs.list_dir, action, self.policy, fs.MAX_ENTRIES,
                                       self.sandbox.boundary)

    async def _edit(self, action: Edit) -> ActionOutcome:
        from codey_worker.edit import edit_file

        return await asyncio.to_thread(edit_file, action, self.policy, self.sandbox.boundary)

    async def _view_image(self, action: ViewImage) -> ActionOutcome:
        from codey_worker.images import MAX_IMAGE_BYTES, view_image

        return await asyncio.to_thread(view_image, action, self.policy, MAX_IMAGE_BYTES,
                                       self.sandbox.boundary)

    async def _exec_start(self, action: ExecStart) -> ActionOutcome:
        if self.console is not None:
            self.console.running(action.session_id, action.argv)
        return await self.processes.start(action)

    async def _exec_write(self, action: ExecWrite) -> ActionOutcome:
        return await self.processes.write(action)

    async def _exec_kill(self, action: ExecKill) -> ActionOutcome:
        return await self.processes.kill(action)

    async def _exec_list(self, action: ExecList) -> ActionOutcome:
        return self.processes.listing(action.session_id)

    async def _exec_forward(self, action: ExecForward) -> ActionOutcome:
        return await self.processes.forward(action)

    async def _grep(self, action: Grep) -> ActionOutcome:
        from codey_worker.search import grep

        return await grep(action, self.policy, sandbox=self.sandbox,
                          boundary=self.sandbox.boundary)

    async def _glob(self, action: Glob) -> ActionOutcome:
        from codey_worker.search import glob

        return await glob(action, self.policy, sandbox=self.sandbox,
                          boundary=self.sandbox.boundary)

    async def _detach(self, action: DetachSession) -> ActionOutcome:
        was = self._attached.pop(action.session_id, None) is not None
        self._attached_as.pop(action.session_id, None)
        if self.watcher is not None:
            was = self.watcher.unwatch(action.session_id) or was
        # its processes and its private /tmp go with it
        if self._processes is not None:
            await self._processes.stop_session(action.session_id)
        self.sandbox.close_box(action.session_id)
        await asyncio.to_thread(self.sandbox.drop_session, action.session_id)
        return Detached(was_attached=was)

    async def _load_context(self, action: LoadContext) -> ActionOutcome:
        workdir = self._check_workdir(action.workdir)
        roots = [Path(os.path.realpath(r)) for r in self.policy.allowed_roots]
        from codey_worker.context import load_context

        return await load_context(workdir, roots, self.home, self.git, self.sandbox.boundary,
                                  action.session_id)

    async def _list_prompt_files(self, action: ListPromptFiles) -> ActionOutcome:
        workdir = self._check_workdir(action.workdir)
        from codey_worker.prompts import list_prompt_files

        return await list_prompt_files(workdir, self.home, boundary=self.sandbox.boundary)
    async def _load_context_with_hooks(self, action: LoadContext) -> ActionOutcome:
        found = await self._load_context(action)
        from codey_worker.hooks import read_hook_files

        assert isinstance(found, ProjectContext)
        workdir = self._check_workdir(action.workdir)
        found.hooks = await asyncio.to_thread(read_hook_files, workdir, self.home, None,
                                              self.sandbox.boundary)
        return found

    async def _run_hooks(self, action: RunHooks) -> ActionOutcome:
        workdir = self._check_workdir(action.workdir)
        from codey_worker.hooks import run_hooks

        async def run_one(command: RunCommand) -> CommandResult:
            async def on_output(stream: str, data: str) -> None:
                return None  # (a hook's output comes back in its run, capped)

            grace = {} if self._kill_grace_s is None else {"grace_s": self._kill_grace_s}
            return await run_command(command, on_output, self.policy, registry=self.registry,
                                     sandbox=self.sandbox, **grace)

        return await run_hooks(action, workdir, self.home, run_one,
                               boundary=self.sandbox.boundary)

    async def _mcp_list(self, action: McpList) -> ActionOutcome:
        where = self._check_workdir(action.workdir) if action.workdir else None
        return McpTools(servers=await self._mcp().list_all(where))

    async def _mcp_call(self, action: McpCall) -> ActionOutcome:
        self.policy.check_mcp_tool(action.server, action.tool)
        return await self._mcp().call(action.server, action.tool, action.arguments,
                                      workdir=self._mcp_workdir(action),
                                      sandbox=runs_in(action.sandbox))

    async def _acp_permission(self, action: AcpPermission) -> ActionOutcome:
        return self._acp().answer(action)

    async def _acp_configure(self, action: AcpConfigure) -> ActionOutcome:
        return await self._acp().configure(action, self._check_workdir(action.workdir))

    async def _workspace_diff(self, action: WorkspaceDiff) -> ActionOutcome:
        return await self.workspaces.diff(action)

    async def _workspace_remove(self, action: WorkspaceRemove) -> ActionOutcome:
        return await self.workspaces.remove(action)

    async def _workspace_commit(self, action: WorkspaceCommit) -> ActionOutcome:
        return await self.workspaces.commit(action)

    async def _workspace_merge(self, action: WorkspaceMerge) -> ActionOutcome:
        return await self.workspaces.merge(action)

    async def _workspace_push(self, action: WorkspacePush) -> ActionOutcome:
        return await self.workspaces.push(action)

    @property
    def checkpoints(self) -> Checkpoints:
        """The sessions' checkpoints (checkpoint_* actions), made with the first."""
        if self._checkpoints is None:
            from codey_worker.checkpoints import Checkpoints

            self._checkpoints = Checkpoints(self.git, self.home)
        return self._checkpoints

    async def _checkpoint_record(self, action: CheckpointRecord) -> ActionOutcome:
        snap, store = await self.checkpoints.record(
            self._check_workdir(action.workdir), action.session_id, action.turn, action.phase,
            action.max_file_bytes, action.keep)
        return CheckpointTaken(turn=action.turn, phase=action.phase, commit=snap.commit,
                               files=snap.files, skipped=snap.skipped, shadow=store.shadow)

    async def _checkpoint_preview(self, action: CheckpointPreview) -> ActionOutcome:
        files, edited, commit = await self.checkpoints.preview(
            self._check_workdir(action.workdir), action.session_id, action.turn)
        return CheckpointPlan(commit=commit, files=_plan_files(files), hand_edited=edited)

    async def _checkpoint_restore(self, action: CheckpointRestore) -> ActionOutcome:
        restored, kept = await self.checkpoints.restore(
            self._check_workdir(action.workdir), action.session_id, action.turn, action.keep,
            action.path)
        return CheckpointRestored(restored=restored, kept=kept)

    async def _checkpoint_diff(self, action: CheckpointDiff) -> ActionOutcome:
        files = await self.checkpoints.diff(self._check_workdir(action.workdir),
                                            action.session_id, action.from_turn, action.to_turn)
        # (from the older to the newer: "added" is what the later one has)
        return CheckpointPlan(files=_plan_files(files))

    async def _checkpoint_prune(self, action: CheckpointPrune) -> ActionOutcome:
        workdir = self._check_workdir(action.workdir) if action.workdir else None
        return CheckpointsPruned(removed=await self.checkpoints.prune(
            workdir, action.session_id, action.keep))

    @property
    def mover(self) -> Mover:
        """Moving sessions between machines (session_bundle & co.), made with the first."""
        if self._mover is None:
            from codey_worker.move import Mover

            self._mover = Mover(self.policy, self.git, self.home)
        return self._mover

    async def _session_bundle(self, action: SessionBundle) -> ActionOutcome:
        return await self.mover.bundle(action)

    async def _session_bundle_read(self, action: SessionBundleRead) -> ActionOutcome:
        return self.mover.read(action)

    async def _session_unpack(self, action: SessionUnpack) -> ActionOutcome:
        return await self.mover.unpack(action)

    async def _unknown(self, action: ActionMessage) -> ActionOutcome:
        raise ActionRefused("bad_request", f"this worker cannot run {type(action).__name__}")

    def _acp(self) -> AcpAgents:
        if self.acp is None:
            raise ActionRefused("acp_unavailable", "this worker runs no ACP agents")
        return self.acp

    async def _acp_prompt(self, action: AcpPrompt) -> ActionOutcome:
        agents = self._acp()
        workdir = self._check_workdir(action.workdir)
        action_id = action.action_id

        async def emit(update: AcpUpdate) -> None:
            await self._emit(codec.encode(ActionProgress(
                action_id=action_id, stream="acp", data=codec.encode(update).decode())))

        return await agents.prompt(action, workdir, emit)

    async def _workspace_create(self, action: WorkspaceCreate) -> ActionOutcome:
        action_id = action.action_id

        async def emit(stream: Literal["stdout", "stderr"], data: str) -> None:
            await self._emit(codec.encode(ActionProgress(action_id=action_id, stream=stream,
                                                         data=data)))

        return await self.workspaces.create(action, emit)

    def _check_workdir(self, workdir: str) -> Path:
        real = self.policy.check_workdir(workdir)
        if not real.is_dir():
            raise ActionRefused("not_found", f"workdir {real} does not exist; attach it first")
        return real

    def _mcp_workdir(self, action: McpCall) -> Path:
        """The workdir an MCP call runs in: the action's, else its session's attached one."""
        workdir = action.workdir or str(self._attached.get(action.session_id) or "")
        if not workdir:
            raise ActionRefused("bad_request", "an MCP call needs its session's workdir: "
                                               "attach the session first")
        return self._check_workdir(workdir)

    def _mcp(self) -> McpManager:
        if self.mcp is None:
            raise ActionRefused("mcp_unavailable", "this worker has no MCP servers")
        return self.mcp

    async def _run_command(self, action: RunCommand) -> ActionOutcome:
        action_id = action.action_id

        async def on_output(stream: str, data: str) -> None:
            kind: Literal["stdout", "stderr"] = "stderr" if stream == "stderr" else "stdout"
            await self._emit(codec.encode(ActionProgress(action_id=action_id, stream=kind,
                                                         data=data)))

        # Checks first (run_command repeats them) so a refused command is not shown as running.
        self.policy.check_command(action.argv)
        self.policy.check_env(action.env)
        if self.console is not None:
            self.console.running(action.session_id, action.argv)
        if self._kill_grace_s is None:
            return await run_command(action, on_output, self.policy, registry=self.registry,
                                     sandbox=self.sandbox)
        return await run_command(action, on_output, self.policy, registry=self.registry,
                                 grace_s=self._kill_grace_s, sandbox=self.sandbox)

    async def _apply_patch(self, action: ApplyPatch) -> ActionOutcome:
        root = self._check_workdir(action.workdir)
        from codey_worker.patch import apply_patch

        outcome = await asyncio.to_thread(apply_patch, action.patch, root,
                                          self.sandbox.boundary)
        if self.console is not None:
            self.console.patch(action.session_id, len(outcome.files))
        return PatchResult(
            files=[FileChange(path=f.path, op=f.op, moved_to=f.moved_to, added=f.added,
                              removed=f.removed) for f in outcome.files],
            diff=outcome.diff,
        )

    def _prewarm(self, session_id: str, workdir: Path) -> None:
        """Start the session's warm box now (workspace-write, network off: what most
        sessions run), while the model thinks, so its first command does not wait for it."""
        boxes = self.sandbox.boxes
        if boxes is None:
            return

        async def warm() -> None:
            try:
                spec = self.sandbox.spec(mode="workspace-write", network=False, workdir=workdir,
                                         cwd=workdir, tmp=self.sandbox.tmp_for(
                                             "workspace-write", session_id))
                await boxes.get(session_id, self.sandbox.warm_prefix(spec),
                                supervisor_env(), spec.workdir)
            except Exception:  # the first command starts one (or a bwrap) and says why
                log.debug("no warm box for %s", session_id, exc_info=True)

        task = asyncio.get_running_loop().create_task(warm())
        self._prewarming.add(task)
        task.add_done_callback(self._prewarming.discard)

    def _check_no_foreign_link(self, text: str, real: Path) -> None:
        """Refuse (``workdir_changed``) a workdir reached through a symlink that lies inside
        another attached session's folder: that folder is the other session's model's to
        write, so the link may be its doing (a sub-agent's ``sub -> ~`` from its parent)."""
        spelled = os.path.normpath(text)
        if spelled == str(real):
            return
        here = Path("/")
        for part in Path(spelled).parts[1:]:
            here = here / part
            if here.is_symlink() and any(within(os.path.realpath(here.parent), str(other))
                                         for other in self._attached.values()):
                raise ActionRefused("workdir_changed", f"{text} goes through the symlink "
                                    f"{here}, inside another session's folder: refused (its "
                                    "model may have made it)")

    async def _attach(self, action: AttachSession) -> ActionOutcome:
        workdir = self.policy.check_workdir(action.workdir)
        # a worktree that was removed is not made again as an empty folder
        self.policy.check_not_gone(workdir)
        if self._attached_as.get(action.session_id) != action.workdir:
            self._check_no_foreign_link(action.workdir, workdir)
        elif self._attached[action.session_id] != workdir:
            raise ActionRefused("workdir_changed", f"{action.workdir} now leads to {workdir}, "
                                f"not to {self._attached[action.session_id]}, the folder this "
                                "session was started in")
        created = False
        if workdir.exists():
            if not workdir.is_dir():
                raise ActionRefused("not_a_directory", f"{workdir} exists and is not a directory")
        else:
            try:
                workdir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ActionRefused("io_error",
                                    f"cannot create {workdir}: {exc.strerror or exc}") from None
            created = True
        self._attached[action.session_id] = workdir
        self._attached_as[action.session_id] = action.workdir
        self._prewarm(action.session_id, workdir)
        if self.watcher is not None:
            self.watcher.watch(action.session_id, workdir)
        if self.console is not None:
            self.console.attached(action.session_id, str(workdir))
        servers: list[McpServerInfo] = []
        if self.mcp is not None:
            try:
                # in the workdir, by the process the session's calls there use: a server that
                # confines itself to its cwd cannot start in the scratch directory hello's
                # list came from
                servers = await asyncio.wait_for(self.mcp.list_all(workdir),
                                                 ATTACH_MCP_TIMEOUT_S)
            except TimeoutError:
                servers = self.mcp.cached()
        return Attached(workdir=str(workdir), created=created, mcp_servers=servers)

    async def _cancel(self, action: Cancel) -> ActionOutcome:
        target = action.target_action_id
        if self.registry.cancel(target):
            return Cancelled(target_action_id=target, was_running=True)
        task = self._tasks.get(target)
        running = self._running_actions.get(target)
        if running is not None and _executor(running).threaded:
            # a write or patch in a thread cannot be stopped halfway: let it finish and report
            # what really happened, rather than "cancelled" for a change that still lands
            return Cancelled(target_action_id=target, was_running=True)
        if task is not None and target != action.action_id and not task.done():
            self._cancel_requested.add(target)
            task.cancel()
            return Cancelled(target_action_id=target, was_running=True)
        return Cancelled(target_action_id=target, was_running=False)


#: The one table from action type to executor: what each action runs, and how the dispatcher
#: keeps its answer. ``EXECUTORS`` (the tags a worker announces in its hello) is read from it.
_EXECUTORS: dict[type[ActionMessage], Executor[Any]] = {
    RunCommand: Executor(ActionDispatcher._run_command),
    ReadFile: _looks(ActionDispatcher._read_file, threaded=True),
    WriteFile: Executor(ActionDispatcher._write_file, threaded=True),
    ListDir: _looks(ActionDispatcher._list_dir, threaded=True),
    ApplyPatch: Executor(ActionDispatcher._apply_patch, threaded=True),
    McpList: _looks(ActionDispatcher._mcp_list),
    McpCall: Executor(ActionDispatcher._mcp_call),
    AttachSession: Executor(ActionDispatcher._attach, changes_workdir=False),
    DetachSession: Executor(ActionDispatcher._detach, changes_workdir=False),
    LoadContext: _looks(ActionDispatcher._load_context_with_hooks),
    Cancel: Executor(ActionDispatcher._cancel, changes_workdir=False),
    AcpPrompt: Executor(ActionDispatcher._acp_prompt),
    AcpPermission: Executor(ActionDispatcher._acp_permission),
    # the agent's state, not a file: set again after a restart it is set to the same
    AcpConfigure: Executor(ActionDispatcher._acp_configure, recorded=False,
                           changes_workdir=False),
    Edit: Executor(ActionDispatcher._edit, threaded=True),
    ViewImage: _looks(ActionDispatcher._view_image, threaded=True),
    Grep: _looks(ActionDispatcher._grep),
    Glob: _looks(ActionDispatcher._glob),
    ExecStart: Executor(ActionDispatcher._exec_start),
    ExecWrite: Executor(ActionDispatcher._exec_write, recorded=False),
    ExecKill: Executor(ActionDispatcher._exec_kill, recorded=False, changes_workdir=False),
    ExecList: Executor(ActionDispatcher._exec_list, recorded=False, changes_workdir=False),
    ExecForward: Executor(ActionDispatcher._exec_forward, recorded=False,
                          changes_workdir=False),
    WorkspaceCreate: Executor(ActionDispatcher._workspace_create),
    WorkspaceDiff: _looks(ActionDispatcher._workspace_diff),
    WorkspaceRemove: Executor(ActionDispatcher._workspace_remove),
    WorkspaceCommit: Executor(ActionDispatcher._workspace_commit),
    WorkspaceMerge: Executor(ActionDispatcher._workspace_merge),
    WorkspacePush: Executor(ActionDispatcher._workspace_push),
    # a checkpoint writes the repository's objects and refs, never the work tree
    CheckpointRecord: Executor(ActionDispatcher._checkpoint_record, changes_workdir=False),
    CheckpointPreview: _looks(ActionDispatcher._checkpoint_preview),
    CheckpointRestore: Executor(ActionDispatcher._checkpoint_restore),
    CheckpointDiff: _looks(ActionDispatcher._checkpoint_diff),
    CheckpointPrune: Executor(ActionDispatcher._checkpoint_prune, changes_workdir=False),
    ListPromptFiles: _looks(ActionDispatcher._list_prompt_files),
    # the bundle is kept in memory for its reads: after a restart a repeat bundles again
    SessionBundle: Executor(ActionDispatcher._session_bundle, recorded=False,
                            changes_workdir=False),
    SessionBundleRead: _looks(ActionDispatcher._session_bundle_read),
    SessionUnpack: Executor(ActionDispatcher._session_unpack, changes_workdir=False),
    # a hook may change files (a formatter): its session's, as a command's
    RunHooks: Executor(ActionDispatcher._run_hooks),
}
_UNKNOWN: Executor[Any] = Executor(ActionDispatcher._unknown)

#: the action types this worker runs, by tag (``Capabilities.executors`` in its hello)
EXECUTORS: list[str] = [str(cls.__struct_config__.tag) for cls in _EXECUTORS]


def _plan_files(found: list[tuple[FileDelta, str]]) -> list[CheckpointFile]:
    named = {"A": "added", "D": "deleted"}
    return [CheckpointFile(path=d.path, status=named.get(d.status, "modified"),  # type: ignore[arg-type]
                           diff=text) for d, text in found]


def _executor(action: ActionMessage) -> Executor[Any]:
    return _EXECUTORS.get(type(action), _UNKNOWN)
