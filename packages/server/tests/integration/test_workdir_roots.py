"""A session whose workdir is outside the worker's allowed roots is refused when it is made
(issue 39 §6), from REST and from Codey's MCP server, saying which folders the machine allows;
before, it was accepted and failed only at its first approved command."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from codey_testkit.scenarios import idle, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [{"match": {"any": True}, "reply": {"text": "ok"}}]}


async def _start(url: str, token: str, arguments: dict[str, Any]) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        return await client.call_tool("start_session", arguments)


def test_a_workdir_outside_the_workers_roots_is_refused_at_creation(
        server: ServerProcess, worker: WorkerProcess, tmp_path: Path) -> None:
    inside = Path(worker.workdir("ok"))
    inside.mkdir(parents=True)
    root = str(Path(worker.workdir("x")).parent)
    for outside in ("/etc", str(tmp_path), f"{inside}/../../elsewhere", f"{root}-evil/p"):
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": outside, "prompt": "hi"})
        assert r.status_code == 409, (outside, r.status_code, r.text)
        detail = r.json()["detail"]
        assert f"{outside} is outside the folders" in detail and root in detail, detail
    assert server.http.get("/api/sessions").json() == []

    token = server.http.post("/api/mcp/tokens", json={"name": "agent"}).json()["token"]
    refused = asyncio.run(_start(f"{server.url}/mcp", token, {
        "worker_id": worker.worker_id, "workdir": "/etc", "prompt": "hi"}))
    assert refused.is_error and "/etc is outside the folders" in refused.content[0].text

    # inside (also through a `..` that stays inside) goes as before
    for ok in (str(inside), f"{inside}/../ok"):
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": ok, "prompt": "hi"})
        assert r.status_code == 201, r.text
        wait_for(server, r.json()["session_id"], idle, timeout=60, what="the turn to end")
