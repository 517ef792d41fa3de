"""The fold: ``apply(state, envelope) -> state``.

One function for start-up replay and live updates, with no I/O and no clock: everything it
needs is in the envelope (``ts`` included). The web client's store (``web/store.js``) is the
same fold in JavaScript; a test replays one log through both and compares.

For speed ``apply`` updates ``state`` in place and returns it — replaying a million events
must not copy the state a million times. Callers that need the old value keep a copy
(``copy_state``). Unknown references (an update for an item that does not exist) are ignored:
the fold never raises on a well-formed event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol.state import (
    Approval,
    AuthInfo,
    PairRequestInfo,
    PendingAction,
    RateLimit,
    SessionInfo,
    State,
    WorkerInfo,
)

__all__ = ["apply", "apply_all", "copy_state", "find_item"]

#: ``changed_paths`` keeps the most recent paths only.
MAX_CHANGED_PATHS = 200

_UPDATE_FIELDS = (
    "status", "streaming", "queued", "exit_code", "truncated", "diff", "files", "error",
    "result", "action_id", "approval_id", "output",
)


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


def apply_all(state: State, envelopes: Iterable[ev.Envelope]) -> State:
    for env in envelopes:
        state = apply(state, env)
    return state


def apply(state: State, env: ev.Envelope) -> State:
    """Fold one event into ``state`` (in place) and return it."""
    handler = _HANDLERS.get(type(env.event))
    if handler is not None:
        handler(state, env)
    state.seq = env.seq
    return state


# ---------------------------------------------------------------------------------------------
# workers and pairing


def _pair_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerPairRequested)
    state.pair_requests[e.request_id] = PairRequestInfo(
        request_id=e.request_id, hostname=e.hostname, os=e.os, python_version=e.python_version,
        worker_version=e.worker_version, roots=list(e.roots), fingerprint=e.fingerprint,
        requested_at=env.ts, expires_at=e.expires_at,
    )


def _pair_resolved(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerPairResolved)
    state.pair_requests.pop(e.request_id, None)


def _paired(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerPaired)
    state.pair_requests.pop(e.request_id, None)
    state.workers[e.worker_id] = WorkerInfo(
        worker_id=e.worker_id, hostname=e.hostname, os=e.os, python_version=e.python_version,
        worker_version=e.worker_version, roots=list(e.roots), paired_at=env.ts,
    )


def _revoked(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerRevoked)
    w = state.workers.get(e.worker_id)
    if w is not None:
        w.revoked = True
        w.connected = False
        w.last_seen = env.ts


def _connected(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerConnected)
    w = state.workers.get(e.worker_id)
    if w is None:
        return
    w.connected = True
    w.hostname = e.hostname
    w.os = e.os
    w.worker_version = e.worker_version
    w.capabilities = e.capabilities
    w.last_seen = env.ts


def _disconnected(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerDisconnected)
    w = state.workers.get(e.worker_id)
    if w is not None:
        w.connected = False
        w.last_seen = env.ts


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
    state.sessions[env.session_id] = SessionInfo(
        session_id=env.session_id, title=e.title, worker_id=e.worker_id, workdir=e.workdir,
        provider=e.provider, model=e.model, policy=e.policy, created_at=env.ts,
        updated_at=env.ts,
    )


def _status(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionStatusChanged)
    s = _session(state, env)
    if s is not None:
        s.status = e.status
        s.status_reason = e.reason


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


def _item_appended(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionItemAppended)
    s = _session(state, env)
    if s is not None:
        # a copy: later updates must not change the envelope (it may still be encoded later)
        s.items.append(msgspec.structs.replace(e.item))


def _item_updated(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionItemUpdated)
    s = _session(state, env)
    if s is None:
        return
    item = find_item(s, e.item_id)
    if item is None:
        return
    if e.text_delta and hasattr(item, "text"):
        item.text += e.text_delta
    if e.output_delta and isinstance(item, ev.ToolCall):
        item.output += e.output_delta
    for name in _UPDATE_FIELDS:
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
    if remember and a.command not in s.approved_prefixes:
        s.approved_prefixes.append(list(a.command or []))


def _action_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ActionRequested)
    s = _session(state, env)
    if s is not None:
        s.pending_actions[e.action_id] = PendingAction(
            action_id=e.action_id, item_id=e.item_id, worker_id=e.worker_id, action=e.action,
        )


def _action_finished(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ActionFinished)
    s = _session(state, env)
    if s is not None:
        s.pending_actions.pop(e.action_id, None)


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
        u.turns += 1


def _rate_limit(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.RateLimitUpdated)
    state.rate_limits[e.provider] = RateLimit(
        limit_requests=e.limit_requests, remaining_requests=e.remaining_requests,
        reset_requests=e.reset_requests, limit_tokens=e.limit_tokens,
        remaining_tokens=e.remaining_tokens, reset_tokens=e.reset_tokens, updated_at=env.ts,
    )


def _auth(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.AuthStatusUpdated)
    state.auth[e.provider] = AuthInfo(
        provider=e.provider, state=e.state, method=e.method, account=e.account,
        expires_at=e.expires_at, error=e.error, verification_uri=e.verification_uri,
        user_code=e.user_code,
    )


_HANDLERS: dict[type[Any], Callable[[State, ev.Envelope], None]] = {
    ev.WorkerPairRequested: _pair_requested,
    ev.WorkerPairResolved: _pair_resolved,
    ev.WorkerPaired: _paired,
    ev.WorkerRevoked: _revoked,
    ev.WorkerConnected: _connected,
    ev.WorkerDisconnected: _disconnected,
    ev.SessionCreated: _session_created,
    ev.SessionStatusChanged: _status,
    ev.SessionTitleChanged: _title,
    ev.SessionPolicyChanged: _policy,
    ev.SessionItemAppended: _item_appended,
    ev.SessionItemUpdated: _item_updated,
    ev.PlanUpdated: _plan,
    ev.ApprovalRequested: _approval_requested,
    ev.ApprovalResolved: _approval_resolved,
    ev.ActionRequested: _action_requested,
    ev.ActionFinished: _action_finished,
    ev.SessionWorkspaceChanged: _workspace_changed,
    ev.TokenUsageRecorded: _usage,
    ev.RateLimitUpdated: _rate_limit,
    ev.AuthStatusUpdated: _auth,
}
