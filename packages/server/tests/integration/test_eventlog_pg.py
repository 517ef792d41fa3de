"""The event log on a real PostgreSQL (Debian's binaries, a throwaway cluster): the whole
contract suite, then what only this backend must show — concurrent writers in several
processes stay gapless, replicas publish each other's events, and a real server keeps its
state across a restart on it."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest

from codey_protocol.codec import decode_envelope, encode
from codey_protocol.events import Envelope, SessionTitleChanged
from codey_server.cluster.replicas import Cluster, Leases
from codey_server.errors import AppendConflict
from codey_server.eventlog import EventLog, Fence
from codey_server.eventlog.contract import EventLogContract, seqs, title
from codey_server.eventlog.postgres import PostgresEventLog
from codey_server.testing.snapshots import new_old_new
from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.stack import ServerProcess

pytestmark = pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed")

_NAMES = itertools.count()


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    with PostgresCluster() as pg:  # one cluster per module: starting one takes seconds
        yield pg


class TestPostgresEventLog(EventLogContract):
    @pytest.fixture(autouse=True)
    def _database(self, cluster: PostgresCluster) -> None:
        self.dsn = cluster.create_database(f"t{next(_NAMES)}")

    def make_log(self, tmp_path: Path) -> EventLog:
        return PostgresEventLog(self.dsn)

    def store_rows(self, tmp_path: Path, rows: list[bytes]) -> None:
        async def schema() -> None:  # the tables (an older release's were the same)
            log = PostgresEventLog(self.dsn)
            await log.open()
            await log.close()

        asyncio.run(schema())
        with psycopg.connect(self.dsn) as conn:
            for raw in rows:
                env = json.loads(raw)
                conn.execute("INSERT INTO codey_events (seq, ts, session_id, type, envelope) "
                             "VALUES (%s, %s, %s, %s, %s)",
                             (env["seq"], env["ts"], env["session_id"], env["event"]["type"],
                              raw))
            conn.execute("UPDATE codey_meta SET value = %s WHERE key = 'last_seq'",
                         (len(rows),))

    def assert_readable(self, log: EventLog, tmp_path: Path, seq: int) -> None:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute("SELECT envelope FROM codey_events WHERE seq = %s",
                               (seq,)).fetchone()
        assert row is not None, f"seq {seq} published before it was committed"
        assert decode_envelope(bytes(row[0])).seq == seq

    async def fences(self, log: EventLog) -> tuple[Fence | None, Fence]:
        """Replica r1 takes ``session:s`` (epoch 1); it lapses and r2 takes it over (epoch 2):
        r2's holding is current, r1's stale."""
        clusters = [Cluster(self.dsn, "r1"), Cluster(self.dsn, "r2")]
        for cluster in clusters:
            await cluster.open()  # (creates codey_leases)
        try:
            old, new = Leases(clusters[0]), Leases(clusters[1])
            assert await old.acquire("session:s")
            stale = old.fence("session:s")
            await clusters[0].execute("UPDATE codey_leases SET expires = '-infinity'")
            assert await new.acquire("session:s")
            current = new.fence("session:s")
        finally:
            for cluster in clusters:
                await cluster.close()
        assert stale is not None and current is not None
        assert (stale.epoch, current.epoch) == (1, 2)
        return current, stale

    async def snapshot_count(self, log: EventLog, tmp_path: Path) -> int:
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            row = await (await conn.execute("SELECT count(*) FROM codey_snapshots")).fetchone()
        assert row is not None
        return int(row[0])


_WRITER = """
import asyncio, sys
from codey_protocol.events import SessionTitleChanged
from codey_server.eventlog.postgres import PostgresEventLog

async def main():
    log = PostgresEventLog(sys.argv[1])
    await log.open()
    async def one(t):
        for n in range(50):
            await log.append([(f"s{t}", SessionTitleChanged(title=str(n)))] * (1 + n % 3))
    await asyncio.gather(*(one(t) for t in range(5)))
    await log.close()

