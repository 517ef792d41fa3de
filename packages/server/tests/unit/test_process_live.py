"""A process's live side on the server (issue 33, items 3 and 4): the tails kept in memory for
the browsers (bounded, whole on watch, merged for a slow socket), and the pure decisions on
what a worker pushes (ports, end), on the Forward click and on the forward's answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import PROCESS_TAIL_KEPT, Capabilities, State
from codey_server.agent.processes import Forwarded, forwarded
from codey_server.core.rules import CommandRejected, Context
from codey_server.core.tails import ProcessTails
from codey_server.features import apply_all, decide
from codey_server.workers.decide import ProcessReport, process_reported

W, S = "wrk_1", "ses_1"


# -- the tails ---------------------------------------------------------------------------------


def test_a_tail_appends_keeps_the_newest_part_and_is_replaced_by_a_reset() -> None:
    tails = ProcessTails()
    tails.add(S, "p1", "one\n")
    tails.add(S, "p1", "two\n")
    assert tails.text("p1") == "one\ntwo\n"
    tails.add(S, "p1", "x" * PROCESS_TAIL_KEPT)
    assert tails.text("p1") == "x" * PROCESS_TAIL_KEPT
    tails.add(S, "p1", "whole\n", reset=True)
    assert tails.text("p1") == "whole\n"


def test_a_watch_gets_every_tail_whole_then_what_comes_merged() -> None:
    tails = ProcessTails()
    tails.add(S, "p1", "before\n")
    watch = tails.watch()
    tails.add(S, "p1", "a\n")
    tails.add(S, "p2", "new\n")
    tails.add(S, "p1", "b\n")
    frame = watch.take()
    assert frame is not None
    got = {t.process_id: (t.text, t.reset) for t in frame.tails}
    # p1: whole when watched (then appended to); p2: its first text replaces any copy
    assert got == {"p1": ("before\na\nb\n", True), "p2": ("new\n", True)}
    assert watch.take() is None
    tails.add(S, "p2", "more\n")
    frame = watch.take()
    assert frame is not None
    assert [(t.process_id, t.text, t.reset) for t in frame.tails] == [("p2", "more\n", False)]
    tails.unwatch(watch)
    tails.add(S, "p2", "unseen\n")
    assert watch.take() is None


def test_a_slow_watch_holds_at_most_the_tail_per_process() -> None:
    tails = ProcessTails()
    watch = tails.watch()
    tails.add(S, "p1", "first\n")
    watch.take()
    for n in range(100):
        tails.add(S, "p1", f"{n:04d}" + "y" * 1000)
    frame = watch.take()
    assert frame is not None
    (t,) = frame.tails
    assert t.reset and t.text == tails.text("p1") and len(t.text) <= PROCESS_TAIL_KEPT


def test_tails_are_bounded_and_a_deleted_sessions_go() -> None:
    tails = ProcessTails(max_tails=3)
    for n in range(5):
        tails.add(S if n % 2 else "ses_2", f"p{n}", "x")
    assert len(tails) == 3 and tails.text("p0") is None and tails.text("p4") == "x"
    tails.on_event(ev.Envelope(seq=1, ts=1.0, session_id=S, event=ev.SessionDeleted()))
    assert [tails.text(p) for p in ("p2", "p3", "p4")] == ["x", None, "x"]


def test_a_watch_is_woken_by_a_write() -> None:
    async def scenario() -> None:
        tails = ProcessTails()
        watch = tails.watch()
        waiting = asyncio.ensure_future(watch.wait())
        await asyncio.sleep(0)
        assert not waiting.done()
        tails.add(S, "p1", "hello\n")
        await asyncio.wait_for(waiting, 5)

    asyncio.run(scenario())


# -- decisions ---------------------------------------------------------------------------------


def _state(*events: tuple[str | None, ev.Event], executors: list[str] | None = None) -> State:
    pairs: list[tuple[str | None, ev.Event]] = [
        (None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="linux",
                               python_version="3.11", worker_version="0.1", roots=["/src"],
                               public_key="pk")),
        (None, ev.WorkerConnected(
            worker_id=W, hostname="h", os="linux", worker_version="0.1",
            capabilities=Capabilities(executors=executors if executors is not None
                                      else ["exec_start", "exec_forward"]))),
        (S, ev.SessionCreated(title="t", worker_id=W, workdir="/src", provider="p", model="m")),
        (S, ev.ProcessStarted(process_id="p1", item_id="i", worker_id=W, argv=["serve"],
                              sandbox="workspace-write", network=False)),
        *events,
    ]
    return apply_all(State(), [ev.Envelope(seq=n + 1, ts=float(n), session_id=sid, event=e)
                               for n, (sid, e) in enumerate(pairs)])


def ports(*numbers: int, worker: str = W, process: str = "p1") -> ProcessReport:
    return ProcessReport(worker, wk.ProcessPorts(session_id=S, process_id=process,
                                                 ports=list(numbers)))


def test_ports_are_recorded_when_they_change_and_only_from_the_processs_worker() -> None:
    state = _state()
    assert process_reported(state, ports(8000, 8000, 70000, 3000), Context()) == [
        (S, ev.ProcessListening(process_id="p1", ports=[3000, 8000]))]
    state = _state((S, ev.ProcessListening(process_id="p1", ports=[3000, 8000])))
    assert process_reported(state, ports(8000, 3000), Context()) == []  # no change
    assert process_reported(state, ports(), Context()) == [
        (S, ev.ProcessListening(process_id="p1", ports=[]))]
    assert process_reported(state, ports(9000, worker="wrk_other"), Context()) == []
    assert process_reported(state, ports(9000, process="p_unknown"), Context()) == []


def test_an_end_pushed_by_the_worker_ends_a_live_process_once() -> None:
    end = ProcessReport(W, wk.ProcessExited(session_id=S, process_id="p1", exit_code=1))
    assert process_reported(_state(), end, Context()) == [
        (S, ev.ProcessEnded(process_id="p1", exit_code=1))]
    # the Stop button asked: the worker's exec_kill is the user's stop
    asked = _state((S, ev.ProcessStopRequested(process_id="p1", by="user")))
    killed = ProcessReport(W, wk.ProcessExited(session_id=S, process_id="p1", signal=15,
                                               stopped_by="exec_kill"))
    assert process_reported(asked, killed, Context()) == [
        (S, ev.ProcessEnded(process_id="p1", signal=15, stopped_by="user"))]
    ended = _state((S, ev.ProcessEnded(process_id="p1", exit_code=0)))
    assert process_reported(ended, end, Context()) == []  # the first end stays
    assert process_reported(ended, ports(8000), Context()) == []


def _rejected(state: State, command: Any) -> CommandRejected:
    with pytest.raises(CommandRejected) as info:
        decide(state, command, Context())
    return info.value


def test_forwarding_asks_only_for_a_port_the_process_listens_on_inside() -> None:
    listening = (S, ev.ProcessListening(process_id="p1", ports=[8000]))
    state = _state(listening)
    click = cl.ForwardPort(session_id=S, process_id="p1", port=8000)
    assert decide(state, click, Context()) == [
        (S, ev.ProcessForwardRequested(process_id="p1", port=8000))]
    assert _rejected(state, cl.ForwardPort(session_id=S, process_id="p1", port=22)).code == \
        "conflict"
    assert _rejected(state, cl.ForwardPort(session_id=S, process_id="nope", port=8000)).code \
        == "not_found"
    asked = _state(listening, (S, ev.ProcessForwardRequested(process_id="p1", port=8000)))
    assert decide(asked, click, Context()) == []  # opening already
    failed = _state(listening, (S, ev.ProcessForwardRequested(process_id="p1", port=8000)),
                    (S, ev.ProcessForwarded(process_id="p1", port=8000, error="no")))
    assert decide(failed, click, Context()) == [  # tried again
        (S, ev.ProcessForwardRequested(process_id="p1", port=8000))]
    old_worker = _state(listening, executors=["exec_start"])
    assert _rejected(old_worker, click).code == "unsupported"
    ended = _state(listening, (S, ev.ProcessEnded(process_id="p1", exit_code=0)))
    assert _rejected(ended, click).code == "conflict"


def test_a_forwards_answer_opens_or_fails_it_unless_the_process_ended() -> None:
    asked = _state((S, ev.ProcessListening(process_id="p1", ports=[8000])),
                   (S, ev.ProcessForwardRequested(process_id="p1", port=8000)))
    answer = wk.PortForwarded(process_id="p1", port=8000, host_port=8000)
    assert forwarded(asked, Forwarded(S, "p1", 8000, answer), Context()) == [
        (S, ev.ProcessForwarded(process_id="p1", port=8000, address="127.0.0.1:8000"))]
    assert forwarded(asked, Forwarded(S, "p1", 8000, None, "not_listening"), Context()) == [
        (S, ev.ProcessForwarded(process_id="p1", port=8000, error="not_listening"))]
    gone = _state((S, ev.ProcessListening(process_id="p1", ports=[8000])),
                  (S, ev.ProcessForwardRequested(process_id="p1", port=8000)),
                  (S, ev.ProcessEnded(process_id="p1", exit_code=0)))
    assert forwarded(gone, Forwarded(S, "p1", 8000, answer), Context()) == []
