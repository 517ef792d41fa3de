"""The core's browser commands: sessions, prompts, approvals, questions, memory.

Each is a pure decision ``(state, command, ctx) -> [(session_id, event)]``: ids and the clock
come in through :class:`~codey_server.core.rules.Context`, so a test can decide with fixed
ids. A command that cannot be carried out raises
:class:`~codey_server.core.rules.CommandRejected` and produces nothing. :data:`COMMANDS` is the
core's table; each feature declares its own (``board/decide.py``, ``schedules/decide.py``),
and :class:`~codey_server.core.rules.Rules` puts them together.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State, WorkerInfo
from codey_server.core import goals, rewind
from codey_server.core.memory import memory_written
from codey_server.core.rules import CommandRejected, Context, Decided, Decider
from codey_server.core.toggles import sandbox_changed

__all__ = ["ATTACHMENTS_MAX", "COMMANDS", "MEMORY_MAX", "TITLE_MAX", "CommandRejected",
           "Context", "Decided", "branch_for", "clean_file_name", "create_session",
           "default_model",
           "default_provider", "existing", "known_providers", "recovered_model",
           "title_from_prompt", "worktree_gone"]

TITLE_MAX = 60


def title_from_prompt(prompt: str) -> str:
    """The first line of the prompt, shortened on a word boundary."""
    line = next((ln.strip() for ln in prompt.splitlines() if ln.strip()), "")
    if not line:
        return "New session"
    if len(line) <= TITLE_MAX:
        return line
    cut = line[:TITLE_MAX].rsplit(" ", 1)[0] or line[:TITLE_MAX]
    return cut.rstrip(" ,.;:") + "…"


def _compact(state: State, c: cl.CompactSession) -> Decided:
    s = existing(state, c.session_id)
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    # the session's state refuses these, not the request: 409
    if s.agent:
        raise CommandRejected("conflict", "an external agent keeps its own context")
    if s.compaction_requested:
        return []
    if not any(isinstance(i, (ev.UserMessage, ev.AssistantMessage, ev.ToolCall))
               for i in s.items):
        raise CommandRejected("conflict", "there is nothing to compact yet")
    return [(s.session_id, ev.CompactionRequested())]


def _trust_hooks(state: State, c: cl.TrustHooks) -> Decided:
    """Only a project file the worker reported, in the content it reported: the user trusts
    what they were shown, never a hash a page made up (a file changed since is asked again)."""
    s = existing(state, c.session_id)
    found = next((f for f in s.hook_files if f.path == c.path and f.scope == "project"),
                 None)
    if found is None:
        raise CommandRejected("not_found", f"the session has no project hook file {c.path!r}")
    if found.sha256 != c.sha256:
        raise CommandRejected("conflict", "the file has changed since: look at it again")
    if c.sha256 in s.trusted_hooks:
        return []
    return [(s.session_id, ev.HooksTrusted(path=c.path, sha256=c.sha256))]


def existing(state: State, session_id: str):  # type: ignore[no-untyped-def]
    s = state.sessions.get(session_id)
    if s is None:
        raise CommandRejected("not_found", f"no session {session_id!r}")
    return s


# model providers: config.json's (in the context) and Settings → Models' (in the state) ----

def known_providers(state: State, ctx: Context) -> list[str]:
    """Every provider a session can use: config.json's first, then those of Settings → Models
    (a name in both is config.json's)."""
    return [*ctx.default_models, *(n for n in state.providers if n not in ctx.default_models)]


def default_model(state: State, ctx: Context, provider: str) -> str:
    """The model a session of ``provider`` uses when none was picked."""
    if provider in ctx.default_models:
        return ctx.default_models[provider]
    entry = state.providers.get(provider)
    if entry is None:
        return ""
    return entry.default_model or (entry.models[0] if entry.models else "")


def default_provider(state: State, ctx: Context) -> str:
    """The server's default provider: config.json's choice, else the first one known (so a
    server started with none takes the first one added in Settings → Models, no restart)."""
    known = known_providers(state, ctx)
    if ctx.default_provider in known or not known:
        return ctx.default_provider
    return known[0]


def recovered_model(state: State, s: SessionInfo, ctx: Context) -> list[ev.Event]:
    """A session whose provider is gone (never configured, or removed) takes the server's
    default from its next turn on: the change is recorded, so the header tells the truth.
    Nothing when its provider is there, when there is no other, or for an ACP agent's."""
    known = known_providers(state, ctx)
    if s.agent is not None or s.provider in known or not known:
        return []
    provider = default_provider(state, ctx)
    why = (f"the provider {s.provider!r} is not configured on this server" if s.provider
           else "no model provider was set up when the session started")
    return [ev.SessionModelChanged(
        provider=provider, model=default_model(state, ctx, provider),
        reason=f"{why}; using {provider!r}")]


def branch_for(title: str, session_id: str) -> str:
    """A session's worktree branch: ``codey/<the title's words>-<4 of its id>`` (the id's part
    keeps two sessions of one title apart)."""
    words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].rstrip("-")
    return f"codey/{words or 'session'}-{session_id[-4:]}"


