"""A session's runner among replicas, fenced by its lease (without a database): the real agent
service and engine, leases and a log that checks fences kept in memory. Another replica takes
the session over while the turn streams or runs a command: the runner here stops at once,
writing nothing more (no ``Interrupted``, no partial mark), sending no cancel, saying so once
in the log; and the runner of a holding that is still current is not disturbed."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.events import Envelope, Event
from codey_server.agent.models import ModelProvider
from codey_server.agent.service import AgentService
from codey_server.agent.stream import Finished, ModelEvent, TextDelta, ToolCallRequested
from codey_server.core.engine import Engine
from codey_server.core.rules import Context
from codey_server.errors import LeaseLost
from codey_server.eventlog import Fence, MemoryEventLog
from codey_server.features import RULES
from codey_server.settings import ProviderConfig, Settings
from codey_testkit.credentials import FixedCredentials
from codey_testkit.waiting import until

S, W = "ses_1", "wrk_1"
LEASE = f"session:{S}"


class Leases:
    """The lease table of a cluster, in memory; this replica is ``me``."""

    def __init__(self, me: str = "r1") -> None:
        self.me = me
        self.rows: dict[str, tuple[str, int]] = {}  # name → (owner, epoch)
        self.held: set[str] = set()
        self.on_lost: list[Callable[[str], None]] = []

    async def acquire(self, name: str) -> bool:
        owner, epoch = self.rows.get(name, ("", 0))
        if owner not in ("", self.me):
            return False
        if owner != self.me:
            self.rows[name] = (self.me, epoch + 1)
        self.held.add(name)
        return True

    async def release(self, name: str) -> None:
        self.held.discard(name)
        if self.rows.get(name, ("", 0))[0] == self.me:
            self.rows[name] = ("", self.rows[name][1])

    async def free(self, names: list[str]) -> set[str]:
        return {n for n in names if self.rows.get(n, ("", 0))[0] == ""}

    def fence(self, name: str) -> Fence | None:
        if name not in self.held or self.rows.get(name, ("", 0))[0] != self.me:
            return None
        return Fence(name, self.rows[name][1], self.me)

    def take_over(self, name: str, by: str = "r2") -> None:
        """Another replica takes the lease (this one has not noticed yet: it was paused)."""
        self.rows[name] = (by, self.rows[name][1] + 1)


class FencedLog(MemoryEventLog):
    """The in-memory log, checking fences against :class:`Leases` (as PostgreSQL does)."""

    def __init__(self, leases: Leases) -> None:
        super().__init__()
        self.leases = leases
        self.refused: list[list[Event]] = []

    async def append(self, events: Sequence[tuple[str | None, Event]], *,
                     fence: Fence | None = None,
                     expected: int | None = None) -> list[Envelope]:
        if fence is not None and self.leases.rows.get(fence.lease) != (fence.owner,
                                                                         fence.epoch):
            self.refused.append([e for _, e in events])
            raise LeaseLost(fence.lease)
        return await super().append(events, expected=expected)


class Gated(ModelProvider):
    """Answers with the given events; waits at each ``None`` until :attr:`go` is set."""

    def __init__(self, answers: list[list[ModelEvent | None]]) -> None:
        super().__init__(ProviderConfig(name="p", base_url="http://127.0.0.1:9/v1",
                                        kind="responses"), FixedCredentials())
        self.answers = answers
        self.go = asyncio.Event()
        self.waiting = asyncio.Event()

    async def stream(self, *, model: str, body: bytes,
                     session_id: str = "") -> AsyncIterator[ModelEvent]:
        for event in self.answers.pop(0):
            if event is None:
                self.waiting.set()
                await self.go.wait()
                continue
            yield event


class Worker:
    """Runs every action; a command streams "one", then waits for :attr:`go`."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.running = asyncio.Event()
        self.cancels: list[str] = []
        self.fences: list[Fence | None] = []
        self._present = asyncio.Event()
        self._present.set()

    async def ensure_attached(self, worker_id: str, session_id: str, workdir: str, *,
                              timeout: float | None = None) -> list[wk.McpServerInfo]:
        return []

    async def run(self, worker_id: str, action: wk.ActionMessage, *,
                  on_progress: Callable[[wk.ActionProgress], Awaitable[None]] | None = None,
                  timeout: float | None = None, skip: int = 0,
                  fence: Fence | None = None) -> wk.ActionOutcome:
        self.fences.append(fence)
        if not isinstance(action, wk.RunCommand):
            return wk.ProjectContext()
        assert on_progress is not None
        await on_progress(wk.ActionProgress(action_id=action.action_id, stream="stdout",
                                            data="one\n"))
        self.running.set()
        await self.go.wait()
        await on_progress(wk.ActionProgress(action_id=action.action_id, stream="stdout",
                                            data="two\n"))
        return wk.CommandResult(exit_code=0, stdout="one\ntwo\n")

    async def cancel(self, worker_id: str, target_action_id: str, session_id: str) -> None:
        self.cancels.append(target_action_id)

    def presence(self, worker_id: str) -> asyncio.Event:
        return self._present

    def absence(self, worker_id: str) -> asyncio.Event:
        return asyncio.Event()


