"""Runs the schedules (:mod:`codey_server.schedules.rules`) while the server runs.

Every second it asks each schedule's :func:`~codey_server.schedules.rules.plan` what is due at the
clock's time and appends the firing through ``Engine.execute_decision``: one group with the
session's start, under the command lock. At start it does the same, so a run missed while the
server was down runs once (within ``schedule_grace_s``) or is recorded as skipped. The agent
service starts the new session's turn from the appended prompt, as for any prompt.

The clock is injectable: the system's, or ``--clock-file PATH`` (a file holding unix seconds,
read at each tick) so tests can move time without waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from codey_server.core.engine import Engine
from codey_server.schedules import rules as schedules
from codey_server.schedules.decide import Due, fire_due

__all__ = ["Scheduler", "file_clock"]

log = logging.getLogger("codey.scheduler")

Clock = Callable[[], float]


def file_clock(path: Path) -> Clock:
    """The time written in ``path`` (unix seconds); the system's while it is missing."""

    def now() -> float:
        try:
            return float(path.read_text().strip())
        except (OSError, ValueError):
            return time.time()

    return now


class Scheduler:
    def __init__(self, engine: Engine, *, clock: Clock = time.time, grace_s: float = 300.0,
                 tick_s: float = 1.0,
                 gate: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.engine = engine
        #: among replicas: True when this one may fire (it holds the scheduler's lease and has
        #: folded everything committed), so two replicas never fire the same run
        self.gate = gate
        self.clock = clock
        self.grace_s = grace_s
        self.tick_s = tick_s
        self._task: asyncio.Task[None] | None = None
        self._failing: set[str] = set()  # schedules whose tick failed (said once each)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def tick(self) -> int:
        """Fire what is due now; returns how many firings (or skips) were recorded."""
        if not self.engine.state.schedules:
            return 0
        now = self.clock()
        done = 0
        for schedule_id in list(self.engine.state.schedules):
            info = self.engine.state.schedules.get(schedule_id)
            if info is None:
                continue
            try:
                due = schedules.plan(info, now, self.grace_s)
                if due is None:
                    continue
                await self.engine.submit(fire_due, Due(schedule_id, due, now))
            except Exception:  # one broken schedule must not keep the others from firing
                if schedule_id not in self._failing:  # said once, not at every tick
                    self._failing.add(schedule_id)
                    log.exception("schedule %s: its tick failed", schedule_id)
                continue
            self._failing.discard(schedule_id)
            done += 1
        return done

    async def _run(self) -> None:
        while True:
            try:
                if self.gate is None or await self.gate():
                    await self.tick()
            except Exception:  # a broken schedule must not stop the others, nor the server
                log.exception("scheduler tick failed")
            await asyncio.sleep(self.tick_s)
