"""The EventLog contract, importable: every backend's tests subclass :class:`EventLogContract`.

The way eventsourcing ships its persistence tests: a new backend (PostgreSQL) gets the whole
suite by one subclass giving :meth:`~EventLogContract.make_log`, ``assert_readable``,
``snapshot_count`` and ``store_rows`` (rows as an older release wrote them)::

    class TestPostgresEventLog(EventLogContract):
        def make_log(self, tmp_path): return PostgresEventLog(DSN)
        ...

It is test code (it needs pytest), kept in the package so that a backend outside this
repository can run it too.
"""

from __future__ import annotations

import abc
import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.codec import decode_envelope, encode
from codey_protocol.errors import ProtocolError
from codey_protocol.events import (
    ActionRequested,
    Envelope,
    Event,
    SessionCreated,
    SessionItemAppended,
    SessionStatusChanged,
    SessionTitleChanged,
    UserMessage,
    WorkerConnected,
    WorkerDisconnected,
)
from codey_protocol.foldversion import encode_snapshot
from codey_protocol.state import State
from codey_protocol.upcasting import version_of
from codey_protocol.worker import RunCommand
from codey_server.errors import (
    AppendConflict,
    LeaseLost,
    LogClosed,
    ServerError,
    SubscriberOverflow,
)
from codey_server.eventlog.base import SNAPSHOTS_KEPT, EventLog, Fence, Subscription

__all__ = ["OLD_ROWS", "Body", "EventLogContract", "seqs", "title"]


def _overflowed(sub: Subscription) -> bool:
    return sub.overflowed

Body = Callable[[EventLog], Awaitable[None]]


def title(n: int) -> SessionTitleChanged:
    return SessionTitleChanged(title=f"title {n}")


def seqs(envs: list[Envelope]) -> list[int]:
    return [env.seq for env in envs]


#: Envelopes as release 745192a stored them (its ``SqliteEventLog``, its structs: see
#: ``scripts/old_event_rows.py``), byte for byte: no ``version``, and none of the fields added
#: since — a session made before the OS sandbox, a command it ran without one, a worker too old
#: to have one, a prompt whose origin was not recorded.
OLD_ROWS: list[bytes] = [
    b'{"seq":1,"ts":1795876825.5401223,"session_id":null,"event":{"type":"worker_connected",'
    b'"worker_id":"w1","hostname":"vm","os":"Linux","worker_version":"0.1.0","capabilities":'
    b'{"executors":["run_command"],"mcp_servers":[],"terminal":false,"acp_agents":[]}}}',
    b'{"seq":2,"ts":1795876825.5401223,"session_id":"s1","event":{"type":"session_created",'
    b'"title":"fix it","worker_id":"w1","workdir":"/w","provider":"p","model":"m",'
    b'"policy":"full-auto","plan_mode":false,"parent_id":null,"parent_item":null,"role":null,'
    b'"read_only":false,"turn_cap":null,"agent":null}}',
    b'{"seq":3,"ts":1795876825.5401223,"session_id":"s1","event":{"type":"session_item_appended'
    b'","item":{"kind":"user_message","id":"i1","ts":1.5,"text":"run the tests","queued":false,'
    b'"attachments":[],"attachments_written":false}}}',
    b'{"seq":4,"ts":1795876825.5401223,"session_id":"s1","event":{"type":"action_requested",'
    b'"action_id":"a1","item_id":"i2","worker_id":"w1","action":{"type":"run_command",'
    b'"action_id":"a1","session_id":"s1","argv":["pytest","-q"],"workdir":"/w","cwd":null,'
    b'"timeout_s":600.0,"env":{},"output_cap":1048576}}}',
]


