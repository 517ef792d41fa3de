"""The turn loop without processes: the real agent service and engine (on the in-memory log),
a provider that replays model events, and a stand-in for the worker registry (the turn's
``Actions`` port). Turns start as they do in the server: from the events the tests append."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.compaction import COMPACT_INSTRUCTIONS
from codey_server.agent.conversation import SUMMARY_PREFIX
from codey_server.agent.errors import ModelError
from codey_server.agent.models import ModelProvider
from codey_server.agent.service import AgentService
from codey_server.agent.stream import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    ReasoningDone,
    RefusalDelta,
    TextDelta,
    ToolCallRequested,
    Usage,
)
from codey_server.core.engine import Engine
from codey_server.core.rules import Context
from codey_server.eventlog import Fence, MemoryEventLog
from codey_server.features import RULES
from codey_server.settings import FallbackConfig, ProviderConfig, Settings
from codey_testkit import waiting
from codey_testkit.credentials import FixedCredentials
from codey_testkit.waiting import Deadline

S = "ses_1"
W = "wrk_1"
Answer = list[ModelEvent | ModelError] | ModelError


class ScriptedProvider(ModelProvider):
    """Replays one list of model events per call and keeps every request body."""

    def __init__(self, name: str, answers: list[Answer], **config: Any) -> None:
        super().__init__(ProviderConfig(name=name, base_url="http://127.0.0.1:9/v1",
                                        kind=config.pop("kind", "responses"), max_retries=2,
                                        **config), FixedCredentials())
        self.answers: deque[Answer] = deque(answers)
        self.bodies: list[dict[str, Any]] = []

    async def stream(self, *, model: str, body: bytes,
                     session_id: str = "") -> AsyncIterator[ModelEvent]:
        self.bodies.append(json.loads(body))
        answer = self.answers.popleft()
        if isinstance(answer, ModelError):
            raise answer
        for event in answer:
            if isinstance(event, ModelError):
                raise event
            yield event


class Worker:
    """Stands in for the worker registry: runs every action at once."""

    def __init__(self) -> None:
        self.actions: list[wk.ActionMessage] = []
        self.context = wk.ProjectContext()
        self.processes = wk.ExecProcesses()  # what exec_list answers
        self._present = asyncio.Event()
        self._present.set()
        self._absent = asyncio.Event()

    async def ensure_attached(self, worker_id: str, session_id: str, workdir: str, *,
                              timeout: float) -> list[wk.McpServerInfo]:
        return []

    async def run(self, worker_id: str, action: wk.ActionMessage, *,
                  on_progress: Callable[[wk.ActionProgress], Awaitable[None]] | None = None,
                  timeout: float | None = None, skip: int = 0,
                  fence: Fence | None = None) -> wk.ActionOutcome:
        self.actions.append(action)
        if isinstance(action, wk.LoadContext):
            return self.context
        if isinstance(action, wk.ExecKill):
            return wk.ExecOutput(process_id=action.process_id, output="bye\n", signal=15,
                                 stopped_by="exec_kill")
        if isinstance(action, wk.ExecList):
            return self.processes
        if on_progress is not None:
            await on_progress(wk.ActionProgress(action_id=action.action_id, stream="stdout",
                                                data="hello\n"))
        return wk.CommandResult(exit_code=0, stdout="hello\n")

    async def cancel(self, worker_id: str, target_action_id: str, session_id: str) -> None:
        return None

    def presence(self, worker_id: str) -> asyncio.Event:
        return self._present

    def absence(self, worker_id: str) -> asyncio.Event:
        return self._absent


async def _no_token(provider: str) -> str | None:
    return None


def _events(state: Any, events: list[tuple[str | None, ev.Event]], ctx: Any) -> Any:
    return events  # what a browser, a worker or the scheduler decided


#: how long a test waits for a turn, or for a session to reach a status
DEADLINE_S = 10.0


class Harness:
    def __init__(self, engine: Engine, providers: dict[str, ScriptedProvider],
                 approval_timeout_s: float | None = None) -> None:
        self.engine = engine
        self.providers = providers
        self.worker = Worker()
        settings = Settings(turn_iteration_cap=20, action_timeout_s=5,
                            approval_timeout_s=approval_timeout_s, roles={})
        self.service = AgentService(engine, self.worker, settings, _no_token,  # type: ignore[arg-type]
                                    actions=self.worker)
        self.service.providers = dict(providers)
        self._ids = 0

    def new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_{self._ids}"

    @property
    def session(self):  # type: ignore[no-untyped-def]
        return self.engine.state.sessions[S]

    def items(self, kind: type[Any]) -> list[Any]:
        return [i for i in self.session.items if isinstance(i, kind)]

    async def record(self, events: list[tuple[str | None, ev.Event]]) -> None:
        await self.engine.submit(_events, events)

    async def prompt(self, text: str) -> None:
        await self.record([(S, ev.SessionItemAppended(item=ev.UserMessage(
            id=self.new_id("itm"), ts=0.0, text=text)))])

    async def turn(self) -> None:
        """Wait until the session's turn (started by the service) is over."""
        deadline = Deadline(DEADLINE_S, what="the session's turn to end")
        while (task := self.service.tasks.get(S)) is not None and not task.done():
            await asyncio.wait_for(asyncio.shield(task), deadline.left())

    async def until(self, ready: Callable[[Any], bool]) -> Any:
        """Wait until ``ready(session)``, for at most :data:`DEADLINE_S`."""
        return await waiting.until(lambda: self.session, ok=ready, timeout=DEADLINE_S,
                                   interval=0.01, show=lambda s: f"still {s.status}",
                                   what="the session to be ready")


