"""The agent's part of the fold: what happens in a session's turns — its items (the
conversation, tool calls, notices), plan, approvals, actions on the worker, processes (the
``exec`` tool's), token usage and the providers' rate limits, questions to the user, compaction
and the project context a turn loaded.

A session's life (created, its settings, status, forks, deletion) is the core's
(:mod:`codey_server.core.fold`, which also says what every handler keeps to: it mutates the
one state in place, never changes the event, ignores unknown references). ``web/store.js``
folds the same events the same way; the parity tests compare the two on generated logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol.state import (
    COMPACTION_ENDED,
    HOOK_RUNS_KEPT,
    PROCESS_OUTPUT_KEPT,
    PROCESSES_ENDED_KEPT,
    Approval,
    ApprovalReview,
    Attention,
    AttentionSetting,
    Budget,
    BudgetStop,
    HookRunInfo,
    PendingAction,
    PortForward,
    Question,
    RateLimit,
    SessionContext,
    SessionProcess,
    Spend,
    State,
)
from codey_protocol.updates import APPEND_FIELDS, REPLACE_FIELDS
from codey_server.core.costs import day_of
from codey_server.core.fold import find_item, find_process, session_of
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]

# Which fields of ``SessionItemUpdated`` append and which replace: derived from the struct by
# codey_protocol.updates; web/store.js gets the same rule generated into web/item_fields.js.
_APPENDS = tuple(APPEND_FIELDS.items())


def _item_appended(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionItemAppended)
    s = session_of(state, env)
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
    s = session_of(state, env)
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
    s = session_of(state, env)
    if s is not None:
        s.plan = list(e.steps)
        s.plan_explanation = e.explanation
        if s.plan_mode:
            s.plan_status = "proposed"


def _touch(state: State, env: ev.Envelope) -> None:
    session_of(state, env)  # the session's last activity, nothing else


def _plan_approved(state: State, env: ev.Envelope) -> None:
    s = session_of(state, env)
    if s is not None:
        s.plan_mode = False
        s.plan_status = "approved"


def _approval_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ApprovalRequested)
    s = session_of(state, env)
    if s is not None:
        s.approvals[e.approval_id] = Approval(
            approval_id=e.approval_id, item_id=e.item_id, kind=e.kind, command=e.command,
            patch=e.patch, path=e.path, reason=e.reason, requested_at=env.ts,
        )


def _approval_resolved(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ApprovalResolved)
    s = session_of(state, env)
    if s is None:
        return
    a = s.approvals.get(e.approval_id)
    if a is None or a.status != "pending":
        return  # the first decision wins
    a.status = e.decision
    a.message = e.message
    a.decided_at = env.ts
    if e.decision == "approved":
        s.reviewer_denials = 0  # the run of the reviewer's denials is over
    remember = e.for_session and e.decision == "approved" and a.command
    # a command approved to run outside the sandbox is remembered apart: approving a command
    # for the session never lets it leave the sandbox
    prefixes = s.escalated_prefixes if a.kind == "escalate" else s.approved_prefixes
    if remember and a.command not in prefixes:
        prefixes.append(list(a.command or []))


def _action_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ActionRequested)
    s = session_of(state, env)
    if s is not None:
        s.pending_actions[e.action_id] = PendingAction(
            action_id=e.action_id, item_id=e.item_id, worker_id=e.worker_id, action=e.action,
            sandbox=s.sandbox, network=s.network,
        )


def _action_finished(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ActionFinished)
    s = session_of(state, env)
    if s is not None:
        s.pending_actions.pop(e.action_id, None)


def _process(state: State, env: ev.Envelope, process_id: str) -> SessionProcess | None:
    s = session_of(state, env)
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
    s = session_of(state, env)
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
    s = session_of(state, env)
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


def _usage(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TokenUsageRecorded)
    s = session_of(state, env)
    if s is not None:
        u = s.usage
        u.input_tokens += e.input_tokens
        u.output_tokens += e.output_tokens
        u.reasoning_tokens += e.reasoning_tokens
        u.total_tokens += e.total_tokens
        u.cached_tokens += e.cached_tokens
        u.cache_write_tokens += e.cache_write_tokens
        u.turns += 1
        u.context_tokens = (e.context_tokens if e.context_tokens is not None
                            else e.input_tokens + e.output_tokens)
        if e.context_window is not None:
            u.context_window = e.context_window
        if e.cost_micros is None:
            u.unpriced_calls += 1
        else:
            u.cost_micros += e.cost_micros
        # the day's spend, by provider: the call's own, else (recorded before providers
        # were) the session's as it stood then
        provider = e.provider or s.provider or "unknown"
        day = state.spend.setdefault(day_of(env.ts), {})
        spend = day.get(provider)
        if spend is None:
            spend = day[provider] = Spend()
        spend.tokens += e.total_tokens
        spend.calls += 1
        if e.cost_micros is None:
            spend.unpriced_calls += 1
        else:
            spend.cost_micros += e.cost_micros


def _context(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionContextUpdated)
    s = session_of(state, env)
    if s is not None:
        s.context = SessionContext(instructions=list(e.instructions), skills=list(e.skills),
                                   environment=e.environment, warnings=list(e.warnings),
                                   loaded_at=env.ts)


def _agent_commands(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.AgentCommandsUpdated)
    s = session_of(state, env)
    if s is not None:
        s.agent_commands = list(e.commands)


def _agent_mode(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.AgentModeUpdated)
    s = session_of(state, env)
    if s is not None:
        s.agent_mode = e.current_mode
        if e.modes is not None:
            s.agent_modes = list(e.modes)


def _agent_config(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.AgentConfigUpdated)
    s = session_of(state, env)
    if s is not None:
        s.agent_config = list(e.options)


def _hooks_found(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.HooksFound)
    s = session_of(state, env)
    if s is not None:
        s.hook_files = list(e.files)


def _hooks_trusted(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.HooksTrusted)
    s = session_of(state, env)
    if s is not None and e.sha256 not in s.trusted_hooks:
        s.trusted_hooks.append(e.sha256)


def _hook_ran(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.HookRan)
    s = session_of(state, env)
    if s is None:
        return
    s.hook_runs.append(HookRunInfo(
        item_id=e.item_id, event=e.event, path=e.path, command_line=e.command_line,
        exit_code=e.exit_code, duration_ms=e.duration_ms, output=e.output,
        timed_out=e.timed_out, decision=e.decision, reason=e.reason, problem=e.problem,
        at=env.ts))
    del s.hook_runs[:-HOOK_RUNS_KEPT]


def _question_asked(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.QuestionAsked)
    s = session_of(state, env)
    if s is not None:
        s.questions[e.question_id] = Question(
            question_id=e.question_id, item_id=e.item_id, question=e.question,
            choices=list(e.choices), asked_at=env.ts)


def _question_answered(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.QuestionAnswered)
    s = session_of(state, env)
    q = s.questions.get(e.question_id) if s is not None else None
    if q is None or q.status != "pending":
        return  # the first answer wins
    q.status = "cancelled" if e.cancelled else "answered"
    q.answer = e.answer
    q.answered_at = env.ts


def _compaction_requested(state: State, env: ev.Envelope) -> None:
    s = session_of(state, env)
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


def _budget_set(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.BudgetSet)
    if e.scope == "day":
        state.day_budget = Budget(max_tokens=e.max_tokens, max_micros=e.max_micros)
        return
    s = session_of(state, env)
    if s is not None:
        none = e.max_tokens is None and e.max_micros is None
        s.budget = None if none else Budget(max_tokens=e.max_tokens, max_micros=e.max_micros)


def _budget_reached(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.BudgetReached)
    s = session_of(state, env)
    if s is not None:
        s.budget_stop = BudgetStop(scope=e.scope, unit=e.unit, limit=e.limit, spent=e.spent,
                                   at=env.ts)


def _prices_set(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.PricesSet)
    state.prices = {name: msgspec.structs.replace(p) for name, p in e.prices.items()}
def _attention_changed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionAttentionChanged)
    s = session_of(state, env)
    if s is not None:
        s.attention_setting = AttentionSetting(
            nudge_after_s=e.nudge_after_s, act_after_s=e.act_after_s,
            on_approval=e.on_approval, on_question=e.on_question)


def _attention_scheduled(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.AttentionScheduled)
    s = session_of(state, env)
    if s is not None:
        s.attention = Attention(target_id=e.target_id, target=e.target, nudge_at=e.nudge_at,
                                act_at=e.act_at, then=e.then)


def _attention_nudged(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.AttentionNudged)
    s = session_of(state, env)
    if s is None:
        return
    if e.step == "t1":
        if s.attention is not None and s.attention.target_id == e.target_id:
            s.attention.nudged = True
    else:  # parked: the target's answer resumes the turn
        s.parked_on = e.target_id


def _attention_acted(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.AttentionActed)
    s = session_of(state, env)
    if s is not None and s.attention is not None and s.attention.target_id == e.target_id:
        s.attention.acted = True


def _approval_reviewed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ApprovalReviewed)
    s = session_of(state, env)
    a = s.approvals.get(e.approval_id) if s is not None else None
    if s is None or a is None:
        return
    a.review = ApprovalReview(decision=e.verdict, risk=e.risk, reason=e.reason,
                              reviewer=e.reviewer, approved=e.approved)
    if e.verdict == "deny":
        s.reviewer_denials += 1
    elif e.verdict == "approve":
        s.reviewer_denials = 0


#: the events of a session's turns
FOLD: Mapping[type[Any], FoldHandler] = {
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
    ev.TokenUsageRecorded: _usage,
    ev.CompactionRequested: _compaction_requested,
    ev.SessionContextUpdated: _context,
    ev.QuestionAsked: _question_asked,
    ev.QuestionAnswered: _question_answered,
    ev.RateLimitUpdated: _rate_limit,
    ev.BudgetSet: _budget_set,
    ev.BudgetReached: _budget_reached,
    ev.PricesSet: _prices_set,
    ev.SessionAttentionChanged: _attention_changed,
    ev.AttentionScheduled: _attention_scheduled,
    ev.AttentionNudged: _attention_nudged,
    ev.AttentionActed: _attention_acted,
    ev.ApprovalReviewed: _approval_reviewed,
    ev.AgentCommandsUpdated: _agent_commands,
    ev.HooksFound: _hooks_found,
    ev.HooksTrusted: _hooks_trusted,
    ev.HookRan: _hook_ran,
    ev.AgentModeUpdated: _agent_mode,
    ev.AgentConfigUpdated: _agent_config,
}