asyncio.run(main())
"""


def test_writers_in_several_processes_keep_the_seq_gapless_and_each_group_together(
        cluster: PostgresCluster) -> None:
    dsn = cluster.create_database("writers")
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, dsn, str(1000 + n)])
             for n in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT seq, envelope FROM codey_events ORDER BY seq").fetchall()
    seqs = [r[0] for r in rows]
    expected = 3 * 5 * sum(1 + n % 3 for n in range(50))
    assert seqs == list(range(1, expected + 1))  # gapless, no duplicate
    # each append's events are consecutive: a group of k titles "n" from one session
    envs = [decode_envelope(bytes(r[1])) for r in rows]
    i = 0
    while i < len(envs):
        e = envs[i].event
        assert isinstance(e, SessionTitleChanged)
        size = 1 + int(e.title) % 3
        group = envs[i:i + size]
        assert all(x.session_id == envs[i].session_id and x.event == e for x in group)
        i += size


def test_replicas_each_publish_every_event_of_all_of_them_in_seq_order(
        cluster: PostgresCluster) -> None:
    """Three logs on one database, as three replicas: each one's subscriber sees every event
    any of them committed, once, in seq order, and the engine's hook gets exactly the others'."""
    dsn = cluster.create_database("replicas")

    async def main() -> None:
        logs = [PostgresEventLog(dsn) for _ in range(3)]
        for one in logs:
            await one.open()
        foreign: list[list[int]] = [[], [], []]
        for n, one in enumerate(logs):
            one.follow(0, lambda envs, n=n: foreign[n].extend(e.seq for e in envs))
        subs = [one.subscribe(maxsize=100_000) for one in logs]
        mine: list[list[int]] = [[], [], []]

        async def write(n: int) -> None:
            for k in range(40):
                envs = await logs[n].append([(f"s{n}", SessionTitleChanged(title=str(k)))]
                                            * (1 + k % 2))
                mine[n].extend(e.seq for e in envs)

        await asyncio.gather(*(write(n) for n in range(3)))
        total = 3 * sum(1 + k % 2 for k in range(40))
        seen: list[list[int]] = [[], [], []]
        for n, sub in enumerate(subs):
            while len(seen[n]) < total:
                batch = await asyncio.wait_for(sub.get(), 10)
                seen[n].extend(e.seq for e in batch)
        for n in range(3):
            assert seen[n] == list(range(1, total + 1))
            assert sorted(foreign[n]) == sorted(set(range(1, total + 1)) - set(mine[n]))
            assert logs[n].last_seq == total
        for one in logs:
            await one.close()

    asyncio.run(main())


def test_a_server_on_postgres_keeps_its_state_across_a_restart(
        cluster: PostgresCluster, tmp_path: Path) -> None:
    dsn = cluster.create_database("served")
    with ServerProcess(tmp_path / "server", extra_args=["--database-url", dsn]) as server:
        created = server.http.post("/api/tasks", json={"title": "survives"})
        assert created.status_code == 201, created.text
        assert not (tmp_path / "server" / "events.db").exists()  # the log is in PostgreSQL
        server.kill9()
        server.start()
        tasks = server.http.get("/api/tasks").json()
        assert [t["title"] for t in tasks] == ["survives"]


def test_replicas_deciding_on_the_same_position_of_a_session_commit_one_decision(
        cluster: PostgresCluster) -> None:
    """Two replicas (two logs, each its own connections) append to one session, each on the
    position it read: of two decisions taken on the same position one commits, whichever
    replica's transaction comes second is refused; deciding again, both go on."""
    dsn = cluster.create_database("positions")

    async def main() -> None:
        logs = [PostgresEventLog(dsn, name=f"r{n}") for n in range(2)]
        for one in logs:
            await one.open()
        try:
            await logs[0].append([("s", title(0))])
            for n in range(20):
                at = await logs[0].committed_seq()
                results = await asyncio.gather(
                    *(one.append([("s", title(n)), (None, title(-n))], expected=at)
                      for one in logs), return_exceptions=True)
                won = [r for r in results if isinstance(r, list)]
                lost = [r for r in results if isinstance(r, AppendConflict)]
                assert len(won) == 1 and len(lost) == 1, results
                assert seqs(won[0]) == [at + 1, at + 2] and lost[0].seq == at + 1

            async def decider(one: PostgresEventLog, k: int) -> None:
                at = await one.committed_seq()
                for _ in range(k):
                    while True:
                        try:
                            await one.append([("s", title(k))], expected=at)
                            break
                        except AppendConflict as err:
                            at = err.seq
                    at = await one.committed_seq()

            await asyncio.gather(decider(logs[0], 15), decider(logs[1], 15))
            with psycopg.connect(dsn) as conn:
                rows = conn.execute("SELECT seq FROM codey_events ORDER BY seq").fetchall()
            assert [r[0] for r in rows] == list(range(1, 1 + 1 + 2 * 20 + 30))
        finally:
            for one in logs:
                await one.close()

    asyncio.run(main())


