"""A worktree's git operations as items and state (codey_server.workspaces.decide), pure."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.rules import CommandRejected, Context
from codey_server.features import apply_all, decide
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


# a removed worktree (issue 33, item 2): nothing starts a turn there; a fork gets its own


def _removed(branch_deleted: bool = False) -> State:
    state = _state()
    state = _fold(state, [(S, ev.SessionItemAppended(item=ev.UserMessage(
        id="itm_u", ts=1.0, text="Fix add()"))), (S, ev.WorktreeUpdated(
            status="ready", path="/wt/app/codey-t-0001", base="main", base_commit="c0",
            repo_root="/src/app"))])
    return _fold(state, [(S, ev.WorktreeUpdated(status="removed",
                                                branch_deleted=branch_deleted or None))])


def _decide(state: State, command: Any) -> list[tuple[str | None, ev.Event]]:
    counter = itertools.count(1)
    ctx = Context(new_id=lambda prefix: f"{prefix}_new{next(counter)}", now=lambda: 5.0)
    return decide(state, command, ctx)


def test_what_would_start_a_turn_in_a_removed_worktree_is_refused_with_the_ways_on() -> None:
    state = _removed()
    failed = _fold(_removed(), [(S, ev.SessionStatusChanged(status="error", reason="x"))])
    for at, command in ((state, cl.SendPrompt(session_id=S, text="Run the tests again")),
                        (failed, cl.RetryTurn(session_id=S))):
        with pytest.raises(CommandRejected) as info:
            _decide(at, command)
        assert info.value.code == "conflict"
        assert info.value.message == (
            "its worktree (/wt/app/codey-t-0001) was removed: make it again from its branch "
            "codey/t-0001, or fork the session into a new worktree")
    with pytest.raises(CommandRejected) as info:
        _decide(_removed(branch_deleted=True), cl.SendPrompt(session_id=S, text="again"))
    assert "make it again" not in info.value.message
    # ready again: prompts are taken
    ready = _fold(state, [(S, ev.WorktreeUpdated(status="ready"))])
    assert _decide(ready, cl.SendPrompt(session_id=S, text="Run the tests again"))


def test_a_fork_of_a_removed_worktree_gets_its_own_from_the_branch_or_the_base() -> None:
    state = _removed()
    # asked for or not: the old folder is gone, a fork could not work there
    for command in (cl.ForkSession(session_id=S),
                    cl.ForkSession(session_id=S, worktree=ev.WorktreeRequest())):
        decided = _decide(state, command)
        forked = decided[0][1]
        assert isinstance(forked, ev.SessionForked) and forked.worktree is not None
        assert (forked.worktree.repo, forked.worktree.base, forked.worktree.status) == (
            "/src/app", "codey/t-0001", "creating")
        assert forked.worktree.branch.startswith("codey/t-fork-")
        s = _fold(state, decided).sessions[decided[0][0] or ""]
        assert s.workdir == "/src/app" and s.worktree is not None  # in the repository, for now
    gone = _decide(_removed(branch_deleted=True), cl.ForkSession(session_id=S))[0][1]
    assert isinstance(gone, ev.SessionForked) and gone.worktree is not None
    assert gone.worktree.base == "main"
    chosen = _decide(state, cl.ForkSession(session_id=S, worktree=ev.WorktreeRequest(
        base="release")))[0][1]
    assert isinstance(chosen, ev.SessionForked) and chosen.worktree is not None
    assert chosen.worktree.base == "release"
    # a worktree still there: a plain fork goes on in the same folder, as before
    ready = _fold(state, [(S, ev.WorktreeUpdated(status="ready"))])
    plain = _decide(ready, cl.ForkSession(session_id=S))[0][1]
    assert isinstance(plain, ev.SessionForked) and plain.worktree is None


def test_a_removal_says_whether_the_branch_went_with_it() -> None:
    from codey_protocol import worker as wk
    from codey_server.workspaces.service import _said

    ok, words, update = _said(wk.WorkspaceRemoved(path="/wt/x", branch_deleted=True), "remove")
    assert ok and words.endswith("its branch was deleted")
    assert update == ev.WorktreeUpdated(status="removed", branch_deleted=True)
    _, _, kept = _said(wk.WorkspaceRemoved(path="/wt/x"), "remove")
    assert kept == ev.WorktreeUpdated(status="removed")
    _, said, _ = _said(wk.WorkspaceCommitted(sha="a" * 40, files=1), "commit")
    assert said == "Committed aaaaaaaaaa (1 file)"
