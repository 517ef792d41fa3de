"""``/api/schedules``: create or change, delete and run schedules (the same commands as the
browser's socket, through ``Engine.execute``); they are in the state (``schedules``)."""

from __future__ import annotations

import zoneinfo
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeAlias

import msgspec
from litestar import delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from codey_protocol import client as cl
from codey_protocol.events import ScheduleFields
from codey_protocol.state import ScheduleInfo
from codey_server.core.engine import Engine
from codey_server.core.rules import CommandRejected
from codey_server.http.errors import errors
from codey_server.http.fields import NonBlank, pattern
from codey_server.http.resource import Resource
from codey_server.schedules.rules import CRON, ISO_TIME, parse_at

__all__ = ["TIME_ZONES", "ScheduleBody", "SchedulesController"]

#: the time zones this machine knows (the system's and the ``tzdata`` package's)
TIME_ZONES = tuple(sorted(zoneinfo.available_timezones()))
if TYPE_CHECKING:
    TimeZone: TypeAlias = str
else:
    TimeZone = Literal[TIME_ZONES]

Cron = Annotated[str, msgspec.Meta(
    pattern=pattern(CRON, "not a cron expression (five fields: minute hour day month "
                          "weekday, e.g. 0 9 * * mon-fri) that ever comes due"),
    description="Five fields (minute hour day month weekday: numbers, names, ranges, lists "
                "and steps) or a macro such as `@daily`; a day past the 29th only with every "
                "month.")]

IsoTime = Annotated[str, msgspec.Meta(
    pattern=pattern(ISO_TIME, "`at` is neither unix seconds nor an ISO 8601 date and time "
                              "that exists (1900 to 9899, e.g. 2030-06-01T09:00, "
                              "2030-06-01T09:00:00Z or 2030-06-01T09:00+02:00)"),
    description="An ISO 8601 date and time, e.g. `2030-06-01T09:00:00Z` or "
                "`2030-06-01T09:00+02:00`; without an offset, a wall-clock time in the "
                "schedule's `timezone` (not the server's).")]


class ScheduleBody(ScheduleFields, kw_only=True, forbid_unknown_fields=True):
    """A schedule: ``cron`` (five fields, in ``timezone``) or a one-time ``at`` (unix seconds,
    or ISO 8601 text: without an offset, in ``timezone``); ``target_session`` None starts a
    new session per run."""

    #: exactly one of them (``check_spec`` refuses both or neither)
    __schema_rules__: ClassVar[dict[str, Any]] = {"oneOf": [
        {"properties": {"cron": {"type": "string"}, "at": {"type": "null"}},
         "required": ["cron"]},
        # (the pattern and words of `at` as text are here: Litestar drops the constraints of
        # a type inside a union)
        {"properties": {"at": {"oneOf": [
            {"type": "number", "description": "Unix seconds."},
            {"type": "string", "pattern": ISO_TIME,
             "description": "An ISO 8601 date and time, e.g. `2030-06-01T09:00:00Z` or "
                            "`2030-06-01T09:00+02:00`; without an offset, a wall-clock time "
                            "in the schedule's `timezone` (not the server's)."}]},
            "cron": {"type": "null"}},
         "required": ["at"]},
    ]}

    # the shared fields, with the rules their decision checks (the socket's command has them
    # as plain strings)
    name: str
    cron: Cron | None = None
    # wider than the stored field: text is turned into unix seconds before the command
    at: float | IsoTime | None = None  # type: ignore[assignment]
    timezone: TimeZone = "UTC"
    worker_id: str
    workdir: NonBlank
    prompt: NonBlank


def _fields(body: ScheduleBody) -> dict[str, Any]:
    """The command's fields: ``at`` as unix seconds, as the log keeps it."""
    fields = msgspec.structs.asdict(body)
    if body.at is not None:
        try:
            fields["at"] = parse_at(body.at, body.timezone)
        except ValueError as err:
            raise CommandRejected("bad_request", str(err)) from None
    return fields


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
        envs = await engine.execute(cl.SaveSchedule(**_fields(data)))
        return Saved(schedule_id=envs[0].event.spec.schedule_id,  # type: ignore[union-attr]
                     seq=envs[-1].seq)

    @post("/{schedule_id:str}", status_code=200, responses=errors(400, 404))
    async def update_schedule(self, schedule_id: FromPath[str], data: JSONBody[ScheduleBody],
                              engine: NamedDependency[Engine]) -> Saved:
        envs = await engine.execute(cl.SaveSchedule(schedule_id=schedule_id, **_fields(data)))
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
