"""The task board: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import WORKING_STATUSES, State, TaskInfo
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


#: session statuses in which its task counts as in progress
_WORKING = frozenset(WORKING_STATUSES)


def _task_follows(state: State, task_id: str, session_id: str, status: str, ts: float) -> None:
    """A task follows its latest session: working → in_progress (back from review too),
    finished → review. Only the user moves it to done (or anywhere else)."""
    task = state.tasks.get(task_id)
    if task is None or not task.session_ids or task.session_ids[-1] != session_id:
        return
    if status in _WORKING and task.status in ("todo", "review"):
        task.status, task.updated_at = "in_progress", ts
    elif status == "idle" and task.status == "in_progress":
        task.status, task.updated_at = "review", ts


def _task_created(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TaskCreated)
    state.tasks[e.task_id] = TaskInfo(
        task_id=e.task_id, title=e.title, description=e.description, status=e.status,
        order=e.order, depends_on=list(e.depends_on), created_at=env.ts, updated_at=env.ts)


def _task_changed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, (ev.TaskUpdated, ev.TaskMoved, ev.TaskDeleted, ev.TaskRunStarted))
    task = state.tasks.get(e.task_id)
    if task is None:
        return
    task.updated_at = env.ts
    if isinstance(e, ev.TaskUpdated):
        task.title, task.description, task.depends_on = e.title, e.description, list(
            e.depends_on)
    elif isinstance(e, ev.TaskMoved):
        task.status, task.order = e.status, e.order
    elif isinstance(e, ev.TaskDeleted):
        del state.tasks[e.task_id]
    else:
        task.session_ids.append(e.session_id)
        task.status = "in_progress"
        session = state.sessions.get(e.session_id)
        if session is not None:
            session.task_id = e.task_id


def _session_status(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionStatusChanged)
    s = state.sessions.get(env.session_id) if env.session_id is not None else None
    if s is not None and s.task_id is not None:
        _task_follows(state, s.task_id, s.session_id, e.status, env.ts)


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.TaskCreated: _task_created,
    ev.TaskUpdated: _task_changed,
    ev.TaskMoved: _task_changed,
    ev.TaskDeleted: _task_changed,
    ev.TaskRunStarted: _task_changed,
    ev.SessionStatusChanged: _session_status,
}
