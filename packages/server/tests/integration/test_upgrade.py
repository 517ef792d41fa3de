"""Today's server and worker on a data dir an older release left (issue 36, item 7).

Each folder of ``tests/data/upgrade/`` is the data dir and the worker's home a release made
(``scripts/upgrade_fixture.py <commit>`` made them by running that release; its docstring
says what is in them). A copy is started with today's server and today's worker, as a user
upgrading in place would, and everything the old server served is still there and still
works: every session with its title, items, approvals and questions; the memory notes, the
board's tasks, the schedules, the MCP token, the providers and the API key pasted for one;
the worker reconnects without pairing again; the waiting approval is still answerable and its
command runs once; the question is answered and its turn goes on; a finished session takes a
new prompt.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from codey_server.upgrades.backup import BACKUPS_DIR, read_manifest
from codey_server.upgrades.data import FORMAT_FILE
from codey_server.upgrades.plan import FORMAT, UNMARKED
from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.scenarios import idle, session, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import Deadline
from codey_testkit.wsclient import BrowserSocket

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "upgrade"
RELEASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "fixture.json").exists())

#: what today's scripted model answers after the old conversations
SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"tool": "shell", "tool_output": "made it"},
     "reply": {"text": "The notes file is made."}},
    {"match": {"tool": "ask_user", "tool_output": "SQLite"},
     "reply": {"text": "SQLite it is."}},
    {"match": {"user": "one more thing"}, "reply": {"text": "Still here."}},
    {"match": {"any": True}, "reply": {"text": "Something else."}},
]}


@dataclass
class Old:
    """A copy of one release's data: ``fixture`` (its ``fixture.json``), ``state`` (what the
    old server served last), the server's data dir, the worker's home (put back where it
    was made)."""

    fixture: dict[str, Any]
    state: dict[str, Any]
    data_dir: Path
    worker_home: Path
    #: the fixture's own folder (read, never written)
    here: Path

    def sid(self, name: str) -> str:
        return str(self.fixture["sessions"][name])


@pytest.fixture(params=RELEASES)
def old(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Old]:
    here = FIXTURES / request.param
    fixture = json.loads((here / "fixture.json").read_text())
    state = json.loads((here / "state.json").read_text())["state"]
    root = Path(fixture["root"])
    # the sessions' folders and the worker's roots are absolute paths in the data: the
    # worker's home goes back where it was made, one test run at a time
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(here / "worker", root / "worker", symlinks=True)
        shutil.copytree(here / "server", tmp_path / "server", symlinks=True)
        try:
            yield Old(fixture, state, tmp_path / "server", root / "worker", here)
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def model(tmp_path: Path) -> Iterator[ModelServerHandle]:
    with start_model_server(SCRIPT, tmp_path / "model") as handle:
        yield handle


@pytest.fixture
def server(old: Old, model: ModelServerHandle) -> Iterator[ServerProcess]:
    """Today's server on the old data dir; its config.json's providers moved to today's
    scripted model (the old one is gone with its port), nothing else changed."""
    config = json.loads((old.data_dir / "config.json").read_text())
    for provider in config["providers"]:
        provider["base_url"] = model.base_url
    with ServerProcess(old.data_dir, config=config) as proc:
        yield proc


def _stored(path: Path) -> dict[str, list[bytes]]:
    """Each session's envelopes in an events.db, as stored (read-only)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out: dict[str, list[bytes]] = {}
        for sid, raw in conn.execute("SELECT session_id, envelope FROM events "
                                     "WHERE session_id IS NOT NULL ORDER BY seq"):
            out.setdefault(sid, []).append(bytes(raw))
        return out
    finally:
        conn.close()


def _state(server: ServerProcess) -> dict[str, Any]:
    state: dict[str, Any] = server.http.get("/api/state/bootstrap").json()["state"]
    return state


def _item(item: dict[str, Any]) -> dict[str, Any]:
    """What an item showed then and must show now."""
    keys = ("id", "kind", "text", "name", "arguments", "status", "result", "command",
            "exit_code", "approval_id", "question_id", "note", "diff")
    return {k: item.get(k) for k in keys if item.get(k) is not None}


def _session_view(s: dict[str, Any]) -> dict[str, Any]:
    return {"title": s["title"], "worker_id": s["worker_id"], "workdir": s["workdir"],
            "policy": s["policy"], "archived": s["archived"], "provider": s["provider"],
            "model": s["model"], "items": [_item(i) for i in s["items"]],
            "approvals": {k: (a["status"], a["command"]) for k, a in s["approvals"].items()},
            "questions": {k: (q["status"], q["question"]) for k, q in s["questions"].items()}}