async def _no_token(provider: str) -> str | None:
    return None


def _events(state: Any, events: list[tuple[str | None, ev.Event]], ctx: Any) -> Any:
    return events


def run(answers: list[list[ModelEvent | None]],
        check: Callable[[Engine, AgentService, Leases, Gated, Worker, FencedLog],
                        Awaitable[None]]) -> None:
    async def main() -> None:
        leases = Leases()
        log = FencedLog(leases)
        engine = Engine(log, RULES, context=Context())
        await engine.start()
        worker = Worker()
        model = Gated(answers)
        service = AgentService(engine, worker, Settings(action_timeout_s=5),  # type: ignore[arg-type]
                               _no_token, actions=worker, leases=leases)  # type: ignore[arg-type]
        service.providers = {"p": model}
        await engine.submit(_events, [
            (None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="Linux",
                                   python_version="3.11", worker_version="0", roots=["/w"],
                                   public_key="k")),
            (None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux",
                                      worker_version="0", capabilities=wk.Capabilities(
                                          executors=[], sandbox=wk.SandboxInfo(kind="bwrap")))),
            (S, ev.SessionCreated(title="t", worker_id=W, workdir="/w/p", provider="p",
                                  model="m", policy="full-auto")),
            (S, ev.SessionItemAppended(item=ev.UserMessage(id="itm_0", ts=0.0, text="go")))])
        await check(engine, service, leases, model, worker, log)
        await service.stop()
        await engine.stop()

    asyncio.run(main())


def _stopped_here(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "stopped its turn here" in r.getMessage()]


def test_a_turn_taken_over_while_the_model_streams_stops_writing_at_once(
        caplog: pytest.LogCaptureFixture) -> None:
    async def check(engine: Engine, service: AgentService, leases: Leases, model: Gated,
                    worker: Worker, log: FencedLog) -> None:
        await until(lambda: model.waiting.is_set(), what="the stream to start")
        await until(lambda: any(isinstance(i, ev.AssistantMessage)
                                for i in engine.state.sessions[S].items),
                    what="the first delta")
        assert all(f == Fence(LEASE, 1, "r1") for f in worker.fences)
        seq = engine.state.seq
        leases.take_over(LEASE)  # paused past its lease; r2 took the session (epoch 2)
        model.go.set()  # it wakes up, and the stream goes on
        await until(lambda: not service.running(S), what="the runner to stop")
        assert engine.state.seq == seq  # nothing more from here: no deltas, no partial mark
        assert log.refused and not any(isinstance(e, ev.SessionStatusChanged) and
                                       e.status == "interrupted"
                                       for events in log.refused for e in events)
        assert leases.rows[LEASE] == ("r2", 2)  # its release changed nothing of r2's
        assert LEASE not in leases.held
        assert len(_stopped_here(caplog)) == 1

    caplog.set_level(logging.WARNING, "codey.agent")
    run([[TextDelta("Hel"), None, TextDelta("lo"), TextDelta(" there"), Finished()]], check)


