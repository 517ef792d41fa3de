"""The task board's browser commands: create, change, move, delete and run tasks (the rules
are in :mod:`.rules`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.board import rules as board
from codey_server.core.decide import create_session
from codey_server.core.rules import CommandRejected, Context, Decided, Decider

__all__ = ["COMMANDS"]


def _task(state: State,
                  c: cl.CreateTask | cl.UpdateTask | cl.MoveTask | cl.DeleteTask | cl.RunTask,
                  ctx: Context) -> Decided:
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
    return board.run(state, c, lambda create: create_session(state, create, ctx), prompt)


COMMANDS: Mapping[type[Any], Decider] = {
    cl.CreateTask: _task, cl.UpdateTask: _task, cl.MoveTask: _task, cl.DeleteTask: _task,
    cl.RunTask: _task,
}
