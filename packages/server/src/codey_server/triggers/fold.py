"""Triggers: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import TRIGGER_DELIVERIES_KEPT, State, TriggerDelivery, TriggerInfo
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _trigger_set(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TriggerSet)
    info = state.triggers.get(e.spec.trigger_id)
    if info is None:
        state.triggers[e.spec.trigger_id] = TriggerInfo(spec=e.spec, created_at=env.ts)
    else:
        info.spec = e.spec


def _trigger_removed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TriggerRemoved)
    state.triggers.pop(e.trigger_id, None)


def _trigger_delivered(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TriggerDelivered)
    info = state.triggers.get(e.trigger_id)
    if info is None:
        return
    info.deliveries.append(TriggerDelivery(
        delivery_id=e.delivery_id, at=env.ts, outcome=e.outcome, event=e.event,
        reason=e.reason, session_id=e.session_id, task_id=e.task_id, payload=e.payload,
        replay_of=e.replay_of, missing=list(e.missing)))
    del info.deliveries[:-TRIGGER_DELIVERIES_KEPT]


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.TriggerSet: _trigger_set,
    ev.TriggerRemoved: _trigger_removed,
    ev.TriggerDelivered: _trigger_delivered,
}
