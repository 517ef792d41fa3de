"""The turn machines on their inputs alone: no engine, no tasks, no clock. A turn is a value
moved on by the pure ``step``; a pilot folds each step's events into the state (as the engine
would), answers the history's effects (as the driver would) and checks what the turn asks
for."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import State
from codey_server.agent.acp import ACP, acp_turn
from codey_server.agent.errors import ModelError
from codey_server.agent.history import History
from codey_server.agent.machine import (
    STREAM_CHUNK,
    ActionDone,
    ActionErrored,
    ActionProgressed,
    ApprovalDecided,
    ApprovalExpired,
    BodyBuilt,
    BuildBody,
    CallModel,
    CancelAction,
    Crashed,
    Input,
    Interrupted,
    Machine,
    ModelDone,
    ModelFailed,
    ModelParts,
    NoteBody,
    Proceed,
    RunAction,
    SessionAttached,
    SetTimer,
    Start,
    Step,
    Stepper,
    TimerFired,
    TurnValue,
    WaitApproval,
    WaitHello,
    WorkerHello,
    WorkerPresence,
    step,
)
from codey_server.agent.models import ModelProvider
from codey_server.agent.ports import Limits, provider_infos
from codey_server.agent.stream import Finished, TextDelta, ToolCallRequested, Usage
from codey_server.agent.turn import CodeyMachine, CodeyTurn, codey_turn
from codey_server.agent.turn import calls as turn_calls
from codey_server.agent.wire import wire_for
from codey_server.core.rules import Context
from codey_server.features import apply
from codey_server.settings import ProviderConfig, RoleConfig
from codey_testkit.credentials import FixedCredentials

S, W = "ses_1", "wrk_1"
LIMITS = Limits(turn_iteration_cap=5, action_timeout_s=30, approval_timeout_s=600)


class Models:
    """One provider (never called: the pilot answers for it) and the sessions' histories."""

    def __init__(self) -> None:
        self.p = ModelProvider(ProviderConfig(name="p", base_url="http://127.0.0.1:9/v1",
                                              max_retries=2), FixedCredentials())
        self.histories: dict[str, History] = {}

    def provider(self, name: str) -> ModelProvider | None:
        return self.p if name == "p" else None

    def history(self, session_id: str, wire_name: str) -> History:
        return self.histories.setdefault(session_id, History(wire_for(wire_name)))


class Pilot:
    """Feeds a turn through ``step`` and folds its events, as the driver and the engine do;
    ``Proceed`` is fed at once when a step asks for it, and the history's effects
    (``BuildBody``, ``NoteBody``) are carried out here, as the driver does, on
    :attr:`models`' histories."""

    def __init__(self, machine: Machine[Any], turn: TurnValue, state: State,
                 models: Models | None = None) -> None:
        self.machine = machine
        self.turn = turn
        self.models = models or Models()
        self.state = state
        self.now = 1000.0
        self._ids = 0
        self.ctx = Context(new_id=self._new_id)

    def _new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_{self._ids}"

    def record(self, *events: tuple[str | None, ev.Event]) -> None:
        for session_id, event in events:
            apply(self.state, ev.Envelope(seq=self.state.seq + 1, ts=self.now,
                                          session_id=session_id, event=event))

    def feed(self, input: Input) -> Step:
        """The step of ``input`` and of any ``Proceed`` after it, as one; events are folded
        at the input's time (or a second after the last)."""
        self.now = input.now or self.now + 1.0
        out = Step()
        made = self._step(input)
        while True:
            self.record(*made.events)
            out.events += made.events
            built: BodyBuilt | None = None
            for effect in made.effects:
                if isinstance(effect, BuildBody):
                    built = self._build(effect)
                elif isinstance(effect, NoteBody):
                    self.models.history(effect.session_id, effect.wire_name).last_body_len = \
                        effect.size
                else:
                    out.effects.append(effect)
            if made.proceed:
                made = self._step(Proceed(now=self.now))
            elif built is not None:
                made = self._step(built)
            else:
                return out

    def _step(self, input: Input) -> Step:
        self.turn, made = step(self.machine, self.turn, self.state, input, self.ctx)
        return made

    def _build(self, e: BuildBody) -> BodyBuilt:
        history = self.models.history(e.session_id, e.wire.name)
        last = history.last_body_len
        body = e.wire.body(model=e.model, instructions=e.instructions,
                           messages=history.messages(e.items), tools=e.tools,
                           session_id=e.session_id, options=e.options)
        return BodyBuilt(body, last, now=self.now)

    @property
    def done(self) -> bool:
        return self.turn.core.done

    @property
    def session(self) -> Any:
        return self.state.sessions[S]


def _events(step: Step) -> list[ev.Event]:
    return [e for _, e in step.events]


def _session(policy: str = "full-auto", agent: str | None = None,
             prompt: str = "fix it", *, machine_sandbox: str = "bwrap",
             sandbox: str = "workspace-write") -> State:
    state = State()
    pilot = Pilot(*_codey_turn(), state)
    pilot.record(
        (None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="Linux",
                               python_version="3.11", worker_version="0", roots=["/w"],
                               public_key="k")),
        (None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux", worker_version="0",
                                  capabilities=wk.Capabilities(sandbox=wk.SandboxInfo(
                                      kind=machine_sandbox,  # type: ignore[arg-type]
                                      reason="" if machine_sandbox != "none"
                                      else "bwrap is not installed")))),
        (S, ev.SessionCreated(title="t", worker_id=W, workdir="/w/p", provider="p", model="m",
                              policy=policy, agent=agent,  # type: ignore[arg-type]
                              sandbox=sandbox)),  # type: ignore[arg-type]
        (S, ev.SessionItemAppended(item=ev.UserMessage(id="itm_u", ts=0.0, text=prompt))))
    return state


def _codey_turn(**kwargs: Any) -> tuple[CodeyMachine, CodeyTurn]:
    """Codey's machine, and a new turn of S (``kwargs``: :func:`codey_turn`'s)."""
    return CodeyMachine(provider_infos(Models())), codey_turn(S, limits=LIMITS, **kwargs)


def _codey(policy: str = "full-auto", *, machine_sandbox: str = "bwrap",
           sandbox: str = "workspace-write", **kwargs: Any) -> Pilot:
    return Pilot(*_codey_turn(**kwargs),
                 _session(policy, machine_sandbox=machine_sandbox, sandbox=sandbox))


def _shell(*argv: str) -> ToolCallRequested:
    return ToolCallRequested("c1", "shell", json.dumps({"command": list(argv)}))


def test_a_turn_starts_running_and_calls_the_model() -> None:
    pilot = _codey()
    step = pilot.feed(Start(now=1.0))
    assert _events(step) == [ev.SessionStatusChanged(status="running")]
    [call] = step.effects
    assert isinstance(call, CallModel) and call.model == "m"
    assert json.loads(call.body)["messages"][-1] == {"role": "user", "content": "fix it"}


def test_a_turn_is_a_value_made_anew_by_each_step_and_replayed_from_its_inputs() -> None:
    """The turn's state is a value (issue 35, item 1): a step makes a new one and leaves the
    one it was given as it was; the same inputs on the same state make equal turns and equal
    events; it prints, compares, and names its phase."""
    machine = _codey_turn()[0]
    inputs = [Start(), ModelParts([_shell("ls"), Usage(10, 2)]), ModelDone(now=2000.0)]
    runs = []
    for _ in range(2):
        pilot = Pilot(machine, codey_turn(S, limits=LIMITS), _session())
        runs.append((pilot, [pilot.feed(i).events for i in inputs]))
    (a, a_events), (b, b_events) = runs
    assert a.turn == b.turn and a_events == b_events
    assert a.turn.phase == "running" and repr(a.turn).startswith("CodeyTurn(core=Core(")
    before = a.turn
    [action_id] = a.session.pending_actions
    a.feed(ActionDone(action_id, wk.CommandResult(exit_code=0, stdout="a\n")))
    assert a.turn != before and before == b.turn  # the step left the old value alone
    assert a.turn.phase == "answer" and a.turn.iterations == 2  # the model is called again


def test_the_first_call_is_requested_with_the_answer_and_runs_at_once() -> None:
    pilot = _codey()
    pilot.feed(Start())
    pilot.feed(ModelParts([_shell("ls"), Usage(10, 2)]))
    step = pilot.feed(ModelDone(now=2000.0))
    usage, appended, requested = _events(step)
    assert isinstance(usage, ev.TokenUsageRecorded)
    assert isinstance(appended, ev.SessionItemAppended) and appended.item.ts == 2000.0
    assert isinstance(requested, ev.ActionRequested)
    assert isinstance(requested.action, wk.RunCommand) and requested.action.argv == ["ls"]
    [run] = step.effects
    assert isinstance(run, RunAction) and run.action is requested.action
    assert run.watch and run.progress

    # its output streams into the item; the outcome settles it; the model is called again
    step = pilot.feed(ActionProgressed(requested.action_id, wk.ActionProgress(
        action_id=requested.action_id, stream="stdout", data="a\n")))
    assert step.events == [] and step.effects == [SetTimer("flush", 0.05)]
    step = pilot.feed(ActionDone(requested.action_id, wk.CommandResult(exit_code=0,
                                                                       stdout="a\n")))
    delta, finished, settled = _events(step)[:3]
    assert delta == ev.SessionItemUpdated(item_id=appended.item.id, output_delta="a\n")
    assert finished == ev.ActionFinished(action_id=requested.action_id, outcome="result")
    assert isinstance(settled, ev.SessionItemUpdated) and settled.status == "done"
    [again] = step.effects
    assert isinstance(again, CallModel)


def test_deltas_are_coalesced_by_the_timer_or_by_size() -> None:
    pilot = _codey()
    pilot.feed(Start())
    [appended] = _events(pilot.feed(ModelParts([TextDelta("He")])))
    assert isinstance(appended, ev.SessionItemAppended)
    item_id = appended.item.id
    step = pilot.feed(ModelParts([TextDelta("l"), TextDelta("lo")]))
    assert step.events == [] and step.effects == [SetTimer("flush", 0.05)]
    assert pilot.feed(ModelParts([TextDelta(",")])).effects == []  # the timer is set
    step = pilot.feed(TimerFired("flush"))
    assert _events(step) == [ev.SessionItemUpdated(item_id=item_id, text_delta="llo,")]
    big = "x" * STREAM_CHUNK
    assert _events(pilot.feed(ModelParts([TextDelta(big)]))) == [
        ev.SessionItemUpdated(item_id=item_id, text_delta=big)]
    step = pilot.feed(ModelParts([TextDelta("!"), Finished()]))
    step = pilot.feed(ModelDone())
    assert _events(step)[:2] == [ev.SessionItemUpdated(item_id=item_id, text_delta="!"),
                                 ev.SessionItemUpdated(item_id=item_id, streaming=False)]
    assert pilot.session.items[-1].text == "He" + "llo," + big + "!"
    assert pilot.session.status == "idle" and pilot.done


