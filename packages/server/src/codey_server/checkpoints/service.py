"""The checkpoints' service: asks the session's worker for a checkpoint before a turn's first
change and for its end state at the turn's end; previews and restores them for the routes
and for the rewind (``services.checkpoints``); prunes a deleted or archived session's.

A **turn** is named by the item id of the prompt that opened it (:func:`turn_of`). A turn
that changed no files has no checkpoint of its own: its files are rewound with the next
later checkpoint (the state it found), or not at all when there is none (:func:`resolve`).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import BUSY_STATUSES, SessionInfo, State
from codey_server.core.actions import ActionFailed, Actions
from codey_server.core.background import Background
from codey_server.core.engine import Engine
from codey_server.core.rules import Context, Decided
from codey_server.errors import ServerError

__all__ = ["CheckpointError", "Checkpoints", "Preview", "Restored", "changes_files",
           "resolve", "turn_of"]

log = logging.getLogger(__name__)

#: how long the worker may take over a checkpoint (a first one hashes the untracked files)
RECORD_TIMEOUT_S = 300.0
OP_TIMEOUT_S = 300.0


class CheckpointError(ServerError):
    """A checkpoint operation refused (``code``: not_found, turn_running, checkpoint_gone,
    worker_offline, path_outside_workdir, or the worker's own), with words the UI shows."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# ---------------------------------------------------------------------------------------------
# pure parts


def changes_files(action: wk.ActionMessage) -> bool:
    """Whether ``action`` may change the workdir's files: a write, a patch, an edit, an ACP
    agent's turn (its writes go through the worker), or a command, process or MCP call that
    runs in a writable sandbox."""
    if isinstance(action, wk.WriteFile | wk.ApplyPatch | wk.Edit | wk.AcpPrompt):
        return True
    if isinstance(action, wk.RunCommand | wk.ExecStart | wk.McpCall):
        return action.sandbox != "read-only"
    return False


def turn_of(s: SessionInfo) -> str | None:
    """The turn under way (or the last one): the item id of its prompt — the last user
    message that was not queued into a running turn."""
    last = None
    for item in reversed(s.items):
        if isinstance(item, ev.UserMessage):
            if not item.queued:
                return item.id
            last = last or item.id
    return last


def resolve(s: SessionInfo, turn: str) -> str | None:
    """The turn whose checkpoint holds the files as they were before ``turn``: its own, else
    the next later one's; None when no checkpoint comes at or after it. Raises ``not_found``
    for a turn that is not one of the session's prompts."""
    order = [item.id for item in s.items if isinstance(item, ev.UserMessage)]
    if turn not in order:
        raise CheckpointError("not_found", f"{turn!r} is not a prompt of this session")
    kept = {c.turn for c in s.checkpoints}
    for later in order[order.index(turn):]:
        if later in kept:
            return later
    return None


def _recorded(state: State, i: tuple[str, wk.CheckpointTaken], ctx: Context) -> Decided:
    session_id, taken = i
    if session_id not in state.sessions:
        return []
    return [(session_id, ev.CheckpointRecorded(turn=taken.turn, commit=taken.commit,
                                               files=taken.files, skipped=taken.skipped,
                                               shadow=taken.shadow))]


# ---------------------------------------------------------------------------------------------
# answers


class PreviewFile(msgspec.Struct, kw_only=True):
    path: str
    status: str
    diff: str = ""


class Preview(msgspec.Struct, kw_only=True):
    """What a restore would do: the files that change (from now to the checkpoint), those
    changed by hand since (kept unless ticked), and why it cannot be done now (None: it can)."""

    turn: str
    checkpoint: str | None = None  # the turn whose checkpoint is used (None: there is none)
    commit: str = ""
    files: list[PreviewFile] = msgspec.field(default_factory=list)
    hand_edited: list[str] = msgspec.field(default_factory=list)
    refused: str | None = None
    code: str | None = None


class Restored(msgspec.Struct, kw_only=True):
    restored: list[str] = msgspec.field(default_factory=list)
    kept: list[str] = msgspec.field(default_factory=list)


class TurnDiff(msgspec.Struct, kw_only=True):
    files: list[PreviewFile] = msgspec.field(default_factory=list)


def _files(plan: wk.CheckpointPlan) -> list[PreviewFile]:
    return [PreviewFile(path=f.path, status=f.status, diff=f.diff) for f in plan.files]


# ---------------------------------------------------------------------------------------------
# I/O


class Checkpoints:
    def __init__(self, engine: Engine, actions: Actions, *,
                 max_file_bytes: int = 10 * 1024 * 1024, keep: int = 0) -> None:
        self.engine = engine
        self.actions = actions
        self.max_file_bytes = max_file_bytes
        self.keep = keep
        #: (session, turn) asked for in this process: once per turn, however many changes
        self._asked: set[tuple[str, str]] = set()
        #: where each session's checkpoints are (worker, workdir), for its pruning after it
        #: is deleted (the state has forgotten it by then)
        self._where: dict[str, tuple[str, str]] = {}
        self._background = Background(log)
        engine.listeners.append(self._on_event)

    async def stop(self) -> None:
        await self._background.cancel()

    def _new(self) -> str:
        return self.engine.context.new_id("act")

    # the agent's turns -----------------------------------------------------------------------

    async def before_change(self, session_id: str, worker_id: str, workdir: str,
                            action: wk.ActionMessage) -> bool:
        """Before ``action`` of a turn runs: the turn's checkpoint when it is the turn's first
        change; whether the action may change files. A worker that cannot take one (an older
        worker, a git failure) is logged and the turn goes on: a checkpoint is a safety net,
        not a gate."""
        if not changes_files(action):
            return False
        s = self.engine.state.sessions.get(session_id)
        turn = turn_of(s) if s is not None else None
        if s is None or turn is None or (session_id, turn) in self._asked or \
                any(c.turn == turn for c in s.checkpoints):
            return True
        self._asked.add((session_id, turn))
        try:
            taken = await self.actions.run(worker_id, wk.CheckpointRecord(
                action_id=self._new(), session_id=session_id, workdir=workdir, turn=turn,
                max_file_bytes=self.max_file_bytes, keep=self.keep), timeout=RECORD_TIMEOUT_S)
        except (ActionFailed, TimeoutError) as err:
            log.warning("session %s: no checkpoint for turn %s (%s)", session_id, turn, err)
            return True
        if isinstance(taken, wk.CheckpointTaken):
            await self.engine.submit(_recorded, (session_id, taken))
        return True

    async def turn_ended(self, session_id: str, worker_id: str, workdir: str) -> None:
        """The turn is over: its end state, when it has a checkpoint (what changes after it
        was changed by hand)."""
        s = self.engine.state.sessions.get(session_id)
        turn = turn_of(s) if s is not None else None
        if s is None or turn is None or not any(c.turn == turn for c in s.checkpoints):
            return
        try:
            await self.actions.run(worker_id, wk.CheckpointRecord(
                action_id=self._new(), session_id=session_id, workdir=workdir, turn=turn,
                phase="end", max_file_bytes=self.max_file_bytes), timeout=RECORD_TIMEOUT_S)
        except (ActionFailed, TimeoutError) as err:
            log.warning("session %s: turn %s's end state not kept (%s)", session_id, turn, err)

    # the user's operations ------------------------------------------------------------------

    def _session(self, session_id: str) -> SessionInfo:
        s = self.engine.state.sessions.get(session_id)
        if s is None:
            raise CheckpointError("not_found", f"no session {session_id!r}")
        return s

    def _refusal(self, s: SessionInfo, *, changing: bool) -> tuple[str, str] | None:
        if changing and s.status in BUSY_STATUSES:
            return "turn_running", "a turn is running: stop it, or wait until it is over"
        if not self.actions.presence(s.worker_id).is_set():
            return "worker_offline", "the session's machine is not connected"
        return None

    async def _run(self, s: SessionInfo, action: wk.ActionMessage) -> wk.ActionOutcome:
        try:
            return await self.actions.run(s.worker_id, action, timeout=OP_TIMEOUT_S)
        except TimeoutError:
            raise CheckpointError("timeout", "the machine did not answer in time") from None
        except ActionFailed as err:
            code = err.code if err.code in ("checkpoint_gone", "path_outside_workdir",
                                            "not_a_repository") else "git_failed"
            raise CheckpointError(code, err.message) from None

    def listing(self, session_id: str) -> list[Any]:
        return list(self._session(session_id).checkpoints)

    async def preview(self, session_id: str, turn: str) -> Preview:
        """What restoring the files as they were before ``turn`` would change."""
        s = self._session(session_id)
        used = resolve(s, turn)
        if used is None:  # no turn from here on changed files: nothing to restore
            return Preview(turn=turn)
        refused = self._refusal(s, changing=False)
        if refused is not None:
            return Preview(turn=turn, checkpoint=used, code=refused[0], refused=refused[1])
        try:
            plan = await self._run(s, wk.CheckpointPreview(
                action_id=self._new(), session_id=session_id, workdir=s.workdir, turn=used))
        except CheckpointError as err:
            return Preview(turn=turn, checkpoint=used, code=err.code, refused=err.message)
        assert isinstance(plan, wk.CheckpointPlan)
        busy = self._refusal(s, changing=True)
        return Preview(turn=turn, checkpoint=used, commit=plan.commit, files=_files(plan),
                       hand_edited=plan.hand_edited, code=busy[0] if busy else None,
                       refused=busy[1] if busy else None)

    async def restore(self, session_id: str, turn: str, keep: list[str] | None = None
                      ) -> Restored:
        """Make the workdir's files as they were before ``turn``, but for ``keep`` (None: the
        files changed by hand since). Raises :class:`CheckpointError` when refused."""
        return await self._restore(session_id, turn, keep=keep)

    async def restore_file(self, session_id: str, turn: str, path: str) -> Restored:
        """Make the one file ``path`` as it was before ``turn`` (the worker confines it)."""
        return await self._restore(session_id, turn, path=path)

    async def _restore(self, session_id: str, turn: str, *, keep: list[str] | None = None,
                       path: str | None = None) -> Restored:
        s = self._session(session_id)
        used = resolve(s, turn)
        if used is None:
            return Restored()
        refused = self._refusal(s, changing=True)
        if refused is not None:
            raise CheckpointError(*refused)
        done = await self._run(s, wk.CheckpointRestore(
            action_id=self._new(), session_id=session_id, workdir=s.workdir, turn=used,
            keep=keep, path=path))
        assert isinstance(done, wk.CheckpointRestored)
        return Restored(restored=done.restored, kept=done.kept)

    async def diff(self, session_id: str, from_turn: str, to_turn: str = "") -> TurnDiff:
        """The change from before ``from_turn`` to before ``to_turn`` (empty: to now)."""
        s = self._session(session_id)
        start = resolve(s, from_turn)
        end = resolve(s, to_turn) if to_turn else None
        if start is None or start == end:
            return TurnDiff()
        refused = self._refusal(s, changing=False)
        if refused is not None:
            raise CheckpointError(*refused)
        plan = await self._run(s, wk.CheckpointDiff(
            action_id=self._new(), session_id=session_id, workdir=s.workdir, from_turn=start,
            to_turn=end or ""))
        assert isinstance(plan, wk.CheckpointPlan)
        return TurnDiff(files=_files(plan))

    # pruning --------------------------------------------------------------------------------

    def _on_event(self, env: ev.Envelope) -> None:
        e, sid = env.event, env.session_id
        if sid is None:
            return
        if isinstance(e, ev.CheckpointRecorded):
            s = self.engine.state.sessions.get(sid)
            if s is not None:
                self._where[sid] = (s.worker_id, s.workdir)
            return
        gone = isinstance(e, ev.SessionDeleted) or (
            isinstance(e, ev.SessionArchived) and e.archived)
        if not gone or self.engine.applying_foreign or sid not in self._where:
            return
        worker_id, workdir = self._where.pop(sid) if isinstance(e, ev.SessionDeleted) \
            else self._where[sid]
        self._background.spawn(self._prune(worker_id, sid, workdir),
                               name=f"pruning {sid}'s checkpoints")

    async def _prune(self, worker_id: str, session_id: str, workdir: str) -> None:
        if not self.actions.presence(worker_id).is_set():
            return  # (the refs stay: a checkpoint kept too long harms nothing)
        await self.actions.run(worker_id, wk.CheckpointPrune(
            action_id=self._new(), session_id=session_id, workdir=workdir),
            timeout=OP_TIMEOUT_S)