def _command(server: ServerProcess, msg: dict[str, Any]) -> None:
    """Send a command over the browser's socket, as the web client does; wait for its ack."""
    client = BrowserSocket(server, after_seq=0)
    try:
        client.send({**msg, "request_id": "r1"})
        deadline = Deadline(20, what=f"the ack of {msg['type']}")
        while True:
            frame = client.recv(deadline.left())
            if frame is not None and frame.get("request_id") == "r1":
                assert frame["type"] == "ack", frame
                return
    finally:
        client.close()


async def _mcp_sessions(url: str, token: str) -> list[str]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        listed: Any = await client.call_tool("list_sessions", {})
        return [s["session_id"] for s in json.loads(listed.content[0].text)]


def test_todays_server_and_worker_open_the_old_data_and_everything_goes_on(
        old: Old, server: ServerProcess, model: ModelServerHandle) -> None:
    fixture = old.fixture
    # the old access token still logs in: the server printed it, the client swapped it
    assert server.token == (old.here / "server" / "access_token").read_text().strip()
    state = _state(server)
    # the old server's snapshot was not trusted (it named no fold): the state was rebuilt from
    # the events, so a finished turn says again how long it took (the old one had no such field)
    assert "busy_seconds" not in old.state["sessions"][old.sid("fix")]
    assert state["sessions"][old.sid("fix")]["busy_seconds"] > 0

    # every session, with its title, items, approvals and questions, as the old server had it
    assert set(state["sessions"]) == set(old.state["sessions"])
    assert len(state["sessions"]) == 7
    for sid, was in old.state["sessions"].items():
        assert _session_view(state["sessions"][sid]) == _session_view(was), sid
    for name, title in fixture["titles"].items():
        assert state["sessions"][old.sid(name)]["title"] == title
    assert state["sessions"][old.sid("archived")]["archived"] is True
    finished = [sid for sid, s in old.state["sessions"].items() if s["status"] == "idle"]
    assert all(state["sessions"][sid]["status"] == "idle" for sid in finished)

    # memory notes, the board, the schedules, as they were
    assert {k: m["text"] for k, m in state["memories"].items()} == \
        {k: m["text"] for k, m in old.state["memories"].items()}
    task_keys = ("title", "description", "status", "depends_on", "session_ids", "order")
    assert {t: {k: v[k] for k in task_keys} for t, v in state["tasks"].items()} == \
        {t: {k: v[k] for k in task_keys} for t, v in old.state["tasks"].items()}
    spec_keys = ("name", "cron", "at", "timezone", "enabled", "prompt", "policy", "workdir",
                 "worker_id", "target_session")
    assert {s: {k: v["spec"][k] for k in spec_keys} for s, v in state["schedules"].items()} \
        == {s: {k: v["spec"][k] for k in spec_keys} for s, v in old.state["schedules"].items()}
    run_keys = ("due_at", "fired_at", "outcome", "session_id")
    assert {s: [{k: r.get(k) for k in run_keys} for r in v["runs"]]
            for s, v in state["schedules"].items()} == \
        {s: [{k: r.get(k) for k in run_keys} for r in v["runs"]]
         for s, v in old.state["schedules"].items()}

    # the providers, and the API key pasted for one of them
    listed = {p["name"] for p in server.http.get("/api/config").json()["providers"]}
    assert {fixture["provider"], fixture["keyed_provider"]} <= listed
    auth = {a["provider"]: a for a in server.http.get("/api/auth/status").json()}
    keyed = auth[fixture["keyed_provider"]]
    assert (keyed["method"], keyed["state"]) == ("api_key", "logged_in"), keyed
    assert fixture["api_key"] not in server.http.get("/api/auth/status").text

    # the MCP token is listed and still opens /mcp
    token = fixture["mcp_token"]
    tokens = {t["token_id"]: t for t in server.http.get("/api/mcp/tokens").json()}
    assert tokens[token["token_id"]]["name"] == token["name"]
    seen = asyncio.run(_mcp_sessions(f"{server.url}/mcp", token["token"]))
    assert set(seen) == {sid for sid, s in old.state["sessions"].items() if not s["archived"]}
    # made before scopes, the token keeps the rights it had (admin, full-auto), and the data
    # was backed up, then raised to this format, with a one-time notice of what changed
    assert (tokens[token["token_id"]]["scope"],
            tokens[token["token_id"]]["max_policy"]) == ("admin", "full-auto")
    data_dir = server.data_dir
    [backup] = (data_dir / BACKUPS_DIR).iterdir()
    assert read_manifest(backup).format == UNMARKED
    assert json.loads((data_dir / FORMAT_FILE).read_text())["format"] == FORMAT
    [notice] = server.http.get("/api/state/bootstrap").json()["state"]["upgrades"]
    assert (notice["from_format"], notice["to_format"]) == (UNMARKED, FORMAT)
    assert any("full-auto" in c for c in notice["changes"])
    assert any("workspace-write" in c for c in notice["changes"])

    # the session waiting on a command: nothing judged it before its machine said hello
    asking = old.sid("approval")
    approval_id = fixture["approval_id"]
    s = wait_for(server, asking, lambda s: s["status"] == "waiting_worker",
                 what="the waiting session to wait for its machine")
    assert s["status_reason"] == "waiting for the machine"
    assert s["approvals"][approval_id]["status"] == "pending"
    made = Path(s["workdir"]) / "made.txt"
    assert not made.exists()

    # today's worker on the old home: no pairing again, the same machine
    worker = WorkerProcess(server, old.worker_home)
    assert worker.paired and worker.worker_id == fixture["worker_id"]
    with worker:
        s = wait_for(server, asking, lambda s: s["status"] == "waiting_approval",
                     what="the approval to be asked of the user again")
        assert s["approvals"][approval_id]["status"] == "pending"
        r = server.http.post(f"/api/sessions/{asking}/approvals/{approval_id}",
                             json={"decision": "approve"})
        assert r.status_code == 200, r.text
        s = wait_for(server, asking, idle, what="the approved command and the turn after")
        assert made.read_text() == "made\n", "the approved command did not run exactly once"
        assert tools(s)[-1]["status"] == "done"
        assert s["items"][-1]["text"] == "The notes file is made."
        assert list(s["approvals"]) == [approval_id]

        # the question is answered, and its turn goes on
        question = old.sid("question")
        _command(server, {"type": "answer_question", "session_id": question,
                          "question_id": fixture["question_id"], "answer": "SQLite"})
        # (it waited in waiting_user: idle() would hold before the answer is read)
        s = wait_for(server, question, lambda s: s["status"] == "idle",
                     what="the answered question's turn")
        assert s["questions"][fixture["question_id"]]["status"] == "answered"
        assert s["items"][-1]["text"] == "SQLite it is."

        # a finished session takes a new prompt
        fixed = old.sid("fix")
        before = len(session(server, fixed)["items"])
        r = server.http.post(f"/api/sessions/{fixed}/prompt", json={"text": "one more thing"})
        assert r.status_code == 202, r.text
        s = wait_for(server, fixed, lambda s: idle(s) and len(s["items"]) >= before + 2,
                     what="the finished session's next turn")
        assert s["items"][-1]["text"] == "Still here."

    # each session's exported log (GET /api/sessions/{id}/log) starts with its events as the
    # old release stored them, byte for byte (in its shape, no version, never upcast); what
    # today's server added after them is in today's
    stored = _stored(old.here / "server" / "events.db")
    for sid in old.state["sessions"]:
        r = server.http.get(f"/api/sessions/{sid}/log")
        assert r.status_code == 200
        lines = r.content.splitlines()
        assert lines[:len(stored[sid])] == stored[sid], sid
        assert all(json.loads(line)["version"] >= 1 for line in lines[len(stored[sid]):])
    # and a command the old worker ran reads as it ran, without a sandbox: so a browser is
    # sent it (upcast, every field present), not with today's default
    ran = {env["seq"]: env["event"]["action"] for env in map(json.loads, (
        raw for rows in stored.values() for raw in rows)) if env["event"]["type"] ==
           "action_requested" and env["event"]["action"]["type"] == "run_command"}
    assert ran and all("sandbox" not in action for action in ran.values())
    browser = BrowserSocket(server, after_seq=1)
    browser.until_seq(max(ran))
    browser.close()
    sent = [env for env in browser.envelopes if env["seq"] in ran]
    assert len(sent) == len(ran)
    assert all((env["event"]["action"]["sandbox"], env["event"]["action"]["network"]) ==
               ("none", True) for env in sent)
