"""Schedules' browser commands: save, delete, run now (the rules are in :mod:`.rules`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.decide import default_model, default_provider, existing
from codey_server.core.rules import CommandRejected, Context, Decided, Decider
from codey_server.schedules import rules as schedules

__all__ = ["COMMANDS", "Due", "fire_due"]


@dataclass(frozen=True)
class Due:
    """A schedule the scheduler found due (or behind) at ``now``."""

    schedule_id: str
    plan: schedules.Plan
    now: float


def fire_due(state: State, due: Due, ctx: Context) -> Decided:
    """Fire a due schedule, or record the runs it skipped; nothing when another replica or an
    earlier tick did it already (decided against the state, under the engine's lock)."""
    info = state.schedules.get(due.schedule_id)
    p = due.plan
    if info is None or (p.due is not None and p.due <= info.last_due):
        return []
    if p.due is None:
        return schedules.skip(due.schedule_id, p) if p.skipped_until > info.last_due else []
    provider = default_provider(state, ctx)
    return schedules.fire(state, due.schedule_id, p.due, session_id=ctx.new_id("ses"),
                          item_id=ctx.new_id("itm"), now=due.now, provider=provider,
                          model=default_model(state, ctx, provider), skipped=p.skipped)


def _schedule(state: State, c: cl.SaveSchedule | cl.DeleteSchedule | cl.RunSchedule,
                      ctx: Context) -> Decided:
    if isinstance(c, cl.SaveSchedule):
        if c.schedule_id is not None and c.schedule_id not in state.schedules:
            raise CommandRejected("not_found", f"no schedule {c.schedule_id!r}")
        spec = schedules.spec_of(c, c.schedule_id or ctx.new_id("sch"))
        problem = schedules.check_spec(spec)
        if problem is not None:
            raise CommandRejected("bad_request", problem)
        worker = state.workers.get(spec.worker_id)
        if worker is None or worker.revoked:
            raise CommandRejected("not_found", f"no worker {spec.worker_id!r}")
        if not spec.workdir:
            raise CommandRejected("bad_request", "workdir must not be empty")
        if spec.target_session is not None:
            existing(state, spec.target_session)
        return [(None, ev.ScheduleSaved(spec=spec))]
    if c.schedule_id not in state.schedules:
        raise CommandRejected("not_found", f"no schedule {c.schedule_id!r}")
    if isinstance(c, cl.DeleteSchedule):
        return [(None, ev.ScheduleDeleted(schedule_id=c.schedule_id))]
    info = state.schedules[c.schedule_id]
    provider = default_provider(state, ctx)
    return schedules.fire(state, c.schedule_id, max(ctx.now(), info.last_due + 0.001),
                          session_id=ctx.new_id("ses"), item_id=ctx.new_id("itm"),
                          now=ctx.now(), provider=provider,
                          model=default_model(state, ctx, provider))


COMMANDS: Mapping[type[Any], Decider] = {
    cl.SaveSchedule: _schedule,
    cl.DeleteSchedule: _schedule,
    cl.RunSchedule: _schedule,
}