def run(answers: list[Answer], check: Callable[[Harness], Awaitable[None]], *,
        others: dict[str, ScriptedProvider] | None = None, policy: str = "full-auto",
        approval_timeout_s: float | None = None, executors: list[str] | None = None,
        plan_mode: bool = False, **config: Any) -> None:
    async def main() -> None:
        engine = Engine(MemoryEventLog(), RULES, context=Context())
        await engine.start()
        provider = ScriptedProvider("p", answers, **config)
        harness = Harness(engine, {"p": provider, **(others or {})}, approval_timeout_s)
        await harness.record([
            (None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="Linux",
                                   python_version="3.11", worker_version="0", roots=["/w"],
                                   public_key="k")),
            (None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux",
                                      worker_version="0", capabilities=wk.Capabilities(
                                          executors=executors or [],
                                          sandbox=wk.SandboxInfo(kind="bwrap")))),
            (S, ev.SessionCreated(title="t", worker_id=W, workdir="/w/p", provider="p",
                                  model="m", policy=policy,  # type: ignore[arg-type]
                                  plan_mode=plan_mode)),
        ])
        await harness.prompt("fix the tests")
        await check(harness)
        await harness.service.stop()
        await engine.stop()

    asyncio.run(main())


def call(call_id: str = "c1", argv: list[str] | None = None) -> ToolCallRequested:
    return ToolCallRequested(call_id, "shell", json.dumps({"command": argv or ["ls"]}))


def provider(h: Harness, name: str = "p") -> ScriptedProvider:
    return h.providers[name]


def test_a_tool_call_runs_and_its_result_goes_back() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        [tool] = h.items(ev.ToolCall)
        assert (tool.status, tool.output, tool.exit_code) == ("done", "hello\n", 0)
        assert h.items(ev.AssistantMessage)[-1].text == "Done."
        assert h.session.status == "idle" and not h.session.pending_actions
        second = provider(h).bodies[1]["input"]
        assert second[-1] == {"type": "function_call_output", "call_id": "c1",
                              "output": tool.result}
        assert h.session.usage.context_tokens == 120 and h.session.usage.cached_tokens == 80

    run([[call(), Usage(100, 20, 0, 120, 80), Finished()], [TextDelta("Done."), Finished()]],
        check)


