"""An action in flight and its waiters: every caller gets the one outcome, even a late one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from codey_protocol import codec
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.core.actions import ActionFailed
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.presence import Presence
from codey_server.core.router import Effect, Router, Settle
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES
from codey_server.testing.writes import record
from codey_server.workers.keys import FileWorkerKeys
from codey_server.workers.sockets import WorkerRegistry, _Conn
from codey_testkit.waiting import until

READ = wk.ReadFile(action_id="a1", session_id="s", workdir="/w", path="f")
CONTENT = wk.FileContent(path="f", content="hi\n", size=3, total_lines=1)
LINK = object()  # the worker's connection, as the router sees it


class _Flight:
    """One action in a router, its waiters futures settled as a driver does."""

    def __init__(self) -> None:
        self.router = Router()
        self.router.linked("w1", LINK)

    def joined(self) -> asyncio.Future[wk.ActionOutcome]:
        """A new waiter, joined to the action (call inside a running loop)."""
        waiter: asyncio.Future[wk.ActionOutcome] = asyncio.get_running_loop().create_future()
        self.carry_out(self.router.submit("w1", READ, waiter))
        return waiter

    def settle(self, outcome: wk.ActionOutcome | ActionFailed) -> None:
        """The worker's answer."""
        frame: wk.ActionResult | wk.ActionErrored = (
            wk.ActionErrored(action_id="a1", code=outcome.code, message=outcome.message)
            if isinstance(outcome, ActionFailed) else
            wk.ActionResult(action_id="a1", result=outcome))
        self.carry_out(self.router.received("w1", LINK, frame))

    @staticmethod
    def carry_out(effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Settle):
                for waiter in effect.waiters:
                    assert isinstance(waiter, asyncio.Future)
                    if waiter.done():
                        continue
                    if isinstance(effect.outcome, ActionFailed):
                        waiter.set_exception(effect.outcome)
                    else:
                        waiter.set_result(effect.outcome)


def test_every_waiter_gets_the_outcome_and_a_later_answer_is_ignored() -> None:
    async def main() -> None:
        flight = _Flight()
        first, second = flight.joined(), flight.joined()
        flight.settle(CONTENT)
        flight.settle(ActionFailed("internal", "a second answer"))
        assert await first == CONTENT and await second == CONTENT

    asyncio.run(main())


def test_a_waiter_joining_after_the_outcome_gets_it_at_once() -> None:
    async def main() -> None:
        flight = _Flight()
        first = flight.joined()  # the outcome is kept while someone waits for it
        flight.settle(ActionFailed("not_found", "f: no such file"))
        late = flight.joined()
        with pytest.raises(ActionFailed) as info:
            await asyncio.wait_for(late, 1)
        assert info.value.code == "not_found"
        first.exception()

    asyncio.run(main())


def test_a_cancelled_waiter_does_not_take_the_others_with_it() -> None:
    async def main() -> None:
        flight = _Flight()
        gone, staying = flight.joined(), flight.joined()
        gone.cancel()
        flight.carry_out(flight.router.leave("a1", gone))
        flight.settle(CONTENT)
        assert await staying == CONTENT

    asyncio.run(main())


# --------------------------------------------------------------------------- the registry