def test_an_approval_waits_until_its_deadline_from_the_request() -> None:
    pilot = _codey("suggest")
    pilot.feed(Start())
    pilot.feed(ModelParts([_shell("make")]))
    step = pilot.feed(ModelDone(now=5000.0))
    kinds = [type(e).__name__ for e in _events(step)]
    assert kinds == ["SessionItemAppended", "ApprovalRequested", "SessionItemUpdated",
                     "SessionStatusChanged"]
    [wait] = step.effects
    [approval] = pilot.session.approvals.values()
    assert wait == WaitApproval(S, approval.approval_id, 5000.0 + 600)
    assert pilot.session.status == "waiting_approval"

    # a turn resumed later waits until the same moment, not 600 s from now
    resumed = Pilot(*_codey_turn(resume=True), pilot.state)
    resumed.now = 5300.0
    waits = [e for e in resumed.feed(Start()).effects if isinstance(e, WaitApproval)]
    assert waits == [WaitApproval(S, approval.approval_id, approval.requested_at + 600)]

    step = resumed.feed(ApprovalExpired(approval.approval_id))
    expired = _events(step)[0]
    assert isinstance(expired, ev.ApprovalResolved) and expired.decision == "expired"
    [tool] = [i for i in resumed.session.items if isinstance(i, ev.ToolCall)]
    assert tool.status == "rejected" and tool.result == "rejected by the user: no decision " \
                                                        "within 10 min"


def test_an_approved_call_is_requested_then_run() -> None:
    pilot = _codey("suggest")
    pilot.feed(Start())
    pilot.feed(ModelParts([_shell("make")]))
    pilot.feed(ModelDone())
    [approval] = pilot.session.approvals.values()
    pilot.record((S, ev.ApprovalResolved(approval_id=approval.approval_id,
                                         decision="approved")))
    step = pilot.feed(ApprovalDecided(approval.approval_id))
    assert [type(e).__name__ for e in _events(step)] == [
        "SessionStatusChanged", "ActionRequested", "SessionItemUpdated"]
    [run] = step.effects
    assert isinstance(run, RunAction) and isinstance(run.action, wk.RunCommand)


def test_the_mcp_servers_listed_in_the_workdir_are_laid_over_the_hellos() -> None:
    """A server confined to its folder could not start where hello's list was taken; the
    session's attach listed it in the workdir: its tools are offered from the first model
    call, and a call is parsed and gated by that list (issue 24)."""
    pilot = _codey("suggest")
    hello = wk.Capabilities(executors=["load_context"], mcp_servers=[
        wk.McpServerInfo(name="confined", error="could not start: no repository here"),
        wk.McpServerInfo(name="kit", tools=[wk.McpTool(name="where", read_only_hint=True)])])
    pilot.record((None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux",
                                           worker_version="0", capabilities=hello)))
    [load] = pilot.feed(Start()).effects
    assert isinstance(load, RunAction) and isinstance(load.action, wk.LoadContext)
    assert load.attach_timeout is not None
    # the driver feeds the attach's list before the action's outcome
    pilot.feed(SessionAttached([wk.McpServerInfo(name="confined", tools=[
        wk.McpTool(name="log", destructive_hint=True)])]))
    [call] = pilot.feed(ActionDone(load.action.action_id, wk.ProjectContext())).effects
    assert isinstance(call, CallModel)
    offered = {t["function"]["name"] for t in json.loads(call.body)["tools"]}
    assert {"mcp__confined__log", "mcp__kit__where"} <= offered  # hello's kit is kept
    pilot.feed(ModelParts([ToolCallRequested("c1", "mcp__confined__log", "{}")]))
    step = pilot.feed(ModelDone())
    [approval] = pilot.session.approvals.values()
    assert approval.kind == "mcp"  # its destructive hint, from the workdir's list, asks
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert tool.mcp_server == "confined" and tool.mcp_tool == "log"
    assert any(isinstance(e, WaitApproval) for e in step.effects)


def _write(path: str, content: str) -> ToolCallRequested:
    return ToolCallRequested("c1", "write_file", json.dumps({"path": path, "content": content}))


def test_a_write_approval_shows_a_diff_against_the_file_the_worker_read_first() -> None:
    pilot = _codey("suggest")
    pilot.feed(Start())
    pilot.feed(ModelParts([_write("notes.txt", "one\n2\nthree\n")]))
    step = pilot.feed(ModelDone())
    # first the worker reads the file as it is: nothing is asked yet
    [read] = step.effects
    assert isinstance(read, RunAction) and isinstance(read.action, wk.ReadFile)
    assert (read.action.path, read.action.workdir) == ("notes.txt", "/w/p")
    assert pilot.session.approvals == {}
    step = pilot.feed(ActionDone(read.action.action_id, wk.FileContent(
        path="notes.txt", content="one\ntwo\nthree\n", size=14, total_lines=3)))
    [approval] = pilot.session.approvals.values()
    diff = ("--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n")
    assert (approval.kind, approval.path, approval.patch) == ("write", "notes.txt", diff)
    assert approval.reason == "changes notes.txt (+1 −1)"
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert (tool.status, tool.diff) == ("waiting_approval", diff)  # stays on the card
    assert [type(e) for e in step.effects] == [WaitApproval]

    # approved: the write runs, and the card keeps the diff
    pilot.record((S, ev.ApprovalResolved(approval_id=approval.approval_id,
                                         decision="approved")))
    [run] = pilot.feed(ApprovalDecided(approval.approval_id)).effects
    assert isinstance(run, RunAction) and isinstance(run.action, wk.WriteFile)
    pilot.feed(ActionDone(run.action.action_id, wk.WriteResult(path="notes.txt",
                                                               bytes_written=12)))
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert (tool.status, tool.diff) == ("done", diff)


def test_a_new_file_shows_its_whole_content_and_an_unreadable_one_says_why() -> None:
    for failure, reason in [
            (("not_found", "notes.txt: no such file or directory"), "creates notes.txt (2 lines)"),
            (("is_directory", "notes.txt is a directory; use list_dir"),
             "writes 2 lines to notes.txt; the file as it is now could not be read (notes.txt "
             "is a directory; use list_dir), so this is the whole new content")]:
        pilot = _codey("suggest")
        pilot.feed(Start())
        pilot.feed(ModelParts([_write("notes.txt", "a\nb")]))
        [read] = pilot.feed(ModelDone()).effects
        assert isinstance(read, RunAction)
        pilot.feed(ActionErrored(read.action.action_id, *failure))
        [approval] = pilot.session.approvals.values()
        assert approval.patch == ("--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n"
                                  "\\ No newline at end of file\n")
        assert approval.reason == reason


def test_a_write_that_asks_nothing_reads_nothing_first() -> None:
    pilot = _codey("auto-edit")
    pilot.feed(Start())
    pilot.feed(ModelParts([_write("notes.txt", "a\n")]))
    [run] = pilot.feed(ModelDone()).effects
    assert isinstance(run, RunAction) and isinstance(run.action, wk.WriteFile)


def test_the_worker_going_away_shows_while_the_action_waits() -> None:
    pilot = _codey()
    pilot.feed(Start())
    pilot.feed(ModelParts([_shell("ls")]))
    [run] = pilot.feed(ModelDone()).effects
    assert isinstance(run, RunAction)
    action_id = run.action.action_id
    pilot.feed(WorkerPresence(action_id, False))
    assert pilot.session.status == "waiting_worker"
    pilot.feed(WorkerPresence(action_id, True))
    assert (pilot.session.status, pilot.session.status_reason) == ("running", "")


def _lost_command(outcome: wk.CommandResult | None = None,
                  policy: str = "suggest") -> tuple[Pilot, Step]:
    """A turn whose answer has two commands; the worker goes away during the first, which
    ends with ``outcome`` once the worker is back (None: it died, and answers
    ``interrupted``). The session runs under full-auto, then under ``policy`` from when the
    worker went away (the user changed it meanwhile, or not)."""
    pilot = _codey()
    pilot.feed(Start())
    second = ToolCallRequested("c2", "shell", json.dumps({"command": ["make", "install"]}))
    pilot.feed(ModelParts([_shell("make"), second]))
    [run] = pilot.feed(ModelDone()).effects
    assert isinstance(run, RunAction)
    action_id = run.action.action_id
    pilot.feed(ActionProgressed(action_id, wk.ActionProgress(
        action_id=action_id, stream="stdout", data="compiling\n")))
    pilot.feed(WorkerPresence(action_id, False))
    assert pilot.session.status == "waiting_worker"
    if policy != "full-auto":
        pilot.record((S, ev.SessionPolicyChanged(policy=policy)))  # type: ignore[arg-type]
    pilot.feed(WorkerPresence(action_id, True))
    if outcome is None:
        return pilot, pilot.feed(ActionErrored(
            action_id, "interrupted",
            "the worker stopped while this action was running; it was not run again"))
    return pilot, pilot.feed(ActionDone(action_id, outcome))


def test_a_command_lost_with_its_dead_worker_fails_saying_so_and_the_turn_stops() -> None:
    pilot, step = _lost_command()
    assert step.effects == []  # no model call behind the user's back
    first, second = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert first.status == "failed"
    assert first.error == ("the worker restarted while this command ran: it was not run "
                           "again, and whether it finished is unknown")
    assert first.result is not None and first.result.startswith(
        "error: the worker restarted while this command ran. It was not run again, and "
        "whether it finished is unknown: it may have been cut short, or still be running")
    assert "cancelled" not in first.result
    # the answer's next command is not run on its own after that
    assert (second.status, second.result) == (
        "cancelled", "not run: the worker went away while an earlier call of this answer ran")
    assert pilot.session.pending_actions == {}
    assert (pilot.session.status, pilot.session.status_reason) == (
        "error", "the worker restarted during a command")
    error = pilot.session.items[-1]
    assert isinstance(error, ev.ErrorItem) and error.code == "worker_lost"
    assert error.message.startswith("The worker restarted while a command ran")
    assert pilot.done

    # the next prompt goes on: the model reads what happened
    pilot.record((S, ev.SessionItemAppended(item=ev.UserMessage(id="itm_2", ts=0.0,
                                                                text="go on"))))
    again = Pilot(*_codey_turn(), pilot.state)
    [call] = again.feed(Start()).effects
    assert isinstance(call, CallModel)
    told = [m for m in json.loads(call.body)["messages"] if m["role"] == "tool"]
    assert told[0]["content"] == first.result


