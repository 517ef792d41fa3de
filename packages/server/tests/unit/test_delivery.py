"""``Delivery`` carrying out the router's effects, and ``Presence`` read from the fold."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.core.actions import ActionFailed, ProgressCallback
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.presence import Presence
from codey_server.errors import LeaseLost
from codey_server.eventlog import Fence, MemoryEventLog
from codey_server.features import RULES
from codey_server.testing.writes import record
from codey_testkit.waiting import until

READ = wk.ReadFile(action_id="a1", session_id="s", workdir="/w", path="f")
CONTENT = wk.FileContent(path="f", content="hi\n", size=3, total_lines=1)


class Link:
    def __init__(self) -> None:
        self.frames: list[Any] = []

    async def send(self, msg: Any) -> None:
        self.frames.append(msg)


class Rows:
    """The database between replicas, in memory: what was written and read."""

    def __init__(self, outcome: Any = None, existed: bool = False) -> None:
        self.outcome = outcome
        self.existed = existed
        self.routed: list[tuple[str, bool]] = []
        self.fences: list[Any] = []
        self.recorded: list[tuple[str, Any]] = []
        self.progress: list[wk.ActionProgress] = []
        self.cancels: list[str] = []

    async def route(self, worker_id: str, action: wk.ActionMessage, *, here: bool,
                    fence: Any = None) -> Any:
        self.routed.append((action.action_id, here))
        self.fences.append(fence)
        return self.outcome, self.existed or self.outcome is not None

    async def record(self, action_id: str, outcome: Any) -> None:
        self.recorded.append((action_id, outcome))

    async def record_progress(self, progress: wk.ActionProgress) -> None:
        self.progress.append(progress)

    async def cancel_elsewhere(self, worker_id: str, target: str, session_id: str) -> None:
        self.cancels.append(target)


def _collected() -> tuple[list[str], ProgressCallback]:
    """A caller's output listener, and the output it was given."""
    output: list[str] = []

    async def on_progress(p: wk.ActionProgress) -> None:
        output.append(p.data)

    return output, on_progress


async def _engine() -> Engine:
    engine = Engine(MemoryEventLog(), RULES)
    await engine.start()
    await record(engine, [(None, ev.WorkerPaired(
        worker_id="w1", request_id="r", hostname="h", os="Linux", python_version="3.11",
        worker_version="0", roots=["/"], public_key="k"))])
    return engine


async def _connected(engine: Engine, replica: str = "") -> None:
    await record(engine, [(None, ev.WorkerConnected(worker_id="w1", hostname="h", os="Linux",
                                                   worker_version="0", replica=replica))])


def test_presence_follows_the_fold_not_the_socket() -> None:
    async def main() -> None:
        engine = await _engine()
        presence = Presence(engine, replica="r1")
        present, absent = presence.presence("w1"), presence.absence("w1")
        gone_here = presence.absence("w1", here=True)
        assert not present.is_set() and absent.is_set() and gone_here.is_set()
        await _connected(engine, replica="r2")  # on another replica
        assert present.is_set() and not absent.is_set() and gone_here.is_set()
        await _connected(engine, replica="r1")
        assert not gone_here.is_set() and presence.here("w1")
        # a stale disconnect from the replica it left changes nothing
        await record(engine, [(None, ev.WorkerDisconnected(worker_id="w1", replica="r2"))])
        assert present.is_set()
        await record(engine, [(None, ev.WorkerRevoked(worker_id="w1"))])
        assert not present.is_set() and absent.is_set() and not presence.connected("w1")

    asyncio.run(main())


def test_revocation_fails_the_waiting_caller() -> None:
    async def main() -> None:
        engine = await _engine()
        delivery = Delivery(engine, Presence(engine))
        link = Link()
        await delivery.linked("w1", link)
        waiting = asyncio.create_task(delivery.run("w1", READ, timeout=5))
        await until(lambda: link.frames, what="the send")
        await record(engine, [(None, ev.WorkerRevoked(worker_id="w1"))])
        with pytest.raises(ActionFailed) as info:
            await waiting
        assert info.value.code == "revoked"
        with pytest.raises(ActionFailed):
            await delivery.run("w1", READ, timeout=5)  # and nothing more is taken

    asyncio.run(main())


def test_attach_once_per_connection() -> None:
    async def main() -> None:
        engine = await _engine()
        delivery = Delivery(engine, Presence(engine))
        link = Link()
        await delivery.linked("w1", link, known_sessions=["s_known"])
        # the worker's hello said so: nothing is sent, and its MCP list is not known here
        assert await delivery.ensure_attached("w1", "s_known", "/w") == []
        assert link.frames == []
        attaching = asyncio.create_task(delivery.ensure_attached("w1", "s_new", "/w"))
        await until(lambda: link.frames, what="the attach")
        [attach] = link.frames
        assert isinstance(attach, wk.AttachSession)
        listed = [wk.McpServerInfo(name="git", tools=[wk.McpTool(name="git_log")])]
        await delivery.received("w1", link, wk.ActionResult(
            action_id=attach.action_id, result=wk.Attached(workdir="/w", mcp_servers=listed)))
        servers = await attaching
        assert servers == listed
        # later actions get the list the attach kept, the same object (news only once)
        assert await delivery.ensure_attached("w1", "s_new", "/w") is servers
        assert len(link.frames) == 1
        delivery.unlinked("w1", link)
        again = Link()
        await delivery.linked("w1", again)
        attaching = asyncio.create_task(delivery.ensure_attached("w1", "s_new", "/w"))
        await until(lambda: again.frames, what="the attach on the new connection")
        attaching.cancel()

    asyncio.run(main())


