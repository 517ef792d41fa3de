"""The EventLog contract (``codey_server.eventlog.contract``) on the in-memory and
SQLite logs, and what only the SQLite log promises (reopening, kill -9, group commit)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import msgspec
import pytest

from codey_protocol.codec import decode_envelope, encode
from codey_protocol.events import Envelope
from codey_protocol.upcasting import decode_stored_many
from codey_server.errors import AppendConflict
from codey_server.eventlog import EventLog, LogClosed, MemoryEventLog, SqliteEventLog
from codey_server.eventlog.contract import EventLogContract, seqs, title
from codey_server.eventlog.sqlite import _SCHEMA

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


class TestMemoryEventLog(EventLogContract):
    rows: list[bytes] = []

    def make_log(self, tmp_path: Path) -> EventLog:
        log = MemoryEventLog()
        if self.rows:  # what an older release stored (a memory log never outlives its process)
            log._raw = list(self.rows)
            log._envelopes = decode_stored_many(self.rows)
            log._last_seq = log._envelopes[-1].seq
            log._heads = {env.session_id: env.seq for env in log._envelopes
                          if env.session_id is not None}
        return log

    def store_rows(self, tmp_path: Path, rows: list[bytes]) -> None:
        self.rows = rows

    def test_an_envelope_stored_by_newer_code_is_refused(self, tmp_path: Path) -> None:
        pytest.skip("a memory log holds only envelopes it decoded")

    def assert_readable(self, log: EventLog, tmp_path: Path, seq: int) -> None:
        assert isinstance(log, MemoryEventLog)
        assert log._envelopes[seq - 1].seq == seq

    async def snapshot_count(self, log: EventLog, tmp_path: Path) -> int:
        assert isinstance(log, MemoryEventLog)
        return len(log._snapshots)


class TestSqliteEventLog(EventLogContract):
    def make_log(self, tmp_path: Path) -> EventLog:
        return SqliteEventLog(tmp_path / "log.db")

    def store_rows(self, tmp_path: Path, rows: list[bytes]) -> None:
        conn = sqlite3.connect(tmp_path / "log.db")
        try:
            conn.executescript(_SCHEMA)  # the tables as every release created them
            for raw in rows:
                env = json.loads(raw)
                conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                             (env["seq"], env["ts"], env["session_id"], env["event"]["type"],
                              raw))
            conn.commit()
        finally:
            conn.close()

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

    def test_a_log_the_previous_release_wrote_gives_each_session_its_position(
            self, tmp_path: Path) -> None:
        """The previous release stored no position: a session's is the seq of its last
        event, so the events it wrote place every session, and mean what they meant."""
        path = tmp_path / "log.db"
        conn = sqlite3.connect(path)
        # the tables exactly as the previous release created them (and sqlite-utils before)
        conn.executescript("""
            CREATE TABLE "events" ("seq" INTEGER PRIMARY KEY, "ts" REAL, "session_id" TEXT,
                                   "type" TEXT, "envelope" BLOB);
            CREATE INDEX "idx_events_session_id" ON "events" ("session_id");
            CREATE TABLE "snapshots" ("seq" INTEGER PRIMARY KEY, "data" BLOB);
            CREATE TABLE "meta" ("key" TEXT PRIMARY KEY, "value" INTEGER);
        """)
        stored = [Envelope(seq=n, ts=1.0, session_id=sid, event=title(n))
                  for n, sid in enumerate(["a", "b", None, "a"], start=1)]
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                         [(e.seq, e.ts, e.session_id, "session_title_changed", encode(e))
                          for e in stored])
        # read back in the current version of their shape (which did not change)
        old = [msgspec.structs.replace(e, version=1) for e in stored]
        conn.commit()
        conn.close()

        async def main() -> None:
            log = SqliteEventLog(path)
            await log.open()
            try:
                assert await log.read(0) == old and log.last_seq == 4
                with pytest.raises(AppendConflict) as moved:
                    await log.append([("a", title(5))], expected=3)
                assert (moved.value.session_id, moved.value.seq) == ("a", 4)
                assert seqs(await log.append([("b", title(5))], expected=2)) == [5]
                assert seqs(await log.append([("a", title(6))], expected=4)) == [6]
                assert (await log.read(0))[:4] == old
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

    def test_a_saved_snapshot_is_not_kept_in_memory(self, tmp_path: Path) -> None:
        """Once stored, a snapshot's bytes (the whole state, encoded) are the log's no more:
        the writer thread kept the last one referenced until the next snapshot, as much
        memory again as the state (issue 36)."""
        size = 32 * 2**20

        async def body(log: EventLog) -> None:
            await log.append([("s", title(1))])
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                data = bytes(size)
                await log.save_snapshot(1, data)
                del data
                # the writer thread answers the caller, then drops what it held: let it
                deadline = time.monotonic() + 5
                while tracemalloc.get_traced_memory()[0] - before > size // 4:
                    assert time.monotonic() < deadline, "the snapshot's bytes are still held"
                    await asyncio.sleep(0.01)
                await log.append([("s", title(2))])  # and the log goes on as before
            finally:
                tracemalloc.stop()
            stored = await log.latest_snapshot()
            assert stored is not None and stored[0] == 1 and len(stored[1]) == size

        self.run(tmp_path, body)
