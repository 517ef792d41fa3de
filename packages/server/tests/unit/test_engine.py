"""The engine over a real SQLite log: snapshots keep start-up short; listeners see the fold."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from codey_protocol import events as ev
from codey_server.core.engine import Engine
from codey_server.eventlog import SqliteEventLog
from codey_server.features import RULES
from codey_server.testing.writes import record
from codey_testkit.waiting import until


def _events(n: int) -> list[tuple[str | None, ev.Event]]:
    out: list[tuple[str | None, ev.Event]] = [(None, ev.WorkerPaired(
        worker_id="w", request_id="r", hostname="h", os="Linux", python_version="3.11",
        worker_version="0", roots=["/"], public_key="k"))]
    out.append(("s", ev.SessionCreated(title="t", worker_id="w", workdir="/w", provider="p",
                                       model="m")))
    out += [("s", ev.SessionItemAppended(item=ev.UserMessage(id=f"i{i}", ts=0.0, text=str(i))))
            for i in range(n)]
    return out


def test_restart_replays_only_the_tail_after_the_latest_snapshot(tmp_path: Path) -> None:
    async def run() -> None:
        path = tmp_path / "events.db"
        first = Engine(SqliteEventLog(path), RULES, snapshot_every=50)
        await first.start()
        for chunk in range(0, 230, 10):
            await record(first, _events(230)[chunk:chunk + 10])
        await until(lambda: first._snapshot_task is not None and first._snapshot_task.done(),
                    what="the background snapshot")
        before = msgspec.to_builtins(first.state)
        await first.stop()  # writes a final snapshot

        second = Engine(SqliteEventLog(path), RULES, snapshot_every=50)
        await second.start()
        assert second.replayed == 0, "a stop leaves a snapshot at the last seq"
        assert msgspec.to_builtins(second.state) == before
        await record(second, _events(5)[2:])
        await second.log.close()  # a crash: no final snapshot

        third = Engine(SqliteEventLog(path), RULES, snapshot_every=50)
        await third.start()
        assert third.replayed == 5, "only the events after the last snapshot"
        assert third.state.seq == second.state.seq
        assert msgspec.to_builtins(third.state) == msgspec.to_builtins(second.state)
        await third.stop()

    asyncio.run(run())


def test_append_returns_after_the_fold_and_listeners_see_each_event(tmp_path: Path) -> None:
    async def run() -> None:
        engine = Engine(SqliteEventLog(tmp_path / "events.db"), RULES)
        await engine.start()
        seen: list[int] = []
        engine.listeners.append(lambda env: seen.append(env.seq))
        results = await asyncio.gather(*[record(engine, _events(3)[i:i + 1]) for i in range(5)])
        assert sorted(e.seq for r in results for e in r) == [1, 2, 3, 4, 5]
        assert seen == [1, 2, 3, 4, 5]
        assert engine.state.seq == 5
        await engine.stop()

    asyncio.run(run())
