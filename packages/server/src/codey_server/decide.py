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
from typing import Any

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State
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
    #: whether a file sent with a prompt is stored (``/api/blobs``)
    blob_exists: Callable[[str], bool] = lambda digest: False


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
    if isinstance(command, (cl.CreateTask, cl.UpdateTask, cl.MoveTask, cl.DeleteTask,
                            cl.RunTask)):
        return _task_command(state, command, ctx)
    if isinstance(command, (cl.SaveSchedule, cl.DeleteSchedule, cl.RunSchedule)):
        return _schedule_command(state, command, ctx)
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
        stopped = _interruptible(state, s)
        if not stopped:
            return []
        return [(x.session_id, ev.SessionStatusChanged(status="interrupted",
                                                       reason="interrupted by the user"))
                for x in stopped]
    if isinstance(command, cl.CompactSession):
        return _compact(state, command)
    handler = _SESSION_OPS.get(type(command))
    if handler is not None:
        return handler(state, command, ctx)
    raise CommandRejected("bad_request", f"{type(command).__name__} is not a command to decide")


def _compact(state: State, c: cl.CompactSession) -> Decided:
    s = _existing(state, c.session_id)
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    if s.agent:
        raise CommandRejected("bad_request", "an external agent keeps its own context")
    if s.compaction_requested:
        return []
    if not any(isinstance(i, (ev.UserMessage, ev.AssistantMessage, ev.ToolCall))
               for i in s.items):
        raise CommandRejected("bad_request", "there is nothing to compact yet")
    return [(s.session_id, ev.CompactionRequested())]


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
    if c.agent is not None:
        if c.agent not in worker.capabilities.acp_agents:
            raise CommandRejected("bad_request", f"worker {c.worker_id!r} has no ACP agent "
                                                 f"{c.agent!r} (see its acp_agents config)")
        if c.plan_mode:
            raise CommandRejected("bad_request", "plan mode is Codey's own; an ACP agent "
                                                 "plans in its own way")
        provider, model = "acp", c.agent
    session_id = ctx.new_id("ses")
    out: Decided = [(session_id, ev.SessionCreated(
        title=c.title or title_from_prompt(c.prompt), worker_id=c.worker_id,
        workdir=c.workdir.strip(), provider=provider, model=model, policy=c.policy,
        plan_mode=c.plan_mode, agent=c.agent,
    ))]
    _check_attachments(c.attachments, ctx)
    if c.prompt.strip() or c.attachments:
        out.append((session_id, ev.SessionItemAppended(
            item=ev.UserMessage(id=ctx.new_id("itm"), ts=ctx.now(), text=c.prompt,
                                attachments=list(c.attachments)))))
    return out


_BUSY = ("running", "waiting_approval", "waiting_worker")

#: a project memory holds at most this many characters
MEMORY_MAX = 8 * 1024
#: files one prompt may carry, and their total size
ATTACHMENTS_MAX = 10
ATTACHMENTS_MAX_BYTES = 25 * 1024 * 1024


def _check_attachments(attachments: list[ev.Attachment], ctx: Context) -> None:
    if len(attachments) > ATTACHMENTS_MAX:
        raise CommandRejected("bad_request", f"at most {ATTACHMENTS_MAX} files per message")
    if sum(a.size for a in attachments) > ATTACHMENTS_MAX_BYTES:
        raise CommandRejected("bad_request", "the files of one message may have at most "
                                             f"{ATTACHMENTS_MAX_BYTES // (1024 * 1024)} MiB")
    for a in attachments:
        if not ctx.blob_exists(a.hash):
            raise CommandRejected("bad_request", f"{a.name}: upload it first (POST /api/blobs)")


def _interruptible(state: State, s: SessionInfo) -> list[SessionInfo]:
    """``s`` and its sub-agents (and theirs) that have a turn to stop."""
    out: list[SessionInfo] = []
    if s.status in _BUSY or (s.status == "waiting_user" and _asking(s)):
        out.append(s)
    for child in state.sessions.values():
        if child.parent_id == s.session_id:
            out += _interruptible(state, child)
    return out


def _asking(s: SessionInfo) -> bool:
    """The model asked the user something and waits for the answer."""
    return any(q.status == "pending" for q in s.questions.values())


