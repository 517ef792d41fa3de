"""Optimistic concurrency on the write path: every append carries the seq its decision was
taken on, the log refuses it when a session of it moved on meanwhile, and the engine decides
again on the new state. The race of issue 35: a turn's end (``running → idle``) and an
interrupt, decided on the same state — once with a stand-in for the turn, on the memory and
SQLite logs, once with the real turn (the agent service, a scripted model)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.events import Envelope, Event
from codey_protocol.state import State
from codey_server.agent.models import ModelProvider
from codey_server.agent.service import AgentService
from codey_server.agent.stream import Finished, ModelEvent, TextDelta
from codey_server.core.engine import DECIDE_ATTEMPTS, Engine
from codey_server.core.rules import Context, Decided
from codey_server.core.status import BUSY, TRANSITIONS
from codey_server.errors import AppendConflict
from codey_server.eventlog import EventLog, Fence, MemoryEventLog, SqliteEventLog
from codey_server.features import RULES
from codey_server.settings import ProviderConfig, Settings
from codey_server.testing.writes import given, record
from codey_testkit.credentials import FixedCredentials
from codey_testkit.waiting import until

S, W = "ses_1", "wrk_1"

Events = Sequence[tuple[str | None, Event]]


def _racing(base: type[EventLog]) -> type[EventLog]:
    """``base`` with a rival: before the first append that ``raced`` picks is committed, the
    rival write (another decision, through the engine) is decided on the same state and
    committed either ``first`` — before that append — or after it."""

    class Racing(base):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.raced: Callable[[Events], bool] = lambda events: False
            self.rival: Callable[[], Awaitable[Any]] | None = None
            self.first = True
            self.rival_result: Any = None
            self.refused: list[AppendConflict] = []
            self._rival_arrived = asyncio.Event()
            self._raced_done = asyncio.Event()
            self._rival_pending = False

        async def append(self, events: Events, *, fence: Fence | None = None,
                         expected: int | None = None) -> list[Envelope]:
            if self._rival_pending:  # the rival's append: it waits for the raced one
                self._rival_pending = False
                self._rival_arrived.set()
                await self._raced_done.wait()
            elif self.rival is not None and self.raced(events):
                rival, self.rival = self.rival, None
                if self.first:  # decided on this state, committed (and folded) before it
                    self.rival_result = await rival()
                else:  # decided on this state, committed right after it
                    self._rival_pending = True
                    task = asyncio.ensure_future(rival())
                    task.add_done_callback(self._rival_done)
                    await self._rival_arrived.wait()
                    try:
                        return await self._append(events, fence, expected)
                    finally:
                        self._raced_done.set()
            return await self._append(events, fence, expected)

        def _rival_done(self, task: asyncio.Future[Any]) -> None:
            self.rival_result = task.exception() or task.result()

        async def _append(self, events: Events, fence: Fence | None,
                          expected: int | None) -> list[Envelope]:
            try:
                return await super().append(events, fence=fence, expected=expected)
            except AppendConflict as err:
                self.refused.append(err)
                raise

    return Racing


def _ended(state: State, session_id: str, ctx: Context) -> Decided:
    """A turn's last step, as its machine decides it: a busy session goes idle."""
    session = state.sessions[session_id]
    if session.status not in BUSY:
        return []
    return [(session_id, ev.SessionStatusChanged(status="idle"))]


def _is_end(events: Events) -> bool:
    return any(sid == S and isinstance(e, ev.SessionStatusChanged) and e.status == "idle"
               for sid, e in events)


async def _statuses(log: EventLog) -> list[str]:
    """The session's statuses in commit order (a repeat, a new reason, once), each change
    checked against the table."""
    changes = [env.event.status for env in await log.read_session(S)
               if isinstance(env.event, ev.SessionStatusChanged)]
    seen: list[str] = []
    before: ev.SessionStatus = "idle"
    for status in changes:
        assert status == before or status in TRANSITIONS[before], \
            f"{before} → {status} committed: {changes}"
        if status != before:
            seen.append(status)
        before = status
    return seen


def _setup() -> list[tuple[str | None, Event]]:
    return [
        (None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="Linux",
                               python_version="3.11", worker_version="0", roots=["/w"],
                               public_key="k")),
        (None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux", worker_version="0",
                                  capabilities=wk.Capabilities(
                                      executors=[], sandbox=wk.SandboxInfo(kind="bwrap")))),
        (S, ev.SessionCreated(title="t", worker_id=W, workdir="/w/p", provider="p", model="m",
                              policy="full-auto")),
    ]


# the engine, with a stand-in for the turn -----------------------------------------------------

def _log(kind: str, tmp_path: Path) -> EventLog:
    if kind == "memory":
        return _racing(MemoryEventLog)()
    return _racing(SqliteEventLog)(tmp_path / "events.db")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("first", ["interrupt", "turn"])
