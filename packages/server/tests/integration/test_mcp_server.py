"""Codey as an MCP server: the MCP SDK's own client over real HTTP starts a session on a real
worker and reads its answer; tokens are needed, shown once, and revocable."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from codey_testkit.scenarios import idle, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "from an agent"}, "reply": {"text": "Hello, fellow agent."}},
    {"match": {"user": "file a task"}, "reply": {"calls": [
        {"name": "mcp__codey__create_task", "arguments": {"title": "filed from a session"}}]}},
    {"match": {"tool": "mcp__codey__create_task", "tool_output": "task_id"},
     "reply": {"text": "Filed."}},
    {"match": {"any": True}, "reply": {"text": "ok"}},
]}


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def _text(result: Any) -> Any:
    assert not result.is_error, result
    return json.loads(result.content[0].text)


async def _agent(url: str, token: str, worker_id: str, workdir: str) -> dict[str, Any]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"list_sessions", "get_session", "list_workers", "start_session",
                "send_prompt", "list_tasks", "create_task", "update_task"} <= names
        # the agent files a task on the board and moves it
        task = _text(await client.call_tool("create_task", {"title": "from the agent",
                                                             "description": "found a bug"}))
        _text(await client.call_tool("update_task", {"task_id": task["task_id"],
                                                     "status": "review"}))
        tasks = _text(await client.call_tool("list_tasks", {}))
        assert [(t["title"], t["status"]) for t in tasks] == [("from the agent", "review")]
        workers = _text(await client.call_tool("list_workers", {}))
        assert [w["worker_id"] for w in workers] == [worker_id]
        started = _text(await client.call_tool("start_session", {
            "worker_id": worker_id, "workdir": workdir, "prompt": "from an agent",
            "policy": "full-auto"}))
        refused = await client.call_tool("start_session", {
            "worker_id": "wrk_none", "workdir": workdir, "prompt": "x"})
        assert refused.is_error  # decide's refusal, as a tool error the agent can read
        listed = _text(await client.call_tool("list_sessions", {}))
        assert started["session_id"] in {s["session_id"] for s in listed}
        return started  # type: ignore[no-any-return]


def test_an_mcp_client_starts_a_session_with_its_token(
        server: ServerProcess, worker: WorkerProcess, tmp_path: Path) -> None:
    url = f"{server.url}/mcp"
    assert httpx.post(url, json={}, timeout=10).status_code == 401  # no token
    # the browser's own access (cookie, access token) does not open /mcp
    assert server.http.post("/mcp", json={}).status_code == 401
    assert httpx.post(url, json={}, headers={"Authorization": f"Bearer {server.token}"},
                      timeout=10).status_code == 401
    made = server.http.post("/api/mcp/tokens", json={"name": "an agent", "scope": "admin",
                                                     "max_policy": "full-auto"})
    assert made.status_code == 201, made.text
    token = made.json()["token"]
    assert token.startswith("cmcp_")
    listed = server.http.get("/api/mcp/tokens").json()
    assert [t["name"] for t in listed] == ["an agent"] and "token" not in listed[0]
    stored = (server.data_dir / "mcp_tokens.json").read_text()
    assert token not in stored  # only its hash

    workdir = Path(worker.workdir("mcp"))
    workdir.mkdir(parents=True)
    started = asyncio.run(_agent(url, token, worker.worker_id, str(workdir)))
    s = wait_for(server, started["session_id"], idle, timeout=30, what="the agent's session")
    assert s["items"][-1]["text"] == "Hello, fellow agent."

    revoked = server.http.delete(f"/api/mcp/tokens/{made.json()['token_id']}")
    assert revoked.status_code == 200
    assert httpx.post(url, json={}, headers={"Authorization": f"Bearer {token}"},
                      timeout=10).status_code == 401


def test_an_agent_in_a_codey_session_uses_codey_through_mcp(
        server: ServerProcess, tmp_path: Path) -> None:
    """The worker's MCP config takes an HTTP server: the session's model files a task on the
    board through Codey's own /mcp."""
    token = server.http.post("/api/mcp/tokens", json={"name": "sessions",
                                                      "scope": "admin"}).json()["token"]
    config = {"mcp_servers": {"codey": {"url": f"{server.url}/mcp",
                                        "headers": {"Authorization": f"Bearer {token}"}}}}
    with WorkerProcess(server, tmp_path / "w2", config=config) as worker:
        workdir = Path(worker.workdir("mcp2"))
        workdir.mkdir(parents=True)
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": str(workdir), "prompt": "file a task",
            "policy": "full-auto"})
        sid = r.json()["session_id"]
        s = wait_for(server, sid, idle, timeout=60, what="the turn")
        assert s["items"][-1]["text"] == "Filed.", s["items"][-2:]
        tasks = server.http.get("/api/tasks").json()
        assert [t["title"] for t in tasks] == ["filed from a session"]


