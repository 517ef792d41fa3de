"""The EventLog contract: every implementation subclasses :class:`EventLogContract`.

A new backend (e.g. Postgres) gets the whole suite by adding one subclass with ``make_log``.
"""

from __future__ import annotations

import abc
import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.codec import decode_envelope
from codey_protocol.events import (
    Envelope,
    Event,
    SessionStatusChanged,
    SessionTitleChanged,
    WorkerDisconnected,
)
from codey_server.errors import ServerError
from codey_server.eventlog import (
    SNAPSHOTS_KEPT,
    EventLog,
    LogClosed,
    MemoryEventLog,
    SqliteEventLog,
    SubscriberOverflow,
)

Body = Callable[[EventLog], Awaitable[None]]

# Appends from 20 tasks forever, printing each acknowledged seq (run as a child and killed).
_CRASH_CHILD = """
import asyncio, sys
from codey_protocol.events import SessionTitleChanged
from codey_server.eventlog import SqliteEventLog

async def main():
    log = SqliteEventLog(sys.argv[1])
    await log.open()
    async def appender(t):
        n = 0
        while True:
            n += 1
            envs = await log.append([(f"s{t}", SessionTitleChanged(title=str(n)))] * (1 + t % 2))
            sys.stdout.write(f"{envs[-1].seq}\\n")
            sys.stdout.flush()
    await asyncio.gather(*(appender(t) for t in range(20)))

asyncio.run(main())
"""


def title(n: int) -> SessionTitleChanged:
    return SessionTitleChanged(title=f"title {n}")


def seqs(envs: list[Envelope]) -> list[int]:
    return [env.seq for env in envs]


