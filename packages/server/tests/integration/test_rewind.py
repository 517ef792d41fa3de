"""Rewinding a conversation over the real stack: a server, a worker and the scripted model.

Three turns, a rewind to the second: the next model request holds the first turn and the new
prompt, nothing of turns 2 and 3, and a restart of the server keeps it so. Refusals: while a
turn runs, and hostile requests (another session's turn, a turn a rewind took back, garbage,
fields that are not the body's) — none of them changes the conversation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import last_request_text, session, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "first prompt"}, "reply": {"text": "answer one"}},
    {"match": {"user": "second prompt"}, "reply": {"text": "answer two"}},
    {"match": {"user": "third prompt"}, "reply": {"text": "answer three"}},
    {"match": {"user": "fourth prompt"}, "reply": {"text": "answer four"}},
    {"match": {"user": "fifth prompt"}, "reply": {"text": "answer five"}},
    # a turn that runs until it is interrupted
    {"match": {"user": "slow prompt"}, "reply": {"text": "late", "initial_delay_ms": 120000}},
    {"match": {"any": True}, "reply": {"text": "ok"}},
]}


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def _create(server: ServerProcess, worker: WorkerProcess, tmp: Path, prompt: str) -> str:
    wd = Path(worker.workdir("proj"))
    wd.mkdir(parents=True, exist_ok=True)
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(wd), "policy": "full-auto",
        "prompt": prompt})
    assert r.status_code == 201, r.text
    sid = str(r.json()["session_id"])
    _answered(server, sid, "answer one" if prompt == "first prompt" else "ok")
    return sid


def _answered(server: ServerProcess, sid: str, text: str) -> dict[str, Any]:
    return wait_for(server, sid, lambda s: s["status"] == "idle" and any(
        i["kind"] == "assistant_message" and i["text"] == text for i in s["items"]),
        timeout=60, what=f"the answer {text!r}")


def _prompt(server: ServerProcess, sid: str, text: str, answer: str) -> dict[str, Any]:
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": text})
    assert r.status_code == 202, r.text
    return _answered(server, sid, answer)


def _turn(s: dict[str, Any], text: str) -> str:
    return next(str(i["id"]) for i in s["items"]
                if i["kind"] == "user_message" and i["text"] == text)


def _checkpoints_missing(server: ServerProcess, sid: str) -> bool:
    return server.http.get(f"/api/sessions/{sid}/checkpoints").status_code == 404


def test_a_rewound_conversation_sends_the_live_branch_only_and_survives_a_restart(
        tmp_path: Path, server: ServerProcess, worker: WorkerProcess,
        model: ModelServerHandle) -> None:
    sid = _create(server, worker, tmp_path, "first prompt")
    _prompt(server, sid, "second prompt", "answer two")
    s = _prompt(server, sid, "third prompt", "answer three")
    turn2 = _turn(s, "second prompt")

    if _checkpoints_missing(server, sid):
        # files (alone or with the conversation) are refused, and nothing changes
        r = server.http.post(f"/api/sessions/{sid}/rewind", json={"turn": turn2})
        assert r.status_code == 409, r.text
        assert "file checkpoints are unavailable" in r.text
        assert len(session(server, sid)["items"]) == len(s["items"])

    r = server.http.post(f"/api/sessions/{sid}/rewind",
                         json={"turn": turn2, "mode": "conversation"})
    assert r.status_code == 200, r.text
    s = session(server, sid)
    assert [i["text"] for i in s["items"] if i["kind"] == "user_message"] == ["first prompt"]
    [branch] = s["rewound"]
    assert branch["turn"] == turn2 and branch["mode"] == "conversation"
    assert [i["text"] for i in branch["items"] if i["kind"] == "user_message"] == [
        "second prompt", "third prompt"]

    _prompt(server, sid, "fourth prompt", "answer four")
    sent = last_request_text(model)
    assert "first prompt" in sent and "answer one" in sent and "fourth prompt" in sent
    for gone in ("second prompt", "answer two", "third prompt", "answer three"):
        assert gone not in sent, gone

    before = session(server, sid)
    server.restart()
    after = session(server, sid)
    assert after["items"] == before["items"] and after["rewound"] == before["rewound"]
    _prompt(server, sid, "fifth prompt", "answer five")
    sent = last_request_text(model)
    assert "fourth prompt" in sent and "fifth prompt" in sent
    assert "second prompt" not in sent and "third prompt" not in sent


def test_rewinds_are_refused_while_a_turn_runs_and_for_hostile_requests(
        tmp_path: Path, server: ServerProcess, worker: WorkerProcess) -> None:
    sid = _create(server, worker, tmp_path, "first prompt")
    s = _prompt(server, sid, "second prompt", "answer two")
    turn1, turn2 = _turn(s, "first prompt"), _turn(s, "second prompt")
    other = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": s["workdir"], "policy": "full-auto",
        "prompt": "another session"})
    assert other.status_code == 201, other.text
    other_sid = other.json()["session_id"]
    foreign = _turn(_answered(server, other_sid, "ok"), "another session")

    def rewind(body: Any, session_id: str = sid) -> tuple[int, str]:
        r = server.http.post(f"/api/sessions/{session_id}/rewind", json=body)
        return r.status_code, r.text

    # another session's prompt, an answer, garbage, a path, nothing: no such live prompt
    for turn in (foreign, s["items"][1]["id"], "garbage", "../../etc/passwd"):
        code, text = rewind({"turn": turn, "mode": "conversation"})
        assert code == 404, (turn, text)
    assert rewind({"turn": turn2, "mode": "conversation"}, "ses_nope")[0] == 404
    # bodies that are not the route's: refused before anything is looked at
    for body in ({"turn": ""}, {"turn": "x" * 201}, {"turn": turn2, "mode": "everything"},
                 {"turn": turn2, "mode": "conversation", "session_id": other_sid},
                 {"turn": turn2, "keep": "all"}, [turn2], "turn"):
        code, text = rewind(body)
        assert code == 400, (body, text)
    assert len(session(server, sid)["items"]) == len(s["items"])
    assert session(server, sid)["rewound"] == []

    # a turn a rewind took back cannot be rewound to
    assert rewind({"turn": turn2, "mode": "conversation"})[0] == 200
    code, text = rewind({"turn": turn2, "mode": "conversation"})
    assert code == 409 and "took back" in text, text

    # while a turn runs
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "slow prompt"})
    assert r.status_code == 202, r.text
    wait_for(server, sid, lambda s: s["status"] == "running", timeout=30,
             what="the slow turn to run")
    code, text = rewind({"turn": turn1, "mode": "conversation"})
    assert code == 409 and "a turn is running" in text, text
    assert server.http.post(f"/api/sessions/{sid}/interrupt").status_code == 200
    wait_for(server, sid, lambda s: s["status"] == "interrupted", timeout=30,
             what="the interrupt")
    # once it stopped, the rewind goes ahead: the slow turn is taken back too
    assert rewind({"turn": _turn(session(server, sid), "slow prompt"),
                   "mode": "conversation"})[0] == 200
    s = session(server, sid)
    assert [i["text"] for i in s["items"] if i["kind"] == "user_message"] == ["first prompt"]
    assert len(s["rewound"]) == 2
    # the other session was never touched
    assert session(server, other_sid)["rewound"] == []


async def _mcp(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        return [await client.call_tool(name, arguments) for name, arguments in calls]


def test_an_mcp_client_rewinds_a_conversation_within_its_token(
        tmp_path: Path, server: ServerProcess, worker: WorkerProcess) -> None:
    sid = _create(server, worker, tmp_path, "first prompt")
    s = _prompt(server, sid, "second prompt", "answer two")
    turn2 = _turn(s, "second prompt")

    def token(scope: str, max_policy: str) -> str:
        made = server.http.post("/api/mcp/tokens", json={
            "name": f"{scope} {max_policy}", "scope": scope, "max_policy": max_policy})
        assert made.status_code == 201, made.text
        return str(made.json()["token"])

    url = f"{server.url}/mcp"
    args = {"session_id": sid, "turn": turn2}
    # a read token, and a token below the session's policy: refused, nothing changes
    [read] = asyncio.run(_mcp(url, token("read", "full-auto"), [("rewind_conversation", args)]))
    [low] = asyncio.run(_mcp(url, token("sessions", "suggest"), [("rewind_conversation", args)]))
    assert read.is_error and low.is_error
    assert session(server, sid)["rewound"] == []
    done, again = asyncio.run(_mcp(url, token("sessions", "full-auto"), [
        ("rewind_conversation", args), ("rewind_conversation", args)]))
    assert not done.is_error, done
    assert again.is_error and "took back" in again.content[0].text
    s = session(server, sid)
    assert [i["text"] for i in s["items"] if i["kind"] == "user_message"] == ["first prompt"]
