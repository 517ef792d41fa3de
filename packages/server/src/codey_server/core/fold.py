"""The core's part of the fold: sessions, their items, approvals, actions, questions, memory.

The whole fold is ``apply(state, envelope) -> state`` (:class:`codey_server.core.rules.Rules`,
composed from this table and each feature's in ``codey_server.features``): one function for
start-up replay and live updates, with no I/O and no clock — everything it needs is in the
envelope (``ts`` included), so the same log always folds to the same state. The web client's
store (``web/store.js``) is the same fold in JavaScript; tests replay logs through both and
compare.

Every handler here and in the features' ``fold.py`` keeps to what follows.

**It is not pure: it mutates.** For speed ``apply`` updates ``state`` in place and returns the
same object — replaying a million events must not copy the state a million times. What
callers must know:

* The engine keeps ONE ``State`` for its life (``Engine.state``). Sessions, workers, items,
  approvals and a session's ``items``/``approvals``/``pending_actions`` containers are
  changed in place by later events, never swapped (a session or worker object is created once,
  by its creation or pairing event). So a reference to one taken before an ``await`` shows,
  after it, everything folded meanwhile. (``plan``, ``changed_paths`` and the ``auth`` and
  ``rate_limits`` entries are replaced whole: read those through their owner.) Code that
  keeps such a reference across an ``await`` relies on this (the agent's turns do not: a turn
  machine is handed the state at each step). A fold that returned new objects would leave
  such code reading stale state; change that code before changing this.
* Code that needs a value as of one moment reads it before its next ``await``, or keeps a
  copy (:func:`copy_state`; encoding the state is a copy too, and the loop thread sees one
  consistent state between awaits).
* The fold does not change the event: an appended item is stored as a copy (later updates
  change the stored item in place, and the envelope may still be encoded). Values taken from
  an update are stored as they are, and nothing changes them in place afterwards.
* Only the engine calls ``apply`` on its state, in seq order; tests and tools fold their own.

Unknown references (an update for an item that does not exist) are ignored: the fold never
raises on a well-formed event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol.state import (
    BUSY_STATUSES,
    COMPACTION_ENDED,
    MAX_CHANGED_PATHS,
    MODEL_CHANGED,
    PROCESS_OUTPUT_KEPT,
    PROCESSES_ENDED_KEPT,
    WORKING_STATUSES,
    Approval,
    PendingAction,
    PortForward,
    ProjectMemory,
    Question,
    RateLimit,
    SessionContext,
    SessionInfo,
    SessionProcess,
    State,
    memory_key,
)
from codey_protocol.updates import APPEND_FIELDS, REPLACE_FIELDS
from codey_protocol.worker import SandboxMode
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD", "MAX_CHANGED_PATHS", "copy_state", "find_item", "find_process"]

# Which fields of ``SessionItemUpdated`` append and which replace: derived from the struct by
# codey_protocol.updates; web/store.js gets the same rule generated into web/item_fields.js.
_APPENDS = tuple(APPEND_FIELDS.items())


def copy_state(state: State) -> State:
    """A deep copy (through the codec, which is the fastest deep copy for structs)."""
    return msgspec.json.decode(msgspec.json.encode(state), type=State)


def find_item(session: SessionInfo, item_id: str) -> ev.Item | None:
    """The item with ``item_id``; searched from the end, where updates nearly always land."""
    items = session.items
    for i in range(len(items) - 1, -1, -1):
        if items[i].id == item_id:
            return items[i]
    return None


# ---------------------------------------------------------------------------------------------
# sessions


def _session(state: State, env: ev.Envelope) -> SessionInfo | None:
    if env.session_id is None:
        return None
    s = state.sessions.get(env.session_id)
    if s is not None:
        s.updated_at = env.ts
    return s


def _session_created(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionCreated)
    if env.session_id is None:
        return
    # ``none``: created before the sandbox existed. It runs sandboxed now, without the
    # network, as a new session does (issue 36: that default is right, and the upgrade's
    # notice tells the user); its event keeps saying how it ran then
    sandbox: SandboxMode = "workspace-write" if e.sandbox == "none" else e.sandbox
    network = False if e.sandbox == "none" else e.network
    state.sessions[env.session_id] = SessionInfo(
        session_id=env.session_id, title=e.title, worker_id=e.worker_id, workdir=e.workdir,
        provider=e.provider, model=e.model, policy=e.policy, created_at=env.ts,
        updated_at=env.ts, plan_mode=e.plan_mode, parent_id=e.parent_id,
        parent_item=e.parent_item, role=e.role, read_only=e.read_only, turn_cap=e.turn_cap,
        agent=e.agent, sandbox=sandbox, network=network,
        worktree=msgspec.structs.replace(e.worktree) if e.worktree is not None else None,
    )


def _status(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionStatusChanged)
    s = _session(state, env)
    if s is not None:
        s.status = e.status
        s.status_reason = e.reason
        # the session's own working time, turn by turn (not its last activity, which a
        # rename or a memory edit moves)
        if e.status in BUSY_STATUSES:
            if s.busy_since is None:
                s.busy_since = env.ts
        elif s.busy_since is not None:
            s.busy_seconds += max(0.0, env.ts - s.busy_since)
            s.busy_since = None


def _title(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionTitleChanged)
    s = _session(state, env)
    if s is not None:
        s.title = e.title


def _policy(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionPolicyChanged)
    s = _session(state, env)
    if s is not None:
        s.policy = e.policy


def _sandbox(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionSandboxChanged)
    s = _session(state, env)
    if s is not None:
        s.sandbox, s.network = e.sandbox, e.network


def _model(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionModelChanged)
    s = _session(state, env)
    if s is not None:
        s.provider, s.model, s.effort = e.provider, e.model, e.effort
        # a mark in the transcript where it changed (the model never reads a notice); its id
        # from the event's seq, so both folds, and every replay, make the same item
        s.items.append(ev.Notice(id=f"itm_model_{env.seq}", ts=env.ts, code=MODEL_CHANGED,
                                 text=model_change_words(e, s.status in WORKING_STATUSES)))


def model_change_words(e: ev.SessionModelChanged, mid_turn: bool) -> str:
    """The model-change mark's text: "Model: openai / gpt-5 · effort high — why", and "(from
    the next turn)" when a turn was under way (it keeps the model it started with). The
    browser's fold writes the same words (``web/store.js``)."""
    words = f"Model: {e.provider} / {e.model}"
    if e.effort:
        words += f" · effort {e.effort}"
    if mid_turn:
        words += " (from the next turn)"
    if e.reason:
        words += f" — {e.reason}"
    return words


