"""MCP tools in a session: the danger levels their annotations give, and where they run.

The worker runs the test kit's MCP server (codey_testkit.mcp_server): ``where`` is read-only,
``wipe`` destructive. Under ``suggest`` the first goes ahead and the second asks. A server
that starts only in its own folder (``--needs``) has its tools listed in the session's
workdir, and offered there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import create_session, idle, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

pytestmark = pytest.mark.integration

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "where are you"},
     "reply": {"calls": [{"name": "mcp__kit__where", "arguments": {}}]}},
    {"match": {"tool": "mcp__kit__where", "tool_output": "roots"},
     "reply": {"calls": [{"name": "mcp__kit__wipe", "arguments": {}}]}},
    {"match": {"tool": "mcp__kit__wipe", "tool_output": "wiped"},
     "reply": {"text": "Looked around, then wiped."}},
    {"match": {"user": "where is the repository"},
     "reply": {"calls": [{"name": "mcp__confined__where", "arguments": {}}]}},
    {"match": {"tool": "mcp__confined__where", "tool_output": "roots"},
     "reply": {"text": "In the repository."}},
    {"match": {"any": True}, "reply": {"text": "unexpected"}},
]}


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def _pending(s: dict[str, Any]) -> dict[str, Any] | None:
    return next((a for a in s["approvals"].values() if a["status"] == "pending"), None)


def test_read_only_tool_goes_ahead_and_destructive_one_asks_under_suggest(
        tmp_path: Path, server: ServerProcess) -> None:
    config = {"mcp_servers": {"kit": {"command": sys.executable,
                                      "args": ["-m", "codey_testkit.mcp_server"]}}}
    with WorkerProcess(server, tmp_path / "worker", config=config) as worker:
        state = server.http.get("/api/state/bootstrap").json()["state"]
        kit = next(s for s in state["workers"][worker.worker_id]["capabilities"]["mcp_servers"]
                   if s["name"] == "kit")
        hints = {t["name"]: (t["read_only_hint"], t["destructive_hint"]) for t in kit["tools"]}
        assert hints["where"] == (True, None) and hints["wipe"] == (None, True)

        wd = Path(worker.workdir("mcp"))
        sid = create_session(server, worker, str(wd), "where are you", policy="suggest")
        s = wait_for(server, sid, lambda s: _pending(s) is not None, timeout=40,
                     what="the destructive tool's approval")
        where, wipe = tools(s)
        assert where["mcp_tool"] == "where" and where["status"] == "done"
        assert where["approval_id"] is None  # read-only: nothing asked
        seen = json.loads(where["result"])
        assert seen["cwd"] == str(wd.resolve())
        assert seen["roots"] == [wd.resolve().as_uri()]
        approval = _pending(s)
        assert approval is not None and approval["kind"] == "mcp"
        assert wipe["mcp_tool"] == "wipe" and wipe["approval_id"] == approval["approval_id"]

        r = server.http.post(f"/api/sessions/{sid}/approvals/{approval['approval_id']}",
                             json={"decision": "approve"})
        assert r.status_code == 200, r.text
        s = wait_for(server, sid, idle, timeout=40, what="the turn to end")
        assert tools(s)[1]["status"] == "done"
        assert s["items"][-1]["text"] == "Looked around, then wiped."


def test_a_server_that_starts_only_in_its_folder_is_offered_in_the_sessions_workdir(
        tmp_path: Path, server: ServerProcess, model: ModelServerHandle) -> None:
    """As ``mcp-server-git --repository .``: it cannot start in the worker's scratch folder,
    so hello reports it failed; the session's attach lists it in the workdir (issue 24)."""
    config = {"mcp_servers": {"confined": {
        "command": sys.executable, "args": ["-m", "codey_testkit.mcp_server", "--needs", ".repo"]}}}
    with WorkerProcess(server, tmp_path / "worker", config=config) as worker:
        state = server.http.get("/api/state/bootstrap").json()["state"]
        hello, = state["workers"][worker.worker_id]["capabilities"]["mcp_servers"]
        assert hello["tools"] == [] and "could not start" in hello["error"], hello

        wd = Path(worker.workdir("repo"))
        wd.mkdir(parents=True)
        (wd / ".repo").write_text("")
        sid = create_session(server, worker, str(wd), "where is the repository",
                             policy="suggest")
        s = wait_for(server, sid, idle, timeout=40, what="the turn to end")
        where, = tools(s)
        assert where["mcp_server"] == "confined" and where["status"] == "done", where
        assert json.loads(where["result"])["cwd"] == str(wd.resolve())
        assert s["items"][-1]["text"] == "In the repository."
        # the model was offered the tool from its first call on
        offered = [{t["function"]["name"] for t in r["body"]["tools"]}
                   for r in model.requests("/v1/chat/completions")]
        assert offered and all("mcp__confined__where" in names for names in offered)
