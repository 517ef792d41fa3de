"""The move's decisions, pure: whether a session may move now (and where), what the
transcript says as it goes, and the move itself (``session_moved``). :mod:`.service` runs them
through :meth:`~codey_server.core.engine.Engine.submit`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State
from codey_server.core.rules import CommandRejected, Context, Decided

__all__ = ["Moved", "Said", "Stop", "check", "moved", "said", "stop_processes"]

#: statuses a session moves from: a turn under way (a tool mid-call, an approval or a question
#: waiting) moves nowhere, so no action can be left to run on both machines
_STILL = ("idle", "interrupted", "error")


def _within(path: str, roots: list[str]) -> bool:
    clean = os.path.normpath(path)
    return any(clean == os.path.normpath(r) or clean.startswith(os.path.normpath(r).rstrip("/")
                                                               + "/") for r in roots)


def check(state: State, session_id: str, worker_id: str, workdir: str) -> SessionInfo:
    """The session, when it may move to ``workdir`` on ``worker_id`` now; else
    :class:`CommandRejected` with the reason the user sees."""
    s = state.sessions.get(session_id)
    if s is None or (s.archived and s.status == "closed"):
        raise CommandRejected("not_found", f"no session {session_id!r}")
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    if s.status not in _STILL or s.pending_actions or any(
            q.status == "pending" for q in s.questions.values()):
        raise CommandRejected("conflict", "a turn is under way: wait for it to end, or "
                                          "interrupt it, then move the session")
    if s.agent is not None:
        raise CommandRejected("conflict", "a session run by an ACP agent cannot move")
    target = state.workers.get(worker_id)
    if target is None:
        raise CommandRejected("not_found", f"no machine {worker_id!r}")
    if target.revoked:
        raise CommandRejected("conflict", "that machine was unlinked")
    if worker_id == s.worker_id:
        raise CommandRejected("conflict", "the session is on that machine already")
    if not target.connected:
        raise CommandRejected("conflict", f"{target.name or target.hostname} is offline: "
                                          "start its worker, then move the session")
    source = state.workers.get(s.worker_id)
    if source is None or not source.connected:
        raise CommandRejected("conflict", "the session's machine is offline: its work cannot "
                                          "be bundled until it is back")
    if not workdir or not os.path.isabs(workdir):
        raise CommandRejected("bad_request", "the folder must be an absolute path")
    if ".." in workdir.split("/"):
        raise CommandRejected("bad_request", "the folder must not climb with '..'")
    if target.roots and not _within(workdir, target.roots):
        raise CommandRejected("forbidden", f"{workdir} is outside the folders "
                              f"{target.name or target.hostname} allows: "
                              + ", ".join(target.roots))
    return s


@dataclass(frozen=True)
class Said:
    """A notice in the session's transcript (``moving``, ``moved``, ``move_failed``)."""

    session_id: str
    code: str
    text: str


def said(state: State, i: Said, ctx: Context) -> Decided:
    if i.session_id not in state.sessions:
        return []
    return [(i.session_id, ev.SessionItemAppended(
        item=ev.Notice(id=ctx.new_id("itm"), ts=ctx.now(), code=i.code, text=i.text)))]


@dataclass(frozen=True)
class Stop:
    session_id: str


def stop_processes(state: State, i: Stop, ctx: Context) -> Decided:
    """Ask every live process of the session to stop (the agent sends the kills)."""
    s = state.sessions.get(i.session_id)
    if s is None:
        return []
    return [(i.session_id, ev.ProcessStopRequested(process_id=p.process_id, by="user"))
            for p in s.processes if p.status == "running"]


@dataclass(frozen=True)
class Moved:
    session_id: str
    worker_id: str
    workdir: str
    #: where it was when the move began: a session that moved or worked meanwhile is not
    #: moved on that stale picture
    from_worker: str
    from_workdir: str
    items: int
    bundle: str
    bundle_size: int


def moved(state: State, i: Moved, ctx: Context) -> Decided:
    """The session goes on on the target (``session_moved``), unless it changed meanwhile."""
    s = state.sessions.get(i.session_id)
    if s is None:
        raise CommandRejected("not_found", f"no session {i.session_id!r}")
    if (s.worker_id, s.workdir) != (i.from_worker, i.from_workdir) or len(s.items) != i.items \
            or s.status not in _STILL or s.pending_actions:
        raise CommandRejected("conflict", "the session worked or moved while it was being "
                                          "bundled: move it again")
    return [(i.session_id, ev.SessionMoved(
        worker_id=i.worker_id, from_worker=i.from_worker, workdir=i.workdir,
        from_workdir=i.from_workdir, bundle=i.bundle, bundle_size=i.bundle_size))]