def test_an_interrupt_racing_a_turns_end_commits_only_on_the_state_it_was_taken_on(
        kind: str, first: str, tmp_path: Path) -> None:
    async def main() -> None:
        log: Any = _log(kind, tmp_path)
        engine = Engine(log, RULES, context=Context())
        await engine.start()
        await record(engine, [*_setup(), (S, ev.SessionStatusChanged(status="running"))])
        log.raced, log.first = _is_end, first == "interrupt"
        log.rival = lambda: engine.execute(cl.Interrupt(session_id=S))
        # the turn's end, appended the way a turn appends (not under the command lock)
        ended = await engine.submit(_ended, S, exclusive=False)
        await until(lambda: log.rival_result is not None, what="the interrupt's write")
        statuses = await _statuses(log)  # (first: no illegal change was committed)
        [refused] = log.refused  # the decision of the two that came second
        if first == "interrupt":
            assert ended == [] and engine.state.sessions[S].status == "interrupted"
            assert [e.event for e in log.rival_result] == [
                ev.SessionStatusChanged(status="interrupted", reason="interrupted by the user")]
            assert statuses == ["running", "interrupted"]
        else:
            assert [e.event for e in ended] == [ev.SessionStatusChanged(status="idle")]
            assert log.rival_result == []  # decided again on the idle session: nothing
            assert engine.state.sessions[S].status == "idle"
            assert statuses == ["running", "idle"]
        assert refused.session_id == S and engine.conflicts == 1
        await engine.stop()

    asyncio.run(main())


def test_a_decision_is_taken_again_on_the_new_state_a_bounded_number_of_times() -> None:
    seen: list[int] = []

    def rename(state: State, title: str, ctx: Context) -> Decided:
        seen.append(state.seq)
        return [(S, ev.SessionTitleChanged(title=title))]

    def rival_title(events: Events) -> bool:
        return any(isinstance(e, ev.SessionTitleChanged) and e.title == "mine"
                   for _, e in events)

    async def main() -> None:
        log: Any = _racing(MemoryEventLog)()
        engine = Engine(log, RULES, context=Context())
        await engine.start()
        await record(engine, _setup())
        rivals = 0

        def arm() -> None:  # another writer of the session beats the decision again
            async def rival() -> Any:
                nonlocal rivals
                rivals += 1
                if rivals < beaten:
                    arm()
                # (not under the command lock, which the decision beaten holds)
                return await engine.submit(given, [(S, ev.SessionTitleChanged(title="theirs"))],
                                           exclusive=False)

            log.raced, log.rival = rival_title, rival

        beaten = 2  # beaten twice: the third decision commits
        arm()
        [env] = await engine.submit(rename, "mine")
        assert env.event == ev.SessionTitleChanged(title="mine")
        assert engine.state.sessions[S].title == "mine"
        assert len(seen) == 3 and seen == sorted(set(seen))  # each on a newer state
        assert len(log.refused) == engine.conflicts == 2

        seen.clear()
        beaten, rivals = DECIDE_ATTEMPTS + 5, 0  # beaten every time: it gives up
        arm()
        with pytest.raises(AppendConflict):
            await engine.submit(rename, "mine", exclusive=False)
        assert len(seen) == DECIDE_ATTEMPTS
        assert engine.state.sessions[S].title == "theirs"
        await engine.stop()

    asyncio.run(main())


# the real turn --------------------------------------------------------------------------------

class _Model(ModelProvider):
    """Answers "Hello." and ends the turn."""

    def __init__(self) -> None:
        super().__init__(ProviderConfig(name="p", base_url="http://127.0.0.1:9/v1",
                                        kind="responses"), FixedCredentials())

    async def stream(self, *, model: str, body: bytes,
                     session_id: str = "") -> AsyncIterator[ModelEvent]:
        yield TextDelta("Hello.")
        yield Finished()


class _Worker:
    def __init__(self) -> None:
        self._present = asyncio.Event()
        self._present.set()

    async def ensure_attached(self, worker_id: str, session_id: str, workdir: str, *,
                              timeout: float | None = None) -> list[wk.McpServerInfo]:
        return []

    async def run(self, worker_id: str, action: wk.ActionMessage, **_: Any) -> wk.ActionOutcome:
        return wk.ProjectContext()

    async def cancel(self, worker_id: str, target_action_id: str, session_id: str) -> None:
        return None

    def presence(self, worker_id: str) -> asyncio.Event:
        return self._present

    def absence(self, worker_id: str) -> asyncio.Event:
        return asyncio.Event()


async def _no_token(provider: str) -> str | None:
    return None


@pytest.mark.parametrize("first", ["interrupt", "turn"])
def test_an_interrupt_racing_the_end_of_a_real_turn(first: str) -> None:
    async def main() -> None:
        log: Any = _racing(MemoryEventLog)()
        engine = Engine(log, RULES, context=Context())
        await engine.start()
        worker = _Worker()
        service = AgentService(engine, worker, Settings(action_timeout_s=5),  # type: ignore[arg-type]
                               _no_token, actions=worker)  # type: ignore[arg-type]
        service.providers = {"p": _Model()}
        log.raced, log.first = _is_end, first == "interrupt"
        log.rival = lambda: engine.execute(cl.Interrupt(session_id=S))
        await record(engine, [*_setup(), (S, ev.SessionItemAppended(
            item=ev.UserMessage(id="itm_0", ts=0.0, text="hi")))])
        await until(lambda: log.rival_result is not None and not service.running(S),
                    what="the turn and the interrupt")
        statuses = await _statuses(log)  # (first: no illegal change was committed)
        session = engine.state.sessions[S]
        [message] = [i for i in session.items if isinstance(i, ev.AssistantMessage)]
        # the answer was closed by an earlier step; the end's step only changes the status
        assert message.text == "Hello." and not message.streaming and not message.partial
        [refused] = log.refused
        assert refused.session_id == S
        if first == "interrupt":  # the turn's end came second: the turn stops as interrupted
            assert session.status == "interrupted"
            assert statuses == ["running", "interrupted"]
        else:  # the interrupt came second: decided again on the idle session, it is nothing
            assert session.status == "idle" and log.rival_result == []
            assert statuses == ["running", "idle"]
        await service.stop()
        await engine.stop()

    asyncio.run(main())