class SlowSocket:
    """Stands in for the worker's websocket on the server side: each send takes ``delay``."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.frames: list[wk.ServerToWorkerMessage] = []

    async def send_data(self, data: bytes, mode: str = "text") -> None:
        await asyncio.sleep(self.delay)
        self.frames.append(codec.decode_server_to_worker(data))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


async def _registry(tmp_path: Path, ws: SlowSocket) -> tuple[WorkerRegistry, _Conn]:
    engine = Engine(MemoryEventLog(), RULES)
    await engine.start()
    await record(engine, [(None, ev.WorkerPaired(
        worker_id="w1", request_id="r", hostname="h", os="Linux", python_version="3.11",
        worker_version="0", roots=["/"], public_key="k"))])
    keys = FileWorkerKeys(tmp_path / "workers.json")
    await keys.add("w1", "k", "secret")
    registry = WorkerRegistry(engine, keys, Delivery(engine, Presence(engine)))
    conn = _Conn(worker_id="w1", ws=ws)  # type: ignore[arg-type]
    assert await registry.attach(conn, "secret")
    return registry, conn


def test_a_joiner_still_gets_the_action_sent_when_the_first_caller_gave_up_sending(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        ws = SlowSocket(delay=0.3)
        registry, conn = await _registry(tmp_path, ws)
        actions = registry.delivery
        first = asyncio.create_task(actions.run("w1", READ, timeout=0.05))
        await until(lambda: actions.router.state("a1") is not None,
                    what="the first caller's send")
        second = asyncio.create_task(actions.run("w1", READ, timeout=5))
        with pytest.raises(TimeoutError):
            await first  # gave up while its send was still going
        await until(lambda: ws.frames, what="the send")
        assert ws.frames == [READ]  # sent once, for the one still waiting
        await registry.handle(conn, wk.ActionResult(action_id="a1", result=CONTENT))
        assert await second == CONTENT

    asyncio.run(main())


def test_cancel_while_connected_leaves_the_answer_to_the_worker(tmp_path: Path) -> None:
    async def main() -> None:
        ws = SlowSocket()
        registry, conn = await _registry(tmp_path, ws)
        waiting = asyncio.create_task(registry.delivery.run("w1", READ, timeout=5))
        await until(lambda: ws.frames, what="the action to be sent")
        await registry.delivery.cancel("w1", "a1", "s")
        assert [type(f) for f in ws.frames] == [wk.ReadFile, wk.Cancel]
        await registry.handle(conn, wk.ActionErrored(action_id="a1", code="cancelled",
                                                     message="the action was cancelled"))
        with pytest.raises(ActionFailed) as info:
            await waiting
        assert info.value.code == "cancelled"

    asyncio.run(main())


def test_workspace_changed_is_taken_only_for_the_workers_own_sessions(tmp_path: Path) -> None:
    async def main() -> None:
        registry, conn = await _registry(tmp_path, SlowSocket())
        engine = registry.engine
        for session_id, worker_id in (("s_mine", "w1"), ("s_other", "w2")):
            await record(engine, [(session_id, ev.SessionCreated(
                title="t", worker_id=worker_id, workdir="/w", provider="p", model="m"))])
        await registry.handle(conn, wk.WorkspaceChanged(session_id="s_other", paths=["evil"]))
        await registry.handle(conn, wk.WorkspaceChanged(session_id="s_gone", paths=["x"]))
        await registry.handle(conn, wk.WorkspaceChanged(session_id="s_mine", paths=["a.py"]))
        changed = [(env.session_id, env.event.paths) for env in await engine.log.read(0)
                   if isinstance(env.event, ev.SessionWorkspaceChanged)]
        assert changed == [("s_mine", ["a.py"])]

    asyncio.run(main())


def test_a_worker_back_with_the_action_still_running_is_not_sent_it_again(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        ws = SlowSocket()
        registry, conn = await _registry(tmp_path, ws)
        actions = registry.delivery
        run = wk.RunCommand(action_id="c1", session_id="s", workdir="/w", argv=["sleep", "9"])
        waiting = asyncio.create_task(actions.run("w1", run, timeout=5))
        await until(lambda: ws.frames, what="the command to be sent")
        await registry.handle(conn, wk.ActionAccepted(action_id="c1"))
        assert actions.router.state("c1") == "accepted"
        registry.detach(conn)
        # it comes back, still running the command: nothing to send; the answer comes anyway
        ws2 = SlowSocket()
        conn2 = _Conn(worker_id="w1", ws=ws2)  # type: ignore[arg-type]
        hello = wk.Hello(worker_version="0", hostname="h", os="Linux", running_actions=["c1"])
        assert await registry.attach(conn2, "secret", hello)
        assert ws2.frames == []
        done = wk.CommandResult(exit_code=0)
        await registry.handle(conn2, wk.ActionResult(action_id="c1", result=done))
        assert await waiting == done
        # one that is not running any more (finished while away) is sent again
        waiting = asyncio.create_task(actions.run("w1", READ, timeout=5))
        await until(lambda: ws2.frames, what="the read to be sent")
        registry.detach(conn2)
        ws3 = SlowSocket()
        assert await registry.attach(_Conn(worker_id="w1", ws=ws3),  # type: ignore[arg-type]
                                     "secret", hello)
        assert ws3.frames == [READ]
        waiting.cancel()

    asyncio.run(main())