def test_an_empty_answer_ends_the_turn_without_calling_again() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        assert len(provider(h).bodies) == 1
        [notice] = h.items(ev.Notice)
        assert notice.code == "empty_answer" and h.session.status == "idle"
        await h.prompt("go on")  # the user speaks: the model is called again
        await h.turn()
        assert len(provider(h).bodies) == 2 and h.items(ev.AssistantMessage)[-1].text == "ok"

    run([[Finished()], [TextDelta("ok"), Finished()]], check)


def test_an_incomplete_answer_says_why_and_stops() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        assert len(provider(h).bodies) == 1
        assert h.items(ev.AssistantMessage)[0].text == "Half an"
        [notice] = h.items(ev.Notice)
        assert notice.code == "incomplete" and "output token limit" in notice.text

    run([[TextDelta("Half an"), Finished("max_output_tokens")]], check)


def test_a_refusal_is_an_answer() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        [message] = h.items(ev.AssistantMessage)
        assert message.refusal and message.text == "I can't help with that."
        assert len(provider(h).bodies) == 1 and h.session.status == "idle"

    run([[RefusalDelta("I can't help"), RefusalDelta(" with that."), Finished()]], check)


def test_a_stream_cut_mid_answer_is_retried_and_the_partial_text_not_sent_back() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        first, second = h.items(ev.AssistantMessage)[:2]
        assert (first.text, first.partial) == ("Hel", True)
        assert (second.text, second.partial) == ("Hello, done.", False)
        assert len(provider(h).bodies) == 2
        assert "Hel" not in json.dumps(provider(h).bodies[1]["input"])

    run([[TextDelta("Hel"), ModelError("cut", code="stream_cut")],
         [TextDelta("Hello, done."), Finished()]], check)


def test_encrypted_reasoning_goes_back_before_its_calls() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        [reasoning] = h.items(ev.Reasoning)
        assert (reasoning.text, reasoning.encrypted_content) == ("think", "enc==")
        second = provider(h).bodies[1]["input"]
        kinds = [i.get("type", i.get("role")) for i in second]
        assert kinds == ["user", "reasoning", "function_call", "function_call_output"]
        assert second[1]["encrypted_content"] == "enc=="

    run([[ReasoningDelta("think"), ReasoningDone("rs_1", "enc=="), call(), Finished()],
         [TextDelta("ok"), Finished()]], check)


def test_compaction_when_the_context_nears_the_window() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        bodies = provider(h).bodies
        assert len(bodies) == 3
        assert bodies[1]["instructions"] == COMPACT_INSTRUCTIONS and bodies[1]["tools"] == []
        [summary] = h.items(ev.Summary)
        assert (summary.reason, summary.text) == ("threshold", "- ran ls")
        # the prompt is summarized; the recent tool call fits in what is kept verbatim
        assert summary.replaces_until == h.items(ev.UserMessage)[0].id
        assert bodies[2]["input"][0]["content"] == SUMMARY_PREFIX + "- ran ls"
        assert [i["type"] for i in bodies[2]["input"][1:]] == ["function_call",
                                                               "function_call_output"]
        assert h.items(ev.AssistantMessage)[-1].text == "Done." and h.session.status == "idle"

    # (the window leaves room for the instructions and the tools' descriptions)
    run([[call(), Usage(7000, 50), Finished()], [TextDelta("- ran ls"), Finished()],
         [TextDelta("Done."), Finished()]], check, context_window=8192)


def test_context_length_exceeded_compacts_and_tries_again() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        [summary] = h.items(ev.Summary)
        assert summary.reason == "context_exceeded"
        assert h.items(ev.AssistantMessage)[-1].text == "Done."
        assert not h.items(ev.ErrorItem)

    run([[call(), Finished()],
         ModelError("too long", 400, "context_length"),
         [TextDelta("- summary"), Finished()],
         [TextDelta("Done."), Finished()]], check)


def test_a_failing_provider_falls_back_and_says_so() -> None:
    backup = ScriptedProvider("backup", [[TextDelta("from the backup"), Finished()]],
                              kind="chat", models=["small"])

    async def check(h: Harness) -> None:
        await h.turn()
        [notice] = h.items(ev.Notice)
        assert notice.code == "fallback" and "backup/small" in notice.text
        assert h.items(ev.AssistantMessage)[-1].text == "from the backup"
        assert backup.bodies[0]["messages"][0]["role"] == "system"  # its own wire format

    run([ModelError("p: the provider failed (HTTP 503)", 503, "server")], check,
        others={"backup": backup}, fallback=FallbackConfig(provider="backup"))


