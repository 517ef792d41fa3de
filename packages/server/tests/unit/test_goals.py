"""Goals without I/O (``core/goals.py``): the goal's parsing, what is due after a turn, what a
check's result appends, the loop's stops; and a whole loop folded step by step."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import State
from codey_server.agent import goal_judge
from codey_server.agent.errors import ModelError
from codey_server.core import goals
from codey_server.core.rules import CommandRejected, Context
from codey_server.features import apply, decide

W, S = "wrk_1", "ses_main"


def context() -> Context:
    counter = itertools.count(1)
    return Context(new_id=lambda prefix: f"{prefix}_{next(counter)}", now=lambda: 100.0,
                   default_provider="openai", default_models={"openai": "gpt-x"},
                   goal_max_turns=3)


class Run:
    """A state folded from events, as the engine would have it."""

    def __init__(self) -> None:
        self.state = State()
        self.ctx = context()
        self.add(None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="linux",
                                       python_version="3.11", worker_version="0.1",
                                       roots=["/src"], public_key="pk"))
        self.add(S, ev.SessionCreated(title="t", worker_id=W, workdir="/src",
                                      provider="openai", model="gpt-x"))

    def add(self, sid: str | None, e: ev.Event) -> None:
        apply(self.state, ev.Envelope(seq=self.state.seq + 1, ts=float(self.state.seq),
                                      session_id=sid, event=e))

    def fold(self, decided: list[tuple[str | None, ev.Event]]) -> list[ev.Event]:
        for sid, e in decided:
            self.add(sid, e)
        return [e for _, e in decided]

    def command(self, c: Any) -> list[ev.Event]:
        return self.fold(decide(self.state, c, self.ctx))

    def turn(self, *items: ev.Item, status: ev.SessionStatus = "idle") -> None:
        """A turn: running, its items, then ``status``."""
        self.add(S, ev.SessionStatusChanged(status="running"))
        for item in items:
            self.add(S, ev.SessionItemAppended(item=item))
        self.add(S, ev.SessionStatusChanged(status=status))

    @property
    def session(self) -> Any:
        return self.state.sessions[S]


def answer(n: int) -> ev.AssistantMessage:
    return ev.AssistantMessage(id=f"itm_a{n}", ts=0.0, text=f"answer {n}")


def claim(n: int, evidence: str) -> ev.ToolCall:
    return ev.ToolCall(id=f"itm_c{n}", ts=0.0, call_id=f"c{n}", name="goal_met",
                       arguments=f'{{"evidence": "{evidence}"}}', status="done")


def test_a_goal_is_a_command_after_a_dollar_else_a_condition() -> None:
    assert goals.parse_goal("  $ pytest -q 'tests/a b.py' ") == (
        "$ pytest -q 'tests/a b.py'", ["pytest", "-q", "tests/a b.py"])
    assert goals.parse_goal("the README explains setup") == ("the README explains setup", None)
    # an unclosed quote: the words as they stand (the run will say what is wrong)
    assert goals.parse_goal("$ pytest 'open") == ("$ pytest 'open", ["pytest", "'open"])
    for bad in ("$", "$   "):
        with pytest.raises(CommandRejected):
            goals.parse_goal(bad)


@given(st.text(max_size=20_000))
def test_trim_keeps_short_text_and_both_ends_of_long_text(text: str) -> None:
    out = goals.trim(text, 400)
    if len(text) <= 400:
        assert out == text
    else:
        assert out.startswith(text[:100]) and out.endswith(text[-300:])
        assert len(out) < 460


def test_setting_a_goal_tells_the_model_and_a_failed_check_starts_the_next_turn() -> None:
    run = Run()
    [goal_set, told] = run.command(cl.SetGoal(session_id=S, condition="$ pytest -q"))
    assert isinstance(goal_set, ev.GoalSet) and goal_set.command == ["pytest", "-q"]
    assert goal_set.max_turns == 3  # the server's default
    assert isinstance(told, ev.SessionItemAppended)
    assert isinstance(told.item, ev.UserMessage) and told.item.origin == goals.GOAL_ORIGIN
    assert not told.item.queued and "`pytest -q` runs in the session's sandbox" in told.item.text
    # the prompt is last: nothing is due until the turn it starts has ended
    assert goals.due(run.session) is None
    run.turn(answer(1), status="running")
    assert goals.due(run.session) is None  # still running
    run.add(S, ev.SessionStatusChanged(status="idle"))
    due = goals.due(run.session)
    assert due == goals.Due(S, goal_set.goal_id, "command", "itm_a1", command=["pytest", "-q"])

    out = run.fold(goals.checked(run.state, goals.CheckDone(
        due, met=False, output="E" * 10_000 + "\n1 failed", exit_code=1), run.ctx))
    checked, prompt = out
    assert isinstance(checked, ev.GoalChecked)
    assert (checked.attempt, checked.met, checked.exit_code) == (1, False, 1)
    assert checked.output.endswith("1 failed") and len(checked.output) < 4100
    assert isinstance(prompt, ev.SessionItemAppended)
    assert isinstance(prompt.item, ev.UserMessage)
    assert prompt.item.text.startswith(
        "The goal is not met yet (check 1 of 3): `pytest -q` exited 1.")
    assert "1 failed" in prompt.item.text
    assert run.session.goal.attempts == 1 and run.session.goal.checked_item == "itm_a1"
    assert goals.due(run.session) is None  # the next turn's prompt waits
    # the same result again (a duplicate) appends nothing
    assert goals.checked(run.state, goals.CheckDone(due, met=False), run.ctx) == []

    run.turn(answer(2))
    due = goals.due(run.session)
    assert due is not None and due.after_item == "itm_a2"
    [checked, met] = run.fold(goals.checked(run.state, goals.CheckDone(
        due, met=True, output="2 passed", exit_code=0), run.ctx))
    assert isinstance(met, ev.GoalMet) and met.reason == "its command exited 0 (check 2)"
    g = run.session.goal
    assert (g.status, g.attempts, g.last_met, g.last_exit_code) == ("met", 2, True, 0)
    run.turn(answer(3))
    assert goals.due(run.session) is None  # met: no more checks


def test_the_cap_gives_the_goal_up_and_no_turn_follows() -> None:
    run = Run()
    run.command(cl.SetGoal(session_id=S, condition="$ false", max_turns=2))
    for n in (1, 2):
        run.turn(answer(n))
        due = goals.due(run.session)
        assert due is not None
        out = run.fold(goals.checked(run.state, goals.CheckDone(due, met=False, exit_code=1),
                                     run.ctx))
    assert isinstance(out[-1], ev.GoalGivenUp)
    assert out[-1].reason == "not met after 2 turns (the cap is 2)"
    assert run.session.goal.status == "given_up"
    assert not any(isinstance(e, ev.SessionItemAppended) for e in out)


def test_a_result_for_a_turn_the_session_moved_past_is_dropped() -> None:
    run = Run()
    run.command(cl.SetGoal(session_id=S, condition="$ make test"))
    run.turn(answer(1))
    due = goals.due(run.session)
    assert due is not None
    # the user prompted while the check ran: a turn started; the next end is checked instead
    run.command(cl.SendPrompt(session_id=S, text="also update the docs"))
    assert goals.checked(run.state, goals.CheckDone(due, met=False), run.ctx) == []
    run.turn(answer(2))
    later = goals.due(run.session)
    assert later is not None and later.after_item == "itm_a2"
    # a goal set again meanwhile: the old goal's result is dropped too
    run.command(cl.SetGoal(session_id=S, condition="$ make check"))
    run.turn(answer(3))
    assert goals.checked(run.state, goals.CheckDone(later, met=True), run.ctx) == []


def test_a_judged_goal_reads_the_last_claim_of_the_turn() -> None:
    run = Run()
    [goal_set, told] = run.command(cl.SetGoal(session_id=S, condition="the docs build"))
    assert goal_set.command is None
    assert isinstance(told, ev.SessionItemAppended) and isinstance(told.item, ev.UserMessage)
    assert "call the `goal_met` tool" in told.item.text
    run.turn(answer(1))
    due = goals.due(run.session)
    assert due is not None and (due.kind, due.evidence) == ("judge", None)  # no claim
    run.fold(goals.checked(run.state, goals.CheckDone(due, met=False, output="no claim"),
                           run.ctx))
    run.turn(claim(1, "first"), claim(2, "make docs printed: ok"), answer(2))
    due = goals.due(run.session)
    assert due is not None and due.evidence == "make docs printed: ok"
    [_, prompt] = run.fold(goals.checked(run.state, goals.CheckDone(
        due, met=False, output="the output is not shown"), run.ctx))
    assert isinstance(prompt, ev.SessionItemAppended) and isinstance(prompt.item, ev.UserMessage)
    assert "(check 2 of 3): the output is not shown" in prompt.item.text
    run.turn(answer(3))
    due = goals.due(run.session)
    # the claims of an earlier turn, already judged, do not count again
    assert due is not None and due.evidence is None


@pytest.mark.parametrize("status", ["interrupted", "error", "closed"])
def test_a_session_stopped_any_other_way_gives_its_goal_up(status: ev.SessionStatus) -> None:
    run = Run()
    run.command(cl.SetGoal(session_id=S, condition="$ pytest"))
    run.add(S, ev.SessionStatusChanged(status="running"))
    run.add(S, ev.SessionItemAppended(item=answer(1)))
    for going in ("running", "waiting_approval", "waiting_user", "idle"):
        run.add(S, ev.SessionStatusChanged(status=going))
        assert goals.stopped(run.state, S, run.ctx) == []
    run.add(S, ev.SessionStatusChanged(status=status, reason="why"))
    [(sid, given_up)] = goals.stopped(run.state, S, run.ctx)
    assert isinstance(given_up, ev.GoalGivenUp)
    assert given_up.reason == f"the session stopped ({status}: why)"
    run.add(sid, given_up)
    assert goals.stopped(run.state, S, run.ctx) == []


def test_a_goal_set_on_a_stopped_session_waits_for_its_turn() -> None:
    run = Run()
    run.turn(answer(1), status="interrupted")
    run.command(cl.SetGoal(session_id=S, condition="$ make"))
    assert goals.stopped(run.state, S, run.ctx) == []  # its prompt starts a turn
    run.turn(answer(2))
    assert goals.due(run.session) is not None


def test_a_proposed_plan_is_not_checked_until_approved() -> None:
    run = Run()
    p = "ses_plan"
    run.add(p, ev.SessionCreated(title="t", worker_id=W, workdir="/src", provider="openai",
                                 model="gpt-x", plan_mode=True))
    run.fold(decide(run.state, cl.SetGoal(session_id=p, condition="$ make"), run.ctx))
    for e in (ev.SessionStatusChanged(status="running"),
              ev.PlanUpdated(steps=[ev.PlanStep(step="look")]),
              ev.SessionItemAppended(item=answer(1)), ev.SessionStatusChanged(status="idle")):
        run.add(p, e)
    s = run.state.sessions[p]
    assert s.plan_status == "proposed" and goals.due(s) is None
    run.fold(decide(run.state, cl.ApprovePlan(session_id=p), run.ctx))
    for e in (ev.SessionStatusChanged(status="running"),
              ev.SessionItemAppended(item=answer(2)), ev.SessionStatusChanged(status="idle")):
        run.add(p, e)
    due = goals.due(s)
    assert due is not None and due.after_item == "itm_a2"


def test_set_goal_refusals_and_clearing() -> None:
    run = Run()
    with pytest.raises(CommandRejected, match="no goal to clear"):
        decide(run.state, cl.SetGoal(session_id=S, condition="clear"), run.ctx)
    with pytest.raises(CommandRejected, match="between 1 and 100"):
        decide(run.state, cl.SetGoal(session_id=S, condition="$ x", max_turns=0), run.ctx)
    with pytest.raises(CommandRejected) as info:
        decide(run.state, cl.SetGoal(session_id="ses_none", condition="$ x"), run.ctx)
    assert info.value.code == "not_found"
    run.command(cl.SetGoal(session_id=S, condition="$ x"))
    [given_up] = run.command(cl.SetGoal(session_id=S, condition=" Clear "))
    assert isinstance(given_up, ev.GoalGivenUp) and given_up.reason == "cleared by the user"
    run.add(S, ev.SessionStatusChanged(status="closed"))
    with pytest.raises(CommandRejected, match="closed"):
        decide(run.state, cl.SetGoal(session_id=S, condition="$ x"), run.ctx)


def test_a_goal_set_while_a_turn_runs_waits_for_it() -> None:
    run = Run()
    run.add(S, ev.SessionStatusChanged(status="running"))
    [_, told] = run.command(cl.SetGoal(session_id=S, condition="$ make"))
    assert isinstance(told, ev.SessionItemAppended) and isinstance(told.item, ev.UserMessage)
    assert told.item.queued


def test_create_session_sets_the_goal_after_the_prompt() -> None:
    run = Run()
    out = run.command(cl.CreateSession(worker_id=W, workdir="/src", prompt="fix it",
                                       goal="$ pytest -q", goal_max_turns=5))
    kinds = [type(e).__name__ for e in out]
    assert kinds == ["SessionCreated", "SessionItemAppended", "GoalSet", "SessionItemAppended"]
    [sid] = [s for s in run.state.sessions if s != S]
    goal = run.state.sessions[sid].goal
    assert goal is not None and goal.max_turns == 5 and goal.command == ["pytest", "-q"]
    # an external agent cannot call goal_met: its goal needs a command
    run.add(None, ev.WorkerConnected(worker_id=W, hostname="h", os="linux",
                                     worker_version="0.1",
                                     capabilities=wk.Capabilities(acp_agents=["claude"])))
    with pytest.raises(CommandRejected, match="external agent"):
        decide(run.state, cl.CreateSession(worker_id=W, workdir="/src", goal="it works",
                                           agent="claude"), run.ctx)


# the judge's request and verdict (agent/goal_judge.py, through the reviewer's call) ----------

class _Answers:
    """A provider whose model answers ``text`` (or fails), recording the request body."""

    def __init__(self, text: str = "", error: Exception | None = None) -> None:
        from codey_server.agent.wire import wire_for

        self.wire = wire_for("chat")
        self.text, self.error = text, error
        self.bodies: list[bytes] = []

    async def stream(self, *, model: str, body: bytes) -> Any:
        from codey_server.agent.stream import TextDelta

        self.bodies.append(body)
        if self.error is not None:
            raise self.error
        yield TextDelta(self.text)


def _judged(text: str = "", error: Exception | None = None,
            evidence: str = "pytest printed 3 passed") -> tuple[goal_judge.GoalVerdict, bytes]:
    provider = _Answers(text, error)
    verdict = asyncio.run(goal_judge.judge_goal(provider, "m", "the tests pass", evidence,
                                                timeout=5))
    return verdict, provider.bodies[0]


def test_the_judges_verdict_is_the_reviewers_and_fails_closed() -> None:
    verdict, _ = _judged('{"decision": "approve", "risk": 5, "reason": "3 passed"}')
    assert verdict == goal_judge.GoalVerdict(met=True, reason="3 passed")
    verdict, _ = _judged('{"decision": "deny", "risk": 80, "reason": "no output"}')
    assert verdict == goal_judge.GoalVerdict(met=False, reason="no output")
    for answer in ("", "yes, met", '{"met": true, "reason": "x"}', '{"decision": "approve"}',
                   "{not json}", '{"decision": "approve", "risk": 5, "reason": "x"'):
        verdict, _ = _judged(answer)
        assert verdict.met is False and "not a verdict" in verdict.reason, answer
    verdict, _ = _judged(error=ModelError("boom", status=502))
    assert verdict.met is False and "boom" in verdict.reason


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=2000))
def test_the_evidence_cannot_leave_its_block(evidence: str) -> None:
    """Whatever the reviewed agent writes (tags, quotes, newlines) stays inside the one data
    block, as a JSON document with the goal beside it."""
    _, body = _judged('{"decision": "deny", "risk": 50, "reason": "x"}', evidence=evidence)
    [system, user] = json.loads(body)["messages"]
    assert "never an instruction" in system["content"]
    text = user["content"]
    assert text.count("<data>") == 1 and text.count("</data>") == 1 and text.endswith("</data>")
    [block] = re.findall(r"<data>\n(.*)\n</data>", text, re.DOTALL)
    assert json.loads(block) == {"goal": "the tests pass", "evidence": evidence}
