"""The agent loop over real processes: server, worker, scripted model server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.scenarios import (
    create_session,
    fix_script,
    idle,
    provider_config,
    session,
    tools,
    wait_for,
    write_project,
)
from codey_testkit.stack import ServerProcess, WorkerProcess


@pytest.fixture
def script() -> dict[str, Any]:
    return fix_script()


def test_read_patch_run_tests_to_completion(server: ServerProcess, worker: WorkerProcess,
                                            model: ModelServerHandle) -> None:
    project = Path(worker.workdir("proj"))
    write_project(project)
    sid = create_session(server, worker, str(project), "fix the add function")
    s = wait_for(server, sid, idle, what="the turn to end")
    assert s["status"] == "idle", s["status_reason"]
    calls = tools(s)
    assert [c["name"] for c in calls] == ["read_file", "apply_patch", "shell"]
    assert all(c["status"] == "done" for c in calls), [c["result"] for c in calls]
    assert "return a + b" in (project / "app.py").read_text()
    assert calls[1]["diff"] and "+    return a + b" in calls[1]["diff"]
    assert calls[2]["exit_code"] == 0 and "1 passed" in calls[2]["output"]
    assert s["items"][-1]["kind"] == "assistant_message"
    assert "test passes" in s["items"][-1]["text"]
    assert s["title"] == "fix the add function"
    assert s["usage"]["turns"] >= 4
    # the model saw every tool result
    bodies = [r["body"] for r in model.requests("/v1/chat/completions")]
    assert len(bodies) == 4
    last_messages = bodies[-1]["messages"]
    assert [m["role"] for m in last_messages if m["role"] == "tool"] == ["tool"] * 3


#: where each provider kind's calls go on the scripted model
PATHS = {"responses": "/v1/responses", "anthropic": "/v1/messages"}


@pytest.mark.parametrize("kind", ["responses", "ollama", "anthropic"])
def test_other_provider_kinds_run_the_same_turn(tmp_path: Path, kind: str) -> None:
    """The Responses API (streamed), Ollama (models read from /api/tags at start-up) and
    Anthropic's Messages API."""
    with start_model_server(fix_script(), tmp_path / "model") as model:
        config = provider_config(model, kind=kind)
        if kind == "ollama":
            config["providers"][0]["models"] = []  # discovered, not configured
        with ServerProcess(tmp_path / "server", config=config) as server, \
                WorkerProcess(server, tmp_path / "worker") as worker:
            listed = server.http.get("/api/config").json()["providers"][0]
            assert "scripted-1" in listed["models"]
            project = Path(worker.workdir("proj"))
            write_project(project)
            sid = create_session(server, worker, str(project), "fix the add function")
            s = wait_for(server, sid, idle, what="the turn to end")
            assert s["status"] == "idle", s["status_reason"]
            assert s["model"] == "scripted-1"
            assert [c["status"] for c in tools(s)] == ["done", "done", "done"]
            assert "return a + b" in (project / "app.py").read_text()
            assert len(model.requests(PATHS.get(kind, "/v1/chat/completions"))) == 4


LOOP_SCRIPT = {"model": "scripted-1", "steps": [
    {"match": {"user": "loop"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": ["touch", "made.txt"]}}]}},
    {"match": {"any": True},
     "reply": {"calls": [{"name": "list_dir", "arguments": {"path": "."}}]}},
]}


def test_iteration_cap_ends_the_turn_with_a_question(tmp_path: Path) -> None:
    with start_model_server(LOOP_SCRIPT, tmp_path / "model") as model:
        config = {**provider_config(model), "turn_iteration_cap": 3}
        with ServerProcess(tmp_path / "server", config=config) as server, \
                WorkerProcess(server, tmp_path / "worker") as worker:
            project = Path(worker.workdir("loop"))
            project.mkdir(parents=True)
            sid = create_session(server, worker, str(project), "loop")
            s = wait_for(server, sid, lambda s: s["status"] == "waiting_user",
                         what="the iteration cap")
            assert len(tools(s)) == 3
            assert s["items"][-1]["kind"] == "assistant_message"
            assert "Should I go on?" in s["items"][-1]["text"]
            # the user answers: a new turn starts
            server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "go on"})
            s = wait_for(server, sid, lambda s: len(tools(s)) >= 4, what="the next turn")


def test_pending_approval_survives_a_server_restart(tmp_path: Path) -> None:
    with start_model_server(LOOP_SCRIPT, tmp_path / "model") as model, \
            ServerProcess(tmp_path / "server", config=provider_config(model)) as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        project = Path(worker.workdir("appr"))
        project.mkdir(parents=True)
        sid = create_session(server, worker, str(project), "loop", policy="suggest")
        s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval", what="approval")
        (approval_id,) = list(s["approvals"])
        server.kill9()
        server.start()
        worker.wait_connected()
        s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval",
                     what="the approval after the restart")
        assert s["approvals"][approval_id]["status"] == "pending"
        r = server.http.post(f"/api/sessions/{sid}/approvals/{approval_id}",
                             json={"decision": "approve"})
        assert r.status_code == 200
        wait_for(server, sid, lambda s: (project / "made.txt").exists() and len(tools(s)) >= 2,
                 what="the approved command to run")
        assert tools(session(server, sid))[0]["status"] == "done"


#: the window of the long session's model (see test_a_long_session_compacts_and_finishes)
LONG_WINDOW = 12000


