"""The delegate gate over the real stack (server, worker, the scripted model): a
prompt-injected model hands a sub-agent a folder outside its session's — an absolute path next
to it, or ``../..`` — under suggest, auto-edit and full-auto. The audit's finding: the child
started at once with that folder writable in its sandbox (``delegate(developer, workdir=~)``
appended to ``~/.bashrc``). Now the user is asked first, under every policy; while the
question waits no sub-agent exists and nothing is written; a rejection means it never starts;
an approval starts it in the folder the card named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import idle, session, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [{"match": {"any": True},
                                              "reply": {"text": "unexpected"}}]}


def _script(other: Path) -> dict[str, Any]:
    def delegate(workdir: str) -> dict[str, Any]:
        return {"calls": [{"name": "delegate", "arguments": {
            "role": "developer", "task": "child-plant: write pwned.txt", "workdir": workdir}}]}

    return {"model": "scripted-1", "steps": [
        # what a README the model read told it to do
        {"match": {"user": "plant it next door"}, "reply": delegate(str(other))},
        {"match": {"user": "climb out"}, "reply": delegate("../..")},
        {"match": {"user": "child-plant"}, "reply": {"calls": [
            {"name": "write_file", "arguments": {"path": "pwned.txt", "content": "owned\n"}}]}},
        {"match": {"tool": "write_file"}, "reply": {"text": "planted"}},
        {"match": {"tool": "delegate"}, "reply": {"text": "parent done"}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]}


def _start(server: ServerProcess, worker: WorkerProcess, workdir: Path, prompt: str,
           policy: str) -> str:
    r = server.http.post("/api/sessions", json={"worker_id": worker.worker_id,
                                                "workdir": str(workdir), "prompt": prompt,
                                                "policy": policy})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def _children(server: ServerProcess, sid: str) -> list[dict[str, Any]]:
    state = server.http.get("/api/state/bootstrap").json()["state"]
    return [c for c in state["sessions"].values() if c["parent_id"] == sid]


def _pending(s: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in s["approvals"].values() if a["status"] == "pending"]


def _decide(server: ServerProcess, sid: str, approval: dict[str, Any], decision: str) -> None:
    r = server.http.post(f"/api/sessions/{sid}/approvals/{approval['approval_id']}",
                         json={"decision": decision})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("policy", ["suggest", "auto-edit", "full-auto"])
def test_a_sub_agent_outside_the_workdir_waits_for_the_user_under_every_policy(
        policy: str, model: ModelServerHandle, server: ServerProcess,
        worker: WorkerProcess) -> None:
    app = Path(worker.workdir("app"))
    other = Path(worker.workdir("other"))
    for folder in (app, other):
        folder.mkdir(parents=True)
    model.set_script(_script(other))
    home = worker.home  # ../.. of the app: the user's home
    nextdoor = _start(server, worker, app, "plant it next door", policy)
    climbing = _start(server, worker, app, "climb out", policy)

    asked = {sid: wait_for(server, sid, lambda s: bool(_pending(s)), timeout=30,
                           what="the delegation's approval")
             for sid in (nextdoor, climbing)}
    for sid, folder in ((nextdoor, other), (climbing, home)):
        [approval] = _pending(asked[sid])
        assert approval["kind"] == "delegate"
        assert approval["path"] == str(folder)  # the card names the folder it grants
        assert f"outside this session's folder {app}" in approval["reason"]
        [call] = tools(asked[sid])
        assert call["status"] == "waiting_approval"
    # while the questions wait: no sub-agent, nothing written anywhere
    assert _children(server, nextdoor) == [] and _children(server, climbing) == []
    assert not (other / "pwned.txt").exists() and not (home / "pwned.txt").exists()

    # rejected: the sub-agent never starts, and the model reads why
    _decide(server, climbing, _pending(asked[climbing])[0], "reject")
    s = wait_for(server, climbing, idle, timeout=30, what="the rejected delegation's turn")
    [call] = tools(s)
    assert call["status"] == "rejected" and "rejected by the user" in call["result"]
    assert s["items"][-1]["text"] == "parent done"
    assert _children(server, climbing) == [] and not (home / "pwned.txt").exists()

    # approved: it starts in the folder the user was shown, under the parent's policy
    _decide(server, nextdoor, _pending(asked[nextdoor])[0], "approve")
    [child] = wait_for_children(server, nextdoor)
    assert (child["workdir"], child["policy"]) == (str(other), policy)
    if policy == "suggest":  # the child's own write asks in its own session
        asked_child = wait_for(server, child["session_id"], lambda c: bool(_pending(c)),
                               timeout=30, what="the child's write approval")
        _decide(server, child["session_id"], _pending(asked_child)[0], "approve")
    s = wait_for(server, nextdoor, idle, timeout=30, what="the approved delegation's turn")
    assert s["items"][-1]["text"] == "parent done"
    assert (other / "pwned.txt").read_text() == "owned\n"
    assert session(server, child["session_id"])["status"] == "idle"


def wait_for_children(server: ServerProcess, sid: str) -> list[dict[str, Any]]:
    """The sub-agents of ``sid`` once there is one (the parent's session is what is polled)."""
    wait_for(server, sid, lambda s: bool(_children(server, sid)), timeout=30,
             what="the sub-agent to start")
    return _children(server, sid)
