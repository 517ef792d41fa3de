"""The fleet governor: one rate-limit window per provider, shared by every session, as a value.

Without I/O: :class:`Governor` is an immutable value and every function here returns a new one
(the async driver, :mod:`codey_server.agent.ratewindow`, holds the current value, carries out
what it says and feeds it what happens). The order of calls for one model call::

    g = ask(g, provider, ticket, session_id, now)       # the call wants to start
    g, go, wake = admit(g, provider, now)               # tickets that may start now; when
                                                        # to call admit again (None: on a change)
    g = seen(g, provider, limits, now)                  # its response's rate-limit headers
    g = started(g, provider, ticket)                    # its answer began (not a 429)
    g = limited(g, provider, retry_after, now)          # or: HTTP 429
    g = done(g, provider, ticket, now)                  # it ended, however

What a window does:

- **Open** (no pause, the window not low): every call goes at once, in priority order.
- **Low** (the provider's remaining requests or tokens at or below :data:`LOW_FRACTION` of its
  limit, and its reset still ahead): calls queue and go one every :data:`GAP_S`, the session
  the user is looking at first (:func:`viewing`), then the oldest; none goes while the
  remaining requests are 0 until the reset. The remaining count is lowered by each admission,
  so calls between two responses cannot overshoot it.
- **Paused** (after a 429, until ``retry_after``): nothing goes, for every session of that
  provider. Then the window **recovers**: one call goes first (a probe); the next only once
  that one's answer began (or it ended), and then one every :data:`GAP_S` until the queue is
  empty — no burst at the reset. A 429 while recovering pauses again.

A window is keyed by provider name: the sessions of one configured provider share one account
(its key or login). It lives in one server process; among replicas each replica has its own
window for a provider (see docs/usage.md): a 429 seen by one pauses that replica's sessions,
the others pause on their own first 429.
"""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

__all__ = ["GAP_S", "LOW_FRACTION", "Governor", "Limits", "Waiter", "Window", "admit", "ask",
           "done", "limited", "parse_reset", "queued_reason", "seen", "started", "viewing"]

#: the least time between two admissions when the window is low or recovering
GAP_S = 1.0
#: a window is low when what remains is at most this part of its limit
LOW_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class Limits:
    """A response's rate-limit headers, read (:func:`parse_reset` gives ``*_reset_s``)."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    requests_reset_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    tokens_reset_s: float | None = None


@dataclass(frozen=True, slots=True)
class Waiter:
    ticket: int
    session_id: str
    since: float


@dataclass(frozen=True, slots=True)
class Window:
    limits: Limits = field(default_factory=Limits)
    #: when the counts of ``limits`` reset (monotonic seconds; None: not known)
    resets_at: float | None = None
    #: after a 429: nothing goes before this
    paused_until: float = 0.0
    #: after a pause: admissions one by one until the queue is empty
    recovering: bool = False
    #: the first call admitted after a pause, until its answer began
    probe: int | None = None
    last_admit: float = -math.inf
    running: frozenset[int] = frozenset()
    queue: tuple[Waiter, ...] = ()


@dataclass(frozen=True, slots=True)
class Governor:
    windows: Mapping[str, Window] = field(default_factory=dict)
    #: sessions a browser is showing now (they go first)
    viewed: frozenset[str] = frozenset()
    gap_s: float = GAP_S
    low_fraction: float = LOW_FRACTION


def _window(g: Governor, provider: str) -> Window:
    return g.windows.get(provider) or Window()


def _put(g: Governor, provider: str, w: Window) -> Governor:
    return replace(g, windows={**g.windows, provider: w})


def ask(g: Governor, provider: str, ticket: int, session_id: str, now: float) -> Governor:
    """A call wants to start: it joins the provider's queue."""
    w = _window(g, provider)
    return _put(g, provider, replace(w, queue=(*w.queue, Waiter(ticket, session_id, now))))


def viewing(g: Governor, session_ids: frozenset[str]) -> Governor:
    """The sessions the user is looking at now (their calls go first)."""
    return replace(g, viewed=session_ids)


def _low(g: Governor, w: Window, now: float) -> bool:
    if w.resets_at is None or now >= w.resets_at:
        return False
    lim = w.limits
    for remaining, limit in ((lim.remaining_requests, lim.limit_requests),
                             (lim.remaining_tokens, lim.limit_tokens)):
        if remaining is not None and limit and remaining <= limit * g.low_fraction:
            return True
    return False


def _exhausted(w: Window, now: float) -> bool:
    return (w.resets_at is not None and now < w.resets_at
            and w.limits.remaining_requests is not None and w.limits.remaining_requests <= 0)