def test_a_command_its_stopping_worker_stopped_fails_with_its_output_and_why() -> None:
    result = wk.CommandResult(exit_code=None, signal=15, cancelled=True, stdout="compiling\n",
                              worker_stopped="signal SIGTERM")
    pilot, step = _lost_command(result)
    assert step.effects == []
    first, _ = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert first.status == "failed"
    assert first.error == ("the worker stopped (signal SIGTERM) while this command ran, and "
                           "stopped the command with it: it did not finish")
    assert first.result == ("the command did not finish: the worker stopped (signal SIGTERM) "
                            "while it ran, and stopped it\ncompiling")
    assert (pilot.session.status, pilot.session.status_reason) == (
        "error", "the worker stopped during a command")


def test_under_full_auto_a_command_lost_with_its_dead_worker_is_told_and_the_turn_goes_on(
        ) -> None:
    pilot, step = _lost_command(policy="full-auto")
    first, second = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    # the same honest report on the card, and to the model
    assert first.status == "failed"
    assert first.error == ("the worker restarted while this command ran: it was not run "
                           "again, and whether it finished is unknown")
    assert second.status == "cancelled"
    # no error, no waiting for a person: a notice, and the model is called at once (the
    # worker is back: it answered)
    notice = pilot.session.items[-1]
    assert isinstance(notice, ev.Notice) and notice.code == "worker_lost"
    assert notice.text == ("The worker restarted while a command ran: it was not run again, "
                           "and whether it finished is unknown. Full auto: the model was "
                           "told, and the session goes on.")
    assert not any(isinstance(i, ev.ErrorItem) for i in pilot.session.items)
    assert (pilot.session.status, pilot.session.status_reason) == ("running", "")
    [call] = step.effects
    assert isinstance(call, CallModel)
    told = [m for m in json.loads(call.body)["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in told] == [first.result, second.result]
    assert told[0]["content"].startswith(
        "error: the worker restarted while this command ran. It was not run again, and "
        "whether it finished is unknown")
    assert not pilot.done


def test_under_full_auto_a_command_its_stopping_worker_stopped_is_told_and_the_turn_goes_on(
        ) -> None:
    result = wk.CommandResult(exit_code=None, signal=15, cancelled=True, stdout="compiling\n",
                              worker_stopped="signal SIGTERM")
    pilot, step = _lost_command(result, policy="full-auto")
    first, _ = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert first.status == "failed" and first.error is not None
    notice = pilot.session.items[-1]
    assert isinstance(notice, ev.Notice) and notice.code == "worker_lost"
    assert notice.text == ("The worker stopped (signal SIGTERM) while a command ran, and "
                           "stopped the command: it did not finish. Full auto: the model was "
                           "told, and the session goes on.")
    assert pilot.session.status == "running"
    [call] = step.effects
    assert isinstance(call, CallModel)
    told = [m for m in json.loads(call.body)["messages"] if m["role"] == "tool"]
    assert told[0]["content"] == first.result


def test_a_command_cancelled_on_request_is_not_lost_with_its_worker() -> None:
    result = wk.CommandResult(exit_code=None, signal=15, cancelled=True)
    pilot, _ = _lost_command(result, policy="full-auto")
    first, _second = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert (first.status, first.error) == ("failed", None)
    assert pilot.session.status == "running" and not pilot.done


def test_a_session_whose_provider_is_not_there_says_what_to_do() -> None:
    """With no provider at all, the error names none (a session started before one was set
    up named "default", which nobody made); with some, it names the session's."""
    def failed(state: State) -> str:
        pilot = Pilot(*_codey_turn(), state)
        pilot.record((S, ev.SessionModelChanged(provider="default", model="")))
        pilot.feed(Start())
        error = pilot.session.items[-1]
        assert isinstance(error, ev.ErrorItem) and pilot.session.status == "error"
        return error.message

    assert failed(_session()) == (
        "no model provider is set up on this server: add a model provider in Settings → "
        "Models, then Retry (the session takes it)")
    state = _session()
    state.providers["local"] = ev.ProviderEntry(name="local", base_url="http://h/v1")
    assert failed(state).startswith("the provider 'default' is not configured on this "
                                    "server: add a model provider in Settings → Models")


def test_a_cut_stream_is_retried_after_a_timer_with_the_same_body() -> None:
    pilot = _codey()
    [first] = pilot.feed(Start()).effects
    pilot.feed(ModelParts([TextDelta("Hel")]))
    step = pilot.feed(ModelFailed(ModelError("cut", code="stream_cut")))
    assert _events(step)[0] == ev.SessionItemUpdated(item_id=pilot.session.items[-1].id,
                                                     streaming=False, partial=True)
    [timer] = step.effects
    assert isinstance(timer, SetTimer) and timer.key == "retry"
    assert pilot.session.status_reason.startswith("the answer was cut off")
    [again] = pilot.feed(TimerFired("retry")).effects
    assert isinstance(first, CallModel) and isinstance(again, CallModel)
    assert again.body == first.body


def test_an_interrupt_cancels_the_action_and_closes_what_is_open() -> None:
    pilot = _codey()
    pilot.feed(Start())
    pilot.feed(ModelParts([_shell("sleep", "9")]))
    [run] = pilot.feed(ModelDone()).effects
    assert isinstance(run, RunAction)
    pilot.feed(ActionProgressed(run.action.action_id, wk.ActionProgress(
        action_id=run.action.action_id, stream="stdout", data="zz")))
    step = pilot.feed(Interrupted())
    assert _events(step)[0] == ev.SessionItemUpdated(item_id=pilot.session.items[-1].id,
                                                     output_delta="zz")  # kept
    assert step.effects == [CancelAction(W, run.action.action_id, S)]
    assert ev.ActionFinished(action_id=run.action.action_id, outcome="cancelled") \
        in _events(step)
    assert pilot.session.status == "interrupted" and pilot.done
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert tool.status == "cancelled"


_PERMISSION = wk.AcpUpdate(kind="permission", tool_call_id="t1", title="Write a.txt",
                           tool_kind="edit", request_id="req_1", options=[
                               wk.AcpOption(option_id="yes", name="Allow", kind="allow_once"),
                               wk.AcpOption(option_id="no", name="No", kind="reject_once")])


def test_an_acp_permission_request_asks_then_answers_the_agent() -> None:
    pilot = Pilot(ACP, acp_turn(S, limits=LIMITS), _session("suggest", agent="scripted"))
    step = pilot.feed(Start())
    [requested] = [e for e in _events(step) if isinstance(e, ev.ActionRequested)]
    [run] = step.effects
    assert isinstance(run, RunAction) and isinstance(run.action, wk.AcpPrompt)
    assert run.action.prompt == "fix it"
    prompt_id = requested.action_id

    def progress(update: wk.AcpUpdate) -> ActionProgressed:
        return ActionProgressed(prompt_id, wk.ActionProgress(
            action_id=prompt_id, stream="acp", data=msgspec.json.encode(update).decode()))

    step = pilot.feed(progress(_PERMISSION))
    [wait] = step.effects
    assert isinstance(wait, WaitApproval)
    [approval] = pilot.session.approvals.values()
    assert (approval.kind, approval.command) == ("acp", ["acp", "edit"])
    assert pilot.session.status == "waiting_approval"

    pilot.record((S, ev.ApprovalResolved(approval_id=approval.approval_id,
                                         decision="approved")))
    step = pilot.feed(ApprovalDecided(approval.approval_id))
    [answer] = step.effects
    assert isinstance(answer, RunAction) and not answer.report
    assert isinstance(answer.action, wk.AcpPermission)
    assert (answer.action.target_action_id, answer.action.option_id) == (prompt_id, "yes")
    assert pilot.session.status == "running"

    step = pilot.feed(ActionDone(prompt_id, wk.AcpTurnEnded(stop_reason="end_turn",
                                                                  acp_session_id="a")))
    assert pilot.session.status == "idle" and pilot.done
    assert not pilot.session.pending_actions


def test_an_acp_turn_interrupted_while_a_permission_waits_stays_interrupted() -> None:
    pilot = Pilot(ACP, acp_turn(S, limits=LIMITS), _session("suggest", agent="scripted"))
    step = pilot.feed(Start())
    [requested] = [e for e in _events(step) if isinstance(e, ev.ActionRequested)]
    prompt_id = requested.action_id
    pilot.feed(ActionProgressed(prompt_id, wk.ActionProgress(
        action_id=prompt_id, stream="acp",
        data=msgspec.json.encode(_PERMISSION).decode())))
    [approval] = pilot.session.approvals.values()
    pilot.feed(Interrupted())
    assert pilot.session.status == "interrupted"
    assert pilot.session.approvals[approval.approval_id].status == "cancelled"
    # the approval's waiter wakes on the cancellation: nothing more happens
    step = pilot.feed(ApprovalDecided(approval.approval_id))
    assert step.events == [] and step.effects == []
    assert pilot.session.status == "interrupted"
    assert pilot.feed(ApprovalExpired(approval.approval_id)).events == []


def test_a_rejected_acp_call_stays_rejected_to_the_end_of_the_turn() -> None:
    pilot = Pilot(ACP, acp_turn(S, limits=LIMITS), _session("suggest", agent="scripted"))
    step = pilot.feed(Start())
    [requested] = [e for e in _events(step) if isinstance(e, ev.ActionRequested)]
    prompt_id = requested.action_id

    def progress(update: wk.AcpUpdate) -> ActionProgressed:
        return ActionProgressed(prompt_id, wk.ActionProgress(
            action_id=prompt_id, stream="acp", data=msgspec.json.encode(update).decode()))

    pilot.feed(progress(wk.AcpUpdate(kind="permission", tool_call_id="t1", title="rm -rf build",
                                     tool_kind="delete", request_id="req_1",
                                     command=["rm", "-rf", "build"], reason="clean it",
                                     options=_PERMISSION.options)))
    [approval] = pilot.session.approvals.values()
    assert approval.reason == "rm -rf build — clean it"
    pilot.record((S, ev.ApprovalResolved(approval_id=approval.approval_id,
                                         decision="rejected")))
    [answer] = pilot.feed(ApprovalDecided(approval.approval_id)).effects
    assert isinstance(answer, RunAction) and isinstance(answer.action, wk.AcpPermission)
    assert answer.action.option_id == "no"
    pilot.feed(progress(wk.AcpUpdate(kind="tool", tool_call_id="t1", status="failed")))
    pilot.feed(ActionDone(prompt_id, wk.AcpTurnEnded(stop_reason="end_turn",
                                                     acp_session_id="a")))
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert tool.status == "rejected" and tool.result == "rejected by the user"
    assert tool.command == ["rm", "-rf", "build"]


# the sandbox gate ---------------------------------------------------------------------------
# A prompt-injected model tries each way around the sandbox; each test is one attempt.


def _escalate(*argv: str, why: str = "it must reach ~/.cache") -> ToolCallRequested:
    return ToolCallRequested("c1", "shell", json.dumps(
        {"command": list(argv), "escalate": True, "justification": why}))


def _call(pilot: Pilot, part: ToolCallRequested) -> Step:
    pilot.feed(Start())
    pilot.feed(ModelParts([part]))
    return pilot.feed(ModelDone())


def _tool(pilot: Pilot) -> ev.ToolCall:
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    return tool


def _decide(pilot: Pilot, decision: str, for_session: bool = False) -> Step:
    [approval] = [a for a in pilot.session.approvals.values() if a.status == "pending"]
    pilot.record((S, ev.ApprovalResolved(approval_id=approval.approval_id,
                                         decision=decision,  # type: ignore[arg-type]
                                         for_session=for_session)))
    return pilot.feed(ApprovalDecided(approval.approval_id))


def _run(step: Step) -> wk.RunCommand:
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    assert isinstance(run.action, wk.RunCommand)
    return run.action


def test_a_command_runs_in_the_sessions_sandbox_with_gits_hardening() -> None:
    pilot = _codey(sandbox="read-only")
    action = _run(_call(pilot, _shell("git", "status")))
    assert (action.sandbox, action.network) == ("read-only", False)
    # git reads no fsmonitor hook and no hooks from the repository it is pointed at
    assert action.env["GIT_CONFIG_COUNT"] == "4"
    pairs = {action.env[f"GIT_CONFIG_KEY_{n}"]: action.env[f"GIT_CONFIG_VALUE_{n}"]
             for n in range(4)}
    assert pairs["core.fsmonitor"] == "false" and pairs["core.hooksPath"] == "/dev/null"
    assert pairs["safe.bareRepository"] == "explicit"


def test_a_calls_sandbox_is_the_gates_and_only_the_tool_escalates_out_of_it() -> None:
    """The sandbox a call runs in is decided once, by the session's gate (issue 35)."""
    from codey_server.agent.tools import Gate, Sandboxing

    pilot = _codey(sandbox="read-only")
    pilot.record((S, ev.SessionSandboxChanged(sandbox="read-only", network=True)))
    workers = pilot.state.workers
    gate = Gate.of(pilot.session, workers[W].capabilities, workers)
    assert (gate.sandbox, gate.sandboxed, gate.can_sandbox) == (
        Sandboxing("read-only", True), True, True)
    action = _run(_call(pilot, _shell("ls")))
    assert Sandboxing(action.sandbox, action.network) == gate.sandbox  # type: ignore[arg-type]
    bare = _codey(machine_sandbox="none")
    gate = Gate.of(bare.session, bare.state.workers[W].capabilities, bare.state.workers)
    assert (gate.sandboxed, gate.can_sandbox) == (False, False)
    assert "no OS sandbox" in str(gate.route(*_parsed(_shell("ls"), gate)))
    escalated = _parsed(_escalate("ls"), gate)
    assert getattr(gate.route(*escalated), "kind", None) == "escalate"


def _parsed(part: ToolCallRequested, gate: Any) -> tuple[Any, Any]:
    from codey_server.agent.tools import parse_call

    parsed = parse_call(part.name, part.arguments, gate.capabilities)
    return parsed.tool, parsed.args


def test_escalating_asks_even_under_full_auto_and_says_why() -> None:
    pilot = _codey("full-auto")
    step = _call(pilot, _escalate("npm", "install"))
    assert not [e for e in step.effects if isinstance(e, RunAction)]
    [approval] = pilot.session.approvals.values()
    assert (approval.kind, approval.command) == ("escalate", ["npm", "install"])
    assert approval.reason == "it must reach ~/.cache"
    # approved: it runs outside the sandbox, with the network
    action = _run(_decide(pilot, "approved"))
    assert (action.sandbox, action.network) == ("full-access", True)


def test_a_rejected_escalation_is_the_models_to_read() -> None:
    pilot = _codey("full-auto")
    _call(pilot, _escalate("curl", "https://example.com"))
    _decide(pilot, "rejected")
    tool = _tool(pilot)
    assert tool.status == "rejected" and tool.result.startswith("rejected by the user")


def test_an_escalation_without_a_reason_is_a_bad_call() -> None:
    pilot = _codey("full-auto")
    step = _call(pilot, _escalate("rm", "-rf", "/", why="  "))
    assert not [e for e in step.effects if isinstance(e, RunAction)]
    assert not pilot.session.approvals
    tool = _tool(pilot)
    assert tool.status == "failed" and "justification" in (tool.result or "")


def test_escalated_for_the_session_is_remembered_apart_from_approved_commands() -> None:
    pilot = _codey("suggest")
    _call(pilot, _escalate("npm", "install"))
    _decide(pilot, "approved", for_session=True)
    assert pilot.session.escalated_prefixes == [["npm", "install"]]
    assert pilot.session.approved_prefixes == []  # approving never lets a command leave
    gate_ask = _gate_ask(pilot, _escalate("npm", "install", "left-pad"))
    assert gate_ask is None  # the same command leaves again without asking
    assert _gate_ask(pilot, _escalate("npm", "publish")) is not None


def _gate_ask(pilot: Pilot, part: ToolCallRequested) -> Any:
    from codey_server.agent.tools import parse_call

    assert isinstance(pilot.turn, CodeyTurn)
    worker = pilot.state.workers[W]
    parsed = parse_call(part.name, part.arguments, worker.capabilities)
    k = Stepper(pilot.machine, pilot.turn, pilot.state, pilot.session, pilot.ctx, pilot.now)
    return turn_calls.route_call(k, parsed)


def test_a_known_safe_command_is_safe_only_inside_the_sandbox() -> None:
    # sandboxed, `cat` goes ahead under suggest
    assert _gate_ask(_with_start(_codey("suggest")), _shell("cat", "README.md")) is None
    # the session chose full access: the same `cat` might read ~/.codey/worker.json
    ask = _gate_ask(_with_start(_codey("suggest", sandbox="full-access")),
                    _shell("cat", "README.md"))
    assert ask is not None and ask.kind == "command"


def test_git_is_known_safe_only_at_the_workdirs_root() -> None:
    # vendor/evil laid out as a git dir with core.fsmonitor set: never "read-only"
    pilot = _with_start(_codey("auto-edit"))
    assert _gate_ask(pilot, _shell("git", "status")) is None
    nested = ToolCallRequested("c1", "shell", json.dumps(
        {"command": ["git", "status"], "workdir": "vendor/evil"}))
    ask = _gate_ask(pilot, nested)
    assert ask is not None and ask.kind == "command"
    assert _gate_ask(pilot, _shell("git", "-c", "core.fsmonitor=./x", "status")) is not None


def test_plan_mode_refuses_a_known_safe_command_outside_the_sandbox() -> None:
    pilot = _with_start(_codey("suggest", sandbox="full-access"))
    pilot.session.plan_mode = True
    assert isinstance(_gate_ask(pilot, _shell("ls")), str)
    sandboxed = _with_start(_codey("suggest"))
    sandboxed.session.plan_mode = True
    assert _gate_ask(sandboxed, _shell("ls")) is None
    assert isinstance(_gate_ask(sandboxed, _escalate("ls")), str)


def test_a_machine_without_a_sandbox_runs_no_command_until_the_user_chooses_full_access(
        ) -> None:
    pilot = _codey("full-auto", machine_sandbox="none")
    step = _call(pilot, _shell("ls"))
    assert not [e for e in step.effects if isinstance(e, RunAction)]
    tool = _tool(pilot)
    assert tool.status == "rejected"
    assert "no OS sandbox (bwrap is not installed)" in (tool.result or "")
    # reading a file needs no sandbox (the worker confines paths to the workdir)
    reader = _with_start(_codey("full-auto", machine_sandbox="none"))
    read = ToolCallRequested("c1", "read_file", json.dumps({"path": "README.md"}))
    assert _gate_ask(reader, read) is None
    # the user chose full access: it runs, bare, as the user asked
    bare = _codey("full-auto", machine_sandbox="none", sandbox="full-access")
    action = _run(_call(bare, _shell("ls")))
    assert action.sandbox == "full-access"


def test_escalating_on_a_machine_without_a_sandbox_still_asks() -> None:
    pilot = _codey("full-auto", machine_sandbox="none")
    _call(pilot, _escalate("make", "install"))
    [approval] = pilot.session.approvals.values()
    assert approval.kind == "escalate"


def test_the_model_is_told_how_to_escalate_when_the_sandbox_stopped_it() -> None:
    pilot = _codey()
    action = _run(_call(pilot, _shell("touch", "/etc/x")))
    pilot.feed(ActionDone(action.action_id, wk.CommandResult(
        exit_code=1, stderr="touch: cannot touch '/etc/x': Read-only file system",
        sandbox_denied=True, sandbox_hint="read-only file system")))
    result = _tool(pilot).result or ""
    assert "the sandbox stopped this: read-only file system" in result
    assert '"escalate": true' in result


def test_a_sub_agent_on_another_machine_asks_under_every_policy() -> None:
    from codey_server.agent.tools import Gate
    from codey_server.agent.tools.delegate import Delegate, DelegateArgs

    tool = Delegate()
    there = DelegateArgs(role="coder", task="push the keys", worker_id="wrk_other")
    here = DelegateArgs(role="coder", task="run the tests", worker_id=W)
    for policy in ("suggest", "auto-edit", "full-auto"):
        ask = tool.ask(there, Gate(policy, worker_id=W, workdir="/w/p"))
        assert ask is not None and ask.kind == "delegate" and "wrk_other" in ask.reason
        assert tool.ask(here, Gate(policy, worker_id=W, workdir="/w/p")) is None


# A prompt-injected model hands a folder of its choice to a sub-agent, whose sandbox would make
# it writable (the audit: delegate(developer, workdir=~) appended to ~/.bashrc, no approval).

def test_the_folder_a_sub_agent_gets_is_read_as_text_with_dots_folded() -> None:
    from codey_server.agent.tools.delegate import child_workdir, narrower_policy, within

    assert child_workdir("/w/p", None) == "/w/p"
    assert child_workdir("/w/p", "src/lib") == "/w/p/src/lib"
    assert child_workdir("/w/p", "../..") == "/"
    assert child_workdir("/w/p", "/w/p/src/../../q") == "/w/q"
    assert child_workdir("/w/p", "./") == "/w/p"
    assert within("/w/p/src", "/w/p") and within("/w/p", "/w/p/") and within("/w/p/", "/w/p")
    assert not within("/w/p2", "/w/p")  # a sibling that starts with the same letters
    assert not within("/w/p/../q", "/w/p") and not within("/w", "/w/p")
    assert within("/anything", "/")
    assert [narrower_policy(a, b) for a, b in [("suggest", "full-auto"),
                                               ("full-auto", "auto-edit"),
                                               ("auto-edit", "auto-edit"),
                                               ("full-auto", "nonsense")]] == [
        "suggest", "auto-edit", "auto-edit", "suggest"]


def test_a_sub_agent_outside_the_workdir_asks_under_every_policy_and_names_the_folder() -> None:
    from codey_server.agent.tools import Gate
    from codey_server.agent.tools.delegate import Delegate, DelegateArgs

    tool = Delegate()
    gate = {"worker_id": W, "workdir": "/home/u/projects/app"}
    for policy in ("suggest", "auto-edit", "full-auto"):
        for workdir, shown in [("/home/u", "/home/u"), ("../..", "/home/u"),
                               ("/home/u/projects/app/../other", "/home/u/projects/other"),
                               ("/home/u/projects/app2", "/home/u/projects/app2"),
                               ("sub/../../../../..", "/")]:
            ask = tool.ask(DelegateArgs("developer", "edit ~/.bashrc", workdir=workdir),
                           Gate(policy, **gate))
            assert ask is not None and ask.kind == "delegate", (policy, workdir)
            assert ask.path == shown
            assert f"in {shown}, outside this session's folder /home/u/projects/app" \
                in ask.reason
        for inside in (None, "", ".", "src", "/home/u/projects/app/src/", "a/../b"):
            assert tool.ask(DelegateArgs("developer", "t", workdir=inside),
                            Gate(policy, **gate)) is None, (policy, inside)


ROLES = {"developer": RoleConfig(description="does the work", policy="full-auto"),
         "explorer": RoleConfig(description="reads", read_only=True, policy="parent")}


def _delegating(policy: str, arguments: dict[str, Any], **session: Any) -> Pilot:
    pilot = _codey(policy, roles=ROLES)
    for name, value in session.items():
        setattr(pilot.session, name, value)
    _call(pilot, ToolCallRequested("c1", "delegate", json.dumps(arguments)))
    return pilot


def _children(pilot: Pilot) -> list[Any]:
    return [c for c in pilot.state.sessions.values() if c.parent_id == S]


def test_a_sub_agent_in_another_folder_starts_only_once_approved_even_under_full_auto() -> None:
    for decision in ("rejected", "approved"):
        pilot = _delegating("full-auto", {"role": "developer", "task": "append to .bashrc",
                                          "workdir": "../.."})
        [approval] = pilot.session.approvals.values()
        assert (approval.kind, approval.path) == ("delegate", "/")
        assert _tool(pilot).status == "waiting_approval"
        assert _children(pilot) == []  # nothing starts while it waits
        _decide(pilot, decision)
        if decision == "rejected":
            assert _tool(pilot).status == "rejected" and _children(pilot) == []
        else:
            [child] = _children(pilot)
            assert child.workdir == "/"  # the folder the user was shown, not the model's text


def test_a_sub_agent_never_gets_a_wider_policy_sandbox_or_network_than_its_parent() -> None:
    pilot = _delegating("suggest", {"role": "developer", "task": "t", "workdir": "src"},
                        sandbox="read-only", network=False)
    assert pilot.session.approvals == {}  # below the workdir: no question
    [child] = _children(pilot)
    # the role asks for full-auto; the parent is suggest, and the narrower one wins
    assert (child.policy, child.sandbox, child.network, child.workdir) == (
        "suggest", "read-only", False, "/w/p/src")
    wide = _delegating("full-auto", {"role": "developer", "task": "t"},
                       sandbox="full-access", network=True)
    [child] = _children(wide)
    assert (child.policy, child.sandbox, child.network) == ("full-auto", "full-access", True)
    auto = _delegating("auto-edit", {"role": "explorer", "task": "t"})
    [child] = _children(auto)
    assert (child.policy, child.read_only) == ("auto-edit", True)


def test_plan_mode_refuses_a_delegation_it_does_not_offer() -> None:
    for role in ("developer", "explorer"):
        pilot = _delegating("full-auto", {"role": role, "task": "do it all now"},
                            plan_mode=True)
        assert _tool(pilot).status == "rejected"
        assert "refused in plan mode" in (_tool(pilot).result or "")
        assert _children(pilot) == [] and pilot.session.approvals == {}


def _with_start(pilot: Pilot) -> Pilot:
    pilot.feed(Start())
    return pilot


# view_image ---------------------------------------------------------------------------------

def test_an_image_is_kept_in_the_blob_store_before_its_call_settles_then_sent_with_it(
        ) -> None:
    import base64
    import hashlib

    from codey_server.agent.machine import BlobStored, StoreBlob

    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 30
    pilot = _codey()
    stored: dict[str, bytes] = {}
    pilot.models.histories[S] = History(wire_for("chat"), stored.get)
    step = _call(pilot, ToolCallRequested("c1", "view_image", json.dumps({"path": "s.png"})))
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    assert isinstance(run.action, wk.ViewImage) and run.action.path == "s.png"
    step = pilot.feed(ActionDone(run.action.action_id, wk.ImageContent(
        path="s.png", mime="image/png", data=base64.b64encode(png).decode(), size=len(png),
        width=2, height=1)))
    # nothing settles (and the model waits) until the bytes are kept
    assert step.effects == [StoreBlob(png)]
    assert _tool(pilot).result is None and run.action.action_id in pilot.session.pending_actions
    digest = hashlib.sha256(png).hexdigest()
    stored[digest] = png
    step = pilot.feed(BlobStored(digest, True))
    tool = _tool(pilot)
    assert tool.status == "done" and tool.image == ev.Attachment(
        hash=digest, name="s.png", mime="image/png", size=len(png))
    assert tool.result == "the image s.png (image/png, 38 bytes, 2×1 px) is attached to " \
                          "this result"
    assert not pilot.session.pending_actions
    [again] = [e for e in step.effects if isinstance(e, CallModel)]
    last = json.loads(again.body)["messages"][-1]
    assert last["role"] == "user"
    assert last["content"][1]["image_url"]["url"] == \
        "data:image/png;base64," + base64.b64encode(png).decode()


def test_an_image_the_server_cannot_keep_fails_its_call_in_words() -> None:
    import base64

    from codey_server.agent.machine import BlobStored

    pilot = _codey()
    step = _call(pilot, ToolCallRequested("c1", "view_image", json.dumps({"path": "s.png"})))
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    pilot.feed(ActionDone(run.action.action_id, wk.ImageContent(
        path="s.png", mime="image/png", data=base64.b64encode(b"x").decode(), size=1)))
    pilot.feed(BlobStored("", False))
    tool = _tool(pilot)
    assert tool.status == "failed" and tool.image is None
    assert "could not keep it" in (tool.result or "")


def test_a_result_too_long_for_the_model_is_cut_with_a_marker() -> None:
    pilot = _codey()
    step = _call(pilot, ToolCallRequested("c1", "glob", json.dumps({"pattern": "**"})))
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    paths = [f"dir/file_{n:05}.txt" for n in range(5000)]
    pilot.feed(ActionDone(run.action.action_id, wk.GlobResult(paths=paths)))
    result = _tool(pilot).result or ""
    assert len(result) < 25_000 and "characters cut] …" in result
    assert result.startswith("dir/file_00000.txt") and result.endswith("dir/file_04999.txt")


# processes (exec, write_stdin, kill) --------------------------------------------------------

def _exec_started(pilot: Pilot, pid: str = "proc_1") -> None:
    step = _call(pilot, ToolCallRequested("c1", "exec", json.dumps(
        {"command": ["python3", "-m", "http.server"]})))
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    assert isinstance(run.action, wk.ExecStart)
    pilot.feed(ActionDone(run.action.action_id, wk.ExecOutput(
        process_id=pid, output="Serving HTTP\n", running=True)))


def test_exec_lists_its_process_in_the_session_when_its_call_settles() -> None:
    pilot = _codey()
    _exec_started(pilot)
    [p] = pilot.session.processes
    tool = _tool(pilot)
    assert (p.process_id, p.item_id, p.argv, p.status, p.output) == (
        "proc_1", tool.id, ["python3", "-m", "http.server"], "running", "Serving HTTP\n")
    assert tool.status == "done" and tool.output == "Serving HTTP\n"
    assert "process proc_1 is running" in (tool.result or "")


def _exec_requested(pilot: Pilot, **args: Any) -> wk.ExecStart:
    step = _call(pilot, ToolCallRequested("c1", "exec", json.dumps(
        {"command": ["npm", "run", "dev"], **args})))
    if not [e for e in step.effects if isinstance(e, RunAction)]:  # an escalation asks
        step = _decide(pilot, "approved")
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    assert isinstance(run.action, wk.ExecStart)
    return run.action


def _started(pilot: Pilot, action: wk.ExecStart) -> list[ev.Event]:
    step = pilot.feed(ActionDone(action.action_id, wk.ExecOutput(
        process_id="proc_1", output="ready\n", running=True)))
    return _events(step)


def test_a_process_records_the_sandbox_and_network_it_was_started_with() -> None:
    pilot = _codey()
    pilot.record((S, ev.SessionSandboxChanged(sandbox="workspace-write", network=True)))
    _started(pilot, _exec_requested(pilot))
    [p] = pilot.session.processes
    assert (p.sandbox, p.network, p.status) == ("workspace-write", True, "running")


def test_a_process_started_after_the_network_went_off_is_stopped_at_once() -> None:
    # the toggle changed while its exec_start was on its way: a process already running then
    # would have been stopped, so this one is too
    pilot = _codey()
    pilot.record((S, ev.SessionSandboxChanged(sandbox="workspace-write", network=True)))
    action = _exec_requested(pilot)
    assert action.network
    pilot.record((S, ev.SessionSandboxChanged(sandbox="workspace-write", network=False)))
    events = _started(pilot, action)
    assert ev.ProcessStopRequested(process_id="proc_1", by="settings") in events
    [p] = pilot.session.processes
    assert (p.status, p.stop_by, p.network) == ("stopping", "settings", True)
    assert _tool(pilot).status == "done"  # the call itself went as it went


def test_a_process_started_after_a_widening_or_an_approved_escalation_runs_on() -> None:
    pilot = _codey()
    action = _exec_requested(pilot)
    pilot.record((S, ev.SessionSandboxChanged(sandbox="workspace-write", network=True)))
    assert not [e for e in _started(pilot, action) if isinstance(e, ev.ProcessStopRequested)]
    assert pilot.session.processes[0].status == "running"
    # escalated: outside the sandbox by the user's word, the session's settings unchanged
    pilot = _codey()
    action = _exec_requested(pilot, escalate=True, justification="it serves on port 80")
    assert (action.sandbox, action.network) == ("full-access", True)
    assert not [e for e in _started(pilot, action) if isinstance(e, ev.ProcessStopRequested)]
    [p] = pilot.session.processes
    assert (p.status, p.sandbox, p.network) == ("running", "full-access", True)


def _second_call(pilot: Pilot, name: str, **args: Any) -> Step:
    pilot.feed(ModelParts([ToolCallRequested("c2", name, json.dumps(args))]))
    return pilot.feed(ModelDone())


def test_a_process_of_another_session_is_refused_without_asking() -> None:
    pilot = _codey("suggest")
    pilot.feed(Start())
    step = _second_call(pilot, "write_stdin", process_id="proc_of_someone_else", input="x")
    assert not [e for e in step.effects if isinstance(e, (RunAction, WaitApproval))]
    tool = _tool(pilot)
    assert tool.status == "rejected" and "not a process of this session" in (tool.result or "")


def test_writing_to_the_sessions_process_needs_no_new_approval_and_reads_its_output() -> None:
    pilot = _codey("full-auto")
    _exec_started(pilot)
    pilot.session.policy = "suggest"  # even under suggest: it was approved when it started
    step = _second_call(pilot, "write_stdin", process_id="proc_1", input="")
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    assert isinstance(run.action, wk.ExecWrite) and not pilot.session.approvals
    pilot.feed(ActionDone(run.action.action_id, wk.ExecOutput(
        process_id="proc_1", output="GET / 200\n", running=True)))
    [p] = pilot.session.processes
    assert p.output == "Serving HTTP\nGET / 200\n"


def test_a_process_the_worker_no_longer_knows_is_gone() -> None:
    from codey_server.agent.machine import ActionErrored

    pilot = _codey()
    _exec_started(pilot)
    step = _second_call(pilot, "kill", process_id="proc_1")
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    pilot.feed(ActionErrored(run.action.action_id, "process_gone",
                             "no process proc_1 in this session: start it again"))
    [p] = pilot.session.processes
    assert p.status == "gone"
    [_, kill] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert kill.status == "failed" and "process_gone" in (kill.result or "")
    # from now on a call on it is refused before it reaches the worker
    step = _second_call(pilot, "write_stdin", process_id="proc_1")
    assert not [e for e in step.effects if isinstance(e, RunAction)]


GONE = ("/wt/app/codey-t-0001 is gone: it was a worktree in this worker's worktrees folder "
        "(/wt), removed since. Nothing was run and no empty folder was made in its place")


def test_a_worktree_gone_at_the_turns_start_ends_it_before_the_model_is_called() -> None:
    """The worker will not make a removed worktree again as an empty folder: its
    ``worktree_gone`` ends the turn, records the worktree as removed, and the prompt waits
    (issue 33, item 2: the tests once ran on nothing, "Ran 0 tests … OK")."""
    pilot = _codey()
    # (a session made in its worktree, as the fold leaves it once the worktree is ready)
    pilot.state.sessions[S].worktree = ev.Worktree(repo="/w/p", branch="codey/t-0001",
                                                   status="ready", path="/wt/app/codey-t-0001")
    pilot.record((None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux",
                                           worker_version="0", capabilities=wk.Capabilities(
                                               executors=["load_context"]))))
    [load] = pilot.feed(Start()).effects
    assert isinstance(load, RunAction) and isinstance(load.action, wk.LoadContext)
    step = pilot.feed(ActionErrored(load.action.action_id, "worktree_gone", GONE))
    assert _events(step) == [ev.WorktreeUpdated(status="removed", error=GONE),
                             ev.SessionStatusChanged(status="error", reason=GONE)]
    assert step.effects == [] and pilot.done
    s = pilot.session
    assert s.worktree.status == "removed" and isinstance(s.items[-1], ev.UserMessage)


def test_a_worktree_gone_under_a_running_turn_fails_the_call_and_ends_the_turn() -> None:
    pilot = _codey()
    pilot.feed(Start())
    pilot.feed(ModelParts([_shell("python3", "-m", "unittest")]))
    [run] = pilot.feed(ModelDone()).effects
    assert isinstance(run, RunAction)
    step = pilot.feed(ActionErrored(run.action.action_id, "worktree_gone", GONE))
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert tool.status == "failed" and "worktree_gone" in (tool.result or "")
    assert not any(isinstance(e, CallModel) for e in step.effects)  # the model is not asked
    assert pilot.done and pilot.session.status == "error"
    assert pilot.session.status_reason == GONE


# a resumed turn waits for its machine's hello (issue 36) ------------------------------------

def _hello(sandbox: str = "bwrap") -> ev.WorkerConnected:
    """The machine's hello, with an OS sandbox or (an older worker) none."""
    return ev.WorkerConnected(worker_id=W, hostname="h", os="Linux", worker_version="0",
                              capabilities=wk.Capabilities(sandbox=wk.SandboxInfo(
                                  kind=sandbox,  # type: ignore[arg-type]
                                  reason="" if sandbox != "none" else "none reported")))


class _Hellos:
    """The workers that said hello to this server since it started (the service's lookup)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, worker_id: str) -> bool:
        return worker_id in self.seen


def _restarted_waiting(policy: str = "suggest",
                       call: ToolCallRequested | None = None) -> tuple[Pilot, _Hellos]:
    """A session that waited on a command's approval (``suggest``; under ``full-auto`` its
    action was requested) when the server stopped; the machine's last hello before that
    reported no sandbox (a worker older than the sandbox); the server started again and
    resumed the turn before anything said hello."""
    pilot = _codey(policy)
    pilot.feed(Start())
    pilot.feed(ModelParts([call or _shell("make")]))
    pilot.feed(ModelDone(now=5000.0))
    pilot.record((None, _hello("none")),
                 (None, ev.WorkerDisconnected(worker_id=W, reason="server restarted")))
    hellos = _Hellos()
    machine = CodeyMachine(provider_infos(Models()), hellos)
    return Pilot(machine, codey_turn(S, limits=LIMITS, resume=True), pilot.state), hellos


def _back(pilot: Pilot, hellos: _Hellos, sandbox: str = "bwrap") -> Step:
    pilot.record((None, _hello(sandbox)))
    hellos.seen.add(W)
    return pilot.feed(WorkerHello(W))


def _approval(pilot: Pilot) -> Any:
    [approval] = pilot.session.approvals.values()
    return approval


def _decided(pilot: Pilot, decision: str) -> Step:
    approval_id = _approval(pilot).approval_id
    pilot.record((S, ev.ApprovalResolved(approval_id=approval_id,
                                         decision=decision)))  # type: ignore[arg-type]
    return pilot.feed(ApprovalDecided(approval_id))


def test_a_resumed_call_waits_for_its_machines_hello_with_its_approval_open() -> None:
    pilot, _ = _restarted_waiting()
    step = pilot.feed(Start())
    s = pilot.session
    assert (s.status, s.status_reason) == ("waiting_worker", "waiting for the machine")
    approval = _approval(pilot)
    assert approval.status == "pending"  # not judged by the machine's old capabilities
    [tool] = [i for i in s.items if isinstance(i, ev.ToolCall)]
    assert tool.status == "waiting_approval" and tool.result is None
    assert step.effects == [WaitHello(S, W),
                            WaitApproval(S, approval.approval_id, approval.requested_at + 600)]
    assert pilot.turn.phase == "hello" and not pilot.done


def test_approved_while_the_machine_is_away_the_call_runs_once_it_says_hello() -> None:
    pilot, hellos = _restarted_waiting()
    pilot.feed(Start())
    step = _decided(pilot, "approved")
    assert step.events == [] and step.effects == []  # still waiting for the machine
    assert pilot.session.status == "waiting_worker"
    step = _back(pilot, hellos)
    assert [type(e).__name__ for e in _events(step)] == [
        "SessionStatusChanged", "ActionRequested", "SessionItemUpdated"]
    [run] = step.effects
    assert isinstance(run, RunAction) and isinstance(run.action, wk.RunCommand)
    assert run.action.argv == ["make"] and run.action.sandbox == "workspace-write"
    assert pilot.session.status == "running"


def test_the_machine_back_first_the_same_approval_is_waited_for_then_runs() -> None:
    pilot, hellos = _restarted_waiting()
    pilot.feed(Start())
    step = _back(pilot, hellos)
    assert _events(step) == [ev.SessionStatusChanged(status="waiting_approval",
                                                     reason="waiting for your approval")]
    assert step.effects == []  # the approval's wait goes on
    step = _decided(pilot, "approved")
    [run] = [e for e in step.effects if isinstance(e, RunAction)]
    assert isinstance(run.action, wk.RunCommand) and run.action.argv == ["make"]
    assert len(pilot.session.approvals) == 1


def test_a_machine_still_without_a_sandbox_refuses_and_cancels_the_approval_saying_why(
        ) -> None:
    pilot, hellos = _restarted_waiting()
    pilot.feed(Start())
    step = _back(pilot, hellos, sandbox="none")
    approval = _approval(pilot)
    assert approval.status == "cancelled" and "has no OS sandbox" in approval.message
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert tool.status == "rejected" and tool.result == approval.message
    assert any(isinstance(e, CallModel) for e in step.effects)  # the model reads why
    # the approval's wait wakes on its cancellation: nothing more happens
    assert pilot.feed(ApprovalDecided(approval.approval_id)).events == []


def test_rejected_while_the_machine_is_away_the_turn_goes_on_without_it() -> None:
    pilot, _ = _restarted_waiting()
    pilot.feed(Start())
    step = _decided(pilot, "rejected")
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert tool.status == "rejected" and tool.result == "rejected by the user"
    assert pilot.session.status == "running"
    assert any(isinstance(e, CallModel) for e in step.effects)
    assert pilot.feed(WorkerHello(W)).events == []  # the hello's wait comes to nothing


def test_a_requested_action_is_sent_again_only_after_the_machines_hello() -> None:
    pilot, hellos = _restarted_waiting("full-auto")
    [pending] = pilot.session.pending_actions.values()
    step = pilot.feed(Start())
    assert not any(isinstance(e, RunAction) for e in step.effects)
    assert step.effects == [WaitHello(S, W)]
    assert pilot.session.status_reason == "waiting for the machine"
    [run] = _back(pilot, hellos).effects
    assert isinstance(run, RunAction) and run.action.action_id == pending.action_id


def test_a_requested_action_refused_after_the_hello_is_over() -> None:
    pilot, hellos = _restarted_waiting("full-auto")
    [pending] = pilot.session.pending_actions.values()
    pilot.feed(Start())
    step = _back(pilot, hellos, sandbox="none")
    assert ev.ActionFinished(action_id=pending.action_id, outcome="cancelled") in _events(step)
    assert pilot.session.pending_actions == {}


def test_a_new_answers_first_call_is_not_sent_before_the_machines_hello() -> None:
    state = _session("full-auto")
    hellos = _Hellos()
    pilot = Pilot(CodeyMachine(provider_infos(Models()), hellos),
                  codey_turn(S, limits=LIMITS), state)
    pilot.feed(Start())
    pilot.feed(ModelParts([_shell("make")]))
    step = pilot.feed(ModelDone())
    assert not any(isinstance(e, ev.ActionRequested) for e in _events(step))
    assert step.effects == [WaitHello(S, W)]
    [run] = _back(pilot, hellos).effects
    assert isinstance(run, RunAction) and isinstance(run.action, wk.RunCommand)


def test_a_server_side_call_needs_no_hello() -> None:
    pilot, _ = _restarted_waiting("full-auto", ToolCallRequested(
        "c1", "update_plan", json.dumps({"plan": [{"step": "look", "status": "pending"}]})))
    step = pilot.feed(Start())
    assert not any(isinstance(e, WaitHello) for e in step.effects)
    [tool] = [i for i in pilot.session.items if isinstance(i, ev.ToolCall)]
    assert tool.status == "done"


def test_a_revoked_machine_is_not_waited_for() -> None:
    pilot, _ = _restarted_waiting()
    pilot.record((None, ev.WorkerRevoked(worker_id=W)))
    step = pilot.feed(Start())
    assert not any(isinstance(e, WaitHello) for e in step.effects)


def test_a_turn_never_ends_with_its_approval_pending() -> None:
    pilot, _ = _restarted_waiting()
    pilot.feed(Start())
    step = pilot.feed(Crashed("boom"))
    approval = _approval(pilot)
    assert approval.status == "cancelled"
    assert approval.message == "the turn ended before it was decided (internal error)"
    assert pilot.done and ev.ApprovalResolved(
        approval_id=approval.approval_id, decision="cancelled",
        message=approval.message) in _events(step)


def test_an_interrupt_cancels_the_approval_once() -> None:
    pilot, _ = _restarted_waiting()
    pilot.feed(Start())
    step = pilot.feed(Interrupted())
    resolved = [e for e in _events(step) if isinstance(e, ev.ApprovalResolved)]
    assert len(resolved) == 1 and _approval(pilot).status == "cancelled"


# ---------------------------------------------------------------------------------------------
# the attention ladder and the reviewer

def _laddered(policy: str = "suggest", *, then: str = "reject", on_question: str = "answer",
              **reviewer: Any) -> Pilot:
    from codey_server.agent.machine import Ladder, ReviewerLimits
    limits = Limits(turn_iteration_cap=5, action_timeout_s=30,
                    ladder=Ladder(60.0, 300.0, then, on_question),
                    reviewer=ReviewerLimits(**reviewer))
    return Pilot(CodeyMachine(provider_infos(Models())), codey_turn(S, limits=limits),
                 _session(policy))


def _timers(step: Step) -> dict[str, float]:
    return {e.key: e.delay for e in step.effects if isinstance(e, SetTimer)}


def test_a_waiting_approval_nudges_at_t1_then_is_rejected_and_told_at_t2() -> None:
    pilot = _laddered()
    step = _call(pilot, _shell("make"))
    [approval] = pilot.session.approvals.values()
    aid = approval.approval_id
    [scheduled] = [e for e in _events(step) if isinstance(e, ev.AttentionScheduled)]
    assert (scheduled.nudge_at, scheduled.act_at, scheduled.then) == \
        (pilot.now + 60, pilot.now + 300, "reject")
    assert _timers(step) == {f"att1:{aid}": 60.0, f"att2:{aid}": 300.0}
    t0 = pilot.now
    step = pilot.feed(TimerFired(f"att1:{aid}", now=t0 + 60))
    [nudge] = _events(step)
    assert isinstance(nudge, ev.AttentionNudged) and nudge.step == "t1" and "make" in nudge.text
    assert pilot.feed(TimerFired(f"att1:{aid}", now=t0 + 61)).events == []  # once
    step = pilot.feed(TimerFired(f"att2:{aid}", now=t0 + 300))
    acted, rejected = _events(step)
    assert isinstance(acted, ev.AttentionActed) and acted.then == "reject"
    assert isinstance(rejected, ev.ApprovalResolved) and rejected.decision == "rejected"
    assert rejected.message == "nobody answered in 5 min; choose another way or stop"
    pilot.feed(ApprovalDecided(aid))
    assert _tool(pilot).result == "rejected: nobody answered in 5 min; choose another way " \
                                  "or stop"
    assert pilot.session.status == "running"  # the turn goes on: the model is told


def test_a_resumed_turn_keeps_the_ladders_times_from_the_log() -> None:
    pilot = _laddered()
    _call(pilot, _shell("make"))
    [approval] = pilot.session.approvals.values()
    t0 = approval.requested_at
    resumed = Pilot(CodeyMachine(provider_infos(Models())), pilot.turn, pilot.state)
    resumed.turn = codey_turn(S, limits=Limits(ladder=pilot.turn.core.ladder), resume=True)
    step = resumed.feed(Start(now=t0 + 100))
    assert not [e for e in _events(step) if isinstance(e, ev.AttentionScheduled)]
    assert _timers(step) == {f"att1:{approval.approval_id}": 0.0,
                             f"att2:{approval.approval_id}": 200.0}


def test_parking_keeps_the_approval_pending_and_ends_the_turn() -> None:
    pilot = _laddered(then="park")
    _call(pilot, _shell("make"))
    [approval] = pilot.session.approvals.values()
    step = pilot.feed(TimerFired(f"att2:{approval.approval_id}",
                                 now=approval.requested_at + 300))
    kinds = [type(e).__name__ for e in _events(step)]
    assert kinds == ["AttentionActed", "AttentionNudged", "SessionStatusChanged"]
    assert pilot.turn.core.done
    s = pilot.session
    assert (s.status, s.parked_on, s.approvals[approval.approval_id].status) == \
        ("interrupted", approval.approval_id, "pending")
    assert s.status_reason == "parked: nobody answered in 5 min"


def test_a_question_nobody_answers_is_answered_for_the_user_at_t2() -> None:
    pilot = _laddered(policy="full-auto")
    _call(pilot, ToolCallRequested("c1", "ask_user", json.dumps({"question": "sqlite?"})))
    [q] = pilot.session.questions.values()
    step = pilot.feed(TimerFired(f"att2:{q.question_id}", now=q.asked_at + 300))
    assert [type(e).__name__ for e in _events(step)] == ["AttentionActed", "QuestionAnswered"]
    assert pilot.session.questions[q.question_id].answer == "no answer; use your best judgement"


def _reviewing(**reviewer: Any) -> tuple[Pilot, Any, Step]:
    pilot = _laddered("reviewer", **reviewer)
    step = _call(pilot, _shell("make", "test"))
    [approval] = pilot.session.approvals.values()
    return pilot, approval, step


def test_under_reviewer_the_action_as_it_would_run_goes_to_the_reviewer_first() -> None:
    from codey_server.agent.machine import Review
    pilot, _approval, step = _reviewing(provider="p", model="cheap")
    [review] = [e for e in step.effects if isinstance(e, Review)]
    assert (review.provider, review.model) == ("p", "cheap")
    assert review.data["action"]["argv"] == ["make", "test"]
    assert review.data["sandbox"] == "workspace-write" and review.data["network"] is False
    assert not _timers(step)  # no ladder while the reviewer judges
    assert pilot.session.status_reason == "the reviewer is judging the action"


def test_a_low_risk_verdict_approves_and_a_high_risk_one_asks_the_user() -> None:
    from codey_server.agent.machine import Reviewed
    from codey_server.agent.reviewer import Verdict
    pilot, approval, _ = _reviewing()
    step = pilot.feed(Reviewed(approval.approval_id, Verdict(decision="approve", risk=10,
                                                             reason="runs the tests")))
    reviewed, resolved = _events(step)
    assert isinstance(reviewed, ev.ApprovalReviewed) and reviewed.approved
    assert isinstance(resolved, ev.ApprovalResolved) and resolved.decision == "approved"
    assert resolved.message == "approved by the reviewer: runs the tests"

    pilot, approval, _ = _reviewing()
    step = pilot.feed(Reviewed(approval.approval_id, Verdict(decision="approve", risk=40,
                                                             reason="installs")))
    assert not [e for e in _events(step) if isinstance(e, ev.ApprovalResolved)]
    assert pilot.session.approvals[approval.approval_id].status == "pending"
    assert pilot.session.status_reason == "waiting for your approval"
    assert f"att2:{approval.approval_id}" in _timers(step)  # the ladder runs now


def test_a_failed_review_asks_the_user() -> None:
    from codey_server.agent.machine import Reviewed
    pilot, approval, _ = _reviewing()
    step = pilot.feed(Reviewed(approval.approval_id, None, "the reviewer did not answer "
                                                           "within 30 s"))
    [reviewed, *_] = _events(step)
    assert isinstance(reviewed, ev.ApprovalReviewed) and reviewed.verdict == "error"
    assert pilot.session.approvals[approval.approval_id].status == "pending"


def test_an_escalation_never_goes_to_the_reviewer() -> None:
    from codey_server.agent.machine import Review
    pilot = _laddered("reviewer")
    step = _call(pilot, _escalate("make"))
    assert not [e for e in step.effects if isinstance(e, Review)]
    assert pilot.session.status_reason == "waiting for your approval"


def test_three_denials_in_a_row_park_the_session() -> None:
    from codey_server.agent.machine import Reviewed
    from codey_server.agent.reviewer import Verdict
    pilot, approval, _ = _reviewing()
    for n in range(2):
        pilot.record((S, ev.ApprovalRequested(approval_id=f"old{n}", item_id="x",
                                              kind="command", command=["rm"])),
                     (S, ev.ApprovalReviewed(approval_id=f"old{n}", verdict="deny")))
    step = pilot.feed(Reviewed(approval.approval_id, Verdict(decision="deny", risk=90,
                                                             reason="deletes")))
    nudges = [e for e in _events(step) if isinstance(e, ev.AttentionNudged)]
    assert [n.step for n in nudges] == ["denials"]
    assert pilot.session.status == "interrupted" and pilot.turn.core.done
    assert pilot.session.approvals[approval.approval_id].status == "pending"


def test_a_parked_approval_rejected_later_reads_as_the_users() -> None:
    pilot = _laddered(then="park")
    _call(pilot, _shell("make"))
    [approval] = pilot.session.approvals.values()
    pilot.feed(TimerFired(f"att2:{approval.approval_id}", now=approval.requested_at + 300))
    resumed = Pilot(CodeyMachine(provider_infos(Models())),
                    codey_turn(S, limits=LIMITS, resume=True), pilot.state)
    pilot.record((S, ev.ApprovalResolved(approval_id=approval.approval_id, decision="rejected",
                                         message="not now")))
    resumed.feed(Start(now=approval.requested_at + 400))
    assert _tool(resumed).result == "rejected by the user: not now"


# PreToolUse hooks (issue 39) ---------------------------------------------------------------

_HOOKS_AT = "/w/p/.claude/settings.json"


def _hooked(scope: str = "user", trusted: bool = False) -> Pilot:
    """A session whose worker runs hooks, with a PreToolUse hook for Bash in a file of
    ``scope`` (a project file trusted or not)."""
    pilot = _codey()
    caps = wk.Capabilities(executors=["run_command", "run_hooks"],
                           sandbox=wk.SandboxInfo(kind="bwrap"))
    pilot.record(
        (None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux", worker_version="0",
                                  capabilities=caps)),
        (S, ev.HooksFound(files=[wk.HookFile(
            path=_HOOKS_AT, scope=scope, sha256="abc",  # type: ignore[arg-type]
            hooks=[wk.HookCommand(event="PreToolUse", matcher="Bash",
                                  command_line="guard")])])))
    if trusted:
        pilot.record((S, ev.HooksTrusted(path=_HOOKS_AT, sha256="abc")))
    pilot.feed(Start())
    pilot.feed(ModelParts([_shell("bash", "-c", "rm -rf x"), Usage(10, 2)]))
    return pilot


def _hooks_asked(step: Step) -> wk.RunHooks:
    [run] = step.effects
    assert isinstance(run, RunAction) and isinstance(run.action, wk.RunHooks)
    return run.action


def test_a_call_waits_for_its_pre_tool_hooks_and_a_deny_is_the_models_result() -> None:
    pilot = _hooked()
    step = pilot.feed(ModelDone())
    assert not any(isinstance(e, ev.ActionRequested) for e in _events(step))
    asked = _hooks_asked(step)
    assert (asked.event, asked.match, asked.workdir) == ("PreToolUse", "shell", "/w/p")
    payload = json.loads(asked.payload)
    assert payload["tool_input"]["command"] == "rm -rf x"  # Claude Code's Bash reads a line
    assert payload["tool_input"]["argv"] == ["bash", "-c", "rm -rf x"]
    assert pilot.turn.phase == "hooking"
    step = pilot.feed(ActionDone(asked.action_id, wk.HooksRan(runs=[wk.HookRun(
        path=_HOOKS_AT, command="guard", exit_code=2, stderr="no rm\n", decision="deny",
        reason="no rm")])))
    ran, settled = _events(step)[:2]
    assert isinstance(ran, ev.HookRan) and (ran.decision, ran.exit_code) == ("deny", 2)
    assert ran.item_id == settled.item_id  # type: ignore[union-attr]
    assert isinstance(settled, ev.SessionItemUpdated) and settled.status == "rejected"
    assert settled.result == "blocked by a PreToolUse hook: no rm"
    assert [type(e) for e in step.effects] == [CallModel]
    assert pilot.session.hook_runs[0].command_line == "guard"


def test_an_untrusted_project_hook_does_not_hold_the_call() -> None:
    step = _hooked(scope="project").feed(ModelDone())
    requested = [e for e in _events(step) if isinstance(e, ev.ActionRequested)]
    assert [type(r.action) for r in requested] == [wk.RunCommand]


def test_a_trusted_project_hook_holds_it_and_updated_input_changes_what_runs() -> None:
    pilot = _hooked(scope="project", trusted=True)
    asked = _hooks_asked(pilot.feed(ModelDone()))
    assert asked.trusted == ["abc"]
    step = pilot.feed(ActionDone(asked.action_id, wk.HooksRan(runs=[wk.HookRun(
        path=_HOOKS_AT, command="guard", exit_code=0,
        updated_input={"command": "rm -rf x/tmp"})])))
    requested = [e for e in _events(step) if isinstance(e, ev.ActionRequested)]
    assert len(requested) == 1 and isinstance(requested[0].action, wk.RunCommand)
    assert requested[0].action.argv == ["bash", "-lc", "rm -rf x/tmp"]


def test_hooks_that_cannot_run_reject_the_call() -> None:
    pilot = _hooked()
    asked = _hooks_asked(pilot.feed(ModelDone()))
    step = pilot.feed(ActionErrored(asked.action_id, "unknown_action", "no such action"))
    settled = [e for e in _events(step) if isinstance(e, ev.SessionItemUpdated)]
    assert settled[-1].status == "rejected"
    assert settled[-1].result == ("not run: its hooks could not run (unknown_action: no such "
                                  "action)")


# the turn's own hook moments (issue 39) ----------------------------------------------------

def _with_hooks(*events: str) -> Pilot:
    """A session whose worker runs hooks, with a user hook for each of ``events``."""
    pilot = _codey()
    caps = wk.Capabilities(executors=["run_command", "run_hooks"],
                           sandbox=wk.SandboxInfo(kind="bwrap"))
    pilot.record(
        (None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux", worker_version="0",
                                  capabilities=caps)),
        (S, ev.HooksFound(files=[wk.HookFile(
            path=_HOOKS_AT, scope="user", sha256="abc",  # type: ignore[arg-type]
            hooks=[wk.HookCommand(event=e, command_line=e) for e in events])])))
    return pilot


def _asks_hooks(step: Step) -> list[wk.RunHooks]:
    return [e.action for e in step.effects
            if isinstance(e, RunAction) and isinstance(e.action, wk.RunHooks)]


def test_a_session_without_hooks_for_a_moment_pays_no_round_trip() -> None:
    pilot = _with_hooks("PreToolUse")  # none for the prompt, the start, the end
    step = pilot.feed(Start())
    assert _asks_hooks(step) == [] and any(isinstance(e, CallModel) for e in step.effects)
    pilot.feed(ModelParts([TextDelta("Done."), Finished()]))
    step = pilot.feed(ModelDone())
    assert _asks_hooks(step) == [] and pilot.done


def test_a_blocked_prompt_never_reaches_the_model() -> None:
    pilot = _with_hooks("UserPromptSubmit")
    [asked] = _asks_hooks(step := pilot.feed(Start()))
    assert not any(isinstance(e, CallModel) for e in step.effects)
    assert json.loads(asked.payload)["prompt"] == "fix it"
    step = pilot.feed(ActionDone(asked.action_id, wk.HooksRan(runs=[wk.HookRun(
        path=_HOOKS_AT, command="x", exit_code=2, decision="block", reason="no")])))
    assert not any(isinstance(e, CallModel) for e in step.effects) and pilot.done
    prompt = pilot.session.items[0]
    assert prompt.blocked == "no" and pilot.session.status == "idle"
    assert pilot.session.items[-1].code == "hook_blocked"


def test_stop_hooks_keep_the_turn_going_at_most_three_times() -> None:
    pilot = _with_hooks("Stop")
    pilot.feed(Start())
    for n in range(4):
        pilot.feed(ModelParts([TextDelta(f"answer {n}"), Finished()]))
        step = pilot.feed(ModelDone())
        if n == 3:
            break
        [asked] = _asks_hooks(step)
        assert json.loads(asked.payload)["stop_hook_active"] is (n > 0)
        step = pilot.feed(ActionDone(asked.action_id, wk.HooksRan(runs=[wk.HookRun(
            path=_HOOKS_AT, command="x", exit_code=0, decision="block", reason="more")])))
        assert any(isinstance(e, CallModel) for e in step.effects)
    assert _asks_hooks(step) == [] and pilot.done
    assert pilot.session.items[-1].code == "hook_stop_cap"
    told = [i.text for i in pilot.session.items
            if isinstance(i, ev.UserMessage) and i.origin == "hook"]
    assert told == ["A Stop hook asks you to go on: more"] * 3