def test_an_auth_error_is_an_error_item_not_a_retry() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        [error] = h.items(ev.ErrorItem)
        assert "rejected the credentials" in error.message
        assert h.session.status == "error" and len(provider(h).bodies) == 1

    run([ModelError("p: the provider rejected the credentials (HTTP 401: bad key)", 401,
                    "auth")], check)


def test_manual_compaction_while_idle() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        await h.record([(S, ev.CompactionRequested())])
        await h.turn()  # a compaction alone
        [summary] = h.items(ev.Summary)
        assert summary.reason == "manual" and summary.text == "- said hi"
        assert h.session.status == "idle" and not h.session.compaction_requested

    run([[TextDelta("hi"), Finished()], [TextDelta("- said hi"), Finished()]], check)


def test_idle_sessions_encoded_conversations_are_a_bounded_cache() -> None:
    """Only the last :attr:`AgentService.histories_kept` idle sessions keep their encoded
    conversation (a server up for weeks kept every session's, issue 36); a session whose went
    sends the same conversation at its next call, encoded afresh."""
    other = "ses_2"

    async def check(h: Harness) -> None:
        h.service.histories_kept = 1
        await h.turn()
        assert [key[0] for key in h.service.histories] == [S]
        await h.record([
            (other, ev.SessionCreated(title="t2", worker_id=W, workdir="/w/q", provider="p",
                                      model="m", policy="full-auto")),
            (other, ev.SessionItemAppended(item=ev.UserMessage(id=h.new_id("itm"), ts=0.0,
                                                               text="other work")))])
        assert other in h.service.tasks  # its turn started with the prompt
        await waiting.until(lambda: other not in h.service.tasks, timeout=DEADLINE_S,
                            interval=0.01, what="the other turn to end")
        assert h.engine.state.sessions[other].items[-1].text == "two"
        assert [key[0] for key in h.service.histories] == [other]  # S's cache went
        await h.prompt("go on")
        await h.turn()
        assert [m["content"] for m in provider(h).bodies[-1]["input"]
                if m.get("role") in ("user", "assistant")] == [
            "fix the tests", "one", "go on"]
        assert [key[0] for key in h.service.histories] == [S]

    run([[TextDelta("one"), Finished()], [TextDelta("two"), Finished()],
         [TextDelta("three"), Finished()]], check)


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_the_approval_gate(decision: str) -> None:
    async def check(h: Harness) -> None:
        await h.until(lambda s: s.status == "waiting_approval")
        [approval] = h.session.approvals.values()
        await h.record([(S, ev.ApprovalResolved(
            approval_id=approval.approval_id,
            decision="approved" if decision == "approve" else "rejected", message="no"))])
        await h.turn()
        [tool] = h.items(ev.ToolCall)
        if decision == "approve":
            assert tool.status == "done" and len(h.worker.actions) == 1
        else:
            assert tool.status == "rejected" and tool.result == "rejected by the user: no"
            assert not h.worker.actions

    run([[call(argv=["make"]), Finished()], [TextDelta("ok"), Finished()]], check,
        policy="suggest")


def test_ask_user_waits_for_the_answer() -> None:
    async def check(h: Harness) -> None:
        await h.until(lambda s: s.status == "waiting_user")
        [q] = h.session.questions.values()
        assert (q.question, q.choices) == ("Which database?", ["sqlite", "postgres"])
        assert h.items(ev.ToolCall)[0].status == "waiting_user"
        await h.record([(S, ev.QuestionAnswered(question_id=q.question_id,
                                                answer="sqlite"))])
        await h.turn()
        [tool] = h.items(ev.ToolCall)
        assert (tool.status, tool.result) == ("done", "the user answered: sqlite")
        assert h.session.status == "idle" and not h.worker.actions

    ask = ToolCallRequested("c1", "ask_user", json.dumps(
        {"question": "Which database?", "choices": ["sqlite", "postgres"]}))
    run([[ask, Finished()], [TextDelta("ok"), Finished()]], check)