def _ordered(g: Governor, queue: tuple[Waiter, ...]) -> list[Waiter]:
    return sorted(queue, key=lambda q: (q.session_id not in g.viewed, q.since, q.ticket))


def _took_one(w: Window) -> Limits:
    lim = w.limits
    if lim.remaining_requests is None:
        return lim
    return replace(lim, remaining_requests=max(0, lim.remaining_requests - 1))


def admit(g: Governor, provider: str, now: float
          ) -> tuple[Governor, tuple[int, ...], float | None]:
    """The tickets that may start now (removed from the queue, counted as running), and when
    to call again if some still wait on time (None: nothing to wait for but a change)."""
    w = _window(g, provider)
    if not w.queue:
        if w.recovering and w.probe is None and not w.running and now >= w.paused_until:
            w = replace(w, recovering=False)
        return _put(g, provider, w), (), None
    if now < w.paused_until:
        return g, (), w.paused_until
    if w.probe is not None:
        return g, (), None  # the probe's answer (or its end) moves this on
    if _exhausted(w, now):
        assert w.resets_at is not None
        return g, (), w.resets_at
    one_by_one = w.recovering or _low(g, w, now)
    if one_by_one:
        next_at = w.last_admit + g.gap_s
        if now < next_at:
            return g, (), next_at
        first = _ordered(g, w.queue)[0]
        probe = first.ticket if (w.recovering and w.last_admit < w.paused_until) else None
        w = replace(w, queue=tuple(q for q in w.queue if q.ticket != first.ticket),
                    running=w.running | {first.ticket}, last_admit=now, probe=probe,
                    limits=_took_one(w))
        wake = None if probe is not None or not w.queue else now + g.gap_s
        return _put(g, provider, w), (first.ticket,), wake
    going = _ordered(g, w.queue)
    limits = w.limits
    if limits.remaining_requests is not None:
        limits = replace(limits, remaining_requests=max(0, limits.remaining_requests
                                                          - len(going)))
    w = replace(w, queue=(), running=w.running | {q.ticket for q in going}, last_admit=now,
                limits=limits)
    return _put(g, provider, w), tuple(q.ticket for q in going), None


def seen(g: Governor, provider: str, limits: Limits, now: float) -> Governor:
    """A response's headers: the window's counts and when they reset."""
    resets = [s for s in (limits.requests_reset_s, limits.tokens_reset_s) if s is not None]
    w = _window(g, provider)
    return _put(g, provider, replace(w, limits=limits,
                                     resets_at=now + max(resets) if resets else None))


def started(g: Governor, provider: str, ticket: int) -> Governor:
    """The call's answer began (the provider took it): a probe lets the others follow."""
    w = _window(g, provider)
    return _put(g, provider, replace(w, probe=None)) if w.probe == ticket else g


def limited(g: Governor, provider: str, retry_after: float | None, now: float,
            default_s: float = 5.0) -> Governor:
    """HTTP 429: every call of the provider waits until ``retry_after`` from now (or the
    window's reset, else ``default_s``), then the window recovers one by one."""
    w = _window(g, provider)
    wait = retry_after if retry_after is not None else (
        w.resets_at - now if w.resets_at is not None and w.resets_at > now else default_s)
    return _put(g, provider, replace(w, paused_until=max(w.paused_until, now + wait),
                                     recovering=True, probe=None))


def done(g: Governor, provider: str, ticket: int, now: float) -> Governor:
    """The call ended (an answer, an error, a cancel) or gave up waiting."""
    w = _window(g, provider)
    return _put(g, provider, replace(
        w, running=w.running - {ticket}, queue=tuple(q for q in w.queue if q.ticket != ticket),
        probe=None if w.probe == ticket else w.probe))


def queued_reason(g: Governor, provider: str, now: float) -> str:
    """What a session waiting in ``provider``'s queue shows: ``queued for rate limit (resets
    in 42 s)``."""
    w = _window(g, provider)
    until = w.paused_until if now < w.paused_until else w.resets_at
    if until is not None and until > now:
        return f"queued for rate limit (resets in {math.ceil(until - now)} s)"
    return "queued for rate limit"


# reading the headers ------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_reset(value: str | None, wall_now: float) -> float | None:
    """Seconds until a reset header's time: OpenAI's duration (``1s``, ``6m0s``, ``20ms``),
    plain seconds, or Anthropic's RFC 3339 time (``2026-11-28T19:00:00Z``). None: unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if parts and "".join(n + u for n, u in parts) == text:
        return sum(float(n) * _UNIT_S[u] for n, u in parts)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text).timestamp()
        except (TypeError, ValueError):
            return None
    return max(0.0, when - wall_now)