def test_a_turn_taken_over_during_a_command_stops_and_cancels_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    async def check(engine: Engine, service: AgentService, leases: Leases, model: Gated,
                    worker: Worker, log: FencedLog) -> None:
        await until(lambda: worker.running.is_set(), what="the command to run")
        await until(lambda: any(isinstance(i, ev.ToolCall) and i.output
                                for i in engine.state.sessions[S].items),
                    what="its first output")
        seq = engine.state.seq
        leases.take_over(LEASE)
        worker.go.set()  # more output and the outcome: the runner's next writes are refused
        await until(lambda: not service.running(S), what="the runner to stop")
        assert engine.state.seq == seq
        [tool] = [i for i in engine.state.sessions[S].items if isinstance(i, ev.ToolCall)]
        assert tool.status == "running" and tool.output == "one\n"  # for the new owner
        assert worker.cancels == []  # the new owner carries the command on
        assert len(_stopped_here(caplog)) == 1

    caplog.set_level(logging.WARNING, "codey.agent")
    call = ToolCallRequested("c1", "shell", json.dumps({"command": ["sh", "-c", "x"]}))
    run([[call, Finished()], [TextDelta("Done."), Finished()]], check)


def test_a_runner_whose_holding_is_current_finishes_its_turn() -> None:
    async def check(engine: Engine, service: AgentService, leases: Leases, model: Gated,
                    worker: Worker, log: FencedLog) -> None:
        await until(lambda: worker.running.is_set(), what="the command to run")
        worker.go.set()
        await until(lambda: not service.running(S), what="the turn to end")
        session = engine.state.sessions[S]
        assert session.status == "idle" and log.refused == []
        [tool] = [i for i in session.items if isinstance(i, ev.ToolCall)]
        assert tool.output == "one\ntwo\n"
        await until(lambda: LEASE not in leases.held, what="the lease released")

    call = ToolCallRequested("c1", "shell", json.dumps({"command": ["sh", "-c", "x"]}))
    run([[call, Finished()], [TextDelta("Done."), Finished()]], check)


def test_the_sweep_takes_over_a_session_once_its_lease_is_free() -> None:
    """A prompt committed while another replica held the session (which then died): nothing
    runs here while that lease holds; once it lapses the sweep claims the session (a new
    epoch), runs its turn fenced by it, and releases the lease when the turn ends."""
    async def main() -> None:
        leases = Leases()
        leases.rows[LEASE] = ("r2", 4)  # the replica that took the prompt
        log = FencedLog(leases)
        engine = Engine(log, RULES, context=Context())
        await engine.start()
        worker = Worker()
        await engine.submit(_events, [
            (None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="Linux",
                                   python_version="3.11", worker_version="0", roots=["/w"],
                                   public_key="k")),
            (S, ev.SessionCreated(title="t", worker_id=W, workdir="/w/p", provider="p",
                                  model="m", policy="full-auto")),
            (S, ev.SessionItemAppended(item=ev.UserMessage(id="itm_0", ts=0.0, text="go")))])
        service = AgentService(engine, worker, Settings(action_timeout_s=5),  # type: ignore[arg-type]
                               _no_token, actions=worker, leases=leases)  # type: ignore[arg-type]
        service.providers = {"p": Gated([[TextDelta("Done."), Finished()]])}
        await service.start()
        seq = engine.state.seq
        await asyncio.sleep(1.5)  # a sweep or two: the lease is r2's
        assert engine.state.seq == seq and not service.running(S)
        leases.rows[LEASE] = ("", 4)  # r2 died: its lease lapsed
        await until(lambda: engine.state.sessions[S].status == "idle" and any(
            isinstance(i, ev.AssistantMessage) for i in engine.state.sessions[S].items),
            what="the turn to run here")
        await until(lambda: not service.running(S) and LEASE not in leases.held,
                    what="the lease released")
        assert leases.rows[LEASE] == ("", 5) and log.refused == []
        await service.stop()
        await engine.stop()

    asyncio.run(main())
