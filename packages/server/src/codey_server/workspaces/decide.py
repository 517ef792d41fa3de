"""Git workspaces' decisions, pure: a git operation's item as it starts, streams and ends,
and the worktree's state that comes of it. :mod:`.service` runs them through
:meth:`~codey_server.core.engine.Engine.submit`."""

from __future__ import annotations

from dataclasses import dataclass

from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.rules import CommandRejected, Context, Decided

__all__ = ["OpEnded", "OpOutput", "OpStarted", "op_ended", "op_output", "op_started"]

#: characters of a setup script's output the item keeps (the newest are dropped)
OUTPUT_CAP = 64 * 1024


@dataclass(frozen=True)
class OpStarted:
    session_id: str
    op: str
    title: str
    action_id: str
    #: the worktree's state as the operation starts (``creating`` again, for a retry)
    worktree: ev.WorktreeUpdated | None = None


@dataclass(frozen=True)
class OpOutput:
    session_id: str
    item_id: str
    text: str


@dataclass(frozen=True)
class OpEnded:
    session_id: str
    item_id: str
    ok: bool
    result: str = ""
    error: str = ""
    exit_code: int | None = None
    worktree: ev.WorktreeUpdated | None = None
    #: the session's status after it, with its reason (a worktree that could not be made
    #: leaves the session in error)
    status: ev.SessionStatus | None = None
    reason: str = ""


def _session(state: State, session_id: str) -> None:
    s = state.sessions.get(session_id)
    if s is None:
        raise CommandRejected("not_found", f"no session {session_id!r}")
    if s.worktree is None:
        raise CommandRejected("conflict", "the session has no worktree")


def op_started(state: State, i: OpStarted, ctx: Context) -> Decided:
    """The operation's item (running); the worktree's state as it starts."""
    _session(state, i.session_id)
    out: Decided = []
    if i.worktree is not None:
        out.append((i.session_id, i.worktree))
    item = ev.GitOp(id=ctx.new_id("itm"), ts=ctx.now(), op=i.op,  # type: ignore[arg-type]
                    title=i.title, action_id=i.action_id)
    out.append((i.session_id, ev.SessionItemAppended(item=item)))
    return out


def op_output(state: State, i: OpOutput, ctx: Context) -> Decided:
    """Output of the operation (the setup script's), while the item keeps any."""
    s = state.sessions.get(i.session_id)
    item = next((x for x in reversed(s.items) if x.id == i.item_id), None) if s else None
    if not isinstance(item, ev.GitOp) or len(item.output) >= OUTPUT_CAP or not i.text:
        return []
    text = i.text[:OUTPUT_CAP - len(item.output)]
    return [(i.session_id, ev.SessionItemUpdated(item_id=i.item_id, output_delta=text))]


def op_ended(state: State, i: OpEnded, ctx: Context) -> Decided:
    """The item done or failed, with its words; the worktree's and the session's state."""
    if i.session_id not in state.sessions:
        return []
    out: Decided = [(i.session_id, ev.SessionItemUpdated(
        item_id=i.item_id, status="done" if i.ok else "failed", result=i.result or None,
        error=i.error or None, exit_code=i.exit_code))]
    if i.worktree is not None:
        out.append((i.session_id, i.worktree))
    if i.status is not None and state.sessions[i.session_id].status != i.status:
        out.append((i.session_id, ev.SessionStatusChanged(status=i.status, reason=i.reason)))
    return out
