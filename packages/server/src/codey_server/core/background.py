"""``Background``: tasks a part starts and does not wait for (a claim, a routed read, a
re-send), kept referenced until they end, their failures logged, cancelled together at stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

__all__ = ["Background"]


class Background:
    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Awaitable[Any], name: str = "background work") -> None:
        """Run ``work`` on the loop; an exception it raises is logged as a warning."""

        async def run() -> None:
            try:
                await work
            except Exception as err:
                self._log.warning("%s failed (%s)", name, err)

        task = asyncio.get_running_loop().create_task(run(), name=name)
        self._tasks.add(task)  # the loop keeps only a weak reference
        task.add_done_callback(self._tasks.discard)

    async def cancel(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
