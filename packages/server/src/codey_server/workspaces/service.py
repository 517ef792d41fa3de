"""``Workspaces``: a session's git worktree, made before its first turn and counted after each;
and the user's commit, merge, push and removal of it. Each is one of the worker's own
``workspace_*`` actions, shown in the session as a ``git_op`` item.

It reacts to folded events (an engine listener), on the replica that decided them: a session
created with a worktree gets it made (a retry or a prompt after a failed one tries again); a
turn that ends gets its worktree's change counted for the card and the board.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo, State
from codey_server.core.actions import ActionFailed, Actions
from codey_server.core.background import Background
from codey_server.core.rules import Context, Decided
from codey_server.errors import ServerError
from codey_server.workspaces.decide import (
    OpEnded,
    OpOutput,
    OpStarted,
    op_ended,
    op_output,
    op_started,
)

if TYPE_CHECKING:
    from codey_server.core.engine import Engine

log = logging.getLogger("codey.workspaces")

__all__ = ["WorkspaceError", "Workspaces"]

#: how long one of the user's git operations may take on the worker (a push, a rebase)
OP_TIMEOUT_S = 300.0


class WorkspaceError(ServerError):
    """A git operation that cannot be done (``code``: not_found, conflict, the worker's own:
    dirty, unmerged, gh_missing, …); its item in the session says so too."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _words(err: ActionFailed | TimeoutError) -> tuple[str, str]:
    if isinstance(err, TimeoutError):
        return "timeout", "the machine did not answer in time"
    return err.code, err.message