async def _calls(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        out: list[Any] = [tools]
        for name, arguments in calls:
            out.append(await client.call_tool(name, arguments))
        return out


def _refusal(result: Any) -> str:
    assert result.is_error, result
    return str(result.content[0].text)


def test_a_token_acts_only_within_its_scope_and_policy_and_is_named_on_what_it_does(
        server: ServerProcess, worker: WorkerProcess) -> None:
    """The audit: a token started a full-auto session, though the docs say tools act under
    each session's approval policy; the log did not say which token started a session, and
    last_used_at was never saved."""
    url = f"{server.url}/mcp"
    workdir = Path(worker.workdir("scoped"))
    workdir.mkdir(parents=True)
    start = {"worker_id": worker.worker_id, "workdir": str(workdir), "prompt": "from an agent"}

    reader = server.http.post("/api/mcp/tokens", json={"name": "reader", "scope": "read"})
    assert reader.json()["scope"] == "read" and reader.json()["max_policy"] == "suggest"
    tools, listed, refused = asyncio.run(_calls(url, reader.json()["token"], [
        ("list_sessions", {}), ("start_session", start)]))
    assert _text(listed) == []
    assert "needs 'sessions'" in _refusal(refused)
    # the reading tools say so: an agent under `suggest` need not ask before calling them
    assert {n for n, t in tools.items() if t.annotations and t.annotations.read_only_hint} == {
        "list_sessions", "get_session", "list_workers", "list_tasks"}

    plain = server.http.post("/api/mcp/tokens", json={"name": "plain"}).json()  # the defaults
    assert (plain["scope"], plain["max_policy"]) == ("sessions", "suggest")
    _, too_much, task, missing, started = asyncio.run(_calls(url, plain["token"], [
        ("start_session", {**start, "policy": "full-auto"}),
        ("create_task", {"title": "not mine to file"}),
        ("get_session", {"session_id": "ses_nope"}),
        ("start_session", start)]))
    assert "up to 'suggest', not 'full-auto'" in _refusal(too_much)
    assert "needs 'admin'" in _refusal(task)
    assert "no session 'ses_nope'" in _refusal(missing)  # the reason, not only "Error…"
    session_id = _text(started)["session_id"]
    wait_for(server, session_id, idle, timeout=30, what="the agent's session")

    # a session the user made full-auto is not a plain token's to drive
    wild = server.http.post("/api/sessions", json={"worker_id": worker.worker_id,
                                                   "workdir": str(workdir),
                                                   "policy": "full-auto"}).json()["session_id"]
    _, prompt = asyncio.run(_calls(url, plain["token"], [
        ("send_prompt", {"session_id": wild, "text": "do everything"})]))
    assert "runs under 'full-auto'" in _refusal(prompt)

    log = server.http.get(f"/api/sessions/{session_id}/log").text
    events = [json.loads(line)["event"] for line in log.splitlines()]
    created = next(e for e in events if e["type"] == "session_created")
    assert created["origin"] == f"mcp:{plain['token_id']}"
    prompts = [e["item"] for e in events if e["type"] == "session_item_appended"
               and e["item"]["kind"] == "user_message"]
    assert prompts and all(p["origin"] == f"mcp:{plain['token_id']}" for p in prompts)

    server.restart()  # last_used_at was kept only in memory
    used = {t["name"]: t["last_used_at"] for t in server.http.get("/api/mcp/tokens").json()}
    assert used["plain"] is not None and used["reader"] is not None


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def _repo_with_setup(root: Path) -> Path:
    """A repository whose setup script leaves a mark, and a branch whose script is worse."""
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", "Tester")
    _git(root, "config", "user.email", "t@example.com")
    (root / ".codey").mkdir()
    (root / ".codey" / "setup.sh").write_text("echo ran > setup-ran.txt\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "start")
    _git(root, "checkout", "-qb", "evil")
    (root / ".codey" / "setup.sh").write_text("echo evil > setup-ran.txt\n")
    _git(root, "commit", "-qam", "what a hostile agent would branch from")
    _git(root, "checkout", "-q", "main")
    return root


def _worktree_ready(s: dict[str, Any]) -> bool:
    return s["worktree"] is not None and s["worktree"]["status"] in ("ready", "failed")


def test_a_sessions_token_runs_no_setup_script_and_picks_no_base(
        server: ServerProcess, worker: WorkerProcess) -> None:
    """The audit: a token capped at `suggest` started a worktree session from a revision of
    its choice whose .codey/setup.sh then ran, with the network on, before any approval. Now
    setup and base need the admin scope; without it a worktree is made without its setup."""
    url = f"{server.url}/mcp"
    repo = _repo_with_setup(Path(worker.workdir("setup")))
    start = {"worker_id": worker.worker_id, "workdir": str(repo), "prompt": "from an agent",
             "worktree": True}
    plain = server.http.post("/api/mcp/tokens", json={"name": "plain"}).json()
    assert plain["scope"] == "sessions"
    _, with_setup, with_base, both, started = asyncio.run(_calls(url, plain["token"], [
        ("start_session", {**start, "setup": True}),
        ("start_session", {**start, "base": "evil", "setup": False}),
        ("start_session", {**start, "base": "evil"}),
        ("start_session", start)]))
    assert "running the project's setup script needs 'admin'" in _refusal(with_setup)
    assert "choosing a base revision needs 'admin'" in _refusal(with_base)
    assert "needs 'admin'" in _refusal(both)
    [only] = server.http.get("/api/state/bootstrap").json()["state"]["sessions"].values()
    assert only["session_id"] == _text(started)["session_id"]  # the refused made nothing
    s = wait_for(server, only["session_id"], _worktree_ready, timeout=60,
                 what="the worktree of the plain token's session")
    assert s["worktree"]["status"] == "ready", s["worktree"]
    assert s["worktree"]["setup"] is False and s["worktree"]["base"] == "main"  # its current
    assert not (Path(s["worktree"]["path"]) / "setup-ran.txt").exists()

    # an admin token's worktree runs the setup by default, from the base it names
    admin = server.http.post("/api/mcp/tokens", json={"name": "admin", "scope": "admin"}).json()
    _, started = asyncio.run(_calls(url, admin["token"], [
        ("start_session", {**start, "base": "evil"})]))
    s = wait_for(server, _text(started)["session_id"], _worktree_ready, timeout=60,
                 what="the worktree of the admin token's session")
    assert s["worktree"]["status"] == "ready", s["worktree"]
    assert (Path(s["worktree"]["path"]) / "setup-ran.txt").read_text() == "evil\n"