def test_remember_keeps_a_note_for_later_sessions() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        memory = h.engine.state.memories[f"{W}:/w/p"]
        assert memory.text == "- tests run with `uv run pytest`"
        await h.prompt("again")
        await h.turn()
        assert "- tests run with `uv run pytest`" in provider(h).bodies[-1]["instructions"]

    note = ToolCallRequested("c1", "remember", json.dumps(
        {"note": "tests run with `uv run pytest`"}))
    run([[note, Finished()], [TextDelta("noted"), Finished()], [TextDelta("hi"), Finished()]],
        check)


def test_a_note_the_memory_holds_is_not_added_again() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        await h.prompt("again")
        await h.turn()
        memory = h.engine.state.memories[f"{W}:/w/p"]
        assert memory.text == "- tests run with `uv run pytest`\n- use tabs"
        first, second, third = h.items(ev.ToolCall)
        assert (first.status, first.result) == ("done", "noted in the project memory")
        assert (second.status, second.result) == ("done", "noted in the project memory")
        assert (third.status, third.result) == (
            "done", "already in the project memory: nothing added")
        events = await h.engine.log.read(0, limit=1000)
        assert sum(isinstance(e.event, ev.MemoryUpdated) for e in events) == 2

    def note(call_id: str, text: str) -> ToolCallRequested:
        return ToolCallRequested(call_id, "remember", json.dumps({"note": text}))

    run([[note("c1", "tests run with `uv run pytest`"), note("c2", "use tabs"), Finished()],
         [TextDelta("noted"), Finished()],
         # the same note again, spelled a little differently
         [note("c3", "Tests run  with `uv run pytest`."), Finished()],
         [TextDelta("noted"), Finished()]], check)


def test_an_approval_nobody_decides_expires() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        [approval] = h.session.approvals.values()
        assert approval.status == "expired" and "no decision within" in approval.message
        [tool] = h.items(ev.ToolCall)
        assert tool.status == "rejected" and not h.worker.actions

    run([[call(argv=["make"]), Finished()], [TextDelta("ok"), Finished()]], check,
        policy="suggest", approval_timeout_s=0.2)


def test_the_workdir_context_goes_into_the_instructions() -> None:
    async def check(h: Harness) -> None:
        h.worker.context = wk.ProjectContext(
            instructions=[wk.InstructionFile(path="/w/AGENTS.md", text="Use tabs."),
                          wk.InstructionFile(path="/w/p/AGENTS.md", text="Use spaces.")],
            skills=[wk.SkillInfo(name="db", description="Migrations.",
                                 path="/w/p/.codey/skills/db/SKILL.md")],
            environment=wk.Environment(os="Linux", git_branch="main", git_dirty=True,
                                       date="2026-11-22T10:00+01:00", timezone="CET"))
        await h.turn()
        instructions = provider(h).bodies[0]["instructions"]
        assert instructions.index("Use tabs.") < instructions.index("Use spaces.")
        assert "- db: Migrations. (/w/p/.codey/skills/db/SKILL.md)" in instructions
        assert "Git: branch main (uncommitted changes)" in instructions
        assert "Date: 2026-11-22 (CET)" in instructions
        assert h.session.context is not None
        loads = [a for a in h.worker.actions if isinstance(a, wk.LoadContext)]
        await h.prompt("again")
        await h.turn()  # the same context: no new event
        events = await h.engine.log.read(0, limit=1000)
        assert sum(isinstance(e.event, ev.SessionContextUpdated) for e in events) == 1
        assert len([a for a in h.worker.actions if isinstance(a, wk.LoadContext)]) == \
            len(loads) + 1

    run([[TextDelta("ok"), Finished()], [TextDelta("ok"), Finished()]], check,
        executors=["load_context"])


