"""A session run by an external agent over ACP: the real server and worker, and the test kit's
scripted ACP agent (written with the SDK) started by the worker."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from codey_testkit.acp_agent import worker_config
from codey_testkit.scenarios import session, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

TURNS = {"turns": [
    [
        {"think": "The user wants a file."},
        {"say": "Let me write hello.txt."},
        {"plan": [["write hello.txt", "in_progress"], ["read it back", "pending"]]},
        {"tool": {"id": "t1", "title": "Write hello.txt", "kind": "edit"}},
        {"permission": {"id": "t1", "title": "Write hello.txt"}},
        {"write": {"path": "hello.txt", "content": "hi from acp\n"}, "if_allowed": True},
        {"update": {"id": "t1", "status": "completed", "text": "wrote hello.txt"},
         "if_allowed": True},
        {"read": {"path": "hello.txt"}, "if_allowed": True},
        {"say": " Done."},
    ],
    [
        {"tool": {"id": "t2", "title": "Escape the workdir", "kind": "edit"}},
        {"permission": {"id": "t2", "title": "Escape the workdir"}},
        {"write": {"path": "../outside.txt", "content": "no"}, "if_allowed": True},
    ],
    [
        {"tool": {"id": "t3", "title": "Write again", "kind": "edit"}},
        {"permission": {"id": "t3", "title": "Write again"}},
        {"write": {"path": "again.txt", "content": "again"}, "if_allowed": True},
    ],
]}


def _agent_config(tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "acp-turns.json"
    script.write_text(json.dumps(TURNS))
    return worker_config(script, tmp_path / "acp-state")


def test_an_acp_session_with_a_permission_request(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "server") as server, \
            WorkerProcess(server, tmp_path / "worker", config=_agent_config(tmp_path)) as worker:
        state = server.http.get("/api/state/bootstrap").json()["state"]
        assert state["workers"][worker.worker_id]["capabilities"]["acp_agents"] == ["scripted"]
        workdir = Path(worker.workdir("acp"))
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": str(workdir), "agent": "scripted",
            "prompt": "write a greeting"})
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval", timeout=60,
                     what="the agent's permission request")
        assert (s["agent"], s["provider"], s["model"]) == ("scripted", "acp", "scripted")
        (approval,) = s["approvals"].values()
        assert approval["kind"] == "acp" and approval["reason"] == "Write hello.txt"
        (call,) = tools(s)
        assert call["name"] == "Write hello.txt" and call["status"] == "waiting_approval"
        assert not (workdir / "hello.txt").exists()  # nothing before the decision

        r = server.http.post(f"/api/sessions/{sid}/approvals/{approval['approval_id']}",
                             json={"decision": "approve"})
        assert r.status_code == 200, r.text
        s = wait_for(server, sid, lambda s: s["status"] == "idle", timeout=60,
                     what="the end of the agent's turn")
        # the agent's write went through the worker's confined file system
        assert (workdir / "hello.txt").read_text() == "hi from acp\n"
        kinds = [i["kind"] for i in s["items"]]
        assert kinds[:3] == ["user_message", "reasoning", "assistant_message"]
        texts = [i["text"] for i in s["items"] if i["kind"] == "assistant_message"]
        # a tool call between two runs of text splits them into two messages
        assert texts == ["Let me write hello.txt.", "[permission: allow_once]",
                         "[read: hi from acp\n] Done."]
        assert not any(i.get("streaming") for i in s["items"])
        (call,) = tools(s)
        assert (call["status"], call["result"]) == ("done", "wrote hello.txt")
        assert [p["step"] for p in s["plan"]] == ["write hello.txt", "read it back"]
        assert s["pending_actions"] == {}

        # the next prompt goes to the same agent session (its second turn). Approved for the
        # session: still the agent's "allow_once" (its "allow_always" would outlive the
        # session), Codey remembers; its write outside the workdir is refused by the worker
        # all the same
        server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "now escape"})
        s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval", timeout=60,
                     what="the second permission request")
        pending = [a for a in s["approvals"].values() if a["status"] == "pending"]
        r = server.http.post(f"/api/sessions/{sid}/approvals/{pending[0]['approval_id']}",
                             json={"decision": "approve_for_session"})
        assert r.status_code == 200
        s = wait_for(server, sid, lambda s: s["status"] == "idle", timeout=60,
                     what="the end of the second turn")
        said = [i["text"] for i in s["items"] if i["kind"] == "assistant_message"]
        assert said[-1].startswith("[permission: allow_once][write failed:"), said
        assert not (workdir.parent / "outside.txt").exists()

        # the third turn's request of the same kind is answered from that decision
        server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "once more"})
        s = wait_for(server, sid, lambda s: s["status"] == "idle" and len(tools(s)) == 3,
                     timeout=60, what="the third turn")
        assert len(s["approvals"]) == 2  # no new approval
        assert (workdir / "again.txt").read_text() == "again"
        assert s["items"][-1]["text"] == "[permission: allow_once]"
        assert session(server, sid)["title"] == "write a greeting"


def test_an_agent_the_worker_does_not_have_is_refused(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "server") as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": worker.workdir("x"), "agent": "claude",
            "prompt": "hi"})
        assert r.status_code == 404 and "no ACP agent 'claude'" in r.text


def test_interrupt_cancels_the_agents_turn_and_a_restarted_worker_loads_its_session(
        tmp_path: Path) -> None:
    script = tmp_path / "turns.json"
    script.write_text(json.dumps({"turns": [
        [{"say": "one"}], [{"say": "working…"}, {"wait_cancel": True}], [{"say": "three"}]]}))
    config = worker_config(script)
    with ServerProcess(tmp_path / "server") as server, \
            WorkerProcess(server, tmp_path / "worker", config=config) as worker:
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": worker.workdir("w"), "agent": "scripted",
            "prompt": "first"})
        sid = r.json()["session_id"]
        wait_for(server, sid, lambda s: s["status"] == "idle" and len(s["items"]) == 2,
                 timeout=60, what="the first turn")
        server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "second"})
        wait_for(server, sid, lambda s: s["items"][-1].get("text") == "working…", timeout=60,
                 what="the agent at work")
        assert server.http.post(f"/api/sessions/{sid}/interrupt").status_code == 200
        s = wait_for(server, sid, lambda s: s["status"] == "interrupted"
                     and not s["pending_actions"], timeout=60, what="the interrupt")
        assert s["items"][-1]["partial"] is True  # the cut answer stays, marked

        # a new worker process starts the agent again, which loads the same ACP session: its
        # third turn plays, not its first
        worker.stop()
        worker.start()
        server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "third"})
        s = wait_for(server, sid, lambda s: s["status"] == "idle"
                     and s["items"][-1].get("text") == "three", timeout=60,
                     what="the third turn after the restart")
        assert s["items"][-1]["kind"] == "assistant_message"


def test_a_server_restart_in_the_middle_of_the_agents_turn(tmp_path: Path) -> None:
    script = tmp_path / "turns.json"
    script.write_text(json.dumps({"turns": [[
        {"say": "started"}, {"wait_file": "go"},
        {"write": {"path": "after.txt", "content": "after"}}, {"say": "finished"}]]}))
    config = worker_config(script)
    with ServerProcess(tmp_path / "server") as server, \
            WorkerProcess(server, tmp_path / "worker", config=config) as worker:
        workdir = Path(worker.workdir("r"))
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": str(workdir), "agent": "scripted",
            "prompt": "go on"})
        sid = r.json()["session_id"]
        wait_for(server, sid, lambda s: s["items"][-1].get("text") == "started", timeout=60,
                 what="the agent at work")
        server.restart()
        worker.wait_connected()
        # the resumed runner follows the same action: the text cut by the restart is partial
        s = wait_for(server, sid, lambda s: s["items"][1].get("partial") is True, timeout=60,
                     what="the turn picked up again")
        assert s["status"] == "running" and len(s["pending_actions"]) == 1
        (workdir / "go").touch()
        s = wait_for(server, sid, lambda s: s["status"] == "idle", timeout=60,
                     what="the end of the turn")
        assert (workdir / "after.txt").read_text() == "after"
        assert s["pending_actions"] == {}
        assert [i["kind"] for i in s["items"]].count("user_message") == 1  # not prompted again


#: the shapes codex-acp (Zed's ACP adapter for Codex) sends: a command's argv and the reason
#: in the permission's raw input, its output only in the raw output, a declined call ends
#: "failed"; then a turn interrupted while a permission waits
CODEX_SHAPES = {"turns": [
    [
        {"tool": {"id": "c1", "title": "ls -la", "kind": "execute",
                  "raw_input": {"command": ["ls", "-la"], "cwd": "."}}},
        {"permission": {"id": "c1", "title": "ls -la", "kind": "execute",
                        "raw_input": {"call_id": "c1", "command": ["ls", "-la"], "cwd": ".",
                                      "reason": "list the files to find the tests"},
                        "text": "list the files to find the tests\nAvailable Decisions: "
                                "approved"}},
        {"update": {"id": "c1", "status": "completed", "raw_output": {
            "stdout": "a.txt\n", "stderr": "", "aggregated_output": "a.txt\n",
            "formatted_output": "a.txt\nb.txt\n", "exit_code": 0}}, "if_allowed": True},
        {"tool": {"id": "c2", "title": "rm -rf build", "kind": "execute",
                  "raw_input": {"command": ["rm", "-rf", "build"]}}},
        {"permission": {"id": "c2", "title": "rm -rf build", "kind": "delete",
                        "raw_input": {"command": ["rm", "-rf", "build"],
                                      "reason": "clean the build"}}},
        {"update": {"id": "c2", "status": "failed", "raw_output": {
            "stdout": "", "stderr": "", "formatted_output": "", "exit_code": -1}},
         "if_rejected": True},
        {"say": "done"},
    ],
    [
        {"tool": {"id": "c3", "title": "make", "kind": "execute",
                  "raw_input": {"command": ["make"]}}},
        {"permission": {"id": "c3", "title": "make", "kind": "execute",
                        "raw_input": {"command": ["make"], "reason": "build it"}}},
        {"say": "never said"},
    ],
    [{"say": "after the interrupt"}],
]}


def test_the_shapes_codex_acp_sends(tmp_path: Path) -> None:
    script = tmp_path / "codex-shapes.json"
    script.write_text(json.dumps(CODEX_SHAPES))
    config = {"acp_agents": {"codex": {
        "command": sys.executable,
        "args": ["-m", "codey_testkit.acp_agent", "--script", str(script)]}}}
    with ServerProcess(tmp_path / "server") as server, \
            WorkerProcess(server, tmp_path / "worker", config=config) as worker:
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": worker.workdir("c"), "agent": "codex",
            "prompt": "tidy up", "policy": "suggest"})
        sid = r.json()["session_id"]

        # the permission's reason and argv reach the card
        s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval", timeout=60,
                     what="the first permission request")
        (approval,) = s["approvals"].values()
        assert approval["reason"] == "ls -la — list the files to find the tests"
        (call,) = tools(s)
        assert call["command"] == ["ls", "-la"]
        assert json.loads(call["arguments"])["command"] == ["ls", "-la"]
        server.http.post(f"/api/sessions/{sid}/approvals/{approval['approval_id']}",
                         json={"decision": "approve"})

        # the output sent only as raw output is shown
        s = wait_for(server, sid, lambda s: len(tools(s)) == 2
                     and s["status"] == "waiting_approval", timeout=60,
                     what="the second permission request")
        first = tools(s)[0]
        assert (first["status"], first["output"], first["result"]) == (
            "done", "a.txt\nb.txt\n", "a.txt\nb.txt\n")

        # a rejected call stays rejected, through the agent's "failed" and the turn's end
        pending = [a for a in s["approvals"].values() if a["status"] == "pending"]
        assert pending[0]["reason"] == "rm -rf build — clean the build"
        server.http.post(f"/api/sessions/{sid}/approvals/{pending[0]['approval_id']}",
                         json={"decision": "reject"})
        s = wait_for(server, sid, lambda s: s["status"] == "idle", timeout=60,
                     what="the end of the first turn")
        second = tools(s)[1]
        assert second["status"] == "rejected", second
        said = [i["text"] for i in s["items"] if i["kind"] == "assistant_message"]
        assert said == ["[permission: allow_once]", "[permission: reject_once]", "done"], said

        # interrupted while a permission waits: the session ends interrupted, not running,
        # and the next prompt starts the agent's next turn
        server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "build"})
        wait_for(server, sid, lambda s: s["status"] == "waiting_approval", timeout=60,
                 what="the third permission request")
        assert server.http.post(f"/api/sessions/{sid}/interrupt").status_code == 200
        s = wait_for(server, sid, lambda s: s["status"] == "interrupted"
                     and not s["pending_actions"], timeout=60, what="the interrupt")
        server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "go on"})
        s = wait_for(server, sid, lambda s: s["status"] == "idle"
                     and s["items"][-1].get("text") == "after the interrupt", timeout=60,
                     what="the turn after the interrupt")
        assert all(a["status"] != "pending" for a in s["approvals"].values())
        assert "never said" not in json.dumps(s)
        # nothing set the session's status between the interrupt and the next prompt (the
        # permission's waiter, cancelled by the interrupt, used to set it running for good)
        log = [json.loads(line)["event"] for line in server.http.get(
            f"/api/sessions/{sid}/log").text.splitlines()]
        stopped = next(n for n, e in enumerate(log) if e.get("status") == "interrupted")
        prompted = next(n for n, e in enumerate(log) if e["type"] == "session_item_appended"
                        and e["item"].get("text") == "go on")
        between = [e for e in log[stopped + 1:prompted]
                   if e["type"] == "session_status_changed"]
        assert between == [], between