def workdir_outside_roots(worker: WorkerInfo, workdir: str) -> str | None:
    """Why a session cannot work in ``workdir`` on ``worker`` (None: it may): the folder is
    outside every root the worker allows, as it reported them in its hello (or, from an older
    worker, as it paired). Only what can be told from the text is judged — an absolute POSIX
    path, ``..`` folded — the worker resolves symlinks and judges again at each action."""
    roots = worker.capabilities.roots or worker.roots
    if not roots or worker.os.lower().startswith("windows") or not workdir.startswith("/"):
        return None
    folded = posixpath.normpath(workdir)
    for root in roots:
        r = posixpath.normpath(root)
        if folded == r or folded.startswith(r.rstrip("/") + "/"):
            return None
    host = worker.name or worker.hostname
    return (f"{workdir} is outside the folders {host} allows ({', '.join(roots)}): choose a "
            "folder inside one, or add it to allowed_roots in that machine's worker config")


def create_session(state: State, c: cl.CreateSession, ctx: Context) -> Decided:
    worker = state.workers.get(c.worker_id)
    if worker is None:
        raise CommandRejected("not_found", f"no worker {c.worker_id!r}")
    if worker.revoked:
        raise CommandRejected("forbidden", f"worker {c.worker_id!r} was revoked")
    if not c.workdir.strip():
        raise CommandRejected("bad_request", "workdir must not be empty")
    outside = workdir_outside_roots(worker, c.workdir.strip())
    if outside is not None:
        raise CommandRejected("outside_allowed_roots", outside)
    provider = c.provider or default_provider(state, ctx)
    model = c.model or default_model(state, ctx, provider)
    if c.agent is not None:
        if c.agent not in worker.capabilities.acp_agents:
            raise CommandRejected("not_found", f"worker {c.worker_id!r} has no ACP agent "
                                                 f"{c.agent!r} (see its acp_agents config)")
        if c.plan_mode:
            raise CommandRejected("bad_request", "plan mode is Codey's own; an ACP agent "
                                                 "plans in its own way")
        provider, model = "acp", c.agent
    session_id = ctx.new_id("ses")
    title = c.title or title_from_prompt(c.prompt or c.goal.strip().lstrip("$ "))
    worktree = None
    if c.worktree is not None:
        if c.agent is not None:
            raise CommandRejected("bad_request", "an ACP agent works in the folder it is given; "
                                                 "start it without a worktree")
        worktree = ev.Worktree(repo=c.workdir.strip(), branch=branch_for(title, session_id),
                               base=c.worktree.base.strip(), setup=c.worktree.setup)
    out: Decided = [(session_id, ev.SessionCreated(
        title=title, worker_id=c.worker_id,
        workdir=c.workdir.strip(), provider=provider, model=model, policy=c.policy,
        plan_mode=c.plan_mode, agent=c.agent, origin=ctx.origin, sandbox=c.sandbox,
        network=c.network, worktree=worktree,
    ))]
    attachments = _check_attachments(c.attachments, ctx)
    if c.prompt.strip() or attachments:
        out.append((session_id, ev.SessionItemAppended(
            item=ev.UserMessage(id=ctx.new_id("itm"), ts=ctx.now(), text=c.prompt,
                                attachments=attachments, origin=ctx.origin))))
    if c.goal.strip():
        created = SessionInfo(session_id=session_id, title=title, worker_id=c.worker_id,
                              workdir=c.workdir.strip(), provider=provider, model=model,
                              agent=c.agent)
        out += [(session_id, e) for e in goals.goal_events(
            created, c.goal, c.goal_max_turns, ctx, code="bad_request")]
    return out


_BUSY = ("running", "waiting_approval", "waiting_worker")

#: a project memory holds at most this many characters
MEMORY_MAX = 8 * 1024
#: files one prompt may carry, and their total size
ATTACHMENTS_MAX = 10
ATTACHMENTS_MAX_BYTES = 25 * 1024 * 1024


