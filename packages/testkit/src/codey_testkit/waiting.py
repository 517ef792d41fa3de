"""Condition waits for tests: poll until something is true, with a deadline, instead of
sleeping a guessed time (a guess is too short on a busy machine and too long on an idle one).

    wait_until(lambda: server.log_text().count("x") == 2, what="two x in the log")
    await until(lambda: d.running() == ["a1"], what="a1 to run")

Both return what ``check`` returned, so a wait can hand back the value it waited for; with
``ok`` the value is tested by ``ok(value)`` instead of its truth, and a timeout says the last
value seen (through ``show``)::

    text = wait_until(server.log_text, ok=lambda t: "ready" in t, show=lambda t: t[-2000:],
                      what="the server to say it is ready")
    s = wait_until(lambda: session(server, sid), ok=idle, retry=httpx.HTTPError,
                   what="the turn to end")          # a restarting server: look again

``until`` also awaits ``check`` when it returns an awaitable (a request, a read). For a loop
whose every step blocks by itself (a socket's recv with a timeout), :class:`Deadline` keeps
the time and says what was waited for when it runs out.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from codey_testkit.errors import TestkitError

__all__ = ["Deadline", "WaitTimedOut", "until", "wait_until"]

T = TypeVar("T")

_NOTHING: Any = object()

#: ``show``'s output is cut to this many characters in a message
_SHOWN = 2000


class WaitTimedOut(TestkitError, AssertionError):
    """The condition did not hold in time (an AssertionError: pytest reports it as a failure)."""


def _message(timeout: float, what: str, last: object, error: BaseException | None,
             show: Callable[[Any], object] | None, ok: object) -> str:
    text = f"timed out after {timeout:g} s waiting for {what}"
    # a plain yes/no check says nothing more by its last False; a value or a test of one does
    if last is not _NOTHING and (ok is not None or show is not None
                                 or not isinstance(last, bool | None)):
        shown = str((show or repr)(last))
        if len(shown) > _SHOWN:
            shown = "…" + shown[-_SHOWN:]
        text += f"; last seen: {shown}"
    if error is not None:
        text += f"; last error: {error!r}"
    return text


def wait_until(check: Callable[[], T], *, timeout: float = 20.0, interval: float = 0.02,
               what: str = "the condition", ok: Callable[[T], object] | None = None,
               retry: type[BaseException] | tuple[type[BaseException], ...] = (),
               show: Callable[[T], object] | None = None) -> T:
    """Return ``check()``'s value once it is truthy (or ``ok(value)`` is); raise
    :class:`WaitTimedOut` after ``timeout`` s. An exception of a type in ``retry`` counts as
    "not yet" (and is named in the timeout's message); any other one ends the wait."""
    deadline = time.monotonic() + timeout
    last: Any = _NOTHING
    error: BaseException | None = None
    while True:
        try:
            last = check()
        except retry as exc:
            error = exc
        else:
            error = None
            if ok(last) if ok is not None else last:
                return cast(T, last)
        if time.monotonic() >= deadline:
            raise WaitTimedOut(_message(timeout, what, last, error, show, ok)) from error
        time.sleep(interval)


async def until(check: Callable[[], T | Awaitable[T]], *, timeout: float = 20.0,
                interval: float = 0.02, what: str = "the condition",
                ok: Callable[[T], object] | None = None,
                retry: type[BaseException] | tuple[type[BaseException], ...] = (),
                show: Callable[[T], object] | None = None) -> T:
    """The same inside an event loop: the loop runs between the checks, and a ``check`` that
    returns an awaitable is awaited (the timeout does not cut one that hangs: give it its
    own)."""
    deadline = time.monotonic() + timeout
    last: Any = _NOTHING
    error: BaseException | None = None
    while True:
        try:
            last = check()
            if inspect.isawaitable(last):
                last = await last
        except retry as exc:
            error = exc
        else:
            error = None
            if ok(last) if ok is not None else last:
                return cast(T, last)
        if time.monotonic() >= deadline:
            raise WaitTimedOut(_message(timeout, what, last, error, show, ok)) from error
        await asyncio.sleep(interval)


class Deadline:
    """The time left for a loop whose every step waits by itself (a recv with a timeout, a
    long poll), in place of ``deadline = time.monotonic() + t`` and its arithmetic::

        deadline = Deadline(15, what=f"seq {seq}")
        while self.last_seq < seq:
            self.recv(deadline.left(last=self.last_seq))   # raises once the time is up
    """

    def __init__(self, timeout: float, *, what: str = "the condition") -> None:
        self.timeout = timeout
        self.what = what
        self.at = time.monotonic() + timeout

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def left(self, last: object = _NOTHING) -> float:
        """The seconds left (more than 0); raise :class:`WaitTimedOut` once there are none,
        saying what was waited for and ``last`` (what was seen so far), when given."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise WaitTimedOut(_message(self.timeout, self.what, last, None, str, None))
        return left
