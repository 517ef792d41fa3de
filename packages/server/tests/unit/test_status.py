"""The session status table: every change on the write path goes through it."""

from __future__ import annotations

import asyncio

import pytest

from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State
from codey_server.core.engine import Engine
from codey_server.core.status import BUSY, TRANSITIONS, IllegalTransition, check
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES
from codey_server.testing.writes import record


def _state(status: ev.SessionStatus) -> State:
    state = State()
    state.sessions["s"] = SessionInfo(session_id="s", title="t", worker_id="w", workdir="/w",
                                      provider="p", model="m", policy="suggest", status=status)
    return state


def _to(status: ev.SessionStatus) -> tuple[str | None, ev.Event]:
    return ("s", ev.SessionStatusChanged(status=status))


@pytest.mark.parametrize("before", sorted(TRANSITIONS))
@pytest.mark.parametrize("after", sorted(TRANSITIONS))
def test_each_change_is_legal_exactly_when_the_table_says(before: ev.SessionStatus,
                                                           after: ev.SessionStatus) -> None:
    legal = before == after or after in TRANSITIONS[before]
    if legal:
        check(_state(before), [_to(after)])
    else:
        with pytest.raises(IllegalTransition):
            check(_state(before), [_to(after)])


def test_the_table_forbids_what_no_screen_could_explain() -> None:
    assert TRANSITIONS["closed"] == frozenset()  # closed is final
    assert "waiting_approval" not in TRANSITIONS["idle"]  # only a running turn asks
    assert "idle" not in TRANSITIONS["error"]  # an error stays until something runs
    assert all("closed" in TRANSITIONS[s] for s in TRANSITIONS if s != "closed")
    assert all(TRANSITIONS[s] | {s} >= BUSY for s in BUSY)


def test_changes_in_one_append_are_checked_in_order() -> None:
    check(_state("idle"), [_to("running"), _to("waiting_approval"), _to("running"), _to("idle")])
    with pytest.raises(IllegalTransition):
        check(_state("idle"), [_to("running"), _to("closed"), _to("running")])
    # a session created in the same append starts idle
    created = ev.SessionCreated(title="t", worker_id="w", workdir="/w", provider="p",
                                model="m", policy="suggest")
    with pytest.raises(IllegalTransition):
        check(State(), [("n", created), ("n", ev.SessionStatusChanged(status="waiting_user"))])


def test_the_engine_refuses_an_illegal_change_and_appends_nothing() -> None:
    async def main() -> None:
        engine = Engine(MemoryEventLog(), RULES)
        await engine.start()
        created = ev.SessionCreated(title="t", worker_id="w", workdir="/w", provider="p",
                                    model="m", policy="suggest")
        await record(engine, [("s", created), ("s", ev.SessionStatusChanged(status="closed"))])
        seq = engine.state.seq
        with pytest.raises(IllegalTransition):
            await record(engine, [("s", ev.SessionStatusChanged(status="running"))])
        assert engine.state.seq == seq
        assert engine.state.sessions["s"].status == "closed"
        await engine.stop()

    asyncio.run(main())