class Workspaces:
    def __init__(self, engine: Engine, actions: Actions) -> None:
        self.engine = engine
        self.actions = actions
        self._creating: set[str] = set()
        self._background = Background(log)
        engine.listeners.append(self._on_event)

    async def start(self) -> None:
        """Make the worktrees whose making the last run left unfinished."""
        for s in self.engine.state.sessions.values():
            if s.worktree is not None and s.worktree.status == "creating" and \
                    s.status != "closed":
                self._make(s.session_id)

    async def stop(self) -> None:
        await self._background.cancel()

    # reactions ------------------------------------------------------------------------------

    def _on_event(self, env: ev.Envelope) -> None:
        if self.engine.applying_foreign or env.session_id is None:
            return  # the replica that decided it does it
        e, sid = env.event, env.session_id
        s = self.engine.state.sessions.get(sid)
        if s is None or s.worktree is None:
            return
        if isinstance(e, ev.SessionCreated) or (isinstance(e, ev.SessionForked)
                                                and e.worktree is not None):
            self._make(sid)
        elif s.worktree.status == "failed" and (
                isinstance(e, ev.TurnRequested) or (isinstance(e, ev.SessionItemAppended)
                                                    and isinstance(e.item, ev.UserMessage))):
            self._make(sid, again=True)  # a retry or a prompt: try to make it again
        elif isinstance(e, ev.SessionStatusChanged) and \
                e.status in ("idle", "error", "interrupted") and s.worktree.status == "ready":
            # a turn ended (not a close: counting then would only hold up a removal)
            self._background.spawn(self._count(sid), f"count-{sid}")

    def _make(self, session_id: str, *, again: bool = False) -> None:
        if session_id in self._creating:
            return
        self._creating.add(session_id)
        self._background.spawn(self._create(session_id, again), f"worktree-{session_id}")

    async def recreate(self, session_id: str) -> wk.WorkspaceReady | None:
        """Make a removed worktree again at its place, from its branch as it stands (what was
        committed there comes back; what was not is gone with the old folder), and run the
        setup script there. The session's turns run again once it is ready (a prompt that
        waited for it first). ``conflict`` while it is not removed, or its branch is gone."""
        s = self.engine.state.sessions.get(session_id)
        if s is None:
            raise WorkspaceError("not_found", f"no session {session_id!r}")
        w = s.worktree
        if w is None or w.status != "removed":
            state = w.status if w is not None else "none"
            raise WorkspaceError("conflict", f"the session's worktree is not removed ({state})")
        if w.branch_deleted:
            raise WorkspaceError("conflict", f"its branch {w.branch} is gone: fork the session "
                                             "into a new worktree instead")
        if s.status == "closed":
            raise WorkspaceError("conflict", "the session is closed")
        if session_id in self._creating:
            raise WorkspaceError("conflict", "its worktree is being made already")
        self._creating.add(session_id)
        try:
            return await self._made(s, w, existing=True)
        finally:
            self._creating.discard(session_id)

    async def _create(self, session_id: str, again: bool) -> None:
        try:
            s = self.engine.state.sessions[session_id]
            w = s.worktree
            assert w is not None
            await self._made(s, w, again=again)
        except WorkspaceError:
            pass  # (its item says why)
        finally:
            self._creating.discard(session_id)

    async def _made(self, s: SessionInfo, w: ev.Worktree, *, again: bool = False,
                    existing: bool = False) -> wk.WorkspaceReady | None:
        """Make the session's worktree (``existing``: again, from its branch), with its item;
        the outcome (None: the folder is no repository, the session works in it as it is),
        or :class:`WorkspaceError` once the failure is recorded."""
        session_id = s.session_id
        # (made again, the branch is checked out as it is: its base, which may have gone
        # since, plays no part)
        action = wk.WorkspaceCreate(
            action_id=self.engine.context.new_id("act"), session_id=session_id,
            repo=w.repo, branch=w.branch, base="" if existing else w.base, setup=w.setup,
            sandbox=s.sandbox, network=s.network, existing=existing)
        base = w.base or "the current branch"
        title = (f"Worktree {w.branch} made again from its branch" if existing
                 else f"Worktree {w.branch} from {base}")
        item_id = await self._started(OpStarted(
            session_id, "create", title, action.action_id,
            worktree=ev.WorktreeUpdated(status="creating", error="") if again else None))
        try:
            outcome = await self.actions.run(
                s.worker_id, action, timeout=action.timeout_s + 60.0,
                on_progress=lambda p: self._output(session_id, item_id, p.data))
        except (ActionFailed, TimeoutError) as err:
            code, message = _words(err)
            if existing:
                # it stays removed; a branch found gone is not offered again
                await self._ended(OpEnded(
                    session_id, item_id, ok=False, error=message,
                    worktree=ev.WorktreeUpdated(
                        error=message, branch_deleted=True if code == "branch_gone"
                        else None)))
                raise WorkspaceError(code, message) from None
            older = code == "bad_request" and "cannot run" in message
            if code == "not_a_repository" or older:
                # as today: the session works in the folder as it is
                why = ("this machine's worker is too old to make worktrees" if older
                       else f"{w.repo} is not in a git repository")
                await self._ended(OpEnded(
                    session_id, item_id, ok=True,
                    result=f"{why[0].upper()}{why[1:]}: the session works in the folder "
                           "as it is.",
                    worktree=ev.WorktreeUpdated(status="in_place")))
                return None
            await self._ended(OpEnded(
                session_id, item_id, ok=False, error=message,
                worktree=ev.WorktreeUpdated(status="failed", error=message),
                status="error", reason=f"its worktree could not be made: {message} "
                                       "(Retry tries again)"))
            raise WorkspaceError(code, message) from None
        assert isinstance(outcome, wk.WorkspaceReady)
        setup = ""
        if outcome.setup:
            setup = (f"; {outcome.setup} ran" if outcome.setup_exit == 0 else
                     f"; {outcome.setup} exited with {outcome.setup_exit}")
        made = (f"{outcome.path} on {outcome.branch}, made again from the branch" if existing
                else f"{outcome.path} on {outcome.branch}, from {outcome.base} "
                     f"({outcome.base_commit[:10]})")
        # made again: its base is what it was (the branch's commits are still ahead of it)
        await self._ended(OpEnded(
            session_id, item_id, ok=True, exit_code=outcome.setup_exit,
            result=f"{made}{setup}",
            worktree=ev.WorktreeUpdated(
                status="ready", path=outcome.path, error="",
                base=None if existing else outcome.base,
                base_commit=None if existing else outcome.base_commit,
                repo_root=outcome.repo_root)))
        return outcome

    async def _count(self, session_id: str) -> None:
        try:
            await self.changes(session_id)
        except (WorkspaceError, ActionFailed, TimeoutError) as err:
            log.info("session %s: its change was not counted (%s)", session_id, err)

    # the pieces -----------------------------------------------------------------------------

    async def _started(self, i: OpStarted) -> str:
        envs = await self.engine.submit(op_started, i)
        item = envs[-1].event
        assert isinstance(item, ev.SessionItemAppended)
        return item.item.id

    async def _output(self, session_id: str, item_id: str, text: str) -> None:
        await self.engine.submit(op_output, OpOutput(session_id, item_id, text),
                                 exclusive=False)

    async def _ended(self, i: OpEnded) -> None:
        await self.engine.submit(op_ended, i)

    def _ready(self, session_id: str) -> tuple[SessionInfo, ev.Worktree]:
        s = self.engine.state.sessions.get(session_id)
        if s is None:
            raise WorkspaceError("not_found", f"no session {session_id!r}")
        w = s.worktree
        if w is None or w.status not in ("ready",):
            state = w.status if w is not None else "none"
            raise WorkspaceError("conflict", f"the session has no worktree ready ({state})")
        return s, w

    def _new(self) -> str:
        return self.engine.context.new_id("act")

    # the user's operations ------------------------------------------------------------------

    async def changes(self, session_id: str) -> wk.WorkspaceChanges:
        """The worktree's whole change against its base; its totals are recorded."""
        s, w = self._ready(session_id)
        try:
            outcome = await self.actions.run(s.worker_id, wk.WorkspaceDiff(
                # the base by name: the change is from its merge base with the branch as
                # they stand (after the base is merged in, the base's own work is not shown)
                action_id=self._new(), session_id=session_id, workdir=w.path,
                base=w.base or w.base_commit), timeout=OP_TIMEOUT_S)
        except (ActionFailed, TimeoutError) as err:
            code, message = _words(err)
            if code == "worktree_gone":  # removed by hand: the session says so from now on
                await self.engine.submit(_gone, (session_id, message))
            raise WorkspaceError(code, message) from None
        assert isinstance(outcome, wk.WorkspaceChanges)
        files = len(outcome.files)
        added = sum(f.added for f in outcome.files)
        deleted = sum(f.deleted for f in outcome.files)
        if (files, added, deleted) != (w.files, w.added, w.deleted):
            await self.engine.submit(_counted, (session_id, files, added, deleted))
        return outcome

    async def _op(self, session_id: str, op: str, title: str, action: wk.ActionMessage,
                  done: ev.WorktreeUpdated | None = None) -> wk.ActionOutcome:
        """Run one operation with its item: done with the outcome's words, or failed with the
        worker's (and :class:`WorkspaceError` raised for the caller)."""
        s, _ = self._ready(session_id)
        item_id = await self._started(OpStarted(session_id, op, title, action.action_id))
        try:
            outcome = await self.actions.run(s.worker_id, action, timeout=OP_TIMEOUT_S)
        except (ActionFailed, TimeoutError) as err:
            code, message = _words(err)
            if code == "worktree_gone":
                # removed by hand: recorded so, and a removal has nothing left to do
                gone = ev.WorktreeUpdated(status="removed", error=message)
                if isinstance(action, wk.WorkspaceRemove):
                    await self._ended(OpEnded(session_id, item_id, ok=True, worktree=gone,
                                              result=f"It was gone already: {message}"))
                    return wk.WorkspaceRemoved(path=action.workdir)
                await self._ended(OpEnded(session_id, item_id, ok=False, error=message,
                                          worktree=gone))
                raise WorkspaceError(code, message) from None
            await self._ended(OpEnded(session_id, item_id, ok=False, error=message))
            # the worker's "bad request" is about what the repository holds (a base that is
            # no local branch, a detached HEAD), not about this request's shape
            raise WorkspaceError("git_failed" if code == "bad_request" else code,
                                 message) from None
        ok, words, update = _said(outcome, op)
        await self._ended(OpEnded(session_id, item_id, ok=ok, result=words,
                                  worktree=update or done))
        return outcome

    async def commit(self, session_id: str, message: str,
                     paths: list[str] | None = None) -> wk.ActionOutcome:
        """Commit ``paths`` of the worktree (None: everything in it)."""
        _, w = self._ready(session_id)
        what = "Commit" if paths is None else \
            f"Commit {len(paths)} chosen file{'' if len(paths) == 1 else 's'}"
        return await self._op(session_id, "commit", f"{what} on {w.branch}", wk.WorkspaceCommit(
            action_id=self._new(), session_id=session_id, workdir=w.path, message=message,
            paths=paths))

    async def merge(self, session_id: str, mode: str) -> wk.ActionOutcome:
        _, w = self._ready(session_id)
        how = "fast-forward" if mode == "ff" else "rebase, then fast-forward"
        return await self._op(session_id, "merge", f"Merge {w.branch} into {w.base} ({how})",
                              wk.WorkspaceMerge(action_id=self._new(), session_id=session_id,
                                                workdir=w.path, base=w.base,
                                                mode=mode))  # type: ignore[arg-type]

    async def update(self, session_id: str) -> wk.ActionOutcome:
        """Merge the base into the worktree's branch, conflicts left in the files for the
        agent to resolve."""
        _, w = self._ready(session_id)
        return await self._op(session_id, "update", f"Merge {w.base} into {w.branch}",
                              wk.WorkspaceMerge(action_id=self._new(), session_id=session_id,
                                                workdir=w.path, base=w.base,
                                                mode="into_branch"))

    async def push(self, session_id: str, *, open_pr: bool, title: str,
                   body: str) -> wk.ActionOutcome:
        _, w = self._ready(session_id)
        what = "Push and open a pull request" if open_pr else "Push"
        return await self._op(session_id, "push", f"{what}: {w.branch}", wk.WorkspacePush(
            action_id=self._new(), session_id=session_id, workdir=w.path, open_pr=open_pr,
            base=w.base, title=title, body=body))

    async def remove(self, session_id: str, *, force: bool,
                     delete_branch: bool) -> wk.ActionOutcome:
        _, w = self._ready(session_id)
        return await self._op(
            session_id, "remove", f"Remove the worktree of {w.branch}",
            wk.WorkspaceRemove(action_id=self._new(), session_id=session_id, workdir=w.path,
                               base=w.base, force=force, delete_branch=delete_branch),
            done=ev.WorktreeUpdated(status="removed"))



