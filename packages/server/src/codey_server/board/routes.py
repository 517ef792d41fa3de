"""``/api/tasks``: the task board — create, change, move, delete and run tasks (the same
commands as the browser's socket, through ``Engine.execute``; the rules in
:mod:`codey_server.board.rules`)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from codey_protocol import client as cl
from codey_protocol.events import ApprovalPolicy, TaskStatus
from codey_protocol.state import TaskInfo
from codey_server.core.engine import Engine
from codey_server.http.errors import errors
from codey_server.http.fields import NonBlank
from codey_server.http.resource import Resource

__all__ = ["TaskBody", "TasksController"]


class TaskBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    title: NonBlank
    description: str = ""
    depends_on: list[str] = msgspec.field(default_factory=list)


class TaskMove(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    status: TaskStatus
    before: str | None = None  # the task it goes before; None: the end of the column


class TaskRun(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    worker_id: str
    workdir: NonBlank
    policy: ApprovalPolicy = "suggest"
    #: in a git worktree of its own (default), from ``base`` (empty: the current branch)
    worktree: bool = True
    base: Annotated[str, msgspec.Meta(max_length=200)] = ""


class TaskSaved(msgspec.Struct, kw_only=True):
    task_id: str
    seq: int


class TaskRunning(msgspec.Struct, kw_only=True):
    task_id: str
    session_id: str
    seq: int


class TasksController(Resource):
    path = "/api/tasks"
    tags = ["tasks"]

    @get(sync_to_thread=False, responses=errors())
    def list_tasks(self, engine: NamedDependency[Engine]) -> list[TaskInfo]:
        """Every task, by column then order."""
        return sorted(engine.state.tasks.values(), key=lambda t: (t.status, t.order))

    @post(status_code=201, responses=errors(400, 404, 409))
    async def create_task(self, data: JSONBody[TaskBody],
                          engine: NamedDependency[Engine]) -> TaskSaved:
        envs = await engine.execute(cl.CreateTask(**msgspec.structs.asdict(data)))
        return TaskSaved(task_id=envs[0].event.task_id,  # type: ignore[union-attr,arg-type]
                         seq=envs[-1].seq)

    @post("/{task_id:str}", status_code=200, responses=errors(400, 404, 409))
    async def update_task(self, task_id: FromPath[str], data: JSONBody[TaskBody],
                          engine: NamedDependency[Engine]) -> TaskSaved:
        envs = await engine.execute(cl.UpdateTask(task_id=task_id,
                                                           **msgspec.structs.asdict(data)))
        return TaskSaved(task_id=task_id, seq=envs[-1].seq)

    @post("/{task_id:str}/move", status_code=200, responses=errors(400, 404, 409))
    async def move_task(self, task_id: FromPath[str], data: JSONBody[TaskMove],
                        engine: NamedDependency[Engine]) -> TaskSaved:
        """Into a column, before a task (or at the end); out of todo only when its
        dependencies are done."""
        envs = await engine.execute(cl.MoveTask(task_id=task_id, status=data.status,
                                                         before=data.before))
        return TaskSaved(task_id=task_id, seq=envs[-1].seq)

    @delete("/{task_id:str}", status_code=200, responses=errors(404, 409))
    async def delete_task(self, task_id: FromPath[str],
                          engine: NamedDependency[Engine]) -> TaskSaved:
        envs = await engine.execute(cl.DeleteTask(task_id=task_id))
        return TaskSaved(task_id=task_id, seq=envs[-1].seq)

    @post("/{task_id:str}/run", status_code=201, responses=errors(400, 403, 404, 409))
    async def run_task(self, task_id: FromPath[str], data: JSONBody[TaskRun],
                       engine: NamedDependency[Engine]) -> TaskRunning:
        """Start a session on the task (its prompt built from the task)."""
        envs = await engine.execute(cl.RunTask(task_id=task_id,
                                                        **msgspec.structs.asdict(data)))
        return TaskRunning(task_id=task_id, session_id=envs[0].session_id or "",
                           seq=envs[-1].seq)