def clean_file_name(name: str) -> str:
    """A file name safe to write anywhere: no directories, no hidden dot, printable. An
    attachment's name comes from a browser (or any API caller): ``x/../../../PLANTED.sh``
    becomes ``PLANTED.sh``, written under the attachments folder like any other."""
    base = re.sub(r"[^\w.\- ]+", "_", posixpath.basename(name.replace("\\", "/"))).strip(" .")
    return (base or "file")[:120]


def _check_attachments(attachments: list[ev.Attachment], ctx: Context) -> list[ev.Attachment]:
    """The attachments, checked, with clean names."""
    if len(attachments) > ATTACHMENTS_MAX:
        raise CommandRejected("bad_request", f"at most {ATTACHMENTS_MAX} files per message")
    # what the request refers to, not how it is written: an unknown file is a 404, too many
    # bytes a 413 (the REST bodies' schemas can say neither)
    for a in attachments:
        if not ctx.blob_exists(a.hash):
            raise CommandRejected("not_found", f"{a.name}: upload it first (POST /api/blobs)")
    if sum(a.size for a in attachments) > ATTACHMENTS_MAX_BYTES:
        raise CommandRejected("too_large", "the files of one message may have at most "
                                           f"{ATTACHMENTS_MAX_BYTES // (1024 * 1024)} MiB")
    return [msgspec.structs.replace(a, name=clean_file_name(a.name)) for a in attachments]


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


def worktree_gone(s: SessionInfo) -> str:
    """Why the session cannot run a turn in its folder ("" when it can): its worktree was
    removed. A turn there would find no folder, or (from an older worker) an empty one made
    in its place, and report on nothing ("Ran 0 tests … OK", issue 33)."""
    w = s.worktree
    if w is None or w.status != "removed":
        return ""
    again = "" if w.branch_deleted else f"make it again from its branch {w.branch}, or "
    where = f" ({w.path})" if w.path else ""
    return f"its worktree{where} was removed: {again}fork the session into a new worktree"


def _runnable(s: SessionInfo) -> None:
    """Refuse (conflict) what would start a turn in a session whose worktree was removed."""
    why = worktree_gone(s)
    if why:
        raise CommandRejected("conflict", why)


