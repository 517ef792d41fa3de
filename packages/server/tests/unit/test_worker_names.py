"""A machine's name: decided from the browser's ``rename_worker`` (checked, tidied, nothing
when unchanged), folded into ``WorkerInfo.name``, with the key's fingerprint from pairing."""

from __future__ import annotations

import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.rules import CommandRejected, Context
from codey_server.features import apply, decide
from codey_server.workers.decide import MAX_WORKER_NAME

CTX = Context(new_id=lambda prefix: f"{prefix}_new")


def _state() -> State:
    state = State()
    for seq, (worker_id, fp) in enumerate([("wrk_a", "SHA256:aaaa-1111-2222"),
                                           ("wrk_b", "SHA256:bbbb-3333-4444")], start=1):
        apply(state, ev.Envelope(seq=seq, ts=float(seq), session_id=None, event=ev.WorkerPaired(
            worker_id=worker_id, request_id=f"req_{seq}", hostname="vm", os="Linux",
            python_version="3.11", worker_version="0.1", roots=["/home"], public_key="k",
            fingerprint=fp)))
    return state


def _rename(state: State, worker_id: str, name: str) -> list[ev.Event]:
    events = decide(state, cl.RenameWorker(worker_id=worker_id, name=name), CTX)
    for n, (sid, e) in enumerate(events, start=100):
        apply(state, ev.Envelope(seq=n, ts=float(n), session_id=sid, event=e))
    return [e for _, e in events]


def test_pairing_keeps_the_fingerprint_and_no_name() -> None:
    state = _state()
    assert state.workers["wrk_a"].fingerprint == "SHA256:aaaa-1111-2222"
    assert state.workers["wrk_a"].name == ""


def test_a_rename_is_an_event_folded_into_the_name() -> None:
    state = _state()
    assert _rename(state, "wrk_b", "  build   box ") == [
        ev.WorkerRenamed(worker_id="wrk_b", name="build box")]
    assert state.workers["wrk_b"].name == "build box"
    assert state.workers["wrk_a"].name == ""
    assert _rename(state, "wrk_b", "build box") == []  # unchanged: nothing to record
    # a reconnect's hello changes the hostname, not the name the user gave
    apply(state, ev.Envelope(seq=200, ts=200.0, session_id=None, event=ev.WorkerConnected(
        worker_id="wrk_b", hostname="vm2", os="Linux", worker_version="0.2")))
    assert (state.workers["wrk_b"].name, state.workers["wrk_b"].hostname) == ("build box", "vm2")


def test_an_empty_name_or_the_hostname_gives_it_back_its_hostname() -> None:
    state = _state()
    _rename(state, "wrk_a", "laptop")
    assert _rename(state, "wrk_a", "   ") == [ev.WorkerRenamed(worker_id="wrk_a", name="")]
    _rename(state, "wrk_a", "laptop")
    assert _rename(state, "wrk_a", "vm") == [ev.WorkerRenamed(worker_id="wrk_a", name="")]
    assert state.workers["wrk_a"].name == ""


@pytest.mark.parametrize(("worker_id", "name", "words"), [
    ("wrk_zz", "x", "no worker 'wrk_zz'"),
    ("wrk_a", "x" * (MAX_WORKER_NAME + 1), f"at most {MAX_WORKER_NAME} characters"),
    ("wrk_a", "vm\u202eevil", "control or invisible formatting"),
    ("wrk_a", "vm\x07", "control or invisible formatting"),
])
def test_bad_names_are_refused_in_words(worker_id: str, name: str, words: str) -> None:
    with pytest.raises(CommandRejected, match=words):
        decide(_state(), cl.RenameWorker(worker_id=worker_id, name=name), CTX)


def test_a_revoked_machine_cannot_be_renamed() -> None:
    state = _state()
    apply(state, ev.Envelope(seq=50, ts=50.0, session_id=None,
                             event=ev.WorkerRevoked(worker_id="wrk_a")))
    with pytest.raises(CommandRejected, match="no worker"):
        decide(state, cl.RenameWorker(worker_id="wrk_a", name="old"), CTX)
