"""Schedules as a plugin: ``/api/schedules``, their commands and events; the scheduler, on
its clock (a file's time in tests), firing where its lease is held among replicas."""

from __future__ import annotations

import time

from codey_server.core.engine import Engine
from codey_server.core.hosting import Hosting
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.schedules import decide, fold
from codey_server.schedules.routes import SchedulesController
from codey_server.schedules.scheduler import Scheduler, file_clock
from codey_server.settings import Settings

__all__ = ["PLUGIN"]


def _scheduler(engine: Engine, settings: Settings, deployment: Hosting) -> Scheduler:
    return Scheduler(
        engine, grace_s=settings.schedule_grace_s,
        clock=file_clock(settings.clock_file) if settings.clock_file else time.time,
        gate=deployment.gate("scheduler", engine))


PLUGIN = FeaturePlugin(
    "schedules",
    routes=(SchedulesController,),
    commands=decide.COMMANDS,
    fold=fold.FOLD,
    # its first tick runs what was missed while the server was down
    parts=(Part("scheduler", _scheduler, start=Scheduler.start, stop=Scheduler.stop,
                intake=True),),
)
