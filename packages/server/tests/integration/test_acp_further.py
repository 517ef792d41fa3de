"""More of ACP over the real stack, with the scripted agent: its own slash commands
(``available_commands_update``: the session keeps the latest whole list, a later list replaces
it), and a tool call whose title and command arrive only in a later ``tool_call_update`` (as
claude-agent-acp sends a command: "Terminal" and an empty raw input first)."""

from __future__ import annotations

import json
from pathlib import Path

from codey_testkit.acp_agent import worker_config
from codey_testkit.scenarios import wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

TURNS = {"turns": [
    [{"commands": [["plan-it", "Make a plan first", "what to plan"],
                   ["init", "Write an AGENTS.md", ""]]},
     {"say": "Ready."}],
    [{"commands": [["init", "Write an AGENTS.md", ""]]}, {"say": "Again."}],
    [{"tool": {"id": "c1", "title": "Terminal", "kind": "execute", "raw_input": {}}},
     {"update": {"id": "c1", "status": "in_progress", "title": "`ls -la`",
                 "raw_input": {"command": "ls -la", "description": "List files"}}},
     {"update": {"id": "c1", "status": "completed", "text": "total 0"}},
     {"say": "Listed."}],
]}


def test_the_agents_commands_reach_the_session(tmp_path: Path) -> None:
    script = tmp_path / "acp-turns.json"
    script.write_text(json.dumps(TURNS))
    config = worker_config(script, tmp_path / "acp-state")
    with ServerProcess(tmp_path / "server") as server, \
            WorkerProcess(server, tmp_path / "worker", config=config) as worker:
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": worker.workdir("acp"),
            "agent": "scripted", "prompt": "hello"})
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        s = wait_for(server, sid, lambda s: s["status"] == "idle" and any(
            i.get("text") == "Ready." for i in s["items"]), timeout=60, what="turn 1")
        assert s["agent_commands"] == [
            {"name": "plan-it", "description": "Make a plan first", "hint": "what to plan"},
            {"name": "init", "description": "Write an AGENTS.md", "hint": ""}]

        r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "/init"})
        assert r.status_code == 202, r.text
        s = wait_for(server, sid, lambda s: s["status"] == "idle" and any(
            i.get("text") == "Again." for i in s["items"]), timeout=60, what="turn 2")
        assert [c["name"] for c in s["agent_commands"]] == ["init"]

        # a command's card named and shown only by a later update
        r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "list the files"})
        assert r.status_code == 202, r.text
        s = wait_for(server, sid, lambda s: s["status"] == "idle" and any(
            i.get("text") == "Listed." for i in s["items"]), timeout=60, what="turn 3")
        (call,) = [i for i in s["items"] if i["kind"] == "tool_call"]
        assert (call["name"], call["command"], call["status"], call["result"]) == (
            "`ls -la`", ["ls -la"], "done", "total 0")
        assert json.loads(call["arguments"]) == {"kind": "execute", "title": "`ls -la`",
                                                 "command": ["ls -la"]}
        log = server.http.get(f"/api/sessions/{sid}/log").text
        assert '"name":"`ls -la`"' in log  # an update event, not a new card
