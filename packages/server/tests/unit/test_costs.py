"""Cost math, the price table's lookup, the budget check and the budgets' commands: pure."""

from __future__ import annotations

import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import Budget, BudgetStop, SessionInfo, Spend, State
from codey_server.agent.budget import COMMANDS
from codey_server.core.costs import (
    BUDGET_REACHED,
    DEFAULT_PRICES,
    budget_reached,
    call_cost,
    day_of,
    price_for,
)
from codey_server.core.rules import CommandRejected, Context

PRICE = ev.ModelPrice(input=2.0, cached_input=0.5, output=8.0)


def test_a_call_is_billed_part_by_part_in_micros() -> None:
    # 1000 input of which 400 cached and 100 written: 500 fresh x 2 + 400 x 0.5 + 100 x 2.5
    # (1.25 x input) + 200 output x 8
    assert call_cost(PRICE, input_tokens=1000, output_tokens=200, cached_tokens=400,
                     cache_write_tokens=100) == 1000 + 200 + 250 + 1600
    assert call_cost(PRICE, input_tokens=1_000_000, output_tokens=0) == 2_000_000  # $2
    written = ev.ModelPrice(input=3.0, cached_input=0.3, output=15.0, cache_write=3.75)
    assert call_cost(written, input_tokens=100, output_tokens=0, cache_write_tokens=100) == 375
    assert call_cost(None, input_tokens=5, output_tokens=5) is None


def test_cache_counts_beyond_the_input_are_capped() -> None:
    assert call_cost(PRICE, input_tokens=10, output_tokens=0, cached_tokens=50,
                     cache_write_tokens=50) == 5  # all 10 cached, none written


def test_prices_are_found_by_name_then_longest_prefix_user_first() -> None:
    assert price_for({}, "gpt-5-mini-2025-08-07") is DEFAULT_PRICES["gpt-5-mini"]
    assert price_for({}, "gpt-5-2025-08-07") is DEFAULT_PRICES["gpt-5"]
    assert price_for({}, "openrouter/claude-sonnet-4-5") is DEFAULT_PRICES["claude-sonnet-4"]
    mine = ev.ModelPrice(input=9.0, cached_input=9.0, output=9.0)
    assert price_for({"gpt-5": mine}, "gpt-5-mini") is mine  # the user's table first
    assert price_for({}, "qwen3-coder") is None
    assert price_for({}, None) is None


def test_day_is_the_utc_day() -> None:
    assert day_of(0.0) == "1970-01-01"
    assert day_of(1_700_000_000.0) == "2023-11-14"


def _session(**kw: object) -> SessionInfo:
    s = SessionInfo(session_id="s1", title="t", worker_id="w", workdir="/", provider="openai",
                    model="gpt-5")
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_budget_reached_own_tokens_then_money_then_the_day() -> None:
    s = _session(budget=Budget(max_tokens=100, max_micros=50))
    state = State(sessions={"s1": s})
    assert budget_reached(state, s, 0.0) is None
    s.usage.total_tokens = 100
    assert budget_reached(state, s, 0.0) == ev.BudgetReached(
        scope="session", unit="tokens", limit=100, spent=100)
    s.usage.total_tokens, s.usage.cost_micros = 99, 60
    assert budget_reached(state, s, 0.0) == ev.BudgetReached(
        scope="session", unit="usd", limit=50, spent=60)
    s.usage.cost_micros = 0
    state.day_budget = Budget(max_micros=1000)
    state.spend = {"1970-01-02": {"openai": Spend(cost_micros=600),
                                  "anthropic": Spend(cost_micros=400)}}
    assert budget_reached(state, s, 0.0) is None  # another day's spend
    assert budget_reached(state, s, 86_400.0) == ev.BudgetReached(
        scope="day", unit="usd", limit=1000, spent=1000)


CTX = Context(now=lambda: 5.0, new_id=lambda prefix: f"{prefix}_1")


def _decide(state: State, command: object) -> list[tuple[str | None, ev.Event]]:
    return COMMANDS[type(command)](state, command, CTX)


def _stopped(scope: str, unit: str, limit: int, spent: int, sid: str = "s1") -> SessionInfo:
    return _session(session_id=sid, status="waiting_user", status_reason=BUDGET_REACHED,
                    budget=Budget(max_tokens=limit if unit == "tokens" else None),
                    budget_stop=BudgetStop(scope=scope, unit=unit, limit=limit,  # type: ignore[arg-type]
                                           spent=spent))


def test_raise_gives_the_session_by_more_than_it_spent_and_starts_a_turn() -> None:
    state = State(sessions={"s1": _stopped("session", "tokens", 100, 130)})
    assert _decide(state, cl.RaiseBudget(session_id="s1", by=50)) == [
        ("s1", ev.BudgetSet(scope="session", max_tokens=180)), ("s1", ev.TurnRequested())]


def test_raising_the_day_restarts_every_session_it_stopped() -> None:
    a, b = _stopped("day", "usd", 1000, 1000, "s1"), _stopped("day", "usd", 1000, 1000, "s2")
    other = _session(session_id="s3")
    state = State(sessions={"s1": a, "s2": b, "s3": other}, day_budget=Budget(max_micros=1000))
    assert _decide(state, cl.RaiseBudget(session_id="s2", by=500)) == [
        (None, ev.BudgetSet(scope="day", max_micros=1500)),
        ("s1", ev.TurnRequested()), ("s2", ev.TurnRequested())]


def test_raise_is_refused_when_nothing_stopped_and_budgets_are_positive() -> None:
    state = State(sessions={"s1": _session()})
    with pytest.raises(CommandRejected):
        _decide(state, cl.RaiseBudget(session_id="s1", by=5))
    with pytest.raises(CommandRejected):
        _decide(state, cl.SetBudget(session_id="s1", max_tokens=0))
    assert _decide(state, cl.SetBudget(max_micros=2_000_000)) == [
        (None, ev.BudgetSet(scope="day", max_micros=2_000_000))]
    with pytest.raises(CommandRejected):
        _decide(state, cl.SetPrices(prices={"m": ev.ModelPrice(input=-1, cached_input=0,
                                                                 output=0)}))
