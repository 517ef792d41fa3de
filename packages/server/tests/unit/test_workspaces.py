"""A worktree's git operations as items and state (codey_server.workspaces.decide), pure."""

from __future__ import annotations

import itertools

import pytest

from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.rules import CommandRejected, Context
from codey_server.features import apply_all
from codey_server.workspaces.decide import (
    OUTPUT_CAP,
    OpEnded,
    OpOutput,
    OpStarted,
    op_ended,
    op_output,
    op_started,
)

S = "ses_1"


def _ctx() -> Context:
    counter = itertools.count(1)
    return Context(new_id=lambda prefix: f"{prefix}_{next(counter)}", now=lambda: 5.0)


def _state(worktree: bool = True) -> State:
    created = ev.SessionCreated(
        title="t", worker_id="w", workdir="/src/app", provider="p", model="m",
        worktree=ev.Worktree(repo="/src/app", branch="codey/t-0001") if worktree else None)
    return apply_all(State(), [ev.Envelope(seq=1, ts=1.0, session_id=S, event=created)])


def _fold(state: State, decided: list[tuple[str | None, ev.Event]]) -> State:
    return apply_all(state, [ev.Envelope(seq=state.seq + n + 1, ts=2.0, session_id=sid, event=e)
                             for n, (sid, e) in enumerate(decided)])


def test_a_worktree_made_with_its_setup_output_moves_the_session_into_it() -> None:
    state = _state()
    started = op_started(state, OpStarted(S, "create", "Worktree codey/t-0001 from main", "act_9"),
                         _ctx())
    state = _fold(state, started)
    item = state.sessions[S].items[-1]
    assert isinstance(item, ev.GitOp) and (item.op, item.status, item.action_id) == (
        "create", "running", "act_9")
    state = _fold(state, op_output(state, OpOutput(S, item.id, "installing…\n"), _ctx()))
    state = _fold(state, op_ended(state, OpEnded(
        S, item.id, ok=True, result="made", exit_code=0,
        worktree=ev.WorktreeUpdated(status="ready", path="/wt/t", base="main")), _ctx()))
    s = state.sessions[S]
    done = s.items[-1]
    assert isinstance(done, ev.GitOp)
    assert (done.status, done.output, done.result, done.exit_code) == (
        "done", "installing…\n", "made", 0)
    assert s.workdir == "/wt/t" and s.worktree is not None and s.worktree.status == "ready"


def test_output_past_the_cap_is_dropped() -> None:
    state = _state()
    state = _fold(state, op_started(state, OpStarted(S, "create", "x", "a"), _ctx()))
    item_id = state.sessions[S].items[-1].id
    state = _fold(state, op_output(state, OpOutput(S, item_id, "x" * (OUTPUT_CAP + 10)), _ctx()))
    assert op_output(state, OpOutput(S, item_id, "more"), _ctx()) == []
    item = state.sessions[S].items[-1]
    assert isinstance(item, ev.GitOp) and len(item.output) == OUTPUT_CAP


def test_a_worktree_that_could_not_be_made_leaves_the_session_in_error() -> None:
    state = _state()
    state = _fold(state, op_started(state, OpStarted(S, "create", "x", "a"), _ctx()))
    item_id = state.sessions[S].items[-1].id
    decided = op_ended(state, OpEnded(S, item_id, ok=False, error="no such branch",
                                      worktree=ev.WorktreeUpdated(status="failed"),
                                      status="error", reason="its worktree could not be made"),
                       _ctx())
    state = _fold(state, decided)
    s = state.sessions[S]
    assert (s.status, s.worktree.status if s.worktree else None) == ("error", "failed")
    assert s.workdir == "/src/app"  # never the repository's own folder changed


def test_a_session_without_a_worktree_has_no_git_operations() -> None:
    with pytest.raises(CommandRejected) as info:
        op_started(_state(worktree=False), OpStarted(S, "commit", "x", "a"), _ctx())
    assert info.value.code == "conflict"
