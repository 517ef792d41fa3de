"""``interrupt_events``: what an interrupt closes, for both runners (Codey's and ACP's)."""

from __future__ import annotations

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import State
from codey_server.agent.conversation import interrupt_events
from codey_server.features import apply_all

W, S = "wrk_1", "ses_1"


def _session_mid_turn() -> State:
    events: list[tuple[str | None, ev.Event]] = [
        (None, ev.WorkerPaired(worker_id=W, request_id="req_1", hostname="box", os="linux",
                               python_version="3.11", worker_version="0.1", roots=["/src"],
                               public_key="pk")),
        (S, ev.SessionCreated(title="t", worker_id=W, workdir="/src/app", provider="p",
                              model="m", policy="suggest")),
        (S, ev.SessionItemAppended(item=ev.ToolCall(id="itm_run", ts=1.0, call_id="c1",
                                                    name="shell", arguments="{}"))),
        (S, ev.ActionRequested(action_id="act_1", item_id="itm_run", worker_id=W,
                               action=wk.RunCommand(action_id="act_1", session_id=S,
                                                    argv=["ls"], workdir="/src/app"))),
        (S, ev.SessionItemAppended(item=ev.ToolCall(id="itm_ask", ts=2.0, call_id="c2",
                                                    name="shell", arguments="{}"))),
        (S, ev.ApprovalRequested(approval_id="apr_1", item_id="itm_ask", kind="command",
                                 command=["rm", "x"])),
        (S, ev.SessionItemAppended(item=ev.ToolCall(id="itm_q", ts=3.0, call_id="c3",
                                                    name="ask_user", arguments="{}"))),
        (S, ev.QuestionAsked(question_id="q_1", item_id="itm_q", question="which?")),
        (S, ev.SessionItemAppended(item=ev.AssistantMessage(id="itm_msg", ts=4.0, text="Wor",
                                                            streaming=True))),
        (S, ev.SessionItemAppended(item=ev.AssistantMessage(id="itm_done", ts=5.0, text="ok"))),
    ]
    return apply_all(State(), [ev.Envelope(seq=n + 1, ts=float(n + 1), session_id=sid,
                                           event=e) for n, (sid, e) in enumerate(events)])


def test_an_interrupt_closes_every_open_thing_and_nothing_else() -> None:
    state = _session_mid_turn()
    got = interrupt_events(state.sessions[S])
    assert got == [
        ev.ActionFinished(action_id="act_1", outcome="cancelled"),
        ev.ApprovalResolved(approval_id="apr_1", decision="cancelled"),
        ev.QuestionAnswered(question_id="q_1", cancelled=True),
        ev.SessionItemUpdated(item_id="itm_run", status="cancelled",
                              result="interrupted by the user"),
        ev.SessionItemUpdated(item_id="itm_ask", status="cancelled",
                              result="interrupted by the user"),
        ev.SessionItemUpdated(item_id="itm_q", status="cancelled",
                              result="interrupted by the user"),
        ev.SessionItemUpdated(item_id="itm_msg", streaming=False, partial=True),
    ]


def test_a_session_at_rest_has_nothing_to_close() -> None:
    state = _session_mid_turn()
    session = state.sessions[S]
    closed = apply_all(state, [ev.Envelope(seq=100 + n, ts=100.0, session_id=S, event=e)
                               for n, e in enumerate(interrupt_events(session))])
    assert interrupt_events(closed.sessions[S]) == []
