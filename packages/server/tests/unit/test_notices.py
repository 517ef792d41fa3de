"""``codey_server.core.notices``: what the user is told, for push and chat alike — no I/O."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codey_protocol import events as ev
from codey_protocol.state import Approval, Question, SessionInfo, State
from codey_server.core import notices
from codey_server.push.service import payload


def _session(sid: str = "ses_0123456789abcdef", **kw: object) -> SessionInfo:
    base: dict[str, object] = {"session_id": sid, "title": "Fix it", "worker_id": "w",
                               "workdir": "/p", "provider": "p", "model": "m"}
    return SessionInfo(**{**base, **kw})  # type: ignore[arg-type]


def _env(event: ev.Event, sid: str = "ses_0123456789abcdef", seq: int = 9) -> ev.Envelope:
    return ev.Envelope(seq=seq, ts=100.0, session_id=sid, event=event)


def _with_approval(kind: str = "command", **session_kw: object) -> tuple[State, Approval]:
    a = Approval(approval_id="apr_1", item_id="i", kind=kind, command=["rm", "-rf", "build"],
                 reason="cleans the build")
    s = _session(**session_kw)
    s.approvals[a.approval_id] = a
    return State(sessions={s.session_id: s}), a


def test_an_approval_is_one_notice_with_decisions_bound_to_its_action() -> None:
    state, a = _with_approval()
    (n,) = notices.notices(state, _env(ev.ApprovalRequested(
        approval_id="apr_1", item_id="i", kind="command", command=a.command)))
    assert n.kind == "approval" and n.key == "approval:apr_1" and not n.risky
    assert n.title == "Approval needed in “Fix it” (01234567): run"
    assert n.body == "$ rm -rf build\ncleans the build"
    assert n.tag == "codey-session:ses_0123456789abcdef"
    assert n.path == "/#/session/ses_0123456789abcdef"
    assert [x.decision for x in n.actions] == ["approve", "approve_for_session", "reject"]
    assert n.action_hash == notices.action_hash(a)
    # the push carries Approve and Reject only
    assert [x["action"] for x in payload(n, ts=1.0)["actions"]] == ["approve", "reject"]
    a.command = ["rm", "-rf", "/"]  # another action: another hash
    assert notices.action_hash(a) != n.action_hash


@pytest.mark.parametrize(("kind", "sandbox"), [("escalate", "workspace-write"),
                                               ("delegate", "workspace-write"),
                                               ("command", "full-access")])
def test_a_risky_approval_has_no_decisions_and_is_refused_from_outside(
        kind: str, sandbox: str) -> None:
    state, a = _with_approval(kind, sandbox=sandbox)
    n = notices.approval_notice(state.sessions["ses_0123456789abcdef"], a)
    assert n.risky and n.actions == () and n.body.endswith("Open Codey to decide.")
    assert payload(n, ts=1.0)["actions"] == []
    assert "app only" in (notices.stale_reason(state, "apr_1", n.action_hash) or "")


def test_a_stale_decision_says_what_happened() -> None:
    state, a = _with_approval()
    shown = notices.action_hash(a)
    assert notices.stale_reason(state, "apr_1", shown) is None
    assert "changed" in (notices.stale_reason(state, "apr_1", "0" * 32) or "")
    assert notices.stale_reason(state, "apr_nope", shown) == "That approval is gone"
    a.status = "approved"
    assert notices.stale_reason(state, "apr_1", shown) == "Already decided: ✅ approved"
    a.status = "expired"
    assert notices.stale_reason(state, "apr_1", shown) == "Already decided: ⌛ expired"


def test_questions_failures_and_answers() -> None:
    s = _session()
    s.questions["q1"] = Question(question_id="q1", item_id="i", question="Which DB?",
                                 choices=["sqlite", "pg"])
    state = State(sessions={s.session_id: s})
    (q,) = notices.notices(state, _env(ev.QuestionAsked(question_id="q1", item_id="i",
                                                        question="Which DB?")))
    assert (q.kind, q.title, q.body) == ("question", "Question from “Fix it”",
                                         "Which DB?\n- sqlite\n- pg")
    assert q.actions == ()

    s.items.append(ev.AssistantMessage(id="m1", ts=0.0, text="\nDone: 3 files.\nDetails…"))
    s.status = "idle"
    (done,) = notices.notices(state, _env(ev.SessionStatusChanged(status="idle")))
    assert (done.kind, done.key, done.body) == ("finished", "answer:m1", "Done: 3 files.")
    assert done.detail == "\nDone: 3 files.\nDetails…"  # a chat gets it whole

    s.status, s.status_reason = "error", "the model failed"
    (failed,) = notices.notices(state, _env(ev.SessionStatusChanged(status="error")))
    assert (failed.kind, failed.title, failed.body) == ("failed", "Error in “Fix it”",
                                                        "the model failed")
    assert notices.notices(state, _env(ev.SessionStatusChanged(status="running"))) == []
    # a sub-agent's end is its parent's business
    s.parent_id = "ses_parent"
    assert notices.notices(state, _env(ev.SessionStatusChanged(status="error"))) == []


@pytest.fixture
def extra_mapper() -> Iterator[None]:
    kinds, mappers = dict(notices.KINDS), dict(notices.MAPPERS)
    yield
    notices.KINDS.clear()
    notices.KINDS.update(kinds)
    notices.MAPPERS.clear()
    notices.MAPPERS.update(mappers)


def test_another_event_maps_to_a_notice_by_one_entry(extra_mapper: None) -> None:
    """How the ladder's nudge or a budget event joins: a kind and a mapper."""
    notices.register_kind(notices.Kind("nudge", "Nobody answered yet"))

    def nudge(state: State, env: ev.Envelope) -> list[notices.Notice]:
        return [notices.Notice(kind="nudge", session_id=env.session_id or "", key="nudge:1",
                               title="Still waiting", body="", detail="Still waiting")]

    notices.register(ev.SessionTitleChanged, nudge)
    (n,) = notices.notices(State(), _env(ev.SessionTitleChanged(title="x")))
    assert n.kind == "nudge" and "nudge" in notices.KINDS


