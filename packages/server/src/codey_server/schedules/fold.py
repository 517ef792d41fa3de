"""Schedules: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import SCHEDULE_RUNS_KEPT, ScheduleInfo, ScheduleRun, State
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _done(info: ScheduleInfo) -> bool:
    # what ``rules.plan`` reads too: a due time at or before ``last_due`` never fires
    return info.spec.at is not None and info.last_due >= info.spec.at


def _schedule_saved(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ScheduleSaved)
    info = state.schedules.get(e.spec.schedule_id)
    if info is None:
        info = state.schedules[e.spec.schedule_id] = ScheduleInfo(spec=e.spec,
                                                                  created_at=env.ts)
    else:
        info.spec = e.spec
    info.done = _done(info)


def _schedule_deleted(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ScheduleDeleted)
    state.schedules.pop(e.schedule_id, None)


def _schedule_fired(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ScheduleFired)
    info = state.schedules.get(e.schedule_id)
    if info is None:
        return
    info.last_due = max(info.last_due, e.due_at)
    info.done = _done(info)
    info.runs.append(ScheduleRun(due_at=e.due_at, fired_at=env.ts, outcome=e.outcome,
                                 session_id=e.session_id, error=e.error, skipped=e.skipped,
                                 item_id=e.item_id))
    del info.runs[:-SCHEDULE_RUNS_KEPT]


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.ScheduleSaved: _schedule_saved,
    ev.ScheduleDeleted: _schedule_deleted,
    ev.ScheduleFired: _schedule_fired,
}