def test_a_database_the_previous_release_wrote_gives_each_session_its_position(
        cluster: PostgresCluster) -> None:
    """The previous release's tables (its index on session_id alone, no position stored):
    opening them replaces the index, and a session's position is its last event's seq."""
    dsn = cluster.create_database("previous")
    stored = [Envelope(seq=n, ts=1.0, session_id=sid, event=title(n))
              for n, sid in enumerate(["a", "b", None, "a"], start=1)]
    # read back in the current version of their shape (which did not change)
    old = [msgspec.structs.replace(e, version=1) for e in stored]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE codey_events (
                seq bigint PRIMARY KEY, ts double precision NOT NULL, session_id text,
                type text NOT NULL, envelope bytea NOT NULL, origin text);
            CREATE INDEX codey_events_session ON codey_events (session_id);
            CREATE TABLE codey_snapshots (seq bigint PRIMARY KEY, data bytea NOT NULL);
            CREATE TABLE codey_meta (key text PRIMARY KEY, value bigint NOT NULL);
            INSERT INTO codey_meta (key, value) VALUES ('last_seq', 4), ('trimmed_through', 0);
        """)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO codey_events VALUES (%s, %s, %s, %s, %s, 'old')",
                            [(e.seq, e.ts, e.session_id, "session_title_changed", encode(e))
                             for e in stored])

    async def main() -> None:
        log = PostgresEventLog(dsn)
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
    with psycopg.connect(dsn) as conn:
        indexes = {r[0] for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'codey_events'")}
    assert indexes == {"codey_events_pkey", "codey_events_session_seq"}


def test_after_new_old_new_nothing_the_log_says_is_lost(cluster: PostgresCluster) -> None:
    """Issue 36, problem 6, on PostgreSQL: a snapshot other code wrote is not trusted."""
    dsn = cluster.create_database("newoldnew")
    asyncio.run(new_old_new(lambda: PostgresEventLog(dsn)))


def test_what_a_replica_knew_of_a_session_does_not_outlive_another_replicas_append(
        cluster: PostgresCluster) -> None:
    """A log keeps the sessions' last seqs it saw while the counter stays where its own last
    commit left it; another replica's append moves the counter, and they are read again."""
    dsn = cluster.create_database("known")

    async def main() -> None:
        a, b = PostgresEventLog(dsn, name="a"), PostgresEventLog(dsn, name="b")
        for one in (a, b):
            await one.open()
        try:
            assert seqs(await a.append([("s", title(1))], expected=0)) == [1]
            assert seqs(await a.append([("s", title(2))], expected=1)) == [2]  # known here
            assert seqs(await b.append([("s", title(3))], expected=2)) == [3]
            with pytest.raises(AppendConflict) as moved:
                await a.append([("s", title(4))], expected=2)  # a knew 2; b moved it to 3
            assert moved.value.seq == 3
            assert seqs(await a.append([(None, title(4))])) == [4]  # no session: nothing read
            with pytest.raises(AppendConflict):
                await a.append([("s", title(5))], expected=2)
            assert seqs(await a.append([("s", title(5))], expected=4)) == [5]
        finally:
            for one in (a, b):
                await one.close()

    asyncio.run(main())
