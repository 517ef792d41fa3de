"""``/api/schedules``: create or change, delete and run schedules (the same commands as the
browser's socket, through ``Engine.execute``); they are in the state (``schedules``)."""

from __future__ import annotations

import msgspec
from litestar import delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from codey_protocol import client as cl
from codey_protocol.events import ScheduleFields
from codey_protocol.state import ScheduleInfo
from codey_server.core.engine import Engine
from codey_server.http.errors import errors
from codey_server.http.resource import Resource

__all__ = ["ScheduleBody", "SchedulesController"]


class ScheduleBody(ScheduleFields, kw_only=True, forbid_unknown_fields=True):
    """A schedule: ``cron`` (five fields, in ``timezone``) or a one-time ``at``;
    ``target_session`` None starts a new session per run."""


class Saved(msgspec.Struct, kw_only=True):
    schedule_id: str
    seq: int


class SchedulesController(Resource):
    path = "/api/schedules"
    tags = ["schedules"]

    @get(sync_to_thread=False, responses=errors())
    def list_schedules(self, engine: NamedDependency[Engine]) -> list[ScheduleInfo]:
        """Every schedule with its latest runs."""
        return list(engine.state.schedules.values())

    @post(status_code=201, responses=errors(400, 404))
    async def create_schedule(self, data: JSONBody[ScheduleBody],
                              engine: NamedDependency[Engine]) -> Saved:
        envs = await engine.execute(cl.SaveSchedule(**msgspec.structs.asdict(data)))
        return Saved(schedule_id=envs[0].event.spec.schedule_id,  # type: ignore[union-attr]
                     seq=envs[-1].seq)

    @post("/{schedule_id:str}", status_code=200, responses=errors(400, 404))
    async def update_schedule(self, schedule_id: FromPath[str], data: JSONBody[ScheduleBody],
                              engine: NamedDependency[Engine]) -> Saved:
        envs = await engine.execute(cl.SaveSchedule(
            schedule_id=schedule_id, **msgspec.structs.asdict(data)))
        return Saved(schedule_id=schedule_id, seq=envs[-1].seq)

    @delete("/{schedule_id:str}", status_code=200, responses=errors(404))
    async def delete_schedule(self, schedule_id: FromPath[str],
                              engine: NamedDependency[Engine]) -> Saved:
        envs = await engine.execute(cl.DeleteSchedule(schedule_id=schedule_id))
        return Saved(schedule_id=schedule_id, seq=envs[-1].seq)

    @post("/{schedule_id:str}/run", status_code=200, responses=errors(404))
    async def run_schedule(self, schedule_id: FromPath[str],
                           engine: NamedDependency[Engine]) -> Saved:
        """Run it now (a run like the others, listed with them)."""
        envs = await engine.execute(cl.RunSchedule(schedule_id=schedule_id))
        return Saved(schedule_id=schedule_id, seq=envs[-1].seq)
