"""The task board's rules, pure: dependencies (exist, no cycle, done before a start), the
order of a column (midpoints; a renumbering when there is no room), and the fold that moves
a task with its session."""

from __future__ import annotations

import itertools

import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State, WorkerInfo
from codey_server.core.rules import CommandRejected, Context
from codey_server.features import apply, decide

_N = itertools.count()
CTX = Context(new_id=lambda prefix: f"{prefix}_{next(_N)}", now=lambda: 10.0,
              default_provider="p", default_models={"p": "m"})


def fold(state: State, decided: list[tuple[str | None, ev.Event]]) -> State:
    for sid, e in decided:
        apply(state, ev.Envelope(seq=state.seq + 1, ts=float(state.seq + 1), session_id=sid,
                                 event=e))
    return state


def board(*titles: str) -> State:
    state = State()
    state.workers["w1"] = WorkerInfo(worker_id="w1", hostname="h", os="Linux")
    for title in titles:
        fold(state, decide(state, cl.CreateTask(title=title), CTX))
    return state


def ids(state: State, status: str = "todo") -> list[str]:
    return [t.title for t in sorted(state.tasks.values(), key=lambda t: t.order)
            if t.status == status]


def by_title(state: State, title: str) -> str:
    return next(t.task_id for t in state.tasks.values() if t.title == title)


def test_new_tasks_go_to_the_end_and_moves_take_the_midpoint() -> None:
    state = board("a", "b", "c")
    assert ids(state) == ["a", "b", "c"]
    moved = decide(state, cl.MoveTask(task_id=by_title(state, "c"), status="todo",
                                      before=by_title(state, "a")), CTX)
    assert len(moved) == 1  # one event for one move
    fold(state, moved)
    assert ids(state) == ["c", "a", "b"]
    fold(state, decide(state, cl.MoveTask(task_id=by_title(state, "c"), status="review"),
                       CTX))
    assert ids(state) == ["a", "b"] and ids(state, "review") == ["c"]


def test_a_column_without_room_is_renumbered() -> None:
    state = board("a", "b", "x")
    a, b, x = (by_title(state, t) for t in "abx")
    state.tasks[b].order = state.tasks[a].order + 1e-9
    fold(state, decide(state, cl.MoveTask(task_id=x, status="todo", before=b), CTX))
    assert ids(state) == ["a", "x", "b"]
    assert [state.tasks[t].order for t in (a, x, b)] == [0.0, 1.0, 2.0]


def test_dependencies_exist_make_no_cycle_and_hold_a_task_in_todo() -> None:
    state = board("design")
    design = by_title(state, "design")
    with pytest.raises(CommandRejected, match="no task"):
        decide(state, cl.CreateTask(title="x", depends_on=["tsk_nope"]), CTX)
    fold(state, decide(state, cl.CreateTask(title="build", depends_on=[design]), CTX))
    build = by_title(state, "build")
    with pytest.raises(CommandRejected, match="cycle") as cycle:
        decide(state, cl.UpdateTask(task_id=design, title="design", depends_on=[build]), CTX)
    # the shortest cycle is a conflict too (409): the path's task, not the body, is at fault
    with pytest.raises(CommandRejected, match="itself") as itself:
        decide(state, cl.UpdateTask(task_id=design, title="design", depends_on=[design]), CTX)
    assert cycle.value.code == itself.value.code == "conflict"
    with pytest.raises(CommandRejected, match="waits for 'design'"):
        decide(state, cl.MoveTask(task_id=build, status="in_progress"), CTX)
    with pytest.raises(CommandRejected, match="depend on it"):
        decide(state, cl.DeleteTask(task_id=design), CTX)
    fold(state, decide(state, cl.MoveTask(task_id=design, status="done"), CTX))
    fold(state, decide(state, cl.MoveTask(task_id=build, status="in_progress"), CTX))
    assert state.tasks[build].status == "in_progress"


def test_a_run_starts_a_session_and_the_task_follows_it() -> None:
    state = board("fix it")
    task = by_title(state, "fix it")
    run = decide(state, cl.RunTask(task_id=task, worker_id="w1", workdir="/w"), CTX)
    kinds = [type(e).__name__ for _, e in run]
    assert kinds == ["SessionCreated", "TaskRunStarted", "SessionItemAppended"]
    fold(state, run)
    sid = run[0][0]
    assert sid is not None and state.sessions[sid].task_id == task
    assert state.tasks[task].status == "in_progress"

    def status(s: str) -> None:
        fold(state, [(sid, ev.SessionStatusChanged(status=s))])  # type: ignore[arg-type]

    status("running")
    status("idle")
    assert state.tasks[task].status == "review"
    status("running")  # a follow-up prompt
    assert state.tasks[task].status == "in_progress"
    status("idle")
    fold(state, decide(state, cl.MoveTask(task_id=task, status="done"), CTX))
    status("running")
    status("idle")
    assert state.tasks[task].status == "done"  # only the user moves it from done
    with pytest.raises(CommandRejected, match="is done"):
        decide(state, cl.RunTask(task_id=task, worker_id="w1", workdir="/w"), CTX)


def test_an_older_session_of_the_task_does_not_move_it() -> None:
    state = board("t")
    task = by_title(state, "t")
    state.sessions["old"] = SessionInfo(session_id="old", title="", worker_id="w1",
                                        workdir="/w", provider="p", model="m", task_id=task)
    state.tasks[task].session_ids = ["old", "new"]
    state.tasks[task].status = "review"
    fold(state, [("old", ev.SessionStatusChanged(status="running"))])
    assert state.tasks[task].status == "review"
