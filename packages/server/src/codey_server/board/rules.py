"""The task board's rules, pure (``decide`` calls them): what a command may do to the tasks,
and the events it makes.

- Dependencies must exist and must not form a cycle; a task leaves ``todo`` (moved or run)
  only once every task it depends on is ``done``.
- Order within a column is a float: a moved task gets the midpoint of its new neighbours, so
  one move is one event; when two neighbours are too close for a midpoint, the column is
  renumbered (a few more events, rarely).
- Running a task is one decision: the session's start (``decide``'s own create_session), then
  ``task_run_started``, then the prompt built from the task. From then on the fold moves the
  task with its session (``board.fold._task_follows``): nothing to repair after a crash.
"""

from __future__ import annotations

from collections.abc import Callable

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State, TaskInfo
from codey_server.core.rules import CommandRejected

__all__ = ["check_dependencies", "end_of", "move", "prompt_of", "ready_to_start", "run"]

Decided = list[tuple[str | None, ev.Event]]

#: below this gap between neighbours a column is renumbered
_MIN_GAP = 1e-6


def check_dependencies(state: State, task_id: str | None, depends_on: list[str]) -> None:
    for dep in depends_on:
        if dep not in state.tasks:
            raise CommandRejected("not_found", f"no task {dep!r} to depend on")
        if dep == task_id:  # the shortest cycle
            raise CommandRejected("conflict", "a task cannot depend on itself")
    if task_id is None:
        return
    # a cycle: some dependency (transitively) depends on this task
    seen: set[str] = set()
    stack = list(depends_on)
    while stack:
        current = stack.pop()
        if current == task_id:
            raise CommandRejected("conflict", "these dependencies would make a cycle")
        if current in seen:
            continue
        seen.add(current)
        stack.extend(state.tasks[current].depends_on if current in state.tasks else ())


def ready_to_start(state: State, task: TaskInfo) -> None:
    waiting = [d for d in task.depends_on
               if d in state.tasks and state.tasks[d].status != "done"]
    if waiting:
        names = ", ".join(repr(state.tasks[d].title) for d in waiting)
        raise CommandRejected("conflict", f"{task.title!r} waits for {names} to be done")


def _column(state: State, status: str, without: str) -> list[TaskInfo]:
    return sorted((t for t in state.tasks.values() if t.status == status
                   and t.task_id != without), key=lambda t: t.order)


def move(state: State, task_id: str, status: ev.TaskStatus, before: str | None) -> Decided:
    task = state.tasks[task_id]
    if task.status == "todo" and status != "todo":
        ready_to_start(state, task)
    column = _column(state, status, task_id)
    if before is not None and before not in {t.task_id for t in column}:
        raise CommandRejected("not_found", f"no task {before!r} in {status}")
    index = next((i for i, t in enumerate(column) if t.task_id == before), len(column))
    low = column[index - 1].order if index > 0 else (column[0].order - 2.0 if column else 0.0)
    high = column[index].order if index < len(column) else low + 2.0
    if high - low > _MIN_GAP:
        return [(None, ev.TaskMoved(task_id=task_id, status=status, order=(low + high) / 2))]
    # no room: renumber the column with the task in its place
    column.insert(index, task)
    return [(None, ev.TaskMoved(task_id=t.task_id, status=status, order=float(n)))
            for n, t in enumerate(column)]


def end_of(state: State, status: str) -> float:
    column = _column(state, status, "")
    return column[-1].order + 1.0 if column else 0.0


def prompt_of(task: TaskInfo) -> str:
    text = f"Task: {task.title}"
    return f"{text}\n\n{task.description.strip()}" if task.description.strip() else text


def run(state: State, c: cl.RunTask, create: Callable[[cl.CreateSession], Decided],
        prompt: ev.UserMessage) -> Decided:
    """``create`` is decide's create_session (it checks the worker and fills the defaults);
    ``prompt`` the first message, whose text :func:`prompt_of` the task makes."""
    task = state.tasks[c.task_id]
    if task.status == "done":
        raise CommandRejected("conflict", f"{task.title!r} is done")
    ready_to_start(state, task)
    # each attempt in a worktree of its own by default, so attempts run side by side
    worktree = ev.WorktreeRequest(base=c.base) if c.worktree else None
    started = create(cl.CreateSession(worker_id=c.worker_id, workdir=c.workdir,
                                      policy=c.policy, title=task.title, worktree=worktree))
    session_id = started[0][0]
    assert session_id is not None
    # the run's record before the prompt: the fold links the session before its turn starts
    return [*started, (None, ev.TaskRunStarted(task_id=task.task_id, session_id=session_id)),
            (session_id, ev.SessionItemAppended(item=prompt))]
