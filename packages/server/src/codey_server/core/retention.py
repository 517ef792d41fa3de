"""Retention: the log keeps the events of finished sessions only for a while.

:func:`sessions_to_keep` is pure: which sessions' events stay, given the state, the time and
:class:`~codey_server.settings.RetentionConfig`. :class:`Retention` runs it every
``every_s`` seconds and asks the engine to trim the rest (``Engine.trim``: a snapshot first,
then the log deletes up to it). Events of no session (workers, pairing, logins) always stay.

A browser that slept past a trim resumes from a seq before the log's ``first_seq`` and is sent
a snapshot of the whole state instead of events (``clients.py``): an explicit resync, never a
silent gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from codey_protocol.state import State
from codey_server.core.engine import Engine
from codey_server.settings import RetentionConfig

__all__ = ["Retention", "sessions_to_keep"]

log = logging.getLogger("codey.retention")

DAY_S = 86400.0


def sessions_to_keep(state: State, now: float, config: RetentionConfig) -> set[str]:
    """Every session that is not closed, and the closed ones still within the limits.

    A deleted session is no longer in the state, so it is never kept.
    """
    keep = {sid for sid, s in state.sessions.items() if s.status != "closed"}
    closed = sorted((s for s in state.sessions.values() if s.status == "closed"),
                    key=lambda s: s.updated_at, reverse=True)
    if config.days is not None:
        closed = [s for s in closed if s.updated_at >= now - config.days * DAY_S]
    if config.finished_sessions is not None:
        closed = closed[: config.finished_sessions]
    return keep | {s.session_id for s in closed}


class Retention:
    """Trims the log every ``config.every_s`` seconds while the server runs."""

    def __init__(self, engine: Engine, config: RetentionConfig,
                 gate: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.engine = engine
        self.config = config
        #: among replicas: True on the one replica that trims (its lease)
        self.gate = gate
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.config.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run_once(self, now: float) -> int:
        keep = sessions_to_keep(self.engine.state, now, self.config)
        gone = await self.engine.trim(keep)
        if gone:
            log.info("retention: %d events of finished sessions deleted", gone)
        return gone

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.every_s)
            try:
                if self.gate is None or await self.gate():
                    await self.run_once(time.time())
            except Exception:  # retention must never take the server down; try again later
                log.exception("retention failed")