def _item_appended(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionItemAppended)
    s = _session(state, env)
    if s is not None:
        # a copy: later updates must not change the envelope (it may still be encoded later)
        s.items.append(msgspec.structs.replace(e.item))
        if isinstance(e.item, ev.Summary):
            s.compaction_requested = False
            # the context now holds the summary and what it kept, not what it replaced
            s.usage.context_tokens = 0
        elif isinstance(e.item, ev.Notice) and e.item.code in COMPACTION_ENDED:
            s.compaction_requested = False
        elif isinstance(e.item, ev.UserMessage) and s.plan_mode:
            s.plan_status = "none"  # feedback on the proposed plan: the model revises it


def _item_updated(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionItemUpdated)
    s = _session(state, env)
    if s is None:
        return
    item = find_item(s, e.item_id)
    if item is None:
        return
    for name, target in _APPENDS:
        delta = getattr(e, name)
        if delta and hasattr(item, target):
            setattr(item, target, getattr(item, target) + delta)
    for name in REPLACE_FIELDS:
        value = getattr(e, name)
        if value is not None and hasattr(item, name):
            setattr(item, name, value)


def _plan(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.PlanUpdated)
    s = _session(state, env)
    if s is not None:
        s.plan = list(e.steps)
        s.plan_explanation = e.explanation
        if s.plan_mode:
            s.plan_status = "proposed"


def _touch(state: State, env: ev.Envelope) -> None:
    _session(state, env)  # the session's last activity, nothing else


def _plan_approved(state: State, env: ev.Envelope) -> None:
    s = _session(state, env)
    if s is not None:
        s.plan_mode = False
        s.plan_status = "approved"


def _approval_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ApprovalRequested)
    s = _session(state, env)
    if s is not None:
        s.approvals[e.approval_id] = Approval(
            approval_id=e.approval_id, item_id=e.item_id, kind=e.kind, command=e.command,
            patch=e.patch, path=e.path, reason=e.reason, requested_at=env.ts,
        )


def _approval_resolved(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ApprovalResolved)
    s = _session(state, env)
    if s is None:
        return
    a = s.approvals.get(e.approval_id)
    if a is None or a.status != "pending":
        return  # the first decision wins
    a.status = e.decision
    a.message = e.message
    a.decided_at = env.ts
    remember = e.for_session and e.decision == "approved" and a.command
    # a command approved to run outside the sandbox is remembered apart: approving a command
    # for the session never lets it leave the sandbox
    prefixes = s.escalated_prefixes if a.kind == "escalate" else s.approved_prefixes
    if remember and a.command not in prefixes:
        prefixes.append(list(a.command or []))


def _action_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ActionRequested)
    s = _session(state, env)
    if s is not None:
        s.pending_actions[e.action_id] = PendingAction(
            action_id=e.action_id, item_id=e.item_id, worker_id=e.worker_id, action=e.action,
            sandbox=s.sandbox, network=s.network,
        )


