"""Approvals, interrupt, steer, retries, many sessions, and a server crash mid-turn."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.procs import pids_with
from codey_testkit.scenarios import create_session, idle, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until


def _shell(*argv: str) -> dict[str, Any]:
    return {"name": "shell", "arguments": {"command": list(argv)}}


TOUCH = ("python3", "-c", "import sys; open(sys.argv[-1] + '.txt', 'w'); print('touched-one')")

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    # approvals
    {"match": {"user": "make a file"}, "reply": {"calls": [_shell("touch", "made.txt")]}},
    {"match": {"user": "remove it"}, "reply": {"calls": [_shell("rm", "keep.txt")]}},
    {"match": {"tool": "shell", "tool_output": "rejected by the user"},
     "reply": {"text": "Understood, I left it alone."}},
    {"match": {"user": "touch twice"}, "reply": {"calls": [_shell(*TOUCH)]}},
    {"match": {"tool": "shell", "tool_output": "touched-one"}, "times": 1,
     "reply": {"calls": [_shell(*TOUCH, "again")]}},
    # interrupt
    {"match": {"user": "run forever"},
     "reply": {"calls": [_shell("bash", "-c", "echo started; sleep 3; touch late.txt")]}},
    # steer
    {"match": {"user": "count slowly"},
     "reply": {"calls": [_shell("bash", "-c", "sleep 2; echo counted")]}},
    {"match": {"user": "say hello instead"}, "reply": {"text": "hello!"}},
    {"match": {"tool": "shell", "tool_output": "counted"}, "reply": {"text": "I counted."}},
    # 429 then success
    {"match": {"user": "flaky"}, "times": 1,
     "reply": {"error": {"status": 429, "retry_after": 1}}},
    {"match": {"user": "flaky"}, "reply": {"text": "ok after a retry"}},
    # crash mid-turn
    {"match": {"user": "long job"},
     "reply": {"calls": [_shell("bash", "-c",
                                "echo ran >> counter.txt; sleep 4; echo finished")]}},
    {"match": {"tool": "shell", "tool_output": "finished"}, "reply": {"text": "all done"}},
    # many sessions
    {"match": {"user": "hello from"},
     "reply": {"calls": [_shell("python3", "-c", "import os; print('cwd', os.getcwd())")]}},
    {"match": {"tool": "shell", "tool_output": "cwd"}, "reply": {"text": "done here"}},
    {"match": {"any": True}, "reply": {"text": "done"}},
]}


def _pending_approval(s: dict[str, Any]) -> dict[str, Any] | None:
    return next((a for a in s["approvals"].values() if a["status"] == "pending"), None)


def _decide(server: ServerProcess, sid: str, approval_id: str, decision: str,
            message: str = "") -> int:
    r = server.http.post(f"/api/sessions/{sid}/approvals/{approval_id}",
                         json={"decision": decision, "message": message})
    return r.status_code


def _workdir(worker: WorkerProcess, name: str) -> Path:
    path = Path(worker.workdir(name))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def test_approve_runs_the_command_and_the_first_decision_wins(
        server: ServerProcess, worker: WorkerProcess) -> None:
    wd = _workdir(worker, "a")
    sid = create_session(server, worker, str(wd), "make a file", policy="suggest")
    s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval", what="approval")
    approval = _pending_approval(s)
    assert approval is not None and approval["command"] == ["touch", "made.txt"]
    assert not (wd / "made.txt").exists()
    assert _decide(server, sid, approval["approval_id"], "approve") == 200
    assert _decide(server, sid, approval["approval_id"], "reject") == 409
    s = wait_for(server, sid, idle, what="the turn to end")
    assert (wd / "made.txt").exists()
    assert tools(s)[0]["status"] == "done"
    assert s["approvals"][approval["approval_id"]]["status"] == "approved"


def test_rejection_message_reaches_the_model(server: ServerProcess, worker: WorkerProcess,
                                             model: ModelServerHandle) -> None:
    wd = _workdir(worker, "b")
    (wd / "keep.txt").write_text("precious")
    sid = create_session(server, worker, str(wd), "remove it", policy="suggest")
    s = wait_for(server, sid, lambda s: _pending_approval(s) is not None, what="approval")
    approval = _pending_approval(s)
    assert approval is not None
    assert _decide(server, sid, approval["approval_id"], "reject", "not that file") == 200
    s = wait_for(server, sid, idle, what="the turn to end")
    assert (wd / "keep.txt").exists()
    assert tools(s)[0]["status"] == "rejected"
    assert s["items"][-1]["text"] == "Understood, I left it alone."
    last = model.requests("/v1/chat/completions")[-1]["body"]["messages"][-1]
    assert last["role"] == "tool"
    assert last["content"] == "rejected by the user: not that file"


def test_approve_for_session_remembers_the_command_prefix(
        server: ServerProcess, worker: WorkerProcess) -> None:
    wd = _workdir(worker, "c")
    sid = create_session(server, worker, str(wd), "touch twice", policy="suggest")
    s = wait_for(server, sid, lambda s: _pending_approval(s) is not None, what="approval")
    approval = _pending_approval(s)
    assert approval is not None
    assert _decide(server, sid, approval["approval_id"], "approve_for_session") == 200
    s = wait_for(server, sid, idle, what="the turn to end")
    assert (wd / "-c.txt").exists() and (wd / "again.txt").exists()
    assert len(s["approvals"]) == 1, "the second command must not ask again"
    assert s["approved_prefixes"] == [list(TOUCH)]
    assert [t["status"] for t in tools(s)] == ["done", "done"]


def test_interrupt_during_a_long_command(server: ServerProcess, worker: WorkerProcess) -> None:
    wd = _workdir(worker, "d")
    sid = create_session(server, worker, str(wd), "run forever")
    wait_for(server, sid, lambda s: tools(s) and "started" in tools(s)[0]["output"],
             what="the command to start")
    t0 = time.monotonic()
    assert server.http.post(f"/api/sessions/{sid}/interrupt").status_code == 200
    s = wait_for(server, sid, lambda s: s["status"] == "interrupted"
                 and tools(s)[0]["status"] == "cancelled", what="the interrupt")
    assert time.monotonic() - t0 < 10
    assert tools(s)[0]["result"] == "interrupted by the user"
    assert not s["pending_actions"]
    # the command is gone (or it is left to run to its end, and then writes late.txt)
    wait_until(lambda: not pids_with("touch late.txt"), timeout=10, interval=0.05,
               what="the interrupted command to end")
    assert not (wd / "late.txt").exists(), "the command kept running after the interrupt"
    # the session takes prompts again
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "anything else"})
    assert r.status_code == 202
    s = wait_for(server, sid, lambda s: s["status"] == "idle"
                 and s["items"][-1]["kind"] == "assistant_message", what="the next turn")
    assert s["items"][-1]["text"] == "done"


def test_steer_prompt_changes_the_next_step(server: ServerProcess, worker: WorkerProcess,
                                            model: ModelServerHandle) -> None:
    wd = _workdir(worker, "e")
    sid = create_session(server, worker, str(wd), "count slowly")
    wait_for(server, sid, lambda s: tools(s) and tools(s)[0]["status"] == "running",
             what="the command to run")
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "say hello instead"})
    assert r.status_code == 202
    s = wait_for(server, sid, lambda s: any(i["kind"] == "user_message" and i["queued"]
                                            for i in s["items"]), timeout=5, what="queued")
    s = wait_for(server, sid, idle, what="the turn to end")
    assert s["items"][-1]["text"] == "hello!"
    assert not any(i["kind"] == "user_message" and i["queued"] for i in s["items"])
    # the steer was injected before the next model call, after the command's result
    messages = model.requests("/v1/chat/completions")[-1]["body"]["messages"]
    assert [m["role"] for m in messages[-2:]] == ["tool", "user"]


def test_rate_limited_then_success(server: ServerProcess, worker: WorkerProcess,
                                   model: ModelServerHandle) -> None:
    wd = _workdir(worker, "f")
    sid = create_session(server, worker, str(wd), "flaky")
    s = wait_for(server, sid, idle, what="the turn to end")
    assert s["items"][-1]["text"] == "ok after a retry"
    calls = model.requests("/v1/chat/completions")
    assert [c["status"] for c in calls] == [429, 200]
    assert calls[1]["ts"] - calls[0]["ts"] >= 0.9, "Retry-After was not honoured"
    state = server.http.get("/api/state/bootstrap").json()["state"]
    assert state["rate_limits"]["scripted"]["limit_requests"] is not None


def test_server_kill9_mid_turn_then_restart_finishes_the_turn_once(
        server: ServerProcess, worker: WorkerProcess) -> None:
    wd = _workdir(worker, "g")
    sid = create_session(server, worker, str(wd), "long job")
    wait_for(server, sid, lambda s: tools(s) and tools(s)[0]["status"] == "running",
             what="the command to run")
    # into the command (it has written its line): the kill lands mid-turn on purpose
    wait_until((wd / "counter.txt").exists, timeout=10, what="the command to start")
    assert worker.proc is not None
    offset = worker.proc.log_offset()
    server.kill9()
    # the worker sees the server gone (and starts reconnecting) first
    worker.proc.wait_for_line(r"^reconnecting in", timeout=15, start=offset)
    server.start()
    worker.wait_connected()
    s = wait_for(server, sid, idle, timeout=40, what="the resumed turn")
    assert s["items"][-1]["text"] == "all done"
    assert (wd / "counter.txt").read_text() == "ran\n", "the command ran more than once"
    assert len(tools(s)) == 1
    ids = [i["id"] for i in s["items"]]
    assert len(ids) == len(set(ids))


def test_ten_sessions_on_two_workers(tmp_path: Path, server: ServerProcess,
                                     worker: WorkerProcess) -> None:
    with WorkerProcess(server, tmp_path / "worker-b", name="worker-b") as other:
        sessions = []
        for i in range(10):
            w = worker if i % 2 == 0 else other
            wd = _workdir(w, f"s{i}")
            sessions.append((create_session(server, w, str(wd), f"hello from {i}"), wd))
        for sid, wd in sessions:
            s = wait_for(server, sid, idle, timeout=60, what=f"session {sid}")
            assert s["items"][-1]["text"] == "done here"
            assert f"cwd {wd.resolve()}" in tools(s)[0]["output"]
