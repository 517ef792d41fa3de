"""The event log on a real PostgreSQL (Debian's binaries, a throwaway cluster): the whole
contract suite, then what only this backend must show — concurrent writers in several
processes stay gapless, replicas publish each other's events, and a real server keeps its
state across a restart on it."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from codey_protocol.codec import decode_envelope
from codey_protocol.events import SessionTitleChanged
from codey_server.cluster.replicas import Cluster, Leases
from codey_server.eventlog import EventLog, Fence
from codey_server.eventlog.contract import EventLogContract
from codey_server.eventlog.postgres import PostgresEventLog
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