def _gone(state: State, i: tuple[str, str], ctx: Context) -> Decided:
    """The worktree was found gone (pure): removed, with the worker's words."""
    session_id, message = i
    s = state.sessions.get(session_id)
    if s is None or s.worktree is None or s.worktree.status == "removed":
        return []
    return [(session_id, ev.WorktreeUpdated(status="removed", error=message))]


def _counted(state: State, i: tuple[str, int, int, int], ctx: Context) -> Decided:
    """The worktree's change, as counted (pure)."""
    session_id, files, added, deleted = i
    return [(session_id, ev.WorktreeUpdated(files=files, added=added, deleted=deleted))]


def _said(outcome: wk.ActionOutcome, op: str) -> tuple[bool, str, ev.WorktreeUpdated | None]:
    """An operation's outcome in words, whether it did what was asked, and the worktree's
    state that follows."""
    if isinstance(outcome, wk.WorkspaceCommitted):
        files = f"{outcome.files} file{'' if outcome.files == 1 else 's'}"
        return True, f"Committed {outcome.sha[:10]} ({files})", None
    if isinstance(outcome, wk.WorkspaceMerged):
        if outcome.merged:
            return True, outcome.message or f"Merged: {outcome.sha[:10]}", \
                ev.WorktreeUpdated(merged=True)
        if op == "update" and outcome.conflicts:  # left in the files, for the agent
            return True, ("Merged, with conflicts left to resolve in: "
                          + ", ".join(outcome.conflicts)), None
        return False, ("Conflicts in: " + ", ".join(outcome.conflicts)
                       if outcome.conflicts else outcome.message or "not merged"), None
    if isinstance(outcome, wk.WorkspacePushed):
        if outcome.pr_url:
            return True, f"Pushed {outcome.branch}; pull request {outcome.pr_url}", \
                ev.WorktreeUpdated(pr_url=outcome.pr_url)
        return True, outcome.message or f"Pushed {outcome.branch} to {outcome.remote}", None
    if isinstance(outcome, wk.WorkspaceRemoved):
        return True, f"Removed {outcome.path}" + (
            "; its branch was deleted" if outcome.branch_deleted else
            "; its branch stays"), ev.WorktreeUpdated(
                status="removed", branch_deleted=True if outcome.branch_deleted else None)
    return True, "", None
