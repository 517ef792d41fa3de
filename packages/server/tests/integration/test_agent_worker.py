"""The agent loop with the worker's side in play: a worker crash mid-command, MCP tools."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.procs import pids_with
from codey_testkit.scenarios import create_session, idle, provider_config, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

#: the command of "count once" (only this module runs it: a test waits for it to be gone)
COUNT_ONCE = "echo ran >> counter.txt; echo started; sleep 3; echo finished"

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "count once"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": [
         "bash", "-c", COUNT_ONCE]}}]}},
    {"match": {"user": "what happened"},
     "reply": {"text": "The worker restarted during the command; it was not run again."}},
    {"match": {"tool": "shell", "tool_output": "whether it finished is unknown"},
     "reply": {"text": "It was cut off; I will check before running it again."}},
    {"match": {"user": "what time"},
     "reply": {"calls": [{"name": "mcp__time__get_current_time",
                          "arguments": {"timezone": "UTC"}}]}},
    {"match": {"tool": "mcp__time__get_current_time", "tool_output": "UTC"},
     "reply": {"text": "I have the time."}},
    {"match": {"user": "stall"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": [
         "bash", "-c", "echo started; sleep 8; echo finished"]}}]}},
    {"match": {"tool": "shell", "tool_output": "finished"},
     "reply": {"text": "Finished after the stall."}},
    {"match": {"any": True}, "reply": {"text": "unexpected"}},
]}


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


@pytest.mark.parametrize("policy", ["suggest", "full-auto"])
def test_worker_kill9_mid_command_then_restart_says_so_and_ran_once(
        tmp_path: Path, server: ServerProcess, policy: str) -> None:
    """The command's outcome is unknown (it outlives its worker): the call fails saying so.
    Under suggest the turn stops for the user's word, and the model reads the truth when the
    user goes on; under full-auto the model reads it at once and the turn goes on. Nothing
    runs the command twice."""
    worker = WorkerProcess(server, tmp_path / "worker").start()
    try:
        wd = Path(worker.workdir("w"))
        wd.mkdir(parents=True)
        sid = create_session(server, worker, str(wd), "count once", policy=policy)
        if policy == "suggest":
            s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval",
                         what="the command's approval")
            [approval] = s["approvals"]
            server.http.post(f"/api/sessions/{sid}/approvals/{approval}",
                             json={"decision": "approve"}).raise_for_status()
        wait_for(server, sid, lambda s: tools(s) and "started" in tools(s)[0]["output"],
                 what="the command to start")
        worker.kill9()
        wait_for(server, sid, lambda s: s["status"] == "waiting_worker", timeout=15,
                 what="waiting_worker")
        worker.start()
        if policy == "full-auto":
            s = wait_for(server, sid, lambda s: idle(s) and s["items"][-1]["kind"] ==
                         "assistant_message", timeout=40, what="the turn to go on")
            notice = s["items"][-2]
            assert (notice["kind"], notice["code"]) == ("notice", "worker_lost"), notice
            assert s["items"][-1]["text"].startswith("It was cut off")
        else:
            s = wait_for(server, sid, lambda s: s["status"] == "error", timeout=40,
                         what="the turn to stop")
            assert s["status_reason"] == "the worker restarted during a command"
            assert s["items"][-1]["kind"] == "error_item"
        call = tools(s)[0]
        assert call["status"] == "failed"
        assert call["result"].startswith("error: the worker restarted while this command ran")
        if policy == "suggest":
            server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "what happened"})
            s = wait_for(server, sid, lambda s: s["status"] == "idle", timeout=40,
                         what="the next turn")
            assert s["items"][-1]["text"].startswith("The worker restarted")
        # the orphaned first run finishes; nothing runs it again
        wait_until(lambda: not pids_with(COUNT_ONCE), timeout=10, interval=0.05,
                   what="the orphaned first run to end")
        assert (wd / "counter.txt").read_text() == "ran\n"
    finally:
        worker.stop()


def test_a_frozen_worker_is_unreachable_after_three_missed_beats_then_goes_on(
        tmp_path: Path, model: Any) -> None:
    """SIGSTOP: its socket looks alive, but it beats no more. After ``worker_silence_s`` (3 s
    here: beats every second) it shows as disconnected and its session waits for it; after
    SIGCONT it reconnects and the command's result arrives."""
    config = {**provider_config(model), "worker_silence_s": 3}
    with ServerProcess(tmp_path / "server", config=config) as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        wd = Path(worker.workdir("w"))
        wd.mkdir(parents=True)
        sid = create_session(server, worker, str(wd), "stall")
        wait_for(server, sid, lambda s: tools(s) and "started" in tools(s)[0]["output"],
                 what="the command to start")
        assert worker.proc is not None
        pid = worker.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            wait_for(server, sid, lambda s: s["status"] == "waiting_worker", timeout=15,
                     what="waiting_worker")
            took = time.monotonic() - stopped
            state = server.http.get("/api/state/bootstrap").json()["state"]
            assert not state["workers"][worker.worker_id]["connected"]
            assert took < 10, f"noticed only after {took:.1f} s"
            assert "no heartbeat" in server.log_text()
        finally:
            os.kill(pid, signal.SIGCONT)
        s = wait_for(server, sid, idle, timeout=40, what="the turn to go on")
        assert s["items"][-1]["text"] == "Finished after the stall."
        assert "finished" in tools(s)[0]["output"]


def test_mcp_tool_of_the_worker_is_offered_and_called(tmp_path: Path,
                                                      server: ServerProcess) -> None:
    config = {"mcp_servers": {"time": {"command": sys.executable,
                                       "args": ["-m", "mcp_server_time"]}}}
    with WorkerProcess(server, tmp_path / "worker", config=config) as worker:
        wd = Path(worker.workdir("m"))
        wd.mkdir(parents=True)
        state = server.http.get("/api/state/bootstrap").json()["state"]
        servers = state["workers"][worker.worker_id]["capabilities"]["mcp_servers"]
        assert any(s["name"] == "time" and any(t["name"] == "get_current_time"
                                               for t in s["tools"]) for s in servers)
        sid = create_session(server, worker, str(wd), "what time")
        s = wait_for(server, sid, idle, timeout=40, what="the turn to end")
        call = tools(s)[0]
        assert call["mcp_server"] == "time" and call["mcp_tool"] == "get_current_time"
        assert call["status"] == "done" and "UTC" in call["result"]
        assert s["items"][-1]["text"] == "I have the time."


def test_revoking_the_worker_fails_its_running_action_for_the_model(
        tmp_path: Path, server: ServerProcess) -> None:
    worker = WorkerProcess(server, tmp_path / "worker").start()
    try:
        wd = Path(worker.workdir("r"))
        wd.mkdir(parents=True)
        sid = create_session(server, worker, str(wd), "count once")
        wait_for(server, sid, lambda s: tools(s) and "started" in tools(s)[0]["output"],
                 what="the command to start")
        assert server.http.post(f"/api/workers/{worker.worker_id}/revoke").status_code == 200
        s = wait_for(server, sid, lambda s: tools(s)[0]["status"] == "failed", timeout=15,
                     what="the action to fail")
        assert "revoked" in tools(s)[0]["result"]
    finally:
        worker.stop()
