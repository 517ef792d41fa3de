"""Retention: which sessions' events stay, and an engine whose log was trimmed restarts to
the same state."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, SessionStatus, State
from codey_server.core.engine import Engine
from codey_server.core.retention import DAY_S, Retention, sessions_to_keep
from codey_server.errors import ConfigError
from codey_server.eventlog import SqliteEventLog
from codey_server.features import RULES
from codey_server.settings import RetentionConfig, Settings
from codey_server.testing.writes import record

NOW = 1_800_000_000.0


def _state(*sessions: tuple[str, SessionStatus, float]) -> State:
    state = State()
    for sid, status, age_days in sessions:
        state.sessions[sid] = SessionInfo(session_id=sid, title=sid, worker_id="w", workdir="/w",
                                          provider="p", model="m", status=status,
                                          updated_at=NOW - age_days * DAY_S)
    return state


STATE = _state(("live", "running", 90), ("idle", "idle", 90), ("new", "closed", 1),
               ("mid", "closed", 10), ("old", "closed", 40))


def test_nothing_goes_without_a_limit_and_open_sessions_always_stay() -> None:
    assert not RetentionConfig().enabled
    assert sessions_to_keep(STATE, NOW, RetentionConfig()) == set(STATE.sessions)
    everything_closed_goes = RetentionConfig(days=0.0)
    assert sessions_to_keep(STATE, NOW, everything_closed_goes) == {"live", "idle"}


def test_closed_sessions_go_by_age_and_by_count() -> None:
    assert sessions_to_keep(STATE, NOW, RetentionConfig(days=30)) == {"live", "idle", "new",
                                                                      "mid"}
    assert sessions_to_keep(STATE, NOW, RetentionConfig(finished_sessions=1)) == {
        "live", "idle", "new"}
    both = RetentionConfig(days=5, finished_sessions=2)
    assert sessions_to_keep(STATE, NOW, both) == {"live", "idle", "new"}


@pytest.mark.parametrize("bad", [{"days": -1}, {"finished_sessions": -2}, {"every_s": 0}])
def test_negative_limits_are_refused(tmp_path: Path, bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="retention"):
        Settings(data_dir=tmp_path, retention=RetentionConfig(**bad)).check()


def test_a_trimmed_log_restarts_to_the_same_state_and_keeps_handing_out_new_seqs(
        tmp_path: Path) -> None:
    async def main() -> None:
        engine = Engine(SqliteEventLog(tmp_path / "events.db"), RULES)
        await engine.start()
        for sid in ("a", "b"):
            await record(engine, [(sid, ev.SessionCreated(
                title=sid, worker_id="w", workdir="/w", provider="p", model="m"))])
            await record(engine, [(sid, ev.SessionItemAppended(
                item=ev.UserMessage(id=f"{sid}-u", ts=NOW, text="hi")))])
        await record(engine, [("b", ev.SessionStatusChanged(status="closed", reason="done"))])
        before = engine.state.sessions["b"]
        gone = await Retention(engine, RetentionConfig(days=0.0)).run_once(NOW + DAY_S)
        assert gone == 3  # b's three events
        assert [e.session_id for e in await engine.log.read(0)] == ["a", "a"]
        last = engine.state.seq
        await engine.stop()

        engine = Engine(SqliteEventLog(tmp_path / "events.db"), RULES)
        await engine.start()
        try:
            # b is still listed, closed, with its items: they are in the snapshot
            assert engine.state.seq == last
            assert engine.state.sessions["b"] == before
            assert len(engine.state.sessions["a"].items) == 1
            assert await engine.log.first_seq() == last + 1
            envs = await record(engine, [("a", ev.SessionTitleChanged(title="again"))])
            assert envs[0].seq == last + 1
        finally:
            await engine.stop()

    asyncio.run(main())