def _send_prompt(state: State, c: cl.SendPrompt, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    if not c.text.strip() and not c.attachments:
        raise CommandRejected("bad_request", "the prompt is empty")
    attachments = _check_attachments(c.attachments, ctx)
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    _runnable(s)
    out: Decided = [(s.session_id, e) for e in recovered_model(state, s, ctx)]
    untitled = s.title == title_from_prompt("")
    if untitled and not any(isinstance(i, ev.UserMessage) for i in s.items):
        out.append((s.session_id, ev.SessionTitleChanged(title=title_from_prompt(c.text))))
    # A prompt during a turn is queued and injected before the next model call (steer).
    busy = s.status in _BUSY or _asking(s)
    # a command's model and tools are for the turn it starts: queued into a running turn,
    # they would not apply (the running turn's stay), so they are not recorded as if they did
    for_turn = c.for_turn
    if busy and for_turn is not None:
        for_turn = ev.TurnSettings(slash=for_turn.slash) if for_turn.slash else None
    out.append((s.session_id, ev.SessionItemAppended(item=ev.UserMessage(
        id=ctx.new_id("itm"), ts=ctx.now(), text=c.text, queued=busy,
        attachments=attachments, origin=ctx.origin, for_turn=for_turn))))
    return out


def _decide_approval(state: State, c: cl.DecideApproval, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
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
    s = existing(state, c.session_id)
    q = s.questions.get(c.question_id)
    if q is None:
        raise CommandRejected("not_found", f"no question {c.question_id!r} in this session")
    if q.status != "pending":
        raise CommandRejected("conflict", f"the question was already {q.status}")
    if not c.answer.strip():
        raise CommandRejected("bad_request", "the answer is empty")
    return [(s.session_id, ev.QuestionAnswered(question_id=q.question_id, answer=c.answer))]


def _rename(state: State, c: cl.RenameSession, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    title = " ".join(c.title.split())
    if not title:
        raise CommandRejected("bad_request", "the title is empty")
    if len(title) > 200:
        raise CommandRejected("bad_request", "the title is longer than 200 characters")
    return [] if title == s.title else [(s.session_id, ev.SessionTitleChanged(title=title))]


def _archive(state: State, c: cl.ArchiveSession, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
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


def _stop_processes(s: SessionInfo, by: ev.ProcessStopper) -> list[ev.Event]:
    """Ask every running process of the session to stop (the agent service sends the worker
    ``exec_kill`` for each, and again after a reconnect until it has ended)."""
    return [ev.ProcessStopRequested(process_id=p.process_id, by=by)
            for p in s.processes if p.status == "running"]


def _close(state: State, c: cl.CloseSession, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    if s.status == "closed":
        return []
    reason = c.reason.strip() or "closed by the user"
    events = _stop_waiting(s, reason) + _stop_processes(s, "close")
    events.append(ev.SessionStatusChanged(status="closed", reason=reason))
    return [(s.session_id, e) for e in events]


def _delete(state: State, c: cl.DeleteSession, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    events = _stop_waiting(s, "the session was deleted") + _stop_processes(s, "close")
    if s.status != "closed":
        events.append(ev.SessionStatusChanged(status="closed", reason="deleted"))
    events.append(ev.SessionDeleted(reason="deleted by the user"))
    return [(s.session_id, e) for e in events]


def _fork(state: State, c: cl.ForkSession, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    if not s.items:
        raise CommandRejected("bad_request", "the session has nothing to fork yet")
    until = c.item_id or s.items[-1].id
    if not any(i.id == until for i in s.items):
        raise CommandRejected("not_found", f"no item {until!r} in this session")
    new_id = ctx.new_id("ses")
    title = " ".join((c.title or "").split()) or f"{s.title} (fork)"
    out: Decided = [(new_id, ev.SessionForked(from_session=s.session_id, until_item=until,
                                              title=title[:200],
                                              worktree=_fork_worktree(s, c, title, new_id)))]
    out += [(new_id, e) for e in recovered_model(state, s, ctx)]
    if c.prompt.strip():
        out.append((new_id, ev.SessionItemAppended(item=ev.UserMessage(
            id=ctx.new_id("itm"), ts=ctx.now(), text=c.prompt))))
    return out


def _fork_worktree(s: SessionInfo, c: cl.ForkSession, title: str,
                   new_id: str) -> ev.Worktree | None:
    """The fork's own worktree, when it asks for one or its source's was removed (that folder
    is gone: the fork could not work in it): a new branch from the base asked for, else from
    the source's branch while it has one (the work committed there goes on), else from the
    source's base; from the same repository."""
    w = s.worktree
    gone = w is not None and w.status == "removed"
    if c.worktree is None and not gone:
        return None
    if s.agent is not None:
        raise CommandRejected("bad_request", "an ACP agent works in the folder it is given; "
                                             "fork it without a worktree")
    base = c.worktree.base.strip() if c.worktree is not None else ""
    setup = c.worktree.setup if c.worktree is not None else (w.setup if w else True)
    if w is None:
        return ev.Worktree(repo=s.workdir, branch=branch_for(title, new_id), base=base,
                           setup=setup)
    if not base:
        base = w.branch if not w.branch_deleted else (w.base or w.base_commit)
    return ev.Worktree(repo=w.repo_root or w.repo, branch=branch_for(title, new_id),
                       base=base, setup=setup)


def _move(state: State, c: cl.MoveSession, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
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
    if len(c.text) > MEMORY_MAX:
        raise CommandRejected("bad_request", f"the memory holds at most {MEMORY_MAX} "
                                             f"characters; this is {len(c.text)}")
    if c.session_id:  # the session's memory: its repository's (core/memory.py)
        s = existing(state, c.session_id)
        return [(None, e) for e in memory_written(state, s, c.text)]
    if c.worker_id not in state.workers:
        raise CommandRejected("not_found", f"no worker {c.worker_id!r}")
    if not c.workdir.strip():
        raise CommandRejected("bad_request", "workdir must not be empty")
    return [(None, ev.MemoryUpdated(worker_id=c.worker_id, workdir=c.workdir.strip(),
                                    text=c.text))]


def _approve_plan(state: State, c: cl.ApprovePlan, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    if s.plan_status != "proposed":
        raise CommandRejected("conflict", "there is no proposed plan to approve")
    _runnable(s)
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
    s = existing(state, c.session_id)
    if s.status not in ("error", "interrupted"):
        raise CommandRejected("conflict", f"nothing to retry: the session is {s.status}")
    _runnable(s)
    return [(s.session_id, e) for e in [*recovered_model(state, s, ctx), ev.TurnRequested()]]


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
    cl.TrustHooks: lambda state, c, ctx: _trust_hooks(state, c),
}


def _set_sandbox(state: State, c: cl.SetSandbox, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    if (s.sandbox, s.network) == (c.sandbox, c.network):
        return []
    # running processes keep the sandbox they started in: a narrowing stops them first
    return [(s.session_id, e) for e in sandbox_changed(s, c.sandbox, c.network, ctx)]


def _set_model(state: State, c: cl.SetSessionModel, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    if s.agent is not None:
        raise CommandRejected("conflict", f"the ACP agent {s.agent!r} picks its own model")
    if c.provider not in known_providers(state, ctx):
        raise CommandRejected("not_found", f"no provider {c.provider!r}: add it in "
                                           "Settings → Models")
    model = c.model.strip() or default_model(state, ctx, c.provider)
    if len(model) > 200:
        raise CommandRejected("bad_request", "that model name is too long")
    if (s.provider, s.model, s.effort) == (c.provider, model, c.effort):
        return []
    return [(s.session_id, ev.SessionModelChanged(provider=c.provider, model=model,
                                                  effort=c.effort))]


def _set_policy(state: State, c: cl.SetApprovalPolicy, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    if s.policy == c.policy:
        return []
    return [(s.session_id, ev.SessionPolicyChanged(policy=c.policy))]


def _set_attention(state: State, c: cl.SetAttention, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    if any(t is not None and not 0 <= t <= 30 * 86400 for t in (c.nudge_after_s, c.act_after_s)):
        raise CommandRejected("bad_request", "the ladder's times must be 0 to 30 days")
    return [(s.session_id, ev.SessionAttentionChanged(
        nudge_after_s=c.nudge_after_s, act_after_s=c.act_after_s, on_approval=c.on_approval,
        on_question=c.on_question))]


def _interrupt(state: State, c: cl.Interrupt, ctx: Context) -> Decided:
    """Stop the session's turn and its sub-agents' — and their processes, also those of a
    session whose turn is over (a dev server it left running)."""
    s = existing(state, c.session_id)
    stopped = _interruptible(state, s)
    alone = [] if any(x is s for x in stopped) else [s]
    out: Decided = [(x.session_id, e) for x in alone + stopped
                    for e in _stop_processes(x, "interrupt")]
    out += [(x.session_id, ev.SessionStatusChanged(status="interrupted",
                                                   reason="interrupted by the user"))
            for x in stopped]
    return out


def _stop_process(state: State, c: cl.StopProcess, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    p = next((p for p in s.processes if p.process_id == c.process_id), None)
    if p is None:
        raise CommandRejected("not_found", f"no process {c.process_id!r} in this session")
    if p.status == "stopping":
        return []  # asked already: its kill is on its way
    if p.status != "running":
        raise CommandRejected("conflict", f"the process has already {p.status}")
    return [(s.session_id, ev.ProcessStopRequested(process_id=p.process_id, by="user"))]


def _forward_port(state: State, c: cl.ForwardPort, ctx: Context) -> Decided:
    """The user's click on a port a process listens on inside its sandbox's own network:
    only such a port (the worker refuses any other too), of a running process, on a worker
    that can forward. Asked again while it opens or is open: nothing more."""
    s = existing(state, c.session_id)
    p = next((p for p in s.processes if p.process_id == c.process_id), None)
    if p is None:
        raise CommandRejected("not_found", f"no process {c.process_id!r} in this session")
    if p.status != "running":
        raise CommandRejected("conflict", f"the process is {p.status}")
    if c.port not in p.ports:
        raise CommandRejected("conflict", f"the process does not listen on port {c.port} "
                                          "inside its sandbox")
    if any(f.port == c.port and f.status in ("opening", "open") for f in p.forwards):
        return []
    worker = state.workers.get(p.worker_id)
    if worker is None or "exec_forward" not in worker.capabilities.executors:
        raise CommandRejected("unsupported", "this machine's worker cannot forward ports "
                                             "(an older version)")
    return [(s.session_id, ev.ProcessForwardRequested(process_id=p.process_id, port=c.port))]


#: the browser commands the core decides
COMMANDS: Mapping[type[Any], Decider] = {
    cl.CreateSession: create_session,
    cl.SendPrompt: _send_prompt,
    cl.DecideApproval: _decide_approval,
    cl.SetApprovalPolicy: _set_policy,
    cl.SetAttention: _set_attention,
    cl.SetSandbox: _set_sandbox,
    cl.SetSessionModel: _set_model,
    cl.Interrupt: _interrupt,
    cl.StopProcess: _stop_process,
    cl.ForwardPort: _forward_port,
    cl.CompactSession: lambda state, c, ctx: _compact(state, c),
    **_SESSION_OPS,
    **goals.COMMANDS,
    **rewind.COMMANDS,
}