def test_a_budget_reached_is_its_own_notice_and_its_stop_is_not_a_finished_turn() -> None:
    from codey_protocol.state import BudgetStop

    s = _session()
    s.items.append(ev.AssistantMessage(id="m1", ts=0.0, text="Halfway there."))
    state = State(sessions={s.session_id: s})
    (b,) = notices.notices(state, _env(ev.BudgetReached(scope="session", unit="usd",
                                                        limit=2_000_000, spent=2_013_400)))
    assert (b.kind, b.key) == ("budget", "budget:session:2000000")
    assert b.title == "“Fix it” reached its budget"
    assert b.body == "$2.01 of $2.00 spent; it waits until the budget is raised"
    assert b.actions == () and b.tag == f"codey-session:{s.session_id}"
    (day,) = notices.notices(state, _env(ev.BudgetReached(scope="day", unit="tokens",
                                                          limit=50_000, spent=50_210)))
    assert day.title == "“Fix it” reached the day's budget"
    assert day.body.startswith("50,210 of 50,000 tokens spent")

    # the waiting status that follows is the budget's: no "finished" on top of it
    s.status, s.status_reason = "waiting_user", "budget reached"
    s.budget_stop = BudgetStop(scope="session", unit="usd", limit=2_000_000, spent=2_013_400,
                               at=0.0)
    assert notices.notices(state, _env(ev.SessionStatusChanged(status="waiting_user"))) == []
    s.budget_stop = None
    (done,) = notices.notices(state, _env(ev.SessionStatusChanged(status="waiting_user")))
    assert done.kind == "finished"


def test_the_ladders_nudge_tells_the_wait_again_with_its_buttons() -> None:
    state, a = _with_approval()
    (first,) = notices.notices(state, _env(ev.ApprovalRequested(
        approval_id=a.approval_id, item_id="i", kind="command", command=a.command)))
    (again,) = notices.notices(state, _env(ev.AttentionNudged(
        target_id=a.approval_id, target="approval", step="t1")))
    assert again.title == f"Still waiting: {first.title}"
    assert again.key == f"{first.key}:t1" and again.tag == first.tag
    assert (again.actions, again.action_hash) == (first.actions, first.action_hash)
    (parked,) = notices.notices(state, _env(ev.AttentionNudged(
        target_id=a.approval_id, target="approval", step="parked")))
    assert parked.title.startswith("Parked, waiting for you: ") and parked.actions
    # answered meanwhile: nothing to tell again
    a.status = "approved"
    assert notices.notices(state, _env(ev.AttentionNudged(
        target_id=a.approval_id, target="approval", step="t1"))) == []

    s = _session()
    s.questions["q1"] = Question(question_id="q1", item_id="i", question="Which DB?")
    (q,) = notices.notices(State(sessions={s.session_id: s}), _env(ev.AttentionNudged(
        target_id="q1", target="question", step="denials")))
    assert q.kind == "question" and q.title.startswith("The reviewer denied 3 in a row")