def test_plan_mode_proposes_then_waits_for_approval() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        s = h.session
        assert (s.status, s.plan_status, s.plan_mode) == ("waiting_user", "proposed", True)
        first = provider(h).bodies[0]
        assert "## Plan mode" in first["instructions"]
        assert {t["name"] for t in first["tools"]} == {
            "shell", "read_file", "grep", "glob", "list_dir", "view_image", "update_plan",
            "ask_user", "remember"}
        refused = h.items(ev.ToolCall)[1]
        assert refused.status == "rejected" and "plan mode" in (refused.result or "")
        assert [type(a) for a in h.worker.actions] == [wk.RunCommand]  # only `ls` ran
        envs = decide_approve(h)
        await h.record(envs)
        await h.turn()
        assert (h.session.plan_mode, h.session.plan_status) == (False, "approved")
        assert [p.step for p in h.session.plan] == ["Read", "Fix it well"]
        last = provider(h).bodies[-1]
        assert "## Plan mode" not in last["instructions"]
        assert "apply_patch" in {t["name"] for t in last["tools"]}

    def decide_approve(h: Harness) -> Any:
        from codey_protocol import client as cl
        from codey_server.features import decide
        return decide(h.engine.state, cl.ApprovePlan(session_id=S, steps=["Read", "Fix it well"]),
                      h.engine.context)

    plan = ToolCallRequested("c3", "update_plan", json.dumps(
        {"plan": [{"step": "Read", "status": "pending"}, {"step": "Fix", "status": "pending"}]}))
    write = ToolCallRequested("c2", "write_file", json.dumps({"path": "a", "content": "x"}))
    run([[call("c1", ["ls"]), write, plan, Finished()], [TextDelta("Done."), Finished()]],
        check, plan_mode=True)


# a session's processes between turns ---------------------------------------------------------

def _started(h: Harness, *pids: str) -> Awaitable[None]:
    return h.record([(S, ev.ProcessStarted(process_id=pid, item_id="itm_x", worker_id=W,
                                           argv=["serve"])) for pid in pids])


def test_an_interrupt_stops_the_processes_a_finished_turn_left_running() -> None:
    from codey_protocol import client as cl

    async def check(h: Harness) -> None:
        await h.turn()
        await _started(h, "proc_1")
        await h.engine.execute(cl.Interrupt(session_id=S))
        [p] = (await h.until(lambda s: s.processes[0].status == "ended")).processes
        assert (p.stopped_by, p.signal, p.output) == ("interrupt", 15, "bye\n")
        kills = [a for a in h.worker.actions if isinstance(a, wk.ExecKill)]
        assert [(k.session_id, k.process_id) for k in kills] == [(S, "proc_1")]

    run([[TextDelta("Started."), Finished()]], check)


def test_the_stop_button_kills_the_process_and_records_its_last_output() -> None:
    from codey_protocol import client as cl

    async def check(h: Harness) -> None:
        await h.turn()
        await _started(h, "proc_1", "proc_2")
        await h.engine.execute(cl.StopProcess(session_id=S, process_id="proc_2"))
        s = await h.until(lambda s: s.processes[1].status == "ended")
        assert [(p.status, p.stopped_by) for p in s.processes] == [
            ("running", ""), ("ended", "user")]

    run([[TextDelta("Started."), Finished()]], check)


def test_after_its_worker_reconnects_a_process_it_no_longer_knows_is_gone() -> None:
    async def check(h: Harness) -> None:
        await h.turn()
        await _started(h, "proc_1", "proc_2", "proc_3")
        h.worker.processes = wk.ExecProcesses(processes=[
            wk.ProcessInfo(process_id="proc_2", argv=["serve"], cwd=".", running=True),
            wk.ProcessInfo(process_id="proc_3", argv=["serve"], cwd=".", exit_code=1)])
        await h.record([(None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux",
                                                  worker_version="0"))])
        s = await h.until(lambda s: s.processes[0].status != "running")
        assert [(p.status, p.exit_code) for p in s.processes] == [
            ("gone", None), ("running", None), ("ended", 1)]
        [listing] = [a for a in h.worker.actions if isinstance(a, wk.ExecList)]
        assert listing.session_id == S

    run([[TextDelta("Started."), Finished()]], check)
