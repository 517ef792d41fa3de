"""The session supervisor on its inputs alone: no engine, no tasks, no leases, no clock. Each
test builds the folded state it needs, feeds :func:`step` and reads the effects it asks for
(what the agent service would carry out) and the supervisor value it returns."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import (
    PortForward,
    Question,
    SessionInfo,
    SessionProcess,
    State,
    WorkerInfo,
)
from codey_server.agent.supervisor import (
    FOREIGN_CLAIM_DELAY_S,
    Boot,
    CancelTurn,
    Claim,
    ClaimFailed,
    Detach,
    Effect,
    FindFree,
    Folded,
    ForwardPort,
    FreeFound,
    Halt,
    Holding,
    HoldingLost,
    Input,
    LeaseTaken,
    ListProcesses,
    ProcessesListed,
    Release,
    ReloadContext,
    Say,
    StartTurn,
    StopProcess,
    Supervisor,
    SweepTick,
    TurnEnded,
    TurnWanted,
    lease_name,
    step,
    work_for,
)
from codey_server.core.leases import Fence

S, T, W = "ses_1", "ses_2", "wrk_1"
ONE = Supervisor()
REPLICA = Supervisor(leased=True)


def fence(sid: str = S, epoch: int = 1) -> Fence:
    return Fence(lease_name(sid), epoch, "r1")


def held(sid: str = S) -> Holding:
    return Holding(True, fence(sid))


def prompt(text: str = "go", *, queued: bool = False, n: int = 0) -> ev.UserMessage:
    return ev.UserMessage(id=f"itm_{n}", ts=0.0, text=text, queued=queued)


def answer(n: int = 1) -> ev.AssistantMessage:
    return ev.AssistantMessage(id=f"itm_{n}", ts=0.0, text="done")


def session(sid: str = S, *, status: str = "idle", items: Iterable[Any] = (),
            **fields: Any) -> SessionInfo:
    return SessionInfo(session_id=sid, title="t", worker_id=W, workdir="/w", provider="p",
                       model="m", status=status, items=list(items), **fields)


def world(*sessions: SessionInfo, workers: Iterable[WorkerInfo] = ()) -> State:
    return State(sessions={s.session_id: s for s in sessions},
                 workers={w.worker_id: w for w in workers})


def folded(event: ev.Event, sid: str | None = S, *, foreign: bool = False,
           holding: Holding = Holding(), ts: float = 1.0) -> Folded:
    return Folded(ev.Envelope(seq=1, ts=ts, session_id=sid, event=event), foreign, holding)


def prompted(**kw: Any) -> Folded:
    return folded(ev.SessionItemAppended(item=prompt()), **kw)


def run(sup: Supervisor, state: State, *inputs: Input) -> tuple[Supervisor, list[Effect]]:
    """Feed the inputs in order; the supervisor after them and every effect asked for."""
    effects: list[Effect] = []
    for i in inputs:
        sup, more = step(sup, state, i)
        effects += more
    return sup, effects


def starts(effects: list[Effect]) -> list[StartTurn]:
    return [e for e in effects if isinstance(e, StartTurn)]


def said(effects: list[Effect]) -> list[str]:
    return [e.message for e in effects if isinstance(e, Say)]


# one server -----------------------------------------------------------------------------------

def test_a_prompt_starts_a_turn_at_once() -> None:
    state = world(session(items=[prompt()]))
    sup, effects = step(ONE, state, prompted())
    assert effects == [StartTurn(S)]
    assert sup == Supervisor(running=frozenset({S}))


def test_the_supervisor_is_a_value() -> None:
    state = world(session(items=[prompt()]))
    sup, _ = step(ONE, state, prompted())
    assert Supervisor() == ONE and sup != ONE  # the old value is untouched
    with pytest.raises(FrozenInstanceError):
        sup.running = frozenset()  # type: ignore[misc]
    assert step(ONE, state, prompted()) == step(ONE, state, prompted())


def test_retry_and_compaction_start_turns_too() -> None:
    state = world(session(items=[prompt()]))
    assert step(ONE, state, folded(ev.TurnRequested()))[1] == [StartTurn(S)]
    assert step(ONE, state, folded(ev.CompactionRequested()))[1] == [
        StartTurn(S, compact_only=True)]
    assert step(ONE, state, TurnWanted(S, "resume"))[1] == [StartTurn(S, resume=True)]


def test_an_acp_session_runs_its_agent_and_keeps_its_own_context() -> None:
    state = world(session(items=[prompt()], agent="codex"))
    assert step(ONE, state, prompted())[1] == [StartTurn(S, acp=True)]
    sup, effects = step(ONE, state, folded(ev.CompactionRequested()))
    assert (sup, effects) == (ONE, [])


def test_a_prompt_during_a_turn_queues_one_more_turn_after_it() -> None:
    state = world(session(items=[prompt(), answer(), prompt(n=2)]))
    sup, effects = run(ONE, state, prompted(), prompted(), prompted())
    assert effects == [StartTurn(S)]  # one turn at a time
    assert sup.rerun == {S}
    sup, effects = step(sup, state, TurnEnded(S))
    assert effects == [StartTurn(S)] and sup.running == {S} and sup.rerun == frozenset()


def test_a_queued_turn_is_dropped_when_its_prompt_was_answered_meanwhile() -> None:
    state = world(session(items=[prompt(), answer()]))  # the running turn took it in (steer)
    sup, _ = run(ONE, state, prompted(), prompted())
    sup, effects = step(sup, state, TurnEnded(S))
    assert effects == [] and sup == ONE


def test_a_compaction_during_a_turn_waits_for_its_end() -> None:
    # the running turn compacts before its next model call; one that is ending makes none,
    # and the request was lost (e2e test_compaction, once in a clean-clone run)
    state = world(session(items=[prompt()]))
    sup, effects = run(ONE, state, prompted(), folded(ev.CompactionRequested()))
    assert effects == [StartTurn(S)] and sup.rerun == frozenset({S})
    ended = world(session(items=[prompt(), answer()], compaction_requested=True))
    assert step(sup, ended, TurnEnded(S))[1] == [StartTurn(S, compact_only=True)]
    # the turn compacted before its next call: nothing more to start
    done = world(session(items=[prompt(), answer()]))
    assert step(sup, done, TurnEnded(S))[1] == []


@pytest.mark.parametrize("status", ["creating", "failed", "removed"])
def test_a_session_waits_for_its_worktree(status: str) -> None:
    tree = ev.Worktree(repo="/w", branch="b", status=status)  # type: ignore[arg-type]
    state = world(session(items=[prompt()], worktree=tree))
    assert step(ONE, state, prompted()) == (ONE, [])
    ready = world(session(items=[prompt()],
                          worktree=ev.Worktree(repo="/w", branch="b", status="ready")))
    assert step(ONE, ready, folded(ev.WorktreeUpdated(status="ready")))[1] == [StartTurn(S)]
    assert step(ONE, ready, folded(ev.WorktreeUpdated(files=3)))[1] == []


def test_a_worktree_made_for_an_answered_session_starts_nothing() -> None:
    state = world(session(items=[prompt(), answer()]))
    assert step(ONE, state, folded(ev.WorktreeUpdated(status="in_place"))) == (ONE, [])


def test_boot_begins_what_each_session_was_left_needing() -> None:
    asking = Question(question_id="q", item_id="i", question="?")
    state = world(
        session("a", status="running", items=[prompt()]),
        session("b", items=[prompt()]),
        session("c", compaction_requested=True, items=[prompt(), answer()]),
        session("d", items=[prompt(), answer()]),
        session("e", status="waiting_user", questions={"q": asking}),
        session("f", status="interrupted", items=[prompt()]))
    sup, effects = step(ONE, state, Boot())
    assert starts(effects) == [StartTurn("a", resume=True), StartTurn("b"),
                               StartTurn("c", compact_only=True), StartTurn("e", resume=True)]
    assert said(effects) == ["resuming session a (running)",
                             "starting the waiting turn of session b",
                             "resuming session e (waiting_user)"]
    assert sup.running == {"a", "b", "c", "e"}
    # among replicas the sweep takes them instead
    assert step(REPLICA, state, Boot()) == (REPLICA, [])


def test_work_for() -> None:
    assert work_for(session(status="waiting_approval")) == "resume"
    assert work_for(session(status="waiting_worker")) == "resume"
    assert work_for(session(status="waiting_user")) is None  # no question pending
    assert work_for(session(items=[prompt(queued=True), answer()])) == "turn"
    assert work_for(session(status="error", items=[prompt()])) is None
    assert work_for(session(status="closed", compaction_requested=True)) == "compact"


def test_halt_cancels_every_turn_and_starts_nothing_after() -> None:
    state = world(session(S, items=[prompt()]), session(T, items=[prompt()]))
    sup, _ = run(ONE, state, prompted(sid=S), prompted(sid=T), prompted(sid=S))
    sup, effects = step(sup, state, Halt())
    assert effects == [CancelTurn(S), CancelTurn(T)] and sup.stopping
    # the cancelled turns end; the queued one does not start, nothing new starts
    sup, effects = run(sup, state, TurnEnded(S), TurnEnded(T), prompted(sid=T),
                       TurnWanted(S), Boot(), SweepTick())
    assert effects == [] and sup.running == frozenset()


@pytest.mark.parametrize("status", ["interrupted", "closed"])
def test_an_interrupt_or_a_close_cancels_the_running_turn(status: str) -> None:
    state = world(session(items=[prompt()]))
    sup, _ = step(ONE, state, prompted())
    changed = folded(ev.SessionStatusChanged(status=status))  # type: ignore[arg-type]
    assert step(sup, state, changed)[1] == [CancelTurn(S)]
    assert step(ONE, state, changed)[1] == []  # nothing runs: nothing to cancel


def test_a_closed_session_s_worker_stops_watching_it_when_it_can() -> None:
    closed = folded(ev.SessionStatusChanged(status="closed"))

    def worker(connected: bool, executors: list[str]) -> WorkerInfo:
        return WorkerInfo(worker_id=W, hostname="h", os="Linux", connected=connected,
                          capabilities=wk.Capabilities(executors=executors))

    able = world(session(), workers=[worker(True, ["detach_session"])])
    assert step(ONE, able, closed)[1] == [Detach(S, W)]
    for state in (world(session(), workers=[worker(False, ["detach_session"])]),
                  world(session(), workers=[worker(True, [])]), world(session())):
        assert step(ONE, state, closed)[1] == []


def test_a_changed_agents_md_reloads_the_running_turn_s_context() -> None:
    state = world(session(items=[prompt()]))
    sup, _ = step(ONE, state, prompted())
    changed = folded(ev.SessionWorkspaceChanged(paths=["src/x.py", "sub/AGENTS.md"]), ts=7.0)
    assert step(sup, state, changed)[1] == [ReloadContext(S, 7.0)]
    assert step(sup, state, folded(ev.SessionWorkspaceChanged(paths=["a.py"])))[1] == []
    assert step(ONE, state, changed)[1] == []  # a new turn loads it anyway


# among replicas -------------------------------------------------------------------------------

def test_a_prompt_without_the_lease_claims_the_session_first() -> None:
    state = world(session(items=[prompt()]))
    sup, effects = step(REPLICA, state, prompted())
    assert effects == [Claim(S, 0.0, "turn")] and sup.claiming == {S}
    assert step(sup, state, prompted())[1] == []  # one claim at a time
    # another replica's prompt: that replica runs the turn, unless it does not
    assert step(REPLICA, state, prompted(foreign=True))[1] == [
        Claim(S, FOREIGN_CLAIM_DELAY_S, "turn")]
    assert step(REPLICA, state, folded(ev.CompactionRequested()))[1] == [
        Claim(S, 0.0, "compact")]


def test_a_lease_held_without_a_known_holding_is_taken_again() -> None:
    state = world(session(items=[prompt()]))
    assert step(REPLICA, state, prompted(holding=Holding(held=True)))[1] == [Claim(S, 0.0, None)]


def test_a_held_lease_starts_the_turn_fenced() -> None:
    state = world(session(items=[prompt()]))
    sup = Supervisor(leased=True, lost=frozenset({S}))
    sup, effects = step(sup, state, prompted(holding=held()))
    assert effects == [StartTurn(S, fence=fence())]
    assert sup.running == {S} and sup.lost == frozenset()


def test_a_claim_taken_starts_what_the_session_needs() -> None:
    state = world(session(status="waiting_approval", items=[prompt()]))
    sup, _ = step(REPLICA, state, SweepTick())
    sup, effects = step(sup, state, FreeFound((S,)))
    assert effects == [Claim(S)]
    sup, effects = step(sup, state, LeaseTaken(S, None, held()))
    assert effects == [Say(logging.INFO, f"taking over session {S} (waiting_approval)"),
                       StartTurn(S, resume=True, fence=fence())]
    assert sup.claiming == frozenset() and sup.running == {S}


def test_a_claim_for_a_prompt_to_an_interrupted_session_starts_its_turn() -> None:
    state = world(session(status="interrupted", items=[prompt()]))
    sup, _ = step(REPLICA, state, prompted())
    assert step(sup, state, LeaseTaken(S, "turn", held()))[1] == [StartTurn(S, fence=fence())]
    # a sweep's claim does not start it: nobody asked
    assert step(sup, state, LeaseTaken(S, None, held()))[1] == [Release(S)]


def test_a_claim_of_a_finished_session_lets_the_lease_go() -> None:
    state = world(session(items=[prompt(), answer()]))  # its last owner finished it
    sup, _ = step(REPLICA, state, prompted())
    sup, effects = step(sup, state, LeaseTaken(S, "turn", held()))
    assert effects == [Release(S)] and sup == REPLICA


def test_a_claim_refused_or_failed_is_forgotten() -> None:
    state = world(session(items=[prompt()]))
    sup, _ = step(REPLICA, state, prompted())
    sup, effects = step(sup, state, ClaimFailed(S))
    assert effects == [] and sup == REPLICA
    assert step(sup, state, prompted())[1] == [Claim(S, 0.0, "turn")]  # the next may go


def test_a_claim_that_ends_after_the_stop_starts_nothing() -> None:
    state = world(session(status="running", items=[prompt()]))
    sup, _ = run(REPLICA, state, TurnWanted(S, "resume"), Halt())
    sup, effects = step(sup, state, LeaseTaken(S, "resume", held()))
    assert effects == [Release(S)] and sup.running == frozenset()


def test_a_finished_turn_releases_its_lease() -> None:
    state = world(session(items=[prompt(), answer()]))
    sup, _ = step(REPLICA, state, prompted(holding=held()))
    sup, effects = step(sup, state, TurnEnded(S, None, held()))
    assert effects == [Release(S)] and sup == REPLICA


def test_a_queued_turn_among_replicas_keeps_the_lease() -> None:
    state = world(session(items=[prompt(), answer(), prompt(n=2)]))
    sup, _ = run(REPLICA, state, prompted(holding=held()), prompted(holding=held()))
    sup, effects = step(sup, state, TurnEnded(S, None, held()))
    assert effects == [StartTurn(S, fence=fence())]


def test_a_turn_whose_fenced_write_was_refused_stops_and_queues_nothing() -> None:
    state = world(session(items=[prompt(), answer(), prompt(n=2)]))
    sup, _ = run(REPLICA, state, prompted(holding=held()), prompted(holding=held()))
    sup, effects = step(sup, state, TurnEnded(S, "session:ses_1", held()))
    assert effects == [
        Say(logging.WARNING, f"session {S}: stopped its turn here at once (session:ses_1); "
                             "the replica that took it over goes on"),
        Release(S)]  # (a no-op on the newer row)
    assert sup == REPLICA


def test_a_lease_lost_while_the_turn_runs_cancels_it_and_keeps_its_row() -> None:
    state = world(session(items=[prompt()]))
    sup, _ = step(REPLICA, state, prompted(holding=held()))
    sup, effects = step(sup, state, HoldingLost(S))
    assert effects == [Say(logging.WARNING, f"session {S}: its lease went to another replica; "
                                            "stopping here"), CancelTurn(S)]
    assert sup.lost == {S}
    sup, effects = step(sup, state, TurnEnded(S, None, Holding()))
    assert effects == [] and sup.running == frozenset()  # no release: the row is another's
    assert step(REPLICA, state, HoldingLost(S)) == (REPLICA, [])  # nothing ran here


def test_the_sweep_asks_for_the_sessions_nobody_runs() -> None:
    state = world(session("a", status="running"), session("b", items=[prompt()]),
                  session("c", items=[prompt(), answer()]), session("d", status="waiting_worker"),
                  session("e", compaction_requested=True))
    sup, _ = run(REPLICA, state, TurnWanted("d", "resume", held("d")),  # runs here
                 TurnWanted("e", "compact"))  # being claimed
    sup, effects = step(sup, state, SweepTick())
    assert effects == [FindFree(("a", "b"))]
    sup, effects = step(sup, state, FreeFound(("b", "e")))
    assert effects == [Claim("b")] and sup.claiming == {"b", "e"}
    assert step(Supervisor(leased=True, stopping=True), state, SweepTick())[1] == []


# a session's processes ------------------------------------------------------------------------

def _process(pid: str, status: str = "running", worker: str = W,
             forwards: Iterable[int] = ()) -> SessionProcess:
    return SessionProcess(process_id=pid, item_id="i", worker_id=worker, argv=["x"],
                          status=status,  # type: ignore[arg-type]
                          forwards=[PortForward(port=p) for p in forwards])


def test_a_worker_back_is_asked_for_the_processes_it_may_still_run() -> None:
    state = world(session("a", processes=[_process("p1")]),
                  session("b", processes=[_process("p2", status="ended")]),
                  session("c", processes=[_process("p3", worker="wrk_2")]),
                  session("d", processes=[_process("p4", status="stopping")]))
    connected = folded(ev.WorkerConnected(worker_id=W, hostname="h", os="Linux",
                                          worker_version="0"), sid=None)
    assert step(ONE, state, connected)[1] == [ListProcesses("a", W), ListProcesses("d", W)]
    # the replica holding its socket asks
    assert step(ONE, state, Folded(connected.env, foreign=True))[1] == []


def test_stops_and_forwards_go_out_from_the_replica_that_decided_them() -> None:
    state = world(session(processes=[_process("p1")]))
    stop = folded(ev.ProcessStopRequested(process_id="p1"))
    forward = folded(ev.ProcessForwardRequested(process_id="p1", port=8000))
    assert step(ONE, state, stop)[1] == [StopProcess(S, "p1")]
    assert step(ONE, state, forward)[1] == [ForwardPort(S, "p1", 8000)]
    assert step(ONE, state, Folded(stop.env, foreign=True))[1] == []
    assert step(ONE, state, Folded(forward.env, foreign=True))[1] == []


def test_after_a_listing_what_was_asked_while_the_worker_was_away_goes_out() -> None:
    state = world(session(processes=[
        _process("p1", status="stopping", forwards=[3000]),
        _process("p2", forwards=[8000, 8001]),
        _process("p3", status="gone", forwards=[9000]),
        _process("p4", status="stopping", worker="wrk_2")]))
    state.sessions[S].processes[1].forwards[1].status = "open"
    assert step(ONE, state, ProcessesListed(S, W))[1] == [
        StopProcess(S, "p1"), ForwardPort(S, "p1", 3000), ForwardPort(S, "p2", 8000)]
    assert step(ONE, state, ProcessesListed("ses_gone", W))[1] == []


# properties -----------------------------------------------------------------------------------

SIDS = ["a", "b", "c"]
statuses = st.sampled_from(["idle", "running", "interrupted", "error", "closed"])


@st.composite
def states(draw: st.DrawFn) -> State:
    sessions = []
    for sid in SIDS:
        items: list[Any] = [prompt()] if draw(st.booleans()) else []
        if items and draw(st.booleans()):
            items.append(answer())
        sessions.append(session(sid, status=draw(statuses), items=items,
                                agent=draw(st.sampled_from([None, "codex"])),
                                compaction_requested=draw(st.booleans())))
    return world(*sessions)


@st.composite
def holdings(draw: st.DrawFn, sid: str) -> Holding:
    kind = draw(st.sampled_from(["none", "held", "unknown"]))
    return Holding() if kind == "none" else held(sid) if kind == "held" else Holding(True)


@st.composite
def inputs(draw: st.DrawFn, sup: Supervisor) -> Input:
    """An input the service could feed the supervisor as it is: a turn ends only if it runs,
    a claim answers only if it is under way."""
    sid = draw(st.sampled_from(SIDS))
    holding = draw(holdings(sid))
    choices: list[Input] = [
        prompted(sid=sid, holding=holding, foreign=draw(st.booleans())),
        folded(ev.CompactionRequested(), sid=sid, holding=holding),
        folded(ev.SessionStatusChanged(status="interrupted"), sid=sid),
        TurnWanted(sid, draw(st.sampled_from(["turn", "resume", "compact"])), holding),
        HoldingLost(sid), SweepTick(), FreeFound(tuple(draw(st.permutations(SIDS)))),
        Boot()]
    if sid in sup.running:
        choices.append(TurnEnded(sid, draw(st.sampled_from([None, "lost"])), holding))
    if sid in sup.claiming:
        choices += [LeaseTaken(sid, draw(st.sampled_from([None, "turn"])), holding),
                    ClaimFailed(sid)]
    if draw(st.integers(0, 30)) == 0:
        choices.append(Halt())
    return draw(st.sampled_from(choices))


@settings(max_examples=100, deadline=None)
@given(state=states(), leased=st.booleans(), data=st.data())
def test_whatever_comes_in_one_turn_per_session_and_leases_only_among_replicas(
        state: State, leased: bool, data: st.DataObject) -> None:
    sup = Supervisor(leased=leased)
    running: set[str] = set()  # the tasks the service would have, by its effects
    for _ in range(30):
        i = data.draw(inputs(sup))
        before = sup
        sup, effects = step(sup, state, i)
        assert step(before, state, i) == (sup, effects)  # pure: the same answer again
        if isinstance(i, TurnEnded):
            running.discard(i.session_id)
        for e in effects:
            if isinstance(e, StartTurn):
                assert e.session_id not in running  # never two turns of a session
                assert not before.stopping
                assert (e.fence is not None) == leased
                assert not (e.acp and e.compact_only)
                running.add(e.session_id)
            elif isinstance(e, CancelTurn):
                assert e.session_id in running
            elif isinstance(e, Claim):
                assert leased and not before.stopping
                # one claim at a time (a claim taken may need another: its holding went)
                assert e.session_id not in before.claiming or isinstance(i, LeaseTaken)
            elif isinstance(e, Release):
                assert leased and e.session_id not in sup.running
            elif isinstance(e, FindFree):
                assert leased and not before.stopping
                assert not set(e.session_ids) & (sup.running | sup.claiming)
        assert sup.running == running
        assert sup.rerun <= sup.running  # a queued turn follows one that runs
        assert sup.leased == leased and (sup.stopping or not before.stopping)
        if not leased:
            assert sup.claiming == sup.lost == frozenset()


# the attention ladder's park ------------------------------------------------------------------

def test_a_turn_that_parks_itself_is_not_cancelled_and_its_answer_resumes_it() -> None:
    parked = world(session(status="interrupted", parked_on="apr_1"))
    running = Supervisor(running=frozenset({S}))
    # the park's own status change: the turn ends by itself (cancelling it would close the
    # approval it keeps)
    _, effects = step(running, parked, folded(ev.SessionStatusChanged(status="interrupted")))
    assert effects == []
    sup, _ = step(running, parked, TurnEnded(S))
    # the answer to what it waits for resumes it; another approval's does not
    assert step(sup, parked, folded(ev.ApprovalResolved(approval_id="apr_2",
                                                        decision="approved")))[1] == []
    _, effects = step(sup, parked, folded(ev.ApprovalResolved(approval_id="apr_1",
                                                              decision="approved")))
    assert effects == [StartTurn(S, resume=True)]
    # a user's interrupt still cancels a running turn
    plain = world(session(status="interrupted"))
    assert step(running, plain, folded(ev.SessionStatusChanged(status="interrupted")))[1] == \
        [CancelTurn(S)]


def test_a_parked_question_is_resumed_by_its_answer() -> None:
    parked = world(session(status="interrupted", parked_on="qst_1"))
    _, effects = step(ONE, parked, folded(ev.QuestionAnswered(question_id="qst_1",
                                                              answer="yes")))
    assert starts(effects) == [StartTurn(S, resume=True)]