class EventLogContract(abc.ABC):
    """Tests every EventLog must pass. Subclasses provide :meth:`make_log`."""

    @abc.abstractmethod
    def make_log(self, tmp_path: Path) -> EventLog:
        """A fresh, unopened log of the backend under test."""

    @abc.abstractmethod
    def assert_readable(self, log: EventLog, tmp_path: Path, seq: int) -> None:
        """Assert, synchronously, that ``seq`` is durably stored (overridden per backend)."""

    def run(self, tmp_path: Path, body: Body) -> None:
        async def main() -> None:
            log = self.make_log(tmp_path)
            await log.open()
            try:
                await body(log)
            finally:
                await log.close()

        asyncio.run(main())

    # seq ----------------------------------------------------------------------------------

    def test_empty_log(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            assert log.last_seq == 0
            assert await log.first_seq() == 0
            assert await log.read(0) == []
            assert await log.read_raw(0, 10) == []
            assert await log.latest_snapshot() is None
            assert await log.append([]) == []
            assert log.last_seq == 0

        self.run(tmp_path, body)

    def test_append_returns_committed_envelopes(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            events: list[tuple[str | None, Event]] = [
                ("s1", title(1)),
                (None, WorkerDisconnected(worker_id="w1", reason="bye")),
                ("s1", SessionStatusChanged(status="running")),
            ]
            envs = await log.append(events)
            assert seqs(envs) == [1, 2, 3]
            assert [(env.session_id, env.event) for env in envs] == events
            assert all(isinstance(env.ts, float) and env.ts > 1e9 for env in envs)
            assert log.last_seq == 3
            assert await log.first_seq() == 1
            assert await log.read(0) == envs

        self.run(tmp_path, body)

    def test_concurrent_appends_are_gapless_and_each_append_is_consecutive(
        self, tmp_path: Path
    ) -> None:
        tasks, per_task = 50, 20

        async def body(log: EventLog) -> None:
            async def appender(t: int) -> list[list[Envelope]]:
                groups = []
                for i in range(per_task):
                    size = 1 + (t + i) % 3  # groups of 1, 2 and 3 events
                    group = [(f"s{t}", title(i * 10 + k)) for k in range(size)]
                    groups.append(await log.append(group))
                return groups

            results = await asyncio.gather(*(appender(t) for t in range(tasks)))
            groups = [group for task_groups in results for group in task_groups]
            for group in groups:
                first = group[0].seq
                assert seqs(group) == list(range(first, first + len(group)))
            total = sum(len(group) for group in groups)
            assert sorted(env.seq for group in groups for env in group) == list(range(1, total + 1))
            stored = await log.read(0)
            assert seqs(stored) == list(range(1, total + 1))
            by_seq = {env.seq: env for group in groups for env in group}
            assert stored == [by_seq[seq] for seq in range(1, total + 1)]
            assert log.last_seq == total
            # Within one task, appends are ordered.
            for task_groups in results:
                firsts = [group[0].seq for group in task_groups]
                assert firsts == sorted(firsts)

        self.run(tmp_path, body)

    def test_unencodable_event_is_refused_without_using_a_seq(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            bad: Any = object()
            results = await asyncio.gather(
                log.append([("s", title(1))]),
                log.append([("s", title(2)), ("s", bad)]),
                log.append([("s", title(3))]),
                return_exceptions=True,
            )
            assert isinstance(results[1], Exception)
            good = [r for r in results if isinstance(r, list)]
            assert sorted(seq for envs in good for seq in seqs(envs)) == [1, 2]
            assert seqs(await log.append([("s", title(4))])) == [3]
            assert [env.event for env in await log.read(0)] == [title(1), title(3), title(4)]

        self.run(tmp_path, body)

    # reads --------------------------------------------------------------------------------

    def test_read_after_seq_and_limit(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            appended = await log.append([("s", title(n)) for n in range(10)])
            assert await log.read(3) == appended[3:]
            assert await log.read(3, limit=2) == appended[3:5]
            assert await log.read(0, limit=0) == []
            assert await log.read(9) == appended[9:]
            assert await log.read(10) == []
            assert await log.read(500) == []

        self.run(tmp_path, body)

    def test_read_session(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("a", title(1)), ("b", title(2)), (None, title(3))])
            await log.append([("b", title(4)), ("a", title(5))])
            a = await log.read_session("a")
            assert [(env.seq, env.event) for env in a] == [(1, title(1)), (5, title(5))]
            assert seqs(await log.read_session("b")) == [2, 4]
            assert await log.read_session("nobody") == []

        self.run(tmp_path, body)

    def test_read_raw_bytes_decode_to_the_same_envelopes(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("s", title(n)) for n in range(7)])
            await log.append([(None, WorkerDisconnected(worker_id="w"))])
            raw = await log.read_raw(2, 100)
            assert all(isinstance(item, bytes) for item in raw)
            assert [decode_envelope(item) for item in raw] == await log.read(2)
            assert len(await log.read_raw(0, 3)) == 3
            assert await log.read_raw(8, 10) == []

        self.run(tmp_path, body)

    # subscriptions ------------------------------------------------------------------------

    def test_subscribers_receive_exactly_the_committed_events_in_order(
        self, tmp_path: Path
    ) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("s", title(0))])  # before subscribing: not delivered
            subs = [log.subscribe(), log.subscribe()]

            async def appender(t: int) -> list[list[Envelope]]:
                return [await log.append([("s", title(i)), ("s", title(-i))]) for i in range(10)]

            results = await asyncio.gather(*(appender(t) for t in range(10)))
            groups = [group for task_groups in results for group in task_groups]
            for sub in subs:
                batches: list[list[Envelope]] = []
                while sum(map(len, batches)) < 200:
                    batches.append(await asyncio.wait_for(sub.get(), 5))
                received = [env for batch in batches for env in batch]
                assert seqs(received) == list(range(2, 202))
                assert received == await log.read(1)
                # An append's events are never split across batches.
                batch_of = {env.seq: i for i, batch in enumerate(batches) for env in batch}
                for group in groups:
                    assert len({batch_of[env.seq] for env in group}) == 1

        self.run(tmp_path, body)

    def test_subscriber_sees_an_event_only_once_it_is_stored(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            sub = log.subscribe()
            checked = 0

            async def consumer() -> None:
                nonlocal checked
                while checked < 60:
                    batch = await sub.get()
                    # Synchronously, before anything else can run on the loop.
                    self.assert_readable(log, tmp_path, batch[-1].seq)
                    checked += len(batch)

            task = asyncio.create_task(consumer())
            await asyncio.gather(*(log.append([(None, title(n))]) for n in range(60)))
            await asyncio.wait_for(task, 5)
            assert checked == 60

        self.run(tmp_path, body)

    def test_overflow_marks_raises_and_detaches(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            slow = log.subscribe(maxsize=2)
            fast = log.subscribe(maxsize=2)
            for n in range(2):
                await log.append([("s", title(n))])
                await fast.get()
            assert not slow.overflowed
            await log.append([("s", title(2))])
            assert slow.overflowed
            assert not fast.overflowed
            with pytest.raises(SubscriberOverflow):
                await slow.get()
            with pytest.raises(SubscriberOverflow):
                async for _ in slow:
                    pass
            assert issubclass(SubscriberOverflow, ServerError)
            # Detached: further appends still work and reach the others only.
            await log.append([("s", title(3))])
            assert seqs(await fast.get()) == [3]
            assert seqs(await fast.get()) == [4]
            slow.close()  # still idempotent after an overflow

        self.run(tmp_path, body)

    def test_closed_subscription_gets_nothing_more(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            sub = log.subscribe()
            other = log.subscribe()
            await log.append([("s", title(1))])
            sub.close()
            sub.close()
            await log.append([("s", title(2))])
            with pytest.raises(LogClosed):
                await sub.get()
            assert [b async for b in sub] == []
            assert seqs(await other.get()) == [1]
            assert seqs(await other.get()) == [2]

        self.run(tmp_path, body)

    def test_waiting_subscriber_wakes_on_append(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            sub = log.subscribe()
            waiting = asyncio.create_task(sub.get())
            await asyncio.sleep(0.01)
            assert not waiting.done()
            envs = await log.append([("s", title(1))])
            assert await asyncio.wait_for(waiting, 5) == envs

        self.run(tmp_path, body)

    def test_close_finishes_in_flight_appends_and_ends_subscriptions(self, tmp_path: Path) -> None:
        async def main() -> None:
            log = self.make_log(tmp_path)
            await log.open()
            sub = log.subscribe()
            tasks = [asyncio.create_task(log.append([("s", title(n))])) for n in range(40)]
            await asyncio.sleep(0)  # every task is now inside append(), awaiting its commit
            await log.close()
            assert all(task.done() for task in tasks)
            results = [task.result() for task in tasks]
            assert sorted(seq for envs in results for seq in seqs(envs)) == list(range(1, 41))
            delivered = [env async for batch in sub for env in batch]  # drains, then ends
            assert seqs(delivered) == list(range(1, 41))
            with pytest.raises(LogClosed):
                await log.append([("s", title(99))])
            with pytest.raises(LogClosed):
                log.subscribe()
            await log.close()  # idempotent

        asyncio.run(main())

    # snapshots ----------------------------------------------------------------------------

    def test_snapshots_keep_the_latest_few(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.save_snapshot(5, b"five")
            assert await log.latest_snapshot() == (5, b"five")
            await log.save_snapshot(10, b"ten")
            await log.save_snapshot(7, b"seven")  # older than the latest: not the latest
            assert await log.latest_snapshot() == (10, b"ten")
            await log.save_snapshot(10, b"ten again")
            assert await log.latest_snapshot() == (10, b"ten again")
            for seq in range(20, 20 + SNAPSHOTS_KEPT + 3):
                await log.save_snapshot(seq, str(seq).encode())
            last = 20 + SNAPSHOTS_KEPT + 2
            assert await log.latest_snapshot() == (last, str(last).encode())
            assert await self.snapshot_count(log, tmp_path) == SNAPSHOTS_KEPT

        self.run(tmp_path, body)

    @abc.abstractmethod
    async def snapshot_count(self, log: EventLog, tmp_path: Path) -> int:
        """How many snapshots the backend holds."""

    # retention ----------------------------------------------------------------------------

    def test_trim_deletes_unkept_sessions_through_the_seq_and_never_reuses_a_seq(
            self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("old", title(1)), (None, title(2)), ("kept", title(3))])
            await log.append([("old", title(4)), ("gone", title(5))])
            await log.save_snapshot(3, b"three")
            await log.save_snapshot(5, b"five")
            assert await log.first_seq() == 1
            # "old" after seq 4 would stay; events of no session always stay
            assert await log.trim({"kept"}, 4) == 2
            assert seqs(await log.read(0)) == [2, 3, 5]
            assert [e.session_id for e in await log.read(0)] == [None, "kept", "gone"]
            assert await log.read_session("old") == []
            assert await log.read(2, 1) == (await log.read(0))[1:2]
            assert len(await log.read_raw(0, -1)) == 3
            # a reader from before seq 4 may have missed trimmed events
            assert await log.first_seq() == 5
            assert await log.latest_snapshot() == (5, b"five")
            assert await self.snapshot_count(log, tmp_path) == 1  # older ones no longer apply
            assert await log.trim({"kept"}, 5) == 1  # the newest event goes too
            assert log.last_seq == 5
            assert seqs(await log.append([("kept", title(6))])) == [6]
            assert await log.trim({"kept"}, 6) == 0

        self.run(tmp_path, body)


class TestMemoryEventLog(EventLogContract):
    def make_log(self, tmp_path: Path) -> EventLog:
        return MemoryEventLog()

    def assert_readable(self, log: EventLog, tmp_path: Path, seq: int) -> None:
        assert isinstance(log, MemoryEventLog)
        assert log._envelopes[seq - 1].seq == seq

    async def snapshot_count(self, log: EventLog, tmp_path: Path) -> int:
        assert isinstance(log, MemoryEventLog)
        return len(log._snapshots)


class TestSqliteEventLog(EventLogContract):
    def make_log(self, tmp_path: Path) -> EventLog:
        return SqliteEventLog(tmp_path / "log.db")

    def assert_readable(self, log: EventLog, tmp_path: Path, seq: int) -> None:
        conn = sqlite3.connect(tmp_path / "log.db")
        try:
            row = conn.execute("SELECT envelope FROM events WHERE seq = ?", (seq,)).fetchone()
        finally:
            conn.close()
        assert row is not None, f"seq {seq} published before it was committed"
        assert decode_envelope(row[0]).seq == seq

    async def snapshot_count(self, log: EventLog, tmp_path: Path) -> int:
        conn = sqlite3.connect(tmp_path / "log.db")
        try:
            return int(conn.execute("SELECT count(*) FROM snapshots").fetchone()[0])
        finally:
            conn.close()

    def test_reopen_after_the_newest_events_were_trimmed_never_reuses_their_seqs(
            self, tmp_path: Path) -> None:
        async def main() -> None:
            log = SqliteEventLog(tmp_path / "log.db")
            await log.open()
            await log.append([("a", title(1)), ("b", title(2)), ("b", title(3))])
            await log.save_snapshot(3, b"state at 3")
            assert await log.trim({"a"}, 3) == 2
            await log.close()

            log = SqliteEventLog(tmp_path / "log.db")
            await log.open()
            try:
                assert log.last_seq == 3
                assert await log.first_seq() == 4
                assert seqs(await log.append([("a", title(4))])) == [4]
            finally:
                await log.close()

        asyncio.run(main())

    def test_reopen_continues_seq(self, tmp_path: Path) -> None:
        async def main() -> None:
            log = SqliteEventLog(tmp_path / "log.db")
            await log.open()
            first = await log.append([("s", title(n)) for n in range(5)])
            await log.save_snapshot(5, b"state at 5")
            await log.close()

            log = SqliteEventLog(tmp_path / "log.db")
            await log.open()
            try:
                assert log.last_seq == 5
                assert await log.first_seq() == 1
                assert seqs(await log.append([("s", title(5))])) == [6]
                stored = await log.read(0)
                assert stored[:5] == first
                assert seqs(stored) == [1, 2, 3, 4, 5, 6]
                assert await log.latest_snapshot() == (5, b"state at 5")
            finally:
                await log.close()

        asyncio.run(main())

    def test_kill_9_keeps_every_acknowledged_append(self, tmp_path: Path) -> None:
        path = tmp_path / "log.db"
        child = subprocess.Popen(
            [sys.executable, "-c", _CRASH_CHILD, str(path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        acknowledged = []
        try:
            assert child.stdout is not None
            while len(acknowledged) < 300:
                line = child.stdout.readline()
                assert line, "the child process stopped early"
                acknowledged.append(int(line))
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()

        async def main() -> None:
            log = SqliteEventLog(path)
            await log.open()
            try:
                stored = seqs(await log.read(0))
                assert stored == list(range(1, len(stored) + 1))
                assert log.last_seq == len(stored)
                assert max(acknowledged) <= len(stored)
                assert seqs(await log.append([("s", title(0))])) == [len(stored) + 1]
            finally:
                await log.close()

        asyncio.run(main())

    def test_group_commit_groups_concurrent_appends(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            assert isinstance(log, SqliteEventLog)
            before = log.commits
            await asyncio.gather(*(log.append([("s", title(n))]) for n in range(200)))
            assert log.last_seq == 200
            assert 1 <= log.commits - before <= 20

        self.run(tmp_path, body)

    def test_durability_settings(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            assert isinstance(log, SqliteEventLog)
            await log.append([("s", title(1))])
            conn = sqlite3.connect(tmp_path / "log.db")
            try:
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                columns = {
                    row[1]: (row[2], row[5])
                    for row in conn.execute("PRAGMA table_info(events)").fetchall()
                }
                assert columns == {
                    "seq": ("INTEGER", 1),
                    "ts": ("REAL", 0),
                    "session_id": ("TEXT", 0),
                    "type": ("TEXT", 0),
                    "envelope": ("BLOB", 0),
                }
                indexed = [
                    conn.execute(f"PRAGMA index_info('{row[1]}')").fetchall()[0][2]
                    for row in conn.execute("PRAGMA index_list(events)").fetchall()
                ]
                assert "session_id" in indexed
                row = conn.execute("SELECT type, session_id FROM events").fetchone()
                assert row == ("session_title_changed", "s")
            finally:
                conn.close()
            # synchronous is per connection: ask the log's writing connection.
            assert await log.pragmas() == {"journal_mode": "wal", "synchronous": 2}  # FULL

        self.run(tmp_path, body)

    def test_failed_commit_uses_no_seq_and_publishes_nothing(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("s", title(1))])
            sub = log.subscribe()
            conn = sqlite3.connect(tmp_path / "log.db")
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.session_id = 'boom' "
                "BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
            )
            conn.commit()
            with pytest.raises(sqlite3.IntegrityError, match="refused by test"):
                await log.append([("ok", title(2)), ("boom", title(3))])
            assert log.last_seq == 1
            conn.execute("DROP TRIGGER refuse")
            conn.commit()
            conn.close()
            envs = await log.append([("ok", title(4))])
            assert seqs(envs) == [2]
            assert seqs(await asyncio.wait_for(sub.get(), 5)) == [2]
            assert [env.event for env in await log.read(0)] == [title(1), title(4)]

        self.run(tmp_path, body)

    def test_reads_run_while_appends_commit(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            async def writer() -> None:
                for n in range(100):
                    await log.append([("s", title(n))])

            async def reader() -> list[int]:
                seen = []
                while len(seen) < 100:
                    envs = await log.read(len(seen))
                    # A read never shows a hole: it is always a prefix of the log.
                    assert seqs(envs) == list(range(len(seen) + 1, len(seen) + 1 + len(envs)))
                    seen.extend(seqs(envs))
                    await asyncio.sleep(0)
                return seen

            _, seen = await asyncio.gather(writer(), reader())
            assert seen == list(range(1, 101))

        self.run(tmp_path, body)

    def test_writer_crash_answers_every_caller(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        class Crashing(SqliteEventLog):
            def _commit_group(self, *args: Any) -> None:
                raise RuntimeError("bug in the writer")

        async def main() -> None:
            log = Crashing(tmp_path / "log.db")
            await log.open()
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(log.append([("s", title(n))]) for n in range(20)), return_exceptions=True
                ),
                5,
            )
            assert all(isinstance(r, LogClosed) for r in results)
            assert "bug in the writer" in str(results[0])
            with pytest.raises(LogClosed):
                await log.append([("s", title(1))])
            await asyncio.wait_for(log.close(), 5)
            assert "writer thread crashed" in caplog.text

        asyncio.run(main())

    def test_concurrent_close_calls_all_wait(self, tmp_path: Path) -> None:
        async def main() -> None:
            log = SqliteEventLog(tmp_path / "log.db")
            await log.open()
            appends = [asyncio.create_task(log.append([("s", title(n))])) for n in range(10)]
            await asyncio.sleep(0)
            closers = [asyncio.create_task(log.close()) for _ in range(3)]
            await asyncio.wait(closers, return_when=asyncio.FIRST_COMPLETED)
            assert all(task.done() and len(task.result()) == 1 for task in appends)
            await asyncio.gather(*closers)

        asyncio.run(main())
