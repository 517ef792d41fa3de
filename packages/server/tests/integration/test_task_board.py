"""A task run end to end through the real stack: a dependency not done refuses the run; the
task is in progress while its session works (here: waits for an approval), in review when
it is done, back in progress on a follow-up, and done only when the user says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codey_testkit.scenarios import session, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "Task: Fix the login bug"}, "reply": {"calls": [
        {"name": "shell", "arguments": {"command": ["make", "fix"]}}]}},
    {"match": {"tool": "shell"}, "reply": {"text": "Fixed."}},
    {"match": {"user": "also the tests"}, "reply": {"text": "Tests added."}},
    {"match": {"any": True}, "reply": {"text": "ok"}},
]}


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def test_a_task_follows_its_session_and_only_the_user_marks_it_done(
        server: ServerProcess, worker: WorkerProcess) -> None:
    http = server.http
    design = http.post("/api/tasks", json={"title": "Design the fix"}).json()["task_id"]
    fix = http.post("/api/tasks", json={
        "title": "Fix the login bug", "description": "Users are logged out after 5 min.",
        "depends_on": [design]}).json()["task_id"]
    cycle = http.post(f"/api/tasks/{design}", json={"title": "Design the fix",
                                                     "depends_on": [fix]})
    assert cycle.status_code == 409 and "cycle" in cycle.json()["detail"]

    def task(task_id: str) -> dict[str, Any]:
        return next(t for t in http.get("/api/tasks").json() if t["task_id"] == task_id)

    wd = Path(worker.workdir("app"))
    wd.mkdir(parents=True)
    run = {"worker_id": worker.worker_id, "workdir": str(wd), "policy": "suggest"}
    refused = http.post(f"/api/tasks/{fix}/run", json=run)
    assert refused.status_code == 409 and "Design the fix" in refused.json()["detail"]
    assert http.post(f"/api/tasks/{fix}/move", json={"status": "in_progress"}).status_code == 409

    assert http.post(f"/api/tasks/{design}/move", json={"status": "done"}).status_code == 200
    started = http.post(f"/api/tasks/{fix}/run", json=run)
    assert started.status_code == 201, started.text
    sid = started.json()["session_id"]
    s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval",
                 what="the approval the fix asks for")
    assert s["items"][0]["text"].startswith("Task: Fix the login bug\n\nUsers are logged out")
    assert task(fix)["status"] == "in_progress" and task(fix)["session_ids"] == [sid]
    (approval_id,) = s["approvals"]
    assert http.post(f"/api/sessions/{sid}/approvals/{approval_id}",
                     json={"decision": "approve"}).status_code == 200
    wait_until(lambda: task(fix)["status"] == "review", what="review once the session is done")
    assert session(server, sid)["items"][-1]["text"] == "Fixed."

    http.post(f"/api/sessions/{sid}/prompt", json={"text": "also the tests"})
    wait_until(lambda: session(server, sid)["items"][-1].get("text") == "Tests added.",
               what="the follow-up")
    wait_until(lambda: task(fix)["status"] == "review", what="review again")
    assert http.post(f"/api/tasks/{fix}/move", json={"status": "done"}).status_code == 200
    assert task(fix)["status"] == "done"
    # done stays done, whatever its session does next
    http.post(f"/api/sessions/{sid}/prompt", json={"text": "thanks"})
    wait_until(lambda: session(server, sid)["items"][-1].get("text") == "ok", what="a reply")
    assert task(fix)["status"] == "done"
    assert http.delete(f"/api/tasks/{design}").status_code == 409  # fix depends on it
