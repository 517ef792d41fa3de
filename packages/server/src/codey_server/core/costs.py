"""What model calls cost, and whether a session may make another: pure functions of the state.

Prices are US dollars per million tokens (:class:`~codey_protocol.events.ModelPrice`), looked up
by model name: the user's table (``state.prices``, Settings → Usage) over :data:`DEFAULT_PRICES`,
an exact name first, else the longest prefix (``gpt-5`` prices ``gpt-5-2025-08-07``), ignoring
a ``vendor/`` prefix. A model with no price is *unpriced*: its calls count their tokens, never a
made-up cost.

Money is counted in millionths of a dollar (*micros*): a price per million tokens times a token
count is micros, so one call's cost is rounded once, and every sum after that (a session, a day,
a provider, in the server's fold and the browser's) is an exact integer.

Budgets (:func:`budget_reached`) are checked before each model call: a session's own budget
against its totals, and the day's against every session's spend that UTC day. The check is
"spent >= limit": a call is never cut in the middle, so the last call may end a little past a
limit; the next one is not made.
"""

from __future__ import annotations

import time

from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State

__all__ = ["BUDGET_REACHED", "CACHE_WRITE_FACTOR", "DEFAULT_PRICES", "budget_reached",
           "call_cost", "day_of", "day_spent", "price_for"]


def _p(input: float, cached: float, output: float,
       cache_write: float | None = None) -> ev.ModelPrice:
    return ev.ModelPrice(input=input, cached_input=cached, output=output,
                         cache_write=cache_write)


#: list prices (USD per million tokens) of the OpenAI and Anthropic models Codey lists, by
#: name prefix (the longest matching prefix wins); Settings → Usage overrides any of them
DEFAULT_PRICES: dict[str, ev.ModelPrice] = {
    "gpt-5": _p(1.25, 0.125, 10.0),
    "gpt-5-mini": _p(0.25, 0.025, 2.0),
    "gpt-5-nano": _p(0.05, 0.005, 0.40),
    "gpt-5-codex": _p(1.25, 0.125, 10.0),
    "gpt-4.1": _p(2.0, 0.50, 8.0),
    "gpt-4.1-mini": _p(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _p(0.10, 0.025, 0.40),
    "gpt-4o": _p(2.50, 1.25, 10.0),
    "gpt-4o-mini": _p(0.15, 0.075, 0.60),
    "o3": _p(2.0, 0.50, 8.0),
    "o3-mini": _p(1.10, 0.55, 4.40),
    "o4-mini": _p(1.10, 0.275, 4.40),
    "codex-mini": _p(1.50, 0.375, 6.0),
    "claude-opus-4-5": _p(5.0, 0.50, 25.0, 6.25),
    "claude-opus-4": _p(15.0, 1.50, 75.0, 18.75),
    "claude-sonnet-4": _p(3.0, 0.30, 15.0, 3.75),
    "claude-3-7-sonnet": _p(3.0, 0.30, 15.0, 3.75),
    "claude-haiku-4-5": _p(1.0, 0.10, 5.0, 1.25),
    "claude-3-5-haiku": _p(0.80, 0.08, 4.0, 1.0),
}

#: the status reason of a session stopped at a budget (``waiting_user``)
BUDGET_REACHED = "budget reached"

#: a cache write costs this many input tokens when the price does not say (Anthropic's
#: five-minute cache)
CACHE_WRITE_FACTOR = 1.25


def _lookup(table: dict[str, ev.ModelPrice], name: str) -> ev.ModelPrice | None:
    if name in table:
        return table[name]
    best = ""
    for prefix in table:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return table[best] if best else None


def price_for(prices: dict[str, ev.ModelPrice], model: str | None) -> ev.ModelPrice | None:
    """The price of ``model``: the user's table (``prices``) first, then the defaults; each by
    the exact name, the name without a ``vendor/`` prefix, then the longest prefix. None when
    neither knows it."""
    if not model:
        return None
    names = [model, model.rsplit("/", 1)[-1]] if "/" in model else [model]
    for table in (prices, DEFAULT_PRICES):
        for name in names:
            found = _lookup(table, name) or _lookup(table, name.lower())
            if found is not None:
                return found
    return None


def call_cost(price: ev.ModelPrice | None, *, input_tokens: int, output_tokens: int,
              cached_tokens: int = 0, cache_write_tokens: int = 0) -> int | None:
    """One call's cost in micros (None: no price). ``input_tokens`` is the whole input, the
    cache's reads and writes included (as every wire reports it); each part is billed at its
    own rate, reasoning within the output."""
    if price is None:
        return None
    cached = min(cached_tokens, input_tokens)
    written = min(cache_write_tokens, input_tokens - cached)
    fresh = input_tokens - cached - written
    write_rate = price.cache_write if price.cache_write is not None \
        else price.input * CACHE_WRITE_FACTOR
    micros = (fresh * price.input + cached * price.cached_input + written * write_rate
              + output_tokens * price.output)
    return round(micros)


def day_of(ts: float) -> str:
    """The UTC day of ``ts`` as ``YYYY-MM-DD`` (the key of ``state.spend``; a day's budget
    is the UTC day's)."""
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def day_spent(state: State, day: str) -> tuple[int, int]:
    """Tokens and micros spent on ``day`` by every provider."""
    spent = state.spend.get(day, {})
    return (sum(s.tokens for s in spent.values()), sum(s.cost_micros for s in spent.values()))


def budget_reached(state: State, session: SessionInfo, now: float) -> ev.BudgetReached | None:
    """The budget that forbids ``session`` another model call now, if one does: its own
    first, then the day's; tokens before money."""
    own = session.budget
    if own is not None:
        u = session.usage
        if own.max_tokens is not None and u.total_tokens >= own.max_tokens:
            return ev.BudgetReached(scope="session", unit="tokens", limit=own.max_tokens,
                                    spent=u.total_tokens)
        if own.max_micros is not None and u.cost_micros >= own.max_micros:
            return ev.BudgetReached(scope="session", unit="usd", limit=own.max_micros,
                                    spent=u.cost_micros)
    day = state.day_budget
    if day.max_tokens is not None or day.max_micros is not None:
        tokens, micros = day_spent(state, day_of(now))
        if day.max_tokens is not None and tokens >= day.max_tokens:
            return ev.BudgetReached(scope="day", unit="tokens", limit=day.max_tokens,
                                    spent=tokens)
        if day.max_micros is not None and micros >= day.max_micros:
            return ev.BudgetReached(scope="day", unit="usd", limit=day.max_micros,
                                    spent=micros)
    return None