class EventLogContract(abc.ABC):
    """Tests every EventLog must pass. Subclasses provide :meth:`make_log`."""

    @abc.abstractmethod
    def make_log(self, tmp_path: Path) -> EventLog:
        """A fresh, unopened log of the backend under test."""

    @abc.abstractmethod
    def assert_readable(self, log: EventLog, tmp_path: Path, seq: int) -> None:
        """Assert, synchronously, that ``seq`` is durably stored (overridden per backend)."""

    @abc.abstractmethod
    def store_rows(self, tmp_path: Path, rows: list[bytes]) -> None:
        """Store ``rows`` (stored envelopes' JSON, seqs 1, 2, …) in the backend's store as an
        older release did, before the log :meth:`make_log` gives is opened on it."""

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

    # fencing ------------------------------------------------------------------------------

    async def fences(self, log: EventLog) -> tuple[Fence | None, Fence]:
        """A current fence and a stale one, for the open ``log``. A backend without leases
        keeps this default: it has no current fence (None), and refuses any fence as stale.
        A backend with leases overrides it (a take-over makes one holding stale)."""
        return None, Fence("session:s", 1, "nobody")

    def test_a_stale_fence_is_refused_and_the_rest_of_its_group_commits(
            self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("s", title(0))])
            current, stale = await self.fences(log)
            sub = log.subscribe()
            # queued together: one group commit (PostgreSQL, SQLite) holds all four
            results = await asyncio.gather(
                log.append([("s", title(1))]),
                log.append([("s", title(2)), ("s", title(3))], fence=stale),
                log.append([("s", title(4))], fence=current),  # None: an unfenced append
                log.append([("s", title(5))]),
                return_exceptions=True)
            refused = results[1]
            assert isinstance(refused, LeaseLost) and refused.lease == stale.lease
            assert isinstance(refused, ServerError)
            good = [r for r in results if isinstance(r, list)]
            assert len(good) == 3
            # the refused append used no seq: the others are gapless after seq 1
            assert sorted(seq for envs in good for seq in seqs(envs)) == [2, 3, 4]
            stored = await log.read(0)
            assert seqs(stored) == [1, 2, 3, 4]
            assert [env.event for env in stored] == [title(0), title(1), title(4), title(5)]
            published: list[Envelope] = []
            while len(published) < 3:
                published += await asyncio.wait_for(sub.get(), 5)
            assert seqs(published) == [2, 3, 4]
            # alone, too; and the seq goes on where it was
            with pytest.raises(LeaseLost):
                await log.append([("s", title(6))], fence=stale)
            assert seqs(await log.append([("s", title(7))])) == [5]
            assert log.last_seq == 5 and seqs(await log.read(0)) == [1, 2, 3, 4, 5]

        self.run(tmp_path, body)

    # expected positions (optimistic concurrency) -----------------------------------------

    def test_an_append_decided_on_its_sessions_last_events_commits(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("a", title(1)), ("b", title(2))])
            # decided at seq 2: neither a (last event 1) nor b (2) moved on after it
            assert seqs(await log.append([("a", title(3)), ("b", title(4))], expected=2)) \
                == [3, 4]
            # decided at 3: b has moved on (4), but this append is a's alone
            assert seqs(await log.append([("a", title(5))], expected=3)) == [5]
            # a session without events, and events of no session, cannot have moved on
            assert seqs(await log.append([("new", title(6)), (None, title(7))],
                                         expected=0)) == [6, 7]
            assert seqs(await log.append([(None, title(8))], expected=0)) == [8]
            assert log.last_seq == 8 and seqs(await log.read(0)) == list(range(1, 9))

        self.run(tmp_path, body)

    def test_an_append_whose_session_moved_on_is_refused_and_the_rest_of_its_group_commits(
            self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("s", title(0)), ("t", title(1))])
            sub = log.subscribe()
            # four decisions taken on the log at seq 2, queued together (one group commit
            # on PostgreSQL and SQLite): the second one's session moves on with the first
            results = await asyncio.gather(
                log.append([("s", title(2))], expected=2),
                log.append([("u", title(3)), ("s", title(4))], expected=2),
                log.append([("t", title(5))], expected=2),
                log.append([("s", title(6))]),  # no expected position: never checked
                return_exceptions=True)
            refused = results[1]
            assert isinstance(refused, AppendConflict) and isinstance(refused, ServerError)
            assert (refused.session_id, refused.seq, refused.expected) == ("s", 3, 2)
            assert [seqs(r) for r in results if isinstance(r, list)] == [[3], [4], [5]]
            # it stored nothing and used no seq (not even its "u" event's)
            stored = await log.read(0)
            assert seqs(stored) == [1, 2, 3, 4, 5]
            assert [env.event for env in stored] == [title(0), title(1), title(2), title(5),
                                                     title(6)]
            assert await log.read_session("u") == []
            published: list[Envelope] = []
            while len(published) < 3:
                published += await asyncio.wait_for(sub.get(), 5)
            assert seqs(published) == [3, 4, 5]
            # decided again on what it missed: it commits, where the seq goes on
            with pytest.raises(AppendConflict) as alone:
                await log.append([("s", title(7))], expected=4)
            assert (alone.value.seq, alone.value.expected) == (5, 4)
            assert seqs(await log.append([("u", title(3)), ("s", title(4))], expected=5)) \
                == [6, 7]
            assert log.last_seq == 7 and seqs(await log.read(0)) == list(range(1, 8))

        self.run(tmp_path, body)

    def test_of_decisions_taken_on_the_same_position_one_commits(self, tmp_path: Path) -> None:
        rounds, deciders = 5, 8

        async def body(log: EventLog) -> None:
            await log.append([("s", title(0))])
            for n in range(rounds):
                at = log.last_seq
                results = await asyncio.gather(
                    *(log.append([("s", title(n * 100 + k))], expected=at)
                      for k in range(deciders)), return_exceptions=True)
                won = [r for r in results if isinstance(r, list)]
                assert len(won) == 1 and seqs(won[0]) == [at + 1]
                assert all(isinstance(r, AppendConflict) and r.seq == at + 1
                           for r in results if not isinstance(r, list))
            assert seqs(await log.read(0)) == list(range(1, rounds + 2))

            # deciders that decide again on each refusal: all commit, one after the other
            async def decider(k: int) -> list[Envelope]:
                at = log.last_seq
                while True:
                    try:
                        return await log.append([("s", title(k)), ("s", title(-k))],
                                                expected=at)
                    except AppendConflict as err:
                        at = err.seq

            groups = await asyncio.gather(*(decider(k) for k in range(deciders)))
            assert sorted(seq for g in groups for seq in seqs(g)) == \
                list(range(rounds + 2, rounds + 2 + 2 * deciders))
            assert all(seqs(g) == [g[0].seq, g[0].seq + 1] for g in groups)

        self.run(tmp_path, body)

    def test_a_trimmed_session_has_no_position_left_to_conflict_with(
            self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            await log.append([("old", title(1)), ("kept", title(2)), ("old", title(3))])
            await log.save_snapshot(3, b"three")
            assert await log.trim({"kept"}, 3) == 2
            # the kept session still has its event 2; the trimmed one has none stored
            with pytest.raises(AppendConflict):
                await log.append([("kept", title(4))], expected=1)
            assert seqs(await log.append([("old", title(4))], expected=1)) == [4]
            with pytest.raises(AppendConflict):
                await log.append([("old", title(5))], expected=3)
            assert seqs(await log.append([("old", title(5))], expected=4)) == [5]

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

    # what older code stored --------------------------------------------------------------

    def test_an_appended_envelope_carries_its_types_version(self, tmp_path: Path) -> None:
        async def body(log: EventLog) -> None:
            envs = await log.append([("s", title(1)), (None, WorkerDisconnected(worker_id="w"))])
            assert [env.version for env in envs] == [version_of("session_title_changed"),
                                                     version_of("worker_disconnected")]
            assert await log.read(0) == envs
            stored = await log.read_session_stored("s")
            assert stored == [encode(envs[0])]
            assert json.loads(stored[0])["version"] == version_of("session_title_changed")

        self.run(tmp_path, body)

    def test_events_stored_by_an_older_release_read_as_they_were_meant(
            self, tmp_path: Path) -> None:
        """Read, they are upcast (a command run before the sandbox reads ``sandbox: none``,
        not today's default); stored, they stay as written, and the export returns them so."""
        self.store_rows(tmp_path, OLD_ROWS)

        async def body(log: EventLog) -> None:
            assert log.last_seq == 4
            envs = await log.read(0)
            assert seqs(envs) == [1, 2, 3, 4]
            assert all(env.version == version_of(str(type(env.event).__struct_config__.tag))
                       for env in envs)
            worker, created, prompt, action = (env.event for env in envs)
            assert isinstance(worker, WorkerConnected)
            assert worker.capabilities.sandbox.kind == "none"
            assert "0.1.0" in worker.capabilities.sandbox.reason
            assert isinstance(created, SessionCreated)
            assert (created.sandbox, created.network, created.origin) == ("none", True, "unknown")
            assert isinstance(prompt, SessionItemAppended)
            assert isinstance(prompt.item, UserMessage) and prompt.item.origin == "unknown"
            assert isinstance(action, ActionRequested)
            assert isinstance(action.action, RunCommand)
            assert (action.action.sandbox, action.action.network) == ("none", True)
            assert await log.read_session("s1") == envs[1:]
            # what a browser is sent: the upcast envelope, every field in it
            sent = await log.read_raw(0, -1)
            assert [decode_envelope(raw) for raw in sent] == envs
            assert json.loads(sent[3])["event"]["action"]["sandbox"] == "none"
            assert "version" in json.loads(sent[1]) and "worktree" in json.loads(sent[1])["event"]
            # the export: the stored bytes, as written
            assert await log.read_session_stored("s1") == OLD_ROWS[1:]
            # a new event after them is stored in the current shape and sent as it is stored
            new = await log.append([("s1", title(5))])
            assert seqs(new) == [5]
            assert (await log.read_raw(4, 10)) == [encode(new[0])]
            assert await log.read_session_stored("s1") == [*OLD_ROWS[1:], encode(new[0])]

        self.run(tmp_path, body)

    def test_an_envelope_stored_by_newer_code_is_refused(self, tmp_path: Path) -> None:
        """A version above the current one means what this code does not know: not read as
        something else (the data format check refuses such a data directory before this)."""
        newer = json.loads(encode(Envelope(seq=1, ts=1.0, session_id="s", event=title(1))))
        newer["version"] = version_of("session_title_changed") + 1
        self.store_rows(tmp_path, [json.dumps(newer, separators=(",", ":")).encode()])

        async def body(log: EventLog) -> None:
            with pytest.raises(ProtocolError) as refused:
                await log.read(0)
            assert refused.value.code == "newer_data"

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
            assert not _overflowed(slow)
            await log.append([("s", title(2))])
            # (read through a call: mypy would keep the narrowing across the await)
            assert _overflowed(slow)
            assert not _overflowed(fast)
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

    def test_a_snapshot_comes_back_as_saved_whatever_code_made_it(self, tmp_path: Path) -> None:
        """The log never reads inside a snapshot: which fold made it is the engine's to judge
        (``codey_server.core.snapshots``), so a bare state an older release saved and one that
        names its fold both come back byte for byte."""

        async def body(log: EventLog) -> None:
            old = encode(State(seq=2))
            await log.save_snapshot(2, old)
            assert await log.latest_snapshot() == (2, old)
            mine = encode_snapshot(State(seq=2))
            await log.save_snapshot(2, mine)  # the fresh one replaces it
            assert await log.latest_snapshot() == (2, mine)

        self.run(tmp_path, body)

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