def _send_prompt(state: State, c: cl.SendPrompt, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    if not c.text.strip() and not c.attachments:
        raise CommandRejected("bad_request", "the prompt is empty")
    _check_attachments(c.attachments, ctx)
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    out: Decided = []
    untitled = s.title == title_from_prompt("")
    if untitled and not any(isinstance(i, ev.UserMessage) for i in s.items):
        out.append((s.session_id, ev.SessionTitleChanged(title=title_from_prompt(c.text))))
    # A prompt during a turn is queued and injected before the next model call (steer).
    busy = s.status in _BUSY or _asking(s)
    out.append((s.session_id, ev.SessionItemAppended(item=ev.UserMessage(
        id=ctx.new_id("itm"), ts=ctx.now(), text=c.text, queued=busy,
        attachments=list(c.attachments)))))
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


# session operations ---------------------------------------------------------------------------


def _answer(state: State, c: cl.AnswerQuestion, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    q = s.questions.get(c.question_id)
    if q is None:
        raise CommandRejected("not_found", f"no question {c.question_id!r} in this session")
    if q.status != "pending":
        raise CommandRejected("conflict", f"the question was already {q.status}")
    if not c.answer.strip():
        raise CommandRejected("bad_request", "the answer is empty")
    return [(s.session_id, ev.QuestionAnswered(question_id=q.question_id, answer=c.answer))]


def _rename(state: State, c: cl.RenameSession, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    title = " ".join(c.title.split())
    if not title:
        raise CommandRejected("bad_request", "the title is empty")
    if len(title) > 200:
        raise CommandRejected("bad_request", "the title is longer than 200 characters")
    return [] if title == s.title else [(s.session_id, ev.SessionTitleChanged(title=title))]


def _archive(state: State, c: cl.ArchiveSession, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    if s.archived == c.archived:
        return []
    if c.archived and s.status in _BUSY:
        raise CommandRejected("conflict", "the session is working: interrupt or close it first")
    return [(s.session_id, ev.SessionArchived(archived=c.archived))]


def _stop_waiting(s: SessionInfo, reason: str) -> list[ev.Event]:
    """What a close or delete resolves: pending approvals and questions."""
    out: list[ev.Event] = [ev.ApprovalResolved(approval_id=a.approval_id, decision="cancelled",
                                               message=reason)
                           for a in s.approvals.values() if a.status == "pending"]
    out += [ev.QuestionAnswered(question_id=q.question_id, cancelled=True)
            for q in s.questions.values() if q.status == "pending"]
    return out


def _close(state: State, c: cl.CloseSession, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    if s.status == "closed":
        return []
    reason = c.reason.strip() or "closed by the user"
    events = _stop_waiting(s, reason)
    events.append(ev.SessionStatusChanged(status="closed", reason=reason))
    return [(s.session_id, e) for e in events]


def _delete(state: State, c: cl.DeleteSession, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    events = _stop_waiting(s, "the session was deleted")
    if s.status != "closed":
        events.append(ev.SessionStatusChanged(status="closed", reason="deleted"))
    events.append(ev.SessionDeleted(reason="deleted by the user"))
    return [(s.session_id, e) for e in events]


def _fork(state: State, c: cl.ForkSession, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    if not s.items:
        raise CommandRejected("bad_request", "the session has nothing to fork yet")
    until = c.item_id or s.items[-1].id
    if not any(i.id == until for i in s.items):
        raise CommandRejected("not_found", f"no item {until!r} in this session")
    new_id = ctx.new_id("ses")
    title = " ".join((c.title or "").split()) or f"{s.title} (fork)"
    out: Decided = [(new_id, ev.SessionForked(from_session=s.session_id, until_item=until,
                                              title=title[:200]))]
    if c.prompt.strip():
        out.append((new_id, ev.SessionItemAppended(item=ev.UserMessage(
            id=ctx.new_id("itm"), ts=ctx.now(), text=c.prompt))))
    return out


def _move(state: State, c: cl.MoveSession, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    worker = state.workers.get(c.worker_id)
    if worker is None:
        raise CommandRejected("not_found", f"no worker {c.worker_id!r}")
    if worker.revoked:
        raise CommandRejected("forbidden", f"worker {c.worker_id!r} was revoked")
    if c.worker_id == s.worker_id:
        return []
    if s.status in _BUSY or _asking(s) or s.pending_actions:
        raise CommandRejected("conflict", "the session is working: interrupt it first")
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    return [(s.session_id, ev.SessionMoved(worker_id=c.worker_id, from_worker=s.worker_id))]


def _set_memory(state: State, c: cl.SetMemory, ctx: Context) -> Decided:
    if c.worker_id not in state.workers:
        raise CommandRejected("not_found", f"no worker {c.worker_id!r}")
    if not c.workdir.strip():
        raise CommandRejected("bad_request", "workdir must not be empty")
    if len(c.text) > MEMORY_MAX:
        raise CommandRejected("bad_request", f"the memory holds at most {MEMORY_MAX} "
                                             f"characters; this is {len(c.text)}")
    return [(None, ev.MemoryUpdated(worker_id=c.worker_id, workdir=c.workdir.strip(),
                                    text=c.text))]


def _approve_plan(state: State, c: cl.ApprovePlan, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    if s.plan_status != "proposed":
        raise CommandRejected("conflict", "there is no proposed plan to approve")
    out: list[ev.Event] = []
    text = "The plan is approved: carry it out now."
    if c.steps is not None:
        steps = [ev.PlanStep(step=" ".join(st.split())) for st in c.steps if st.strip()]
        if not steps:
            raise CommandRejected("bad_request", "an edited plan needs at least one step")
        out.append(ev.PlanUpdated(steps=steps, explanation=s.plan_explanation))
        text = "The plan is approved as I edited it:\n" + "\n".join(
            f"{n}. {st.step}" for n, st in enumerate(steps, start=1)) + "\nCarry it out now."
    if c.note.strip():
        text += f"\n\n{c.note.strip()}"
    out.append(ev.PlanApproved(note=c.note.strip()))
    out.append(ev.SessionItemAppended(item=ev.UserMessage(id=ctx.new_id("itm"), ts=ctx.now(),
                                                          text=text)))
    return [(s.session_id, e) for e in out]


def _retry(state: State, c: cl.RetryTurn, ctx: Context) -> Decided:
    s = _existing(state, c.session_id)
    if s.status not in ("error", "interrupted"):
        raise CommandRejected("conflict", f"nothing to retry: the session is {s.status}")
    return [(s.session_id, ev.TurnRequested())]


_SESSION_OPS: dict[type, Callable[[State, Any, Context], Decided]] = {
    cl.RetryTurn: _retry,
    cl.ApprovePlan: _approve_plan,
    cl.AnswerQuestion: _answer,
    cl.RenameSession: _rename,
    cl.ArchiveSession: _archive,
    cl.CloseSession: _close,
    cl.DeleteSession: _delete,
    cl.ForkSession: _fork,
    cl.MoveSession: _move,
    cl.SetMemory: _set_memory,
}


def _schedule_command(state: State, c: cl.SaveSchedule | cl.DeleteSchedule | cl.RunSchedule,
                      ctx: Context) -> Decided:
    from codey_server import schedules  # croniter, only when schedules are used

    if isinstance(c, cl.SaveSchedule):
        if c.schedule_id is not None and c.schedule_id not in state.schedules:
            raise CommandRejected("not_found", f"no schedule {c.schedule_id!r}")
        spec = schedules.spec_of(c, c.schedule_id or ctx.new_id("sch"))
        problem = schedules.check_spec(spec)
        if problem is not None:
            raise CommandRejected("bad_request", problem)
        worker = state.workers.get(spec.worker_id)
        if worker is None or worker.revoked:
            raise CommandRejected("not_found", f"no worker {spec.worker_id!r}")
        if not spec.workdir:
            raise CommandRejected("bad_request", "workdir must not be empty")
        if spec.target_session is not None:
            _existing(state, spec.target_session)
        return [(None, ev.ScheduleSaved(spec=spec))]
    if c.schedule_id not in state.schedules:
        raise CommandRejected("not_found", f"no schedule {c.schedule_id!r}")
    if isinstance(c, cl.DeleteSchedule):
        return [(None, ev.ScheduleDeleted(schedule_id=c.schedule_id))]
    info = state.schedules[c.schedule_id]
    provider = ctx.default_provider
    return schedules.fire(state, c.schedule_id, max(ctx.now(), info.last_due + 0.001),
                          session_id=ctx.new_id("ses"), item_id=ctx.new_id("itm"),
                          now=ctx.now(), provider=provider,
                          model=ctx.default_models.get(provider, ""))


def _task_command(state: State,
                  c: cl.CreateTask | cl.UpdateTask | cl.MoveTask | cl.DeleteTask | cl.RunTask,
                  ctx: Context) -> Decided:
    from codey_server import board

    if isinstance(c, cl.CreateTask):
        title = c.title.strip()
        if not title:
            raise CommandRejected("bad_request", "a task needs a title")
        board.check_dependencies(state, None, c.depends_on)
        return [(None, ev.TaskCreated(task_id=ctx.new_id("tsk"), title=title[:200],
                                      description=c.description, depends_on=c.depends_on,
                                      order=board.end_of(state, "todo")))]
    if c.task_id not in state.tasks:
        raise CommandRejected("not_found", f"no task {c.task_id!r}")
    if isinstance(c, cl.UpdateTask):
        if not c.title.strip():
            raise CommandRejected("bad_request", "a task needs a title")
        board.check_dependencies(state, c.task_id, c.depends_on)
        return [(None, ev.TaskUpdated(task_id=c.task_id, title=c.title.strip()[:200],
                                      description=c.description, depends_on=c.depends_on))]
    if isinstance(c, cl.MoveTask):
        return board.move(state, c.task_id, c.status, c.before)
    if isinstance(c, cl.DeleteTask):
        users = [t.title for t in state.tasks.values() if c.task_id in t.depends_on]
        if users:
            raise CommandRejected("conflict", f"{', '.join(map(repr, users))} depend on it")
        return [(None, ev.TaskDeleted(task_id=c.task_id))]
    prompt = ev.UserMessage(id=ctx.new_id("itm"), ts=ctx.now(),
                            text=board.prompt_of(state.tasks[c.task_id]))
    return board.run(state, c, lambda create: _create_session(state, create, ctx), prompt)
