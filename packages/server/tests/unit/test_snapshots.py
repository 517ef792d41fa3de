"""A start trusts only a snapshot of its own fold (``codey_server.core.snapshots``): issue 36,
problems 5 and 6, on the SQLite log (``test_eventlog_pg.py`` runs the same on PostgreSQL)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from codey_protocol import events as ev
from codey_protocol.codec import encode
from codey_protocol.foldversion import FOLD_VERSION, encode_snapshot, read_snapshot
from codey_server.core.engine import Engine
from codey_server.eventlog import SqliteEventLog
from codey_server.features import RULES
from codey_server.testing.snapshots import (
    as_old_code_saw_it,
    new_old_new,
    tell_story,
    turn_took,
)
from codey_server.testing.writes import record


def test_after_new_old_new_nothing_the_log_says_is_lost(tmp_path: Path) -> None:
    asyncio.run(new_old_new(lambda: SqliteEventLog(tmp_path / "events.db")))


async def _stored_with_snapshot(path: Path, snapshot: bytes | None) -> list[ev.Envelope]:
    """The story in a log at ``path``, its latest snapshot replaced by ``snapshot``."""
    engine = Engine(SqliteEventLog(path), RULES)
    await engine.start()
    stored = await tell_story(engine)
    await engine.stop()
    if snapshot is not None:
        log = SqliteEventLog(path)
        await log.open()
        await log.save_snapshot(stored[-1].seq, snapshot)
        await log.close()
    return stored


def test_a_turns_time_is_back_on_a_card_of_the_previous_release(tmp_path: Path) -> None:
    """Problem 5: the previous release's snapshot has no ``busy_seconds`` (its state had no
    such field), so a card said nothing of the time its turn took; replayed from the
    events, it says it again."""
    path = tmp_path / "events.db"

    async def run() -> None:
        stored = await _stored_with_snapshot(path, None)
        previous = msgspec.to_builtins(as_old_code_saw_it(stored))
        for session in previous["sessions"].values():
            del session["busy_seconds"], session["busy_since"]
        log = SqliteEventLog(path)
        await log.open()
        await log.save_snapshot(stored[-1].seq, msgspec.json.encode(previous))
        await log.close()

        engine = Engine(SqliteEventLog(path), RULES)
        await engine.start()
        assert engine.state.sessions["s1"].busy_seconds == turn_took(stored) > 0
        await engine.stop()

    asyncio.run(run())


def test_a_snapshot_of_this_fold_is_trusted_and_one_of_another_is_not(tmp_path: Path) -> None:
    async def run() -> None:
        for name, fold, trusted in (("mine", FOLD_VERSION, True),
                                    ("other", "0123456789abcdef", False)):
            path = tmp_path / f"{name}.db"
            stored = await _stored_with_snapshot(path, None)
            # a snapshot that says less than the log, under the fold ``fold``
            emptier = as_old_code_saw_it(stored)
            log = SqliteEventLog(path)
            await log.open()
            await log.save_snapshot(stored[-1].seq, encode_snapshot(emptier, fold=fold))
            await log.close()
            engine = Engine(SqliteEventLog(path), RULES)
            await engine.start()
            if trusted:  # taken as it is: nothing to replay after it
                assert engine.replayed == 0 and not engine.state.providers
            else:
                assert engine.replayed == len(stored) and "lab" in engine.state.providers
            await engine.stop()

    asyncio.run(run())


def test_a_snapshot_that_does_not_decode_is_rebuilt_too(tmp_path: Path) -> None:
    path = tmp_path / "events.db"

    async def run() -> None:
        stored = await _stored_with_snapshot(path, b"\x00not json")
        engine = Engine(SqliteEventLog(path), RULES)
        await engine.start()
        assert engine.replayed == len(stored) and "lab" in engine.state.providers
        snap = await engine.log.latest_snapshot()
        assert snap is not None and read_snapshot(snap[1])[0] == FOLD_VERSION
        await engine.stop()

    asyncio.run(run())


def test_sessions_retention_trimmed_are_kept_from_a_snapshot_of_other_code(
        tmp_path: Path) -> None:
    """The log was trimmed (a closed session's events deleted, up to a snapshot), and then
    older code wrote the latest snapshot: the trimmed session exists only there, so it is
    taken from it, and what the log says of it after that snapshot is folded onto it."""
    path = tmp_path / "events.db"

    async def run() -> None:
        engine = Engine(SqliteEventLog(path), RULES)
        await engine.start()
        await tell_story(engine)
        await record(engine, [
            ("old", ev.SessionCreated(title="finished long ago", worker_id="w1", workdir="/o",
                                      provider="openai", model="gpt-a")),
            ("old", ev.SessionStatusChanged(status="closed"))])
        assert await engine.trim({"s1"}) == 2  # the closed session's events go
        before = msgspec.to_builtins(engine.state)
        await engine.stop()

        log = SqliteEventLog(path)
        await log.open()
        snap = await log.latest_snapshot()
        assert snap is not None
        # the same state, as other code's snapshot (no fold): trusted by nothing now
        old_fold = encode(msgspec.json.decode(bytes(read_snapshot(snap[1])[1]),
                                              type=type(engine.state)))
        await log.save_snapshot(snap[0], old_fold)
        await log.append([("old", ev.SessionTitleChanged(title="renamed after the trim"))])
        await log.close()

        again = Engine(SqliteEventLog(path), RULES)
        await again.start()
        state = msgspec.to_builtins(again.state)
        assert state["sessions"]["old"]["title"] == "renamed after the trim"
        state["sessions"]["old"]["title"] = "finished long ago"
        for s in (state, before):
            s.pop("seq")
            for session in s["sessions"].values():
                session.pop("updated_at")
        assert state == before
        assert again.state.seq == snap[0] + 1
        await record(again, [("s1", ev.SessionTitleChanged(title="the log goes on"))])
        await again.stop()

    asyncio.run(run())
