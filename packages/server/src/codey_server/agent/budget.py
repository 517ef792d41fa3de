"""The budgets' commands: set a session's or the day's budget, "raise by …" on a session
stopped at one, and the price table. Pure decisions ``(state, command, ctx) -> events``.

A session stops at a budget in its turn (:func:`codey_server.core.costs.budget_reached`,
before a model call); :class:`~codey_protocol.client.RaiseBudget` raises the limit it stopped
at to what was spent plus ``by`` and asks for a turn (``turn_requested``) for every session
that limit stopped: the session's own, or, for the day's, each session the day stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.costs import BUDGET_REACHED
from codey_server.core.decide import existing
from codey_server.core.rules import CommandRejected, Context, Decided, Decider

__all__ = ["COMMANDS"]


def _limits(max_tokens: int | None, max_micros: int | None) -> None:
    for value in (max_tokens, max_micros):
        if value is not None and value <= 0:
            raise CommandRejected("bad_request", "a budget is a positive number (or none)")


def _set(state: State, c: cl.SetBudget, ctx: Context) -> Decided:
    _limits(c.max_tokens, c.max_micros)
    if c.session_id is None:
        return [(None, ev.BudgetSet(scope="day", max_tokens=c.max_tokens,
                                    max_micros=c.max_micros))]
    s = existing(state, c.session_id)
    return [(s.session_id, ev.BudgetSet(scope="session", max_tokens=c.max_tokens,
                                        max_micros=c.max_micros))]


def _stopped(state: State, scope: str) -> list[str]:
    return [s.session_id for s in state.sessions.values()
            if s.budget_stop is not None and s.budget_stop.scope == scope
            and s.status == "waiting_user" and s.status_reason == BUDGET_REACHED]


def _raise(state: State, c: cl.RaiseBudget, ctx: Context) -> Decided:
    s = existing(state, c.session_id)
    stop = s.budget_stop
    if stop is None or s.status != "waiting_user":
        raise CommandRejected("conflict", "the session is not stopped at a budget")
    if c.by <= 0:
        raise CommandRejected("bad_request", "raise by a positive amount")
    # what was spent plus ``by``: the session gets ``by`` more, whatever the last call
    # overshot
    new = max(stop.limit, stop.spent) + c.by
    if stop.scope == "session":
        own = s.budget
        tokens, micros = (own.max_tokens, own.max_micros) if own is not None else (None, None)
        if stop.unit == "tokens":
            tokens = new
        else:
            micros = new
        return [(s.session_id, ev.BudgetSet(scope="session", max_tokens=tokens,
                                            max_micros=micros)),
                (s.session_id, ev.TurnRequested())]
    day = state.day_budget
    tokens, micros = day.max_tokens, day.max_micros
    if stop.unit == "tokens":
        tokens = new
    else:
        micros = new
    out: Decided = [(None, ev.BudgetSet(scope="day", max_tokens=tokens, max_micros=micros))]
    return out + [(sid, ev.TurnRequested()) for sid in _stopped(state, "day")]


def _prices(state: State, c: cl.SetPrices, ctx: Context) -> Decided:
    for name, price in c.prices.items():
        if not name.strip():
            raise CommandRejected("bad_request", "a price needs a model name")
        if min(price.input, price.cached_input, price.output,
               price.cache_write if price.cache_write is not None else 0.0) < 0:
            raise CommandRejected("bad_request", f"{name}: a price cannot be negative")
    return [(None, ev.PricesSet(prices={n.strip(): p for n, p in c.prices.items()}))]


COMMANDS: Mapping[type[Any], Decider] = {
    cl.SetBudget: _set, cl.RaiseBudget: _raise, cl.SetPrices: _prices,
}