def _action_finished(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ActionFinished)
    s = _session(state, env)
    if s is not None:
        s.pending_actions.pop(e.action_id, None)


# ---------------------------------------------------------------------------------------------
# processes


def find_process(session: SessionInfo, process_id: str) -> SessionProcess | None:
    for p in session.processes:
        if p.process_id == process_id:
            return p
    return None


def _process(state: State, env: ev.Envelope, process_id: str) -> SessionProcess | None:
    s = _session(state, env)
    return find_process(s, process_id) if s is not None else None


def _read(p: SessionProcess, delta: str) -> None:
    """Output read from a process: its newest PROCESS_OUTPUT_KEPT characters are kept."""
    if delta:
        out = p.output + delta
        if len(out) > PROCESS_OUTPUT_KEPT:
            out = out[-PROCESS_OUTPUT_KEPT:]
            p.output_cut = True
        p.output = out


def _process_started(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProcessStarted)
    s = _session(state, env)
    if s is None or find_process(s, e.process_id) is not None:
        return
    p = SessionProcess(process_id=e.process_id, item_id=e.item_id, worker_id=e.worker_id,
                       argv=list(e.argv), cwd=e.cwd, tty=e.tty, started_at=env.ts,
                       sandbox=e.sandbox, network=e.network)
    _read(p, e.output)
    s.processes.append(p)


def _process_output(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProcessOutput)
    p = _process(state, env, e.process_id)
    if p is not None:
        _read(p, e.output_delta)


def _process_stop_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProcessStopRequested)
    p = _process(state, env, e.process_id)
    if p is not None and p.status == "running":
        p.status = "stopping"
        p.stop_by = e.by


def _process_ended(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProcessEnded)
    s = _session(state, env)
    p = find_process(s, e.process_id) if s is not None else None
    if s is None or p is None or p.status in ("ended", "gone"):
        return  # the first end wins
    _read(p, e.output_delta)
    p.status = "gone" if e.stopped_by == "gone" else "ended"
    p.exit_code, p.signal, p.stopped_by = e.exit_code, e.signal, e.stopped_by
    p.ended_at = env.ts
    p.ports = []  # it listens on nothing now, and its forwards ended with it
    for f in p.forwards:
        if f.status in ("opening", "open"):
            f.status = "closed"
    ended = [i for i, x in enumerate(s.processes) if x.status in ("ended", "gone")]
    if len(ended) > PROCESSES_ENDED_KEPT:  # the oldest ended one leaves the list
        del s.processes[ended[0]]


def _process_listening(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProcessListening)
    p = _process(state, env, e.process_id)
    if p is not None and p.status in ("running", "stopping"):
        p.ports = list(e.ports)


def _process_forward_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProcessForwardRequested)
    p = _process(state, env, e.process_id)
    if p is None or p.status not in ("running", "stopping"):
        return
    p.forwards = [f for f in p.forwards if f.port != e.port]  # a failed one is tried again
    p.forwards.append(PortForward(port=e.port))


def _process_forwarded(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProcessForwarded)
    p = _process(state, env, e.process_id)
    f = next((f for f in p.forwards if f.port == e.port), None) if p is not None else None
    if f is None or f.status != "opening":
        return  # (the process ended meanwhile: closed stays closed)
    f.status = "failed" if e.error else "open"
    f.address, f.error = e.address, e.error


def _workspace_changed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionWorkspaceChanged)
    s = _session(state, env)
    if s is None:
        return
    new = list(dict.fromkeys(e.paths))
    seen = set(new)
    kept = [p for p in s.changed_paths if p not in seen]
    s.changed_paths = (kept + new)[-MAX_CHANGED_PATHS:]


def _usage(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TokenUsageRecorded)
    s = _session(state, env)
    if s is not None:
        u = s.usage
        u.input_tokens += e.input_tokens
        u.output_tokens += e.output_tokens
        u.reasoning_tokens += e.reasoning_tokens
        u.total_tokens += e.total_tokens
        u.cached_tokens += e.cached_tokens
        u.cache_write_tokens += e.cache_write_tokens
        u.turns += 1
        u.context_tokens = e.input_tokens + e.output_tokens
        if e.context_window is not None:
            u.context_window = e.context_window


def _context(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionContextUpdated)
    s = _session(state, env)
    if s is not None:
        s.context = SessionContext(instructions=list(e.instructions), skills=list(e.skills),
                                   environment=e.environment, warnings=list(e.warnings),
                                   loaded_at=env.ts)


def _archived(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionArchived)
    s = _session(state, env)
    if s is not None:
        s.archived = e.archived