def _long_session_script(steps: int) -> dict[str, Any]:
    call = {"calls": [{"name": "shell", "arguments": {"command": ["true"]}}]}
    return {"model": "scripted-1", "options": {"context_window": LONG_WINDOW}, "steps": [
        {"match": {"user": "Summarize the conversation above"},
         "reply": {"text": "- The user asked to run `true` 300 times; keep calling it."}},
        {"match": {"user": "run the long loop"}, "times": 1, "reply": call},
        {"match": {"tool": "shell"}, "times": steps - 1, "reply": call},
        {"match": {"tool": "shell"}, "reply": {"text": f"Ran it {steps} times."}},
    ]}


@pytest.mark.parametrize("kind", ["responses", "chat", "anthropic"])
def test_a_long_session_compacts_and_finishes(tmp_path: Path, kind: str) -> None:
    """300 tool steps against a model whose window holds about 100: the session compacts
    (more than once) and finishes; the model never sees an input over its window. The
    window is the instructions and tools (about 5,200 tokens since the web tools came) plus
    room for about 100 steps (about 50 tokens each)."""
    steps = 300
    with start_model_server(_long_session_script(steps), tmp_path / "model") as model:
        config = provider_config(model, kind=kind)
        config["providers"][0]["context_window"] = LONG_WINDOW
        config["turn_iteration_cap"] = steps + 50
        with ServerProcess(tmp_path / "server", config=config) as server, \
                WorkerProcess(server, tmp_path / "worker") as worker:
            project = Path(worker.workdir("long"))
            project.mkdir(parents=True)
            sid = create_session(server, worker, str(project), "run the long loop")
            s = wait_for(server, sid, idle, timeout=240, what="the long turn to end")
            assert s["status"] == "idle", s["status_reason"]
            assert len(tools(s)) == steps
            assert s["items"][-1]["text"] == f"Ran it {steps} times."
            summaries = [i for i in s["items"] if i["kind"] == "summary"]
            assert len(summaries) >= 2 and all(x["reason"] == "threshold" for x in summaries)
            assert not [i for i in s["items"] if i["kind"] == "error_item"]
            requests = model.requests(PATHS.get(kind, "/v1/chat/completions"))
            refused = [r for r in requests if r["status"] != 200]
            assert refused == []
            if kind == "anthropic":
                # the summary's call offers no tools: the API would refuse tool blocks there
                summarizing = [r["body"] for r in requests
                               if "Summarize the conversation above" in str(r["body"])]
                assert summarizing and all("tools" not in b for b in summarizing)
                assert not [blk for b in summarizing for m in b["messages"]
                            for blk in m["content"] if blk["type"] != "text"]
            assert s["usage"]["context_window"] == LONG_WINDOW
            assert s["usage"]["context_tokens"] < LONG_WINDOW


DELEGATE_SCRIPT = {"model": "scripted-1", "steps": [
    {"match": {"user": "survey the project"}, "reply": {"text": "Asking two explorers.", "calls": [
        {"name": "delegate", "arguments": {"role": "explorer", "task": "explore-A: list files"}},
        {"name": "delegate", "arguments": {"role": "explorer",
                                           "task": "explore-B: read app.py"}}]}},
    {"match": {"user": "explore-A"}, "reply": {
        "initial_delay_ms": 800,
        "calls": [{"name": "shell", "arguments": {"command": ["ls"]}},
                  {"name": "write_file", "arguments": {"path": "x.txt", "content": "no"}}]}},
    {"match": {"tool": "write_file"}, "reply": {"text": "A found app.py and test_app.py."}},
    {"match": {"user": "explore-B"}, "reply": {
        "initial_delay_ms": 800,
        "calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}},
    {"match": {"tool": "read_file"}, "reply": {"text": "B: add() subtracts."}},
    {"match": {"tool": "delegate", "tool_output": "A found"},
     "reply": {"text": "Both reported: two files, and add() subtracts."}},
    {"match": {"any": True}, "reply": {"text": "unexpected"}},
]}


def test_a_parent_delegates_to_two_explorers_in_parallel(tmp_path: Path) -> None:
    with start_model_server(DELEGATE_SCRIPT, tmp_path / "model") as model, \
            ServerProcess(tmp_path / "server", config=provider_config(model)) as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        project = Path(worker.workdir("survey"))
        write_project(project)
        sid = create_session(server, worker, str(project), "survey the project",
                             policy="suggest")
        s = wait_for(server, sid, idle, timeout=60, what="the parent's turn")
        assert s["items"][-1]["text"] == "Both reported: two files, and add() subtracts."
        calls = [c for c in tools(s) if c["name"] == "delegate"]
        assert [c["status"] for c in calls] == ["done", "done"]
        assert "the explorer finished:\nA found" in calls[0]["result"]
        assert "the explorer finished:\nB: add() subtracts." in calls[1]["result"]
        state = server.http.get("/api/state/bootstrap").json()["state"]
        children = sorted((c for c in state["sessions"].values() if c["parent_id"] == sid),
                          key=lambda c: c["title"])
        assert [(c["role"], c["read_only"], c["status"]) for c in children] == [
            ("explorer", True, "idle"), ("explorer", True, "idle")]
        a, b = children
        # an explorer only reads: its write was refused, its `ls` ran without asking
        a_tools = tools(a)
        assert [(t["name"], t["status"]) for t in a_tools] == [("shell", "done"),
                                                                ("write_file", "rejected")]
        assert not (project / "x.txt").exists()
        # in parallel: B was started before A finished
        log = [line for line in server.http.get(f"/api/sessions/{a['session_id']}/log")
               .text.splitlines() if line]
        a_done = json.loads(log[-1])["ts"]
        assert b["created_at"] < a_done