def test_routed_with_the_worker_here_nothing_is_read_back() -> None:
    async def main() -> None:
        engine = await _engine()
        rows = Rows()
        delivery = Delivery(engine, Presence(engine), routes=rows)
        link = Link()
        await delivery.linked("w1", link)
        output, on_progress = _collected()
        waiting = asyncio.create_task(delivery.run("w1", READ, on_progress=on_progress,
                                                   timeout=5))
        await until(lambda: link.frames, what="the send")
        assert rows.routed == [("a1", True)]  # written first, nobody woken
        assert delivery.router.awaiting_elsewhere() == []
        await delivery.received("w1", link, wk.ActionProgress(action_id="a1", stream="stdout",
                                                              data="out"))
        await delivery.received("w1", link, wk.ActionResult(action_id="a1", result=CONTENT))
        assert await waiting == CONTENT and output == ["out"]
        # straight to the turn, and written first: a take-over reads the whole output there
        assert [p.data for p in rows.progress] == ["out"]
        await until(lambda: rows.recorded == [("a1", CONTENT)], what="the outcome written")

    asyncio.run(main())


def test_routed_with_the_worker_elsewhere_the_rows_answer() -> None:
    async def main() -> None:
        engine = await _engine()
        await _connected(engine, replica="r2")
        rows = Rows()
        delivery = Delivery(engine, Presence(engine, replica="r1"), routes=rows)
        waiting = asyncio.create_task(delivery.run("w1", READ, timeout=5))
        await until(lambda: delivery.router.awaiting_elsewhere() == ["a1"],
                    what="the action written")
        assert rows.routed == [("a1", False)]
        await delivery.cancel("w1", "a1", "s")
        assert rows.cancels == ["a1"]  # the worker's replica sends it
        await delivery.answered("a1", ActionFailed("cancelled", "the action was cancelled"))
        with pytest.raises(ActionFailed):
            await waiting
        assert rows.recorded == []  # it came from there

    asyncio.run(main())


def test_routed_an_outcome_from_before_a_take_over_answers_at_once() -> None:
    async def main() -> None:
        engine = await _engine()
        delivery = Delivery(engine, Presence(engine), routes=Rows(outcome=CONTENT))
        link = Link()
        await delivery.linked("w1", link)
        assert await delivery.run("w1", READ, timeout=5) == CONTENT
        assert link.frames == []  # not sent again
        # a caller that wants the output reads it back first, then the outcome
        output, on_progress = _collected()
        later = wk.ReadFile(action_id="a2", session_id="s", workdir="/w", path="f")
        waiting = asyncio.create_task(delivery.run("w1", later, on_progress=on_progress,
                                                   timeout=5))
        await until(lambda: delivery.router.awaiting_elsewhere() == ["a2"],
                    what="the read-back")
        await delivery.progressed("a2", wk.ActionProgress(action_id="a2", stream="stdout",
                                                          data="out"))
        await delivery.answered("a2", CONTENT)
        assert await waiting == CONTENT and output == ["out"] and link.frames == []

    asyncio.run(main())


def test_routed_a_take_over_gets_the_output_from_its_start_less_what_the_log_shows() -> None:
    # the re-sent action's output comes again from the database, from its start: the caller
    # (a resumed turn whose item already shows "hel") gets only what follows
    async def main() -> None:
        engine = await _engine()
        await _connected(engine, replica="r2")
        rows = Rows(existed=True)
        delivery = Delivery(engine, Presence(engine, replica="r1"), routes=rows)
        fence = Fence("session:s", 3, "r1")
        output, on_progress = _collected()
        waiting = asyncio.create_task(delivery.run("w1", READ, on_progress=on_progress,
                                                   timeout=5, skip=3, fence=fence))
        await until(lambda: delivery.router.awaiting_elsewhere() == ["a1"],
                    what="the action written")
        assert rows.fences == [fence]
        for data in ("he", "llo", " world"):
            await delivery.progressed("a1", wk.ActionProgress(action_id="a1",
                                                              stream="stdout", data=data))
        await delivery.answered("a1", CONTENT)
        assert await waiting == CONTENT
        assert output == ["lo", " world"]

    asyncio.run(main())


def test_one_server_after_a_restart_gets_only_the_output_that_follows_and_skips_none() -> None:
    # one server: the worker sends only the output after the re-send; nothing is left out
    async def main() -> None:
        engine = await _engine()
        delivery = Delivery(engine, Presence(engine))
        link = Link()
        await delivery.linked("w1", link)
        output, on_progress = _collected()
        waiting = asyncio.create_task(delivery.run("w1", READ, on_progress=on_progress,
                                                   timeout=5, skip=3))
        await until(lambda: link.frames, what="the send")
        await delivery.received("w1", link, wk.ActionProgress(action_id="a1", stream="stdout",
                                                              data="more"))
        await delivery.received("w1", link, wk.ActionResult(action_id="a1", result=CONTENT))
        assert await waiting == CONTENT and output == ["more"]

    asyncio.run(main())


def test_routed_a_stale_runners_action_is_refused_and_never_sent() -> None:
    class Refusing(Rows):
        async def route(self, worker_id: str, action: wk.ActionMessage, *, here: bool,
                        fence: Any = None) -> Any:
            raise LeaseLost(fence.lease)

    async def main() -> None:
        engine = await _engine()
        delivery = Delivery(engine, Presence(engine), routes=Refusing())
        link = Link()
        await delivery.linked("w1", link)
        with pytest.raises(LeaseLost):
            await delivery.run("w1", READ, timeout=5, fence=Fence("session:s", 1, "r1"))
        assert link.frames == [] and delivery.router.state("a1") is None

    asyncio.run(main())
