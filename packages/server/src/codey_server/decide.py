"""``decide(state, command, ctx) -> [(session_id, event)]``: commands become events.

Pure: ids and the clock come in through :class:`Context`, so a test can decide with fixed ids.
A command that cannot be carried out raises :class:`CommandRejected` and produces nothing.
The service around it only loads, decides, appends (then the fold applies and fans out).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.errors import ServerError

__all__ = ["CommandRejected", "Context", "Decided", "decide", "title_from_prompt"]

Decided = list[tuple[str | None, ev.Event]]

TITLE_MAX = 60


class CommandRejected(ServerError):
    """The command was refused. ``code``: not_found | conflict | bad_request | forbidden."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass
class Context:
    """What ``decide`` may not compute itself: fresh ids, the time, server defaults."""

    new_id: Callable[[str], str] = _new_id
    now: Callable[[], float] = time.time
    default_provider: str = "default"
    default_models: dict[str, str] = field(default_factory=dict)


def title_from_prompt(prompt: str) -> str:
    """The first line of the prompt, shortened on a word boundary."""
    line = next((ln.strip() for ln in prompt.splitlines() if ln.strip()), "")
    if not line:
        return "New session"
    if len(line) <= TITLE_MAX:
        return line
    cut = line[:TITLE_MAX].rsplit(" ", 1)[0] or line[:TITLE_MAX]
    return cut.rstrip(" ,.;:") + "…"


def decide(state: State, command: cl.ClientToServer, ctx: Context) -> Decided:
    if isinstance(command, cl.CreateSession):
        return _create_session(state, command, ctx)
    if isinstance(command, cl.SendPrompt):
        return _send_prompt(state, command, ctx)
    if isinstance(command, cl.DecideApproval):
        return _decide_approval(state, command, ctx)
    if isinstance(command, cl.SetApprovalPolicy):
        s = _existing(state, command.session_id)
        if s.policy == command.policy:
            return []
        return [(s.session_id, ev.SessionPolicyChanged(policy=command.policy))]
    if isinstance(command, cl.Interrupt):
        s = _existing(state, command.session_id)
        if s.status in ("idle", "interrupted", "closed", "error", "waiting_user"):
            return []
        return [(s.session_id, ev.SessionStatusChanged(status="interrupted",
                                                       reason="interrupted by the user"))]
    raise CommandRejected("bad_request", f"{type(command).__name__} is not a command to decide")


def _existing(state: State, session_id: str):  # type: ignore[no-untyped-def]
    s = state.sessions.get(session_id)
    if s is None:
        raise CommandRejected("not_found", f"no session {session_id!r}")
    return s


def _create_session(state: State, c: cl.CreateSession, ctx: Context) -> Decided:
    worker = state.workers.get(c.worker_id)
    if worker is None:
        raise CommandRejected("not_found", f"no worker {c.worker_id!r}")
    if worker.revoked:
        raise CommandRejected("forbidden", f"worker {c.worker_id!r} was revoked")
    if not c.workdir.strip():
        raise CommandRejected("bad_request", "workdir must not be empty")
    provider = c.provider or ctx.default_provider
    model = c.model or ctx.default_models.get(provider, "")
    session_id = ctx.new_id("ses")
    out: Decided = [(session_id, ev.SessionCreated(
        title=c.title or title_from_prompt(c.prompt), worker_id=c.worker_id,
        workdir=c.workdir.strip(), provider=provider, model=model, policy=c.policy,
    ))]
    if c.prompt.strip():
        out.append((session_id, ev.SessionItemAppended(
            item=ev.UserMessage(id=ctx.new_id("itm"), ts=ctx.now(), text=c.prompt))))
    return out


_BUSY = ("running", "waiting_approval", "waiting_worker")


def _send_prompt(state: State, c: cl.SendPrompt, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    if not c.text.strip():
        raise CommandRejected("bad_request", "the prompt is empty")
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    out: Decided = []
    untitled = s.title == title_from_prompt("")
    if untitled and not any(isinstance(i, ev.UserMessage) for i in s.items):
        out.append((s.session_id, ev.SessionTitleChanged(title=title_from_prompt(c.text))))
    # A prompt during a turn is queued and injected before the next model call (steer).
    out.append((s.session_id, ev.SessionItemAppended(item=ev.UserMessage(
        id=ctx.new_id("itm"), ts=ctx.now(), text=c.text, queued=s.status in _BUSY))))
    return out


def _decide_approval(state: State, c: cl.DecideApproval, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    a = s.approvals.get(c.approval_id)
    if a is None:
        raise CommandRejected("not_found", f"no approval {c.approval_id!r} in this session")
    if a.status != "pending":
        raise CommandRejected("conflict", f"approval already {a.status}")
    decision: ev.ApprovalDecision = "rejected" if c.decision == "reject" else "approved"
    return [(s.session_id, ev.ApprovalResolved(
        approval_id=a.approval_id, decision=decision, message=c.message,
        for_session=c.decision == "approve_for_session"))]
