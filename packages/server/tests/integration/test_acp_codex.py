"""A session run by the real ``codex-acp`` (Zed's ACP adapter for Codex, from the npm
registry: ``python -m codey_testkit.codex_acp`` fetches it, scripts/test does) on a real worker,
its model the test kit's scripted one over the Responses API. Codey shows its permission
requests as approval cards. (Codex's own sandbox is off here: started by the worker, codex-acp
could not find its ``codex-linux-sandbox`` helper inside bwrap; what is tested is the ACP
conversation, not Codex's sandbox.)

What this holds against the real adapter: a command's argv on the card and its output on the
item; "approve for session" answered ``allow_once`` (Codex's "always" would write a permanent
rule under ``$CODEX_HOME/rules``); a rejection that stays rejected.

Codex runs with its classic ``shell_command`` tool, not its unified exec (``exec_command``):
codex-acp 0.16 reports a unified exec command's end only sometimes (its end event can come
before the start it registers, and is then dropped), so a call's output would reach a client
one run in two. Codey settles a call whose end never came as done at the end of the turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codey_testkit import codex_acp
from codey_testkit.model_handle import start_model_server
from codey_testkit.scenarios import tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

BINARY = codex_acp.binary()

pytestmark = pytest.mark.skipif(
    BINARY is None, reason="codex-acp is not fetched (python -m codey_testkit.codex_acp)")

SCRIPT = {"model": "scripted-1", "steps": [
    {"match": {"user": "make a file"}, "reply": {"calls": [
        {"name": "shell_command", "arguments": {"command": "touch made.txt && echo codex-ran"}}]}},
    {"match": {"user": "remove it"}, "reply": {"calls": [
        {"name": "shell_command", "arguments": {"command": "rm made.txt && echo removed"}}]}},
    {"match": {"tool": "shell_command", "tool_output": "codex-ran"}, "reply": {"text": "Made."}},
    {"match": {"tool": "shell_command", "tool_output": "removed"}, "reply": {"text": "Removed."}},
    {"match": {"any": True}, "reply": {"text": "unexpected"}},
]}


def _ask(server: ServerProcess, sid: str, prompt: str | None, decision: str) -> dict:
    """Prompt (unless None), wait for codex's permission request, decide it."""
    if prompt is not None:
        server.http.post(f"/api/sessions/{sid}/prompt", json={"text": prompt})
    s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval", timeout=90,
                 what="codex's permission request")
    (pending,) = [a for a in s["approvals"].values() if a["status"] == "pending"]
    r = server.http.post(f"/api/sessions/{sid}/approvals/{pending['approval_id']}",
                         json={"decision": decision})
    assert r.status_code == 200, r.text
    return pending


def _said(server: ServerProcess, sid: str, text: str) -> dict:
    return wait_for(server, sid, lambda s: s["status"] == "idle"
                    and s["items"][-1].get("text") == text, timeout=90,
                    what=f"codex's turn to end with {text!r}")


def test_a_session_run_by_codex_acp(tmp_path: Path) -> None:
    assert BINARY is not None
    model = start_model_server(SCRIPT, tmp_path / "model")
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        'model = "scripted-1"\nmodel_provider = "scripted"\napproval_policy = "untrusted"\n'
        'sandbox_mode = "danger-full-access"\n[model_providers.scripted]\nname = "scripted"\n'
        f'base_url = "{model.url}/v1"\nwire_api = "responses"\n')
    config = {"acp_agents": {"codex": {"command": str(BINARY),
                                       "env": {"CODEX_HOME": str(codex_home)}}}}
    try:
        with ServerProcess(tmp_path / "server") as server, \
                WorkerProcess(server, tmp_path / "worker", config=config) as worker:
            workdir = Path(worker.workdir("codex"))
            made = workdir / "made.txt"
            r = server.http.post("/api/sessions", json={
                "worker_id": worker.worker_id, "workdir": str(workdir), "agent": "codex",
                "prompt": "make a file", "policy": "suggest"})
            assert r.status_code == 201, r.text
            sid = r.json()["session_id"]

            # 1. the command on the card; approved, it runs and its output is on the item
            s = wait_for(server, sid, lambda s: s["status"] == "waiting_approval", timeout=90,
                         what="codex's first permission request")
            (call,) = tools(s)
            assert call["command"][-1] == "touch made.txt && echo codex-ran", call
            assert not made.exists()
            asked = _ask(server, sid, None, "approve")
            assert asked["kind"] == "acp"
            assert asked["reason"].startswith("touch made.txt && echo codex-ran")
            s = _said(server, sid, "Made.")
            assert tools(s)[0]["status"] == "done" and "codex-ran" in tools(s)[0]["output"]
            assert made.exists()

            # 2. rejected: it stays rejected (codex aborts its turn there), and nothing ran
            _ask(server, sid, "remove it", "reject")
            s = wait_for(server, sid, lambda s: s["status"] == "idle"
                         and tools(s)[-1]["status"] == "rejected", timeout=90,
                         what="the rejected call and the end of codex's turn")
            assert len(tools(s)) == 2
            assert made.exists()

            # 3. approved for the session: codex gets allow_once (its "always" would write a
            # permanent rule in its home); Codey answers the next request of the kind itself
            _ask(server, sid, "remove it now", "approve_for_session")
            s = _said(server, sid, "Removed.")
            assert not made.exists()
            server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "make a file again"})
            s = _said(server, sid, "Made.")
            assert made.exists() and len(s["approvals"]) == 3  # no new card
            assert not list(codex_home.glob("rules/*")), list(codex_home.glob("rules/*"))
    finally:
        model.stop()
