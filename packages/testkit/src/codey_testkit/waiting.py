"""Condition waits for tests: poll until something is true, with a deadline, instead of
sleeping a guessed time (a guess is too short on a busy machine and too long on an idle one).

    wait_until(lambda: server.log_text().count("x") == 2, what="two x in the log")
    await until(lambda: d.running() == ["a1"], what="a1 to run")
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from codey_testkit.errors import TestkitError

__all__ = ["WaitTimedOut", "until", "wait_until"]


class WaitTimedOut(TestkitError, AssertionError):
    """The condition did not hold in time (an AssertionError: pytest reports it as a failure)."""


def wait_until(check: Callable[[], object], *, timeout: float = 20.0, interval: float = 0.02,
               what: str = "the condition") -> None:
    """Return once ``check()`` is truthy; raise :class:`WaitTimedOut` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise WaitTimedOut(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


async def until(check: Callable[[], object], *, timeout: float = 20.0, interval: float = 0.02,
                what: str = "the condition") -> None:
    """The same inside an event loop: the loop runs between the checks."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise WaitTimedOut(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)
