"""A session resumed at the server's start waits for its machine's hello before its open call
is judged (issue 36): real server, worker and scripted model.

The machine's last hello before the shutdown reports no OS sandbox, as a worker older than the
sandbox did; the worker that comes back has one. Judged against the stored capabilities, the
command waiting for its approval was refused at start-up, the model told, the turn ended and
the approval left pending (Approve answered 200 and ran nothing). Now the session waits for
the machine ("waiting for the machine"), its approval answerable all the while, and the
command runs once, whichever comes first: the user's approval or the machine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.scenarios import create_session, idle, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

#: appends one line per run: the file says how many times the command ran
APPEND = ("python3", "-c", "open('ran.txt', 'a').write('ran\\n'); print('appended')")

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "count once"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": list(APPEND)}}]}},
    {"match": {"tool": "shell", "tool_output": "appended"}, "reply": {"text": "all done"}},
    {"match": {"any": True}, "reply": {"text": "something else"}},
]}

WAITING_FOR_THE_MACHINE = ("waiting_worker", "waiting for the machine")


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def _no_sandbox_path(tmp_path: Path) -> str:
    """A PATH whose ``bwrap`` cannot make a sandbox: the worker's hello reports none."""
    fake = tmp_path / "no-sandbox-bin"
    fake.mkdir(exist_ok=True)
    bwrap = fake / "bwrap"
    bwrap.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                     "exit 1\n")
    bwrap.chmod(0o755)
    return f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def _sandbox_kind(server: ServerProcess, worker: WorkerProcess) -> str:
    state = server.http.get("/api/state/bootstrap").json()["state"]
    return str(state["workers"][worker.worker_id]["capabilities"]["sandbox"]["kind"])


def _waiting_then_all_stopped(tmp_path: Path, server: ServerProcess,
                              worker: WorkerProcess) -> tuple[str, str, Path]:
    """A session waiting on a command's approval; then its machine says hello once without
    a sandbox, and the worker and the server stop; the server starts again, alone. Returns
    the session, its approval and its workdir."""
    wd = Path(worker.workdir("count"))
    wd.mkdir(parents=True)
    sid = create_session(server, worker, str(wd), "count once", policy="suggest")
    s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval", what="the approval")
    (approval_id,) = s["approvals"]

    worker.stop()
    worker.env = {"PATH": _no_sandbox_path(tmp_path)}
    worker.start()
    assert _sandbox_kind(server, worker) == "none"
    worker.stop()
    worker.env = {}
    assert server.stop() == 0
    server.start()

    s = wait_for(server, sid, lambda s: (s["status"], s["status_reason"])
                 == WAITING_FOR_THE_MACHINE, what="the session to wait for its machine")
    assert s["approvals"][approval_id]["status"] == "pending"
    [call] = tools(s)
    assert call["status"] == "waiting_approval" and call["result"] is None
    assert [i["kind"] for i in s["items"]] == ["user_message", "tool_call"]  # nobody told
    assert not (wd / "ran.txt").exists()
    return sid, approval_id, wd


def _approve(server: ServerProcess, sid: str, approval_id: str) -> None:
    r = server.http.post(f"/api/sessions/{sid}/approvals/{approval_id}",
                         json={"decision": "approve"})
    assert r.status_code == 200, r.text


def _ran_once_and_went_on(server: ServerProcess, sid: str, approval_id: str,
                          wd: Path) -> None:
    s = wait_for(server, sid, idle, what="the turn to go on and end")
    assert s["status"] == "idle", s["status_reason"]
    assert (wd / "ran.txt").read_text() == "ran\n", "the command did not run exactly once"
    [call] = tools(s)
    assert call["status"] == "done" and "appended" in call["output"]
    assert s["items"][-1]["text"] == "all done"
    assert list(s["approvals"]) == [approval_id]  # asked once
    assert s["approvals"][approval_id]["status"] == "approved"


def test_approved_while_the_machine_is_away_runs_once_it_is_back(
        tmp_path: Path, server: ServerProcess, worker: WorkerProcess) -> None:
    sid, approval_id, wd = _waiting_then_all_stopped(tmp_path, server, worker)
    _approve(server, sid, approval_id)
    s = wait_for(server, sid, lambda s: s["approvals"][approval_id]["status"] == "approved",
                 what="the approval to be recorded")
    assert (s["status"], s["status_reason"]) == WAITING_FOR_THE_MACHINE
    assert not (wd / "ran.txt").exists()

    worker.start()
    assert _sandbox_kind(server, worker) == "bwrap"
    _ran_once_and_went_on(server, sid, approval_id, wd)


def test_the_machine_back_first_then_the_approval_runs_the_command(
        tmp_path: Path, server: ServerProcess, worker: WorkerProcess) -> None:
    sid, approval_id, wd = _waiting_then_all_stopped(tmp_path, server, worker)
    worker.start()
    s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval",
                 what="the approval to be asked again of the user")
    assert s["approvals"][approval_id]["status"] == "pending"
    assert tools(s)[0]["status"] == "waiting_approval"
    assert not (wd / "ran.txt").exists()

    _approve(server, sid, approval_id)
    _ran_once_and_went_on(server, sid, approval_id, wd)