def _deleted(state: State, env: ev.Envelope) -> None:
    if env.session_id is not None:
        state.sessions.pop(env.session_id, None)


def _kept_by_fork(item: ev.Item) -> bool:
    """Finished items only: a fork starts idle, with nothing half done."""
    if isinstance(item, ev.ToolCall):
        return item.result is not None
    if isinstance(item, ev.UserMessage):
        return not item.queued
    if isinstance(item, (ev.AssistantMessage, ev.Reasoning)):
        return not item.streaming
    return True


def _forked(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionForked)
    src = state.sessions.get(e.from_session)
    if src is None or env.session_id is None or env.session_id in state.sessions:
        return
    items: list[ev.Item] = []
    for item in src.items:
        if _kept_by_fork(item):
            items.append(msgspec.structs.replace(item))
        if item.id == e.until_item:
            break
    # a fork into a worktree of its own starts in the repository, as a new session does
    worktree = msgspec.structs.replace(e.worktree) if e.worktree is not None else None
    state.sessions[env.session_id] = SessionInfo(
        session_id=env.session_id, title=e.title, worker_id=src.worker_id,
        workdir=worktree.repo if worktree is not None else src.workdir, provider=src.provider,
        model=src.model, effort=src.effort, policy=src.policy, created_at=env.ts,
        updated_at=env.ts, items=items, forked_from=e.from_session, context=src.context,
        sandbox=src.sandbox, network=src.network, worktree=worktree)


def _moved(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionMoved)
    s = _session(state, env)
    if s is not None:
        s.worker_id = e.worker_id


def _question_asked(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.QuestionAsked)
    s = _session(state, env)
    if s is not None:
        s.questions[e.question_id] = Question(
            question_id=e.question_id, item_id=e.item_id, question=e.question,
            choices=list(e.choices), asked_at=env.ts)


def _question_answered(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.QuestionAnswered)
    s = _session(state, env)
    q = s.questions.get(e.question_id) if s is not None else None
    if q is None or q.status != "pending":
        return  # the first answer wins
    q.status = "cancelled" if e.cancelled else "answered"
    q.answer = e.answer
    q.answered_at = env.ts


def _memory(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.MemoryUpdated)
    state.memories[memory_key(e.worker_id, e.workdir)] = ProjectMemory(
        worker_id=e.worker_id, workdir=e.workdir, text=e.text, updated_at=env.ts)


def _compaction_requested(state: State, env: ev.Envelope) -> None:
    s = _session(state, env)
    if s is not None:
        s.compaction_requested = True


def _rate_limit(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.RateLimitUpdated)
    state.rate_limits[e.provider] = RateLimit(
        limit_requests=e.limit_requests, remaining_requests=e.remaining_requests,
        reset_requests=e.reset_requests, limit_tokens=e.limit_tokens,
        remaining_tokens=e.remaining_tokens, reset_tokens=e.reset_tokens, updated_at=env.ts,
    )


#: the events the core folds (sessions, their items, approvals, actions, questions, memory);
#: each feature folds its own (``board/fold.py``, ``workers/fold.py``, …)
FOLD: Mapping[type[Any], FoldHandler] = {
    ev.SessionCreated: _session_created,
    ev.SessionStatusChanged: _status,
    ev.SessionTitleChanged: _title,
    ev.SessionPolicyChanged: _policy,
    ev.SessionSandboxChanged: _sandbox,
    ev.SessionModelChanged: _model,
    ev.SessionItemAppended: _item_appended,
    ev.SessionItemUpdated: _item_updated,
    ev.PlanUpdated: _plan,
    ev.PlanApproved: _plan_approved,
    ev.TurnRequested: _touch,
    ev.ApprovalRequested: _approval_requested,
    ev.ApprovalResolved: _approval_resolved,
    ev.ActionRequested: _action_requested,
    ev.ActionFinished: _action_finished,
    ev.ProcessStarted: _process_started,
    ev.ProcessOutput: _process_output,
    ev.ProcessStopRequested: _process_stop_requested,
    ev.ProcessEnded: _process_ended,
    ev.ProcessListening: _process_listening,
    ev.ProcessForwardRequested: _process_forward_requested,
    ev.ProcessForwarded: _process_forwarded,
    ev.SessionWorkspaceChanged: _workspace_changed,
    ev.TokenUsageRecorded: _usage,
    ev.CompactionRequested: _compaction_requested,
    ev.SessionContextUpdated: _context,
    ev.SessionArchived: _archived,
    ev.SessionDeleted: _deleted,
    ev.SessionForked: _forked,
    ev.SessionMoved: _moved,
    ev.QuestionAsked: _question_asked,
    ev.QuestionAnswered: _question_answered,
    ev.MemoryUpdated: _memory,
    ev.RateLimitUpdated: _rate_limit,
}
