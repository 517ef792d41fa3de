"""The governor's thin async driver: one per server, shared by every provider and session.

It holds the current :class:`~codey_server.agent.governor.Governor` value, a future per call
waiting in a queue, and one timer per provider for the next time the governor said to look
again. :meth:`RateWindows.slot` is what a model call (``ModelProvider._stream``) goes through
before each try::

    async with windows.slot(provider, session_id) as slot:
        if slot.waiting: ...            # tell the session it is queued (slot.reason)
        await slot.ready()
        ... the HTTP call; slot.seen(headers), slot.started(), or slot.limited(retry_after)

Which sessions a browser shows (:meth:`viewing`) is kept for :data:`VIEW_TTL_S` after the
browser last said so: a browser that goes away stops counting on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Mapping

from codey_server.agent import governor as gv

__all__ = ["VIEW_TTL_S", "RateWindows", "Slot", "limits_from_headers"]

#: how long a browser's "I am showing these sessions" counts
VIEW_TTL_S = 60.0


def limits_from_headers(headers: Mapping[str, str], wall_now: float) -> gv.Limits | None:
    """The window's counts from a response's headers (OpenAI's ``x-ratelimit-*`` or
    Anthropic's ``anthropic-ratelimit-*``), or None when there are none."""
    h = {k.lower(): v for k, v in headers.items()}

    def num(name: str) -> int | None:
        try:
            return int(h[name].strip()) if name in h else None
        except ValueError:
            return None

    if any(k.startswith("x-ratelimit-") for k in h):
        return gv.Limits(
            limit_requests=num("x-ratelimit-limit-requests"),
            remaining_requests=num("x-ratelimit-remaining-requests"),
            requests_reset_s=gv.parse_reset(h.get("x-ratelimit-reset-requests"), wall_now),
            limit_tokens=num("x-ratelimit-limit-tokens"),
            remaining_tokens=num("x-ratelimit-remaining-tokens"),
            tokens_reset_s=gv.parse_reset(h.get("x-ratelimit-reset-tokens"), wall_now))
    if any(k.startswith("anthropic-ratelimit-") for k in h):
        return gv.Limits(
            limit_requests=num("anthropic-ratelimit-requests-limit"),
            remaining_requests=num("anthropic-ratelimit-requests-remaining"),
            requests_reset_s=gv.parse_reset(h.get("anthropic-ratelimit-requests-reset"),
                                            wall_now),
            limit_tokens=num("anthropic-ratelimit-tokens-limit"),
            remaining_tokens=num("anthropic-ratelimit-tokens-remaining"),
            tokens_reset_s=gv.parse_reset(h.get("anthropic-ratelimit-tokens-reset"), wall_now))
    return None


class Slot:
    """One model call's place in its provider's window (see :meth:`RateWindows.slot`)."""

    def __init__(self, windows: RateWindows, provider: str, ticket: int,
                 future: asyncio.Future[None]) -> None:
        self._windows = windows
        self.provider = provider
        self.ticket = ticket
        self._future = future

    @property
    def waiting(self) -> bool:
        return not self._future.done()

    @property
    def reason(self) -> str:
        """``queued for rate limit (resets in 42 s)``"""
        return gv.queued_reason(self._windows.value, self.provider, self._windows.clock())

    async def ready(self) -> None:
        await asyncio.shield(self._future)

    def seen(self, headers: Mapping[str, str]) -> None:
        limits = limits_from_headers(headers, time.time())
        if limits is not None:
            self._windows.update(self.provider, lambda g, now: gv.seen(g, self.provider,
                                                                      limits, now))

    def started(self) -> None:
        self._windows.update(self.provider, lambda g, now: gv.started(g, self.provider,
                                                                     self.ticket))

    def limited(self, retry_after: float | None) -> None:
        self._windows.update(self.provider, lambda g, now: gv.limited(g, self.provider,
                                                                     retry_after, now))


class RateWindows:
    """The server's windows (one :class:`~codey_server.agent.governor.Governor` value)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 gap_s: float = gv.GAP_S) -> None:
        self.value = gv.Governor(gap_s=gap_s)
        self.clock = clock
        self._tickets = itertools.count(1)
        self._futures: dict[int, asyncio.Future[None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._viewed: dict[str, float] = {}  # session id → until when it counts

    def viewing(self, session_ids: list[str]) -> None:
        """A browser shows these sessions now."""
        now = self.clock()
        for sid in session_ids:
            self._viewed[sid] = now + VIEW_TTL_S
        self._viewed = {s: t for s, t in self._viewed.items() if t > now}
        self.value = gv.viewing(self.value, frozenset(self._viewed))

    def update(self, provider: str, change: Callable[[gv.Governor, float], gv.Governor]) -> None:
        self.value = change(self.value, self.clock())
        self._pump(provider)

    def _pump(self, provider: str) -> None:
        now = self.clock()
        if self._viewed and min(self._viewed.values()) <= now:
            self._viewed = {s: t for s, t in self._viewed.items() if t > now}
            self.value = gv.viewing(self.value, frozenset(self._viewed))
        self.value, going, wake = gv.admit(self.value, provider, now)
        for ticket in going:
            future = self._futures.get(ticket)
            if future is not None and not future.done():
                future.set_result(None)
        timer = self._timers.pop(provider, None)
        if timer is not None:
            timer.cancel()
        if wake is not None:
            loop = asyncio.get_running_loop()
            self._timers[provider] = loop.call_later(max(0.0, wake - now), self._pump,
                                                     provider)

    @contextlib.asynccontextmanager
    async def slot(self, provider: str, session_id: str) -> AsyncIterator[Slot]:
        """A place in ``provider``'s window for one try of a model call; left (``done``) when
        the block ends, however it ends."""
        ticket = next(self._tickets)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._futures[ticket] = future
        self.value = gv.ask(self.value, provider, ticket, session_id, self.clock())
        self._pump(provider)
        try:
            yield Slot(self, provider, ticket, future)
        finally:
            self._futures.pop(ticket, None)
            self.update(provider, lambda g, now: gv.done(g, provider, ticket, now))

    def queued(self) -> dict[str, int]:
        """Calls waiting now, by provider (for /metrics and tests)."""
        return {p: len(w.queue) for p, w in self.value.windows.items() if w.queue}
