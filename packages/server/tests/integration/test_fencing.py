"""Fencing by lease epoch on a real PostgreSQL (issue 23): leases' epochs, appends and routed
actions refused once another replica took the lease over, and — with real processes — a
replica paused with ``kill -STOP`` for longer than its lease and resumed with ``-CONT``
appends nothing after the replica that took its session over, while the session finishes
there with its command run once and its output neither lost nor repeated."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from codey_protocol import worker as wk
from codey_protocol.events import SessionTitleChanged
from codey_server.cluster.replicas import Cluster, ClusterRoutes, Leases
from codey_server.core.leases import Fence
from codey_server.errors import LeaseLost
from codey_server.eventlog.postgres import PostgresEventLog
from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.stopcont import KINDS, TAKE_OVER_GOAL_S, StopContCluster

pytestmark = pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed")


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresCluster]:
    with PostgresCluster() as cluster:
        yield cluster


async def _expire(cluster: Cluster, name: str) -> None:
    """The holder stopped renewing (paused) for longer than the lease."""
    await cluster.execute("UPDATE codey_leases SET expires = now() - interval '1 second' "
                          "WHERE name = %s", (name,))


def test_epochs_rise_with_every_take_and_hold_through_renewals(pg: PostgresCluster) -> None:
    dsn = pg.create_database("epochs")
    # a cluster from before fencing: its lease table has no epoch yet
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE codey_leases (name text PRIMARY KEY, owner text NOT NULL, "
                     "expires timestamptz NOT NULL)")
        conn.execute("INSERT INTO codey_leases VALUES ('janitor', 'old', now())")

    async def main() -> None:
        a, b = Cluster(dsn, "a"), Cluster(dsn, "b")
        await a.open()  # upgrades the table
        await b.open()
        try:
            la, lb = Leases(a), Leases(b)
            lost: list[str] = []
            la.on_lost.append(lost.append)
            assert await la.acquire("janitor")  # the old row, expired: taken, epoch 0 → 1
            assert la.fence("janitor") == Fence("janitor", 1, "a")
            assert await la.acquire("session:s")
            assert la.fence("session:s") == Fence("session:s", 1, "a")
            assert await la.acquire("session:s")  # again, by its holder: the same holding
            assert await la.renew() == {"janitor", "session:s"}
            assert la.fence("session:s") == Fence("session:s", 1, "a")
            assert not await lb.acquire("session:s") and lb.fence("session:s") is None
            await _expire(a, "session:s")
            assert await lb.acquire("session:s")  # a take-over
            assert lb.fence("session:s") == Fence("session:s", 2, "b")
            assert await la.renew() == {"janitor"} and lost == ["session:s"]
            assert la.fence("session:s") is None
            await lb.release("session:s")  # free at once; the row and its epoch stay
            assert await lb.free(["session:s"]) == {"session:s"}
            assert await la.acquire("session:s")
            assert la.fence("session:s") == Fence("session:s", 3, "a")
            await lb.release("session:s")  # not b's any more: changes nothing
            assert await la.renew() == {"janitor", "session:s"}
            await la.stop()  # hands everything over at once, epochs kept
            assert await lb.acquire("session:s")
            assert lb.fence("session:s") == Fence("session:s", 4, "b")
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_after_a_take_over_no_append_of_the_old_holder_commits(pg: PostgresCluster) -> None:
    """The old holder appends as fast as it can (a paused replica waking up) while the lease
    is taken over: every append of it that committed did so before the take-over returned
    (the new holder reads it when it catches up), and every later one was refused."""
    dsn = pg.create_database("takeover")

    async def main() -> None:
        clusters = [Cluster(dsn, "r0"), Cluster(dsn, "r1")]
        logs = [PostgresEventLog(dsn), PostgresEventLog(dsn)]
        for cluster, log in zip(clusters, logs, strict=True):
            await cluster.open()
            await log.open()
        leases = [Leases(c) for c in clusters]
        rng = random.Random(23)
        try:
            holder = 0
            assert await leases[holder].acquire("session:s")
            for _round in range(12):
                fence = leases[holder].fence("session:s")
                assert fence is not None
                committed: list[int] = []
                refused: list[LeaseLost] = []
                tasks = [asyncio.create_task(_append_until_refused(logs[holder], fence,
                                                                   committed, refused))
                         for _ in range(4)]
                await asyncio.sleep(rng.uniform(0.005, 0.05))
                other = 1 - holder
                await _expire(clusters[other], "session:s")
                assert await leases[other].acquire("session:s")
                taken_at = await logs[other].committed_seq()  # what the new holder catches up
                await asyncio.gather(*tasks)
                assert committed and len(refused) == 4
                assert max(committed) <= taken_at, "an append of the old holder committed " \
                                                   "after the take-over"
                holder = other
            # and the log stayed gapless through all of it
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                seqs = [r[0] for r in await (await conn.execute(
                    "SELECT seq FROM codey_events ORDER BY seq")).fetchall()]
            assert seqs == list(range(1, len(seqs) + 1))
        finally:
            for cluster, log in zip(clusters, logs, strict=True):
                await log.close()
                await cluster.close()

    asyncio.run(main())


async def _append_until_refused(log: PostgresEventLog, fence: Fence, committed: list[int],
                                refused: list[LeaseLost]) -> None:
    while True:
        try:
            envs = await log.append([("s", SessionTitleChanged(title=f"e{fence.epoch}"))] * 2,
                                    fence=fence)
        except LeaseLost as err:
            refused.append(err)
            return
        committed.extend(e.seq for e in envs)


def test_a_stale_runners_action_is_refused_and_a_take_overs_re_send_gets_the_outcome(
        pg: PostgresCluster) -> None:
    dsn = pg.create_database("routes")

    async def main() -> None:
        a, b = Cluster(dsn, "a"), Cluster(dsn, "b")
        await a.open()
        await b.open()
        try:
            la, lb = Leases(a), Leases(b)
            ra, rb = ClusterRoutes(a), ClusterRoutes(b)
            action = wk.ReadFile(action_id="act_1", session_id="s", workdir="/w", path="f")
            assert await la.acquire("session:s")
            fa = la.fence("session:s")
            assert await ra.route("w1", action, here=True, fence=fa) == (None, False)
            assert await ra.route("w1", action, here=True, fence=fa) == (None, True)
            await _expire(a, "session:s")
            assert await lb.acquire("session:s")
            fb = lb.fence("session:s")
            # the old runner, awake again: refused, not sent
            with pytest.raises(LeaseLost):
                await ra.route("w1", action, here=True, fence=fa)
            with pytest.raises(LeaseLost):
                await ra.route("w1", wk.ReadFile(action_id="act_2", session_id="s",
                                                 workdir="/w", path="g"), here=True, fence=fa)
            # the new owner re-sends the same id: the row is its epoch's now
            assert await rb.route("w1", action, here=False, fence=fb) == (None, True)
            content = wk.FileContent(path="f", content="x", size=1, total_lines=1)
            await ra.record("act_1", content)  # the worker's replica writes the outcome
            assert await rb.route("w1", action, here=False, fence=fb) == (content, True)
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                rows = await (await conn.execute(
                    "SELECT action_id, epoch FROM codey_actions ORDER BY action_id")).fetchall()
            assert rows == [("act_1", 2)]  # act_2 never written
            # an action of no runner (no fence) is written as before
            plain = wk.ReadFile(action_id="act_3", session_id="s", workdir="/w", path="h")
            assert await ra.route("w1", plain, here=True) == (None, False)
            assert await ra.route("w1", plain, here=True) == (None, True)
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_a_replica_paused_past_its_lease_appends_nothing_once_resumed(
        tmp_path: Path, pg: PostgresCluster) -> None:
    """One round of each kind of scripts/stopcont.py (which runs many): the session's replica
    is paused with kill -STOP for 15 s while the model streams, then while a command runs
    (it prints "middle" during the pause, "end" after the resume), and resumed with -CONT."""
    dsn = pg.create_database("stopcont")
    with StopContCluster(tmp_path, rounds=2, dsn=dsn) as cluster:
        for n, kind in enumerate(KINDS):
            t0 = time.monotonic()
            result = cluster.round(n, kind)
            print(result.line(), f"({time.monotonic() - t0:.0f} s)")
            assert result.ok, result
            assert result.took_over_s is not None and result.took_over_s <= TAKE_OVER_GOAL_S
            assert result.stale == [] and result.finished_by_new_owner and result.old_stopped
            assert result.epochs[1] > result.epochs[0]
            if kind == "command":
                assert result.runs == 1
                assert [line for line in (result.output or "").splitlines()
                        if line.endswith("-1.")] == ["start-1.", "middle-1.", "end-1."]
