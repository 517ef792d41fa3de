"""The exactly-once core (``core/router.py``) on its own: inputs in, effects out, no loop."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codey_protocol import worker as wk
from codey_server.core.actions import ActionFailed
from codey_server.core.router import (
    CancelElsewhere,
    Deliver,
    Effect,
    Record,
    RecordProgress,
    Route,
    Router,
    Send,
    Settle,
)
from codey_server.eventlog import Fence

FENCE = Fence("session:s", 2, "r1")

def read(action_id: str = "a1") -> wk.ReadFile:
    return wk.ReadFile(action_id=action_id, session_id="s", workdir="/w", path=action_id)


def content(action_id: str = "a1") -> wk.FileContent:
    return wk.FileContent(path=action_id, content="x", size=1, total_lines=1)


def result(action_id: str = "a1") -> wk.ActionResult:
    return wk.ActionResult(action_id=action_id, result=content(action_id))


def progress(action_id: str = "a1", data: str = "out") -> wk.ActionProgress:
    return wk.ActionProgress(action_id=action_id, stream="stdout", data=data)


def sends(effects: list[Effect]) -> list[tuple[Any, str]]:
    return [(e.link, e.message.action_id if not isinstance(e.message, wk.Cancel)
             else f"cancel {e.message.target_action_id}")
            for e in effects if isinstance(e, Send)]


def settled(effects: list[Effect]) -> dict[Any, Any]:
    return {w: e.outcome for e in effects if isinstance(e, Settle) for w in e.waiters}


# one server ---------------------------------------------------------------------------------


def test_an_action_goes_out_once_on_the_link_and_joiners_wait_for_the_same_answer() -> None:
    r = Router()
    r.linked("w1", "L1")
    assert sends(r.submit("w1", read(), "first")) == [("L1", "a1")]
    assert r.submit("w1", read(), "second") == []
    assert r.state("a1") == "sent"
    assert settled(r.received("w1", "L1", result())) == {"first": content(),
                                                         "second": content()}
    assert r.received("w1", "L1", wk.ActionErrored(action_id="a1", code="x", message="y")) == []
    r.leave("a1", "first")
    r.leave("a1", "second")
    assert r.state("a1") is None


def test_a_waiter_joining_after_the_outcome_gets_it_at_once() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read(), "first")
    r.received("w1", "L1", result())
    assert r.submit("w1", read(), "late") == [Settle("a1", content(), ("late",))]


def test_without_a_link_it_waits_and_goes_out_when_the_worker_links() -> None:
    r = Router()
    assert r.submit("w1", read(), "caller") == []
    assert r.state("a1") == "pending"
    assert sends(r.linked("w1", "L1")) == [("L1", "a1")]


def test_every_new_link_gets_the_unanswered_actions_again_with_their_ids() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read("a1"), "c1")
    r.submit("w1", read("a2"), "c2")
    r.received("w1", "L1", result("a2"))
    assert r.unlinked("w1", "L1") is True
    assert r.state("a1") == "pending"
    assert sends(r.linked("w1", "L2")) == [("L2", "a1")]  # a2 was answered


def test_a_reconnect_does_not_resend_what_the_worker_says_it_runs() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read("a1"), "c1")
    r.submit("w1", read("a2"), "c2")
    r.unlinked("w1", "L1")
    assert sends(r.linked("w1", "L2", running=["a1"])) == [("L2", "a2")]
    assert r.state("a1") == "accepted"
    assert settled(r.received("w1", "L2", result("a1"))) == {"c1": content("a1")}


def test_an_acknowledged_action_is_not_sent_again_on_that_link() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read(), "first")
    r.received("w1", "L1", wk.ActionAccepted(action_id="a1"))
    assert r.state("a1") == "accepted"
    r.leave("a1", "first")  # gave up: forgotten
    assert r.state("a1") is None
    # asked again (a resumed turn): the worker still has it, its answer comes on this link
    assert r.submit("w1", read(), "again") == []
    assert settled(r.received("w1", "L1", result())) == {"again": content()}
    r.leave("a1", "again")
    # answered: the worker holds it no more, so asking again sends it (the record answers)
    assert sends(r.submit("w1", read(), "third")) == [("L1", "a1")]


def test_an_old_links_acknowledgement_holds_nothing_on_the_new_one() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.linked("w1", "L2")
    r.received("w1", "L1", wk.ActionAccepted(action_id="a1"))
    assert sends(r.submit("w1", read(), "c")) == [("L2", "a1")]
    # an answer on the old link still counts (the worker's last frames there)
    assert settled(r.received("w1", "L1", result())) == {"c": content()}


def test_an_action_nobody_waits_for_is_forgotten_and_its_late_answer_ignored() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read(), "caller")
    assert r.leave("a1", "caller") == []
    assert r.state("a1") is None
    assert r.received("w1", "L1", result()) == []
    r.unlinked("w1", "L1")
    assert r.linked("w1", "L2") == []  # never sent again


def test_a_caller_cut_off_while_sending_leaves_the_send_to_the_others() -> None:
    r = Router()
    r.linked("w1", "L1")
    [send] = r.submit("w1", read(), "first")
    r.submit("w1", read(), "second")
    assert sends(r.leave("a1", "first", cut=send)) == [("L1", "a1")]
    # alone, it takes the action with it
    r2 = Router()
    r2.linked("w1", "L1")
    [send] = r2.submit("w1", read(), "only")
    assert r2.leave("a1", "only", cut=send) == []
    assert r2.state("a1") is None


def test_a_cut_send_on_a_link_already_replaced_is_not_repeated() -> None:
    r = Router()
    r.linked("w1", "L1")
    [send] = r.submit("w1", read(), "first")
    r.submit("w1", read(), "second")
    assert sends(r.linked("w1", "L2")) == [("L2", "a1")]
    assert r.leave("a1", "first", cut=send) == []


def test_answers_count_only_from_the_actions_own_worker() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.linked("w2", "L2")
    r.submit("w1", read(), "caller", listener="on_progress")
    assert r.received("w2", "L2", progress()) == []
    assert r.received("w2", "L2", result()) == []
    assert r.state("a1") == "sent"


def test_progress_goes_to_the_latest_listener() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read(), "first", listener="p1")
    assert r.received("w1", "L1", progress()) == [Deliver("p1", progress())]
    r.submit("w1", read(), "second", listener="p2")
    r.submit("w1", read(), "third")  # no listener: keeps p2
    assert r.received("w1", "L1", progress()) == [Deliver("p2", progress())]
    r.received("w1", "L1", result())
    assert r.received("w1", "L1", progress()) == []  # after the outcome


def test_a_listener_leaves_with_its_caller() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read(), "first", listener="p1")
    r.submit("w1", read(), "second", listener="p2")
    r.leave("a1", "second")  # its turn stopped: its callback must not get more output
    assert r.received("w1", "L1", progress()) == [Deliver("p1", progress())]
    r.leave("a1", "first")
    assert r.received("w1", "L1", progress()) == []


def test_cancel_with_the_worker_here_is_a_cancel_frame_once_per_link() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read(), "caller")
    assert sends(r.cancel("w1", "a1", "s", "c1")) == [("L1", "cancel a1")]
    assert r.cancel("w1", "a1", "s", "c2") == []
    assert r.state("a1") == "sent"  # the worker answers the target itself
    r.unlinked("w1", "L1")
    r.linked("w1", "L2")
    assert sends(r.cancel("w1", "a1", "s", "c3")) == [("L2", "cancel a1")]


def test_cancel_while_the_worker_is_away_settles_it_and_it_is_never_sent() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read(), "caller")
    r.unlinked("w1", "L1")
    effects = r.cancel("w1", "a1", "s", "c1")
    outcome = settled(effects)["caller"]
    assert isinstance(outcome, ActionFailed) and outcome.code == "cancelled"
    assert outcome.message == "cancelled while the worker was away"
    assert not any(isinstance(e, Record) for e in effects)  # one server: nothing to record
    assert r.cancel("w1", "gone", "s", "c2") == []
    assert r.linked("w1", "L2") == []


def test_revocation_fails_every_action_of_that_worker_only() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read("a1"), "c1")
    r.submit("w1", read("a2"), "c2")
    r.submit("w2", read("b1"), "c3")
    outcomes = settled(r.revoked("w1"))
    assert set(outcomes) == {"c1", "c2"}
    assert all(isinstance(o, ActionFailed) and o.code == "revoked" for o in outcomes.values())
    assert r.state("b1") == "pending"


def test_a_replaced_links_end_changes_nothing() -> None:
    r = Router()
    r.linked("w1", "L1")
    r.submit("w1", read(), "caller")
    r.linked("w1", "L2")
    assert r.unlinked("w1", "L1") is False
    assert r.link("w1") == "L2" and r.state("a1") == "sent"


def test_attachments_belong_to_the_workers_connection() -> None:
    r = Router()
    r.linked("w1", "L1", known_sessions=["s1"])
    assert r.is_attached("w1", "s1") and not r.is_attached("w1", "s2")
    listed = [wk.McpServerInfo(name="git")]
    r.attached("w1", "s2", listed)
    r.presence_changed("w1")  # the fold catching up with this very link: kept
    assert r.is_attached("w1", "s2")
    assert r.mcp_servers("w1", "s2") is listed and r.mcp_servers("w1", "s1") == []
    r.unlinked("w1", "L1")
    assert not r.is_attached("w1", "s1") and r.mcp_servers("w1", "s2") == []
    r.attached("w1", "s3")  # attached through another replica's socket
    r.presence_changed("w1")  # it reconnected somewhere: attach afresh
    assert not r.is_attached("w1", "s3")


# among replicas ------------------------------------------------------------------------------


def test_routed_an_action_is_written_first_then_sent_when_the_worker_is_here() -> None:
    r = Router(routed=True)
    r.linked("w1", "L1")
    assert r.submit("w1", read(), "caller", listener="p") == [Route("w1", read(), here=True)]
    assert r.state("a1") == "routing"
    assert r.submit("w1", read(), "joiner") == []
    assert sends(r.route_done("a1", None)) == [("L1", "a1")]
    assert r.awaiting_elsewhere() == []  # the same-replica shortcut: nothing read back
    # the output goes straight to the caller, and is written first for a take-over
    assert r.received("w1", "L1", progress()) == [RecordProgress(progress()),
                                                  Deliver("p", progress())]
    effects = r.received("w1", "L1", result())
    assert settled(effects) == {"caller": content(), "joiner": content()}
    assert Record("a1", content()) in effects  # for a take-over, and so nobody picks it up


def test_routed_an_outcome_already_recorded_answers_at_once() -> None:
    r = Router(routed=True)
    r.submit("w1", read(), "caller")
    effects = r.route_done("a1", content())
    assert settled(effects) == {"caller": content()}
    assert not any(isinstance(e, (Record, Send)) for e in effects)


def test_routed_an_outcome_already_recorded_comes_after_the_output_before_it() -> None:
    # a take-over's re-send of an action that finished meanwhile: its caller wants the output
    # the worker streamed while the session had no owner, so it reads that first
    r = Router(routed=True)
    r.linked("w1", "L1")
    r.submit("w1", read(), "caller", listener="p")
    assert r.route_done("a1", content(), existed=True) == []  # nothing sent
    assert r.awaiting_elsewhere() == ["a1"] and r.wants_progress("a1")
    assert r.received("w1", "L1", result()) == []  # (a late repeat of the answer)
    assert r.linked("w1", "L2") == []
    assert r.progressed("a1", progress()) == [Deliver("p", progress())]
    assert settled(r.answered("a1", content())) == {"caller": content()}


def test_routed_with_the_worker_elsewhere_output_and_outcome_come_from_the_database() -> None:
    r = Router(routed=True)
    assert r.submit("w1", read(), "caller", listener="p") == [Route("w1", read(), here=False)]
    assert r.awaiting_elsewhere() == []  # not written yet
    assert r.route_done("a1", None) == []
    assert r.awaiting_elsewhere() == ["a1"] and r.wants_progress("a1")
    assert r.progressed("a1", progress()) == [Deliver("p", progress())]
    effects = r.answered("a1", content())
    assert settled(effects) == {"caller": content()}
    assert not any(isinstance(e, Record) for e in effects)  # it came from there
    assert r.answered("a1", ActionFailed("x", "y")) == []


def test_routed_a_caller_cut_off_while_writing_leaves_the_write_to_the_others() -> None:
    r = Router(routed=True)
    [route] = r.submit("w1", read(), "first")
    r.submit("w1", read(), "second")
    assert r.leave("a1", "first", cut=route) == [Route("w1", read(), here=False)]


def test_routed_carrying_out_for_another_replica_writes_output_and_outcome() -> None:
    r = Router(routed=True)
    r.linked("w1", "L1")
    assert sends(r.carry("w1", read())) == [("L1", "a1")]
    assert r.carry("w1", read()) == []  # picked up again: once
    assert r.received("w1", "L1", progress()) == [RecordProgress(progress())]
    assert r.received("w1", "L1", result()) == [Record("a1", content())]
    assert r.state("a1") is None


def test_routed_the_same_replicas_action_is_carried_on_when_its_caller_leaves() -> None:
    r = Router(routed=True)
    r.linked("w1", "L1")
    r.submit("w1", read(), "caller")
    r.route_done("a1", None)
    r.leave("a1", "caller")  # interrupted: the worker's answer is still recorded
    assert r.state("a1") == "sent"
    assert r.received("w1", "L1", result()) == [Record("a1", content())]


def test_routed_output_after_its_caller_left_is_written_for_whoever_takes_over() -> None:
    # the session was here, on the worker's replica, and went to another replica: the output
    # that follows is written for that one, not given to the callback of the turn that stopped
    r = Router(routed=True)
    r.linked("w1", "L1")
    r.submit("w1", read(), "caller", listener="on_progress")
    r.route_done("a1", None)
    assert r.received("w1", "L1", progress()) == [RecordProgress(progress()),
                                                  Deliver("on_progress", progress())]
    r.leave("a1", "caller")  # the lease went elsewhere
    assert not r.wants_progress("a1")
    later = progress(data="later")
    assert r.received("w1", "L1", later) == [RecordProgress(later)]
    assert r.received("w1", "L1", result()) == [Record("a1", content())]


def test_routed_a_take_over_of_an_action_carried_here_reads_its_output_back_in_order() -> None:
    # carried out here for the replica the session was on; the session is taken over here:
    # its caller gets the whole output from the database, then the outcome, in that order
    # (the output before it joined is there, not on the link)
    r = Router(routed=True)
    r.linked("w1", "L1")
    r.carry("w1", read())
    early = progress(data="early")
    assert r.received("w1", "L1", early) == [RecordProgress(early)]
    assert r.submit("w1", read(), "caller", listener="on_progress") == []
    assert r.awaiting_elsewhere() == ["a1"] and r.wants_progress("a1")
    later = progress(data="later")
    assert r.received("w1", "L1", later) == [RecordProgress(later)]  # not handed over
    assert r.received("w1", "L1", result()) == [Record("a1", content())]  # nor settled
    assert r.received("w1", "L1", result()) == []
    assert r.awaiting_elsewhere() == ["a1"]
    # the read-back: both frames, then the outcome
    assert r.progressed("a1", early) == [Deliver("on_progress", early)]
    assert r.progressed("a1", later) == [Deliver("on_progress", later)]
    assert settled(r.answered("a1", content())) == {"caller": content()}
    assert r.awaiting_elsewhere() == []


def test_routed_a_re_sent_action_with_the_worker_here_reads_its_output_back() -> None:
    # a take-over re-sends an action written before (by the session's last replica): with
    # the worker here, its output still comes from the database, from its start
    r = Router(routed=True)
    r.linked("w1", "L1")
    [route] = r.submit("w1", read(), "caller", listener="p", fence=FENCE)
    assert route == Route("w1", read(), here=True, fence=FENCE)
    assert sends(r.route_done("a1", None, existed=True)) == [("L1", "a1")]
    assert r.awaiting_elsewhere() == ["a1"]
    assert r.received("w1", "L1", progress()) == [RecordProgress(progress())]
    assert r.received("w1", "L1", result()) == [Record("a1", content())]
    assert r.linked("w1", "L2") == []  # answered: not sent again on a new link
    assert settled(r.answered("a1", content())) == {"caller": content()}


def test_routed_a_route_done_again_carries_the_first_callers_fence() -> None:
    r = Router(routed=True)
    [route] = r.submit("w1", read(), "first", fence=FENCE)
    r.submit("w1", read(), "second")
    assert r.leave("a1", "first", cut=route) == [Route("w1", read(), here=False, fence=FENCE)]


def test_routed_a_carried_action_answered_elsewhere_is_dropped() -> None:
    r = Router(routed=True)
    r.linked("w1", "L1")
    r.carry("w1", read())
    r.unlinked("w1", "L1")  # the worker went to another replica, which answers
    assert r.awaiting_elsewhere() == ["a1"]
    assert r.answered("a1", content()) == []
    assert r.state("a1") is None


def test_routed_pick_up_of_an_action_its_own_caller_is_writing_adds_nothing() -> None:
    r = Router(routed=True)
    r.linked("w1", "L1")
    r.submit("w1", read(), "caller")
    assert r.carry("w1", read()) == []
    assert sends(r.route_done("a1", None)) == [("L1", "a1")]


def test_routed_cancel_goes_to_the_workers_replica_or_is_recorded_when_away() -> None:
    r = Router(routed=True)
    r.submit("w1", read(), "caller")
    r.route_done("a1", None)
    assert r.cancel("w1", "a1", "s", "c1", elsewhere=True) == [CancelElsewhere("w1", "a1", "s")]
    effects = r.cancel("w1", "a1", "s", "c2")
    assert settled(effects)["caller"].code == "cancelled"
    assert next(e for e in effects if isinstance(e, Record)).action_id == "a1"
    # the caller had already left (an interrupt): still recorded, so no replica sends it
    assert [type(e) for e in r.cancel("w1", "a9", "s", "c3")] == [Record]


# properties ----------------------------------------------------------------------------------

IDS = ["a1", "a2", "a3"]

op = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(IDS)),
    st.tuples(st.just("leave"), st.integers(0, 20)),
    st.tuples(st.just("submit_cut"), st.sampled_from(IDS)),
    st.tuples(st.just("link")),
    st.tuples(st.just("unlink")),
    st.tuples(st.just("accept"), st.sampled_from(IDS)),
    st.tuples(st.just("answer"), st.sampled_from(IDS)),
    st.tuples(st.just("answer_offline"), st.sampled_from(IDS)),
    st.tuples(st.just("cancel"), st.sampled_from(IDS)),
)


class _World:
    """A router, its callers and a worker that runs each action id once and answers a
    repeat from its record, connected by links that come and go."""

    def __init__(self) -> None:
        self.r = Router()
        self.link: str | None = None
        self.links = 0
        self.running: set[str] = set()  # got, not answered yet
        self.done: set[str] = set()  # answered (its record)
        self.waiting: dict[int, str] = {}  # waiter -> action id
        self.asked: dict[int, str] = {}
        self.outcomes: dict[int, Any] = {}
        self.left: set[int] = set()
        self.waiter_no = 0
        self.sent: Counter[tuple[str, str, int]] = Counter()  # (link, id, generation)
        self.generation: Counter[str] = Counter()

    def apply(self, effects: list[Effect]) -> None:
        queue = list(effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, Settle):
                for waiter in effect.waiters:
                    assert waiter not in self.left, "settled a waiter that had left"
                    assert waiter not in self.outcomes, "settled a waiter twice"
                    self.outcomes[waiter] = effect.outcome  # type: ignore[index]
            elif isinstance(effect, Send) and isinstance(effect.message, wk.ReadFile):
                aid = effect.message.action_id
                assert effect.link == self.link, "sent on a link that is not the current one"
                key = (effect.link, aid, self.generation[aid])
                self.sent[key] += 1
                assert self.sent[key] == 1, "sent twice on one link"
                if aid in self.done:  # answered from the record
                    queue += self.r.received("w1", effect.link, result(aid))
                else:
                    self.running.add(aid)

    def step(self, o: tuple[Any, ...]) -> None:
        kind = o[0]
        if kind in ("submit", "submit_cut"):
            w = self.waiter_no
            self.waiter_no += 1
            if self.r.state(o[1]) is None:
                self.generation[o[1]] += 1
            self.waiting[w] = self.asked[w] = o[1]
            effects = self.r.submit("w1", read(o[1]), w)
            cut = next((e for e in effects if isinstance(e, Send)), None)
            if kind == "submit" or cut is None:
                self.apply(effects)
            else:  # the caller is stopped while its send is on the way: it never arrives
                self.apply([e for e in effects if e is not cut])
                del self.waiting[w]
                self.left.add(w)
                self.apply(self.r.leave(o[1], w, cut))
        elif kind == "leave" and self.waiting:
            w = sorted(self.waiting)[o[1] % len(self.waiting)]
            self.left.add(w)
            self.apply(self.r.leave(self.waiting.pop(w), w))
        elif kind == "link":
            self.links += 1
            self.link = f"L{self.links}"
            self.apply(self.r.linked("w1", self.link, running=sorted(self.running)))
        elif kind == "unlink" and self.link is not None:
            self.r.unlinked("w1", self.link)
            self.link = None
        elif kind == "accept" and self.link is not None and o[1] in self.running:
            self.apply(self.r.received("w1", self.link, wk.ActionAccepted(action_id=o[1])))
        elif kind == "answer" and self.link is not None and o[1] in self.running:
            self.running.discard(o[1])
            self.done.add(o[1])
            self.apply(self.r.received("w1", self.link, result(o[1])))
        elif kind == "answer_offline" and self.link is None and o[1] in self.running:
            self.running.discard(o[1])  # recorded; the frame is lost with the connection
            self.done.add(o[1])
        elif kind == "cancel":
            effects = self.r.cancel("w1", o[1], "s", "c")
            self.apply(effects)
        for w in [w for w in self.waiting if w in self.outcomes]:
            self.left.add(w)
            self.apply(self.r.leave(self.waiting.pop(w), w))


@settings(max_examples=400, deadline=None)
@given(st.lists(op, max_size=40))
def test_exactly_once_whatever_the_order_of_events(ops: list[tuple[Any, ...]]) -> None:
    world = _World()
    for o in ops:
        world.step(o)
    # in the end the worker is back and answers everything it has: nobody waits for ever
    world.step(("link",))
    for _ in range(2 * len(IDS)):
        for aid in sorted(world.running):
            world.step(("answer", aid))
    assert world.waiting == {}, f"still waiting: {world.waiting}"
    for w, outcome in world.outcomes.items():
        assert outcome == content(world.asked[w]) or (
            isinstance(outcome, ActionFailed) and outcome.code == "cancelled")
