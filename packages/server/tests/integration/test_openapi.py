"""The OpenAPI document at /schema is true: every route's real answers, from a real server with
a real worker and the scripted model, match what the document says — status, content type,
body schema, which routes need a login — and OPTIONS lists exactly the documented methods.

Each request goes through schemathesis's response checks against the document the server
serves. A route missing from :func:`_exercise` fails the coverage check at the end: add a real
request for every new route.
"""

from __future__ import annotations

import base64
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from schemathesis import checks
from schemathesis.specs.openapi.schemas import OpenApiSchema

from codey_protocol import codec
from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import provider_config, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "make a file"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": ["touch", "made"]}}]}},
    {"match": {"tool": "shell"}, "reply": {"text": "There."}},
    {"match": {"any": True}, "reply": {"text": "Noted."}},
]}

#: what a documented answer is checked for
_CHECKS = [checks.status_code_conformance, checks.content_type_conformance,
           checks.response_schema_conformance, checks.response_headers_conformance]
_METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


@pytest.fixture
def server(tmp_path: Path, model: ModelServerHandle) -> Iterator[ServerProcess]:
    """The scripted model, and a provider that takes a pasted API key."""
    config = provider_config(model)
    config["providers"].append({"name": "keyed", "base_url": model.base_url + "/v1",
                                "auth": "api_key", "models": ["m"]})
    # a pasted Telegram token starts a bot: let it find nothing listening, not the internet
    config["telegram"] = {"api_base": "http://127.0.0.1:9"}
    with ServerProcess(tmp_path / "server", config=config,
                       extra_args=["--direct-actions"]) as proc:
        yield proc


class _Contract:
    """Sends requests and checks each answer against the served document."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.document: dict[str, Any] = httpx.get(f"{server.url}/schema/openapi.json",
                                                  timeout=10).json()
        self.schema: OpenApiSchema = schemathesis.openapi.from_dict(self.document)
        self.covered: set[tuple[str, str]] = set()

    def operations(self) -> set[tuple[str, str]]:
        return {(method.upper(), path) for path, item in self.document["paths"].items()
                for method in item if method in _METHODS}

    def check(self, method: str, template: str, expect: int, *,
              path: dict[str, str] | None = None, client: httpx.Client | None = None,
              **kwargs: Any) -> httpx.Response:
        """Send ``method template`` (``path`` filled in), assert the status, validate."""
        url = template.format(**(path or {}))
        response = (client or self.server.http).request(method, url, **kwargs)
        assert response.status_code == expect, (method, url, response.status_code,
                                                 response.text[:500])
        case = self.schema[template][method].Case(path_parameters=path or {})
        case.validate_response(response, checks=_CHECKS)
        self.covered.add((method, template))
        return response


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _pair_request_body() -> dict[str, Any]:
    key = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"public_key": _b64(key), "hostname": "contract-host", "os": "Linux",
            "python_version": platform.python_version(), "worker_version": "0.1.0",
            "roots": ["/tmp"]}


def _exercise(api: _Contract, server: ServerProcess, worker: WorkerProcess) -> None:
    """At least one real answer from every route, success and refusal."""
    worker_id = worker.worker_id
    workdir = worker.workdir("contract")
    Path(workdir).mkdir(parents=True)

    api.check("GET", "/api/health", 200)
    metrics = api.check("GET", "/metrics", 200)
    assert "codey_workers_connected" in metrics.text
    api.check("GET", "/api/state/bootstrap", 200)
    api.check("GET", "/api/config", 200)
    api.check("GET", "/api/about", 200)
    assert api.check("GET", "/api/web-tools", 200).json()["search_kind"] == "none"
    # Settings → Tools (test_web_tools.py has it for real)
    assert api.check("PUT", "/api/web-tools", 200, json={"fetch_domains": ["example.org"]}
                     ).json()["source"] == "settings"
    api.check("PUT", "/api/web-tools", 400, json={"fetch_allow": ["not-a-network"]})
    prices = api.check("GET", "/api/prices", 200).json()["defaults"]
    assert prices["gpt-5"]["output"] > 0
    api.check("POST", "/api/viewing", 200, json={"session_ids": ["ses_none"]})
    api.check("POST", "/api/viewing", 400, json={"session_ids": "ses_none"})

    # sessions: a turn that stops at an approval, approved, then steered
    api.check("POST", "/api/sessions", 404, json={"worker_id": "wrk_none", "workdir": "/w"})
    api.check("POST", "/api/sessions", 400, json={"worker_id": worker_id, "nope": 1})
    created = api.check("POST", "/api/sessions", 201, json={
        "worker_id": worker_id, "workdir": workdir, "prompt": "make a file", "policy": "suggest"})
    sid = created.json()["session_id"]
    s = wait_for(server, sid, lambda s: s["approvals"] and tools(s), what="the approval")
    approval_id = next(iter(s["approvals"]))
    api.check("GET", "/api/sessions", 200)
    api.check("GET", "/api/sessions/{session_id}", 200, path={"session_id": sid})
    api.check("GET", "/api/sessions/{session_id}", 404, path={"session_id": "ses_none"})
    ids = {"session_id": sid, "approval_id": approval_id}
    template = "/api/sessions/{session_id}/approvals/{approval_id}"
    api.check("POST", template, 400, path=ids, json={"decision": "maybe"})
    api.check("POST", template, 200, path=ids, json={"decision": "approve"})
    api.check("POST", template, 409, path=ids, json={"decision": "reject"})
    ended = wait_for(server, sid, lambda s: s["status"] == "idle" and len(s["items"]) >= 3,
                     what="the turn to end")
    api.check("POST", "/api/sessions/{session_id}/prompt", 202, path={"session_id": sid},
              json={"text": "thanks"})
    # the follow-up's turn ends (its answer in) before the rest: an interrupt sent while it
    # ran would make the session retryable, and retry below expects there is nothing to retry
    wait_for(server, sid, lambda s: s["status"] == "idle" and any(
        i["kind"] == "assistant_message" for i in s["items"][len(ended["items"]) + 1:]),
             what="the follow-up's turn to end")
    api.check("POST", "/api/sessions/{session_id}/prompt", 400, path={"session_id": sid},
              json={"text": "   "})
    api.check("POST", "/api/sessions/{session_id}/prompt", 404, path={"session_id": "ses_none"},
              json={"text": "hello"})
    api.check("POST", "/api/sessions/{session_id}/policy", 200, path={"session_id": sid},
              json={"policy": "auto-edit"})
    api.check("POST", "/api/sessions/{session_id}/policy", 404,
              path={"session_id": "ses_none"}, json={"policy": "auto-edit"})
    api.check("POST", "/api/sessions/{session_id}/attention", 200, path={"session_id": sid},
              json={"nudge_after_s": 60, "act_after_s": None, "on_approval": "park"})
    api.check("POST", "/api/sessions/{session_id}/attention", 400, path={"session_id": sid},
              json={"act_after_s": -1})
    api.check("POST", "/api/sessions/{session_id}/attention", 404,
              path={"session_id": "ses_none"}, json={})
    api.check("POST", "/api/sessions/{session_id}/sandbox", 200, path={"session_id": sid},
              json={"sandbox": "read-only", "network": False})
    api.check("POST", "/api/sessions/{session_id}/sandbox", 404,
              path={"session_id": "ses_none"}, json={"sandbox": "read-only"})
    api.check("POST", "/api/sessions/{session_id}/interrupt", 200, path={"session_id": sid})
    api.check("POST", "/api/sessions/{session_id}/interrupt", 404,
              path={"session_id": "ses_none"})
    model = "/api/sessions/{session_id}/model"
    api.check("POST", model, 200, path={"session_id": sid},
              json={"provider": "scripted", "model": "scripted-1", "effort": "low"})
    api.check("POST", model, 404, path={"session_id": sid}, json={"provider": "nope"})
    api.check("POST", model, 404, path={"session_id": "ses_none"}, json={"provider": "scripted"})
    api.check("POST", "/api/sessions/{session_id}/retry", 409, path={"session_id": sid})
    api.check("POST", "/api/sessions/{session_id}/retry", 404, path={"session_id": "ses_none"})
    # a worktree's review and shipping (test_worktrees.py has them for real): this session
    # has none
    for method, template, body in [
            ("GET", "/api/sessions/{session_id}/changes", None),
            ("POST", "/api/sessions/{session_id}/worktree/commit", {"message": "m"}),
            ("POST", "/api/sessions/{session_id}/worktree/merge", {"mode": "ff"}),
            ("POST", "/api/sessions/{session_id}/worktree/resolve", None),
            ("POST", "/api/sessions/{session_id}/worktree/push", {}),
            ("POST", "/api/sessions/{session_id}/worktree/remove", {}),
            ("POST", "/api/sessions/{session_id}/worktree/recreate", None),
            ("POST", "/api/sessions/{session_id}/worktree/draft-message", None)]:
        kwargs: dict[str, Any] = {"json": body} if body is not None else {}
        api.check(method, template, 409, path={"session_id": sid}, **kwargs)
        api.check(method, template, 404, path={"session_id": "ses_none"}, **kwargs)
    # checkpoints (test_checkpoints.py has them for real): a turn, and one that is none
    turn = next(i["id"] for i in server.http.get(f"/api/sessions/{sid}").json()["items"]
                if i["kind"] == "user_message")
    marks = "/api/sessions/{session_id}/checkpoints"
    api.check("GET", marks, 200, path={"session_id": sid})
    api.check("GET", marks, 404, path={"session_id": "ses_none"})
    at = {"session_id": sid, "turn": turn}
    nowhere = {"session_id": sid, "turn": "itm_none"}
    api.check("GET", marks + "/{turn}/preview", 200, path=at)
    api.check("GET", marks + "/{turn}/preview", 404, path=nowhere)
    api.check("POST", marks + "/{turn}/restore", 404, path=nowhere, json={})
    api.check("POST", marks + "/{turn}/restore-file", 404, path=nowhere, json={"path": "x"})
    api.check("POST", marks + "/{turn}/restore-file", 400, path=at, json={"path": ""})
    api.check("GET", "/api/sessions/{session_id}/diff", 200, path={"session_id": sid},
              params={"from": turn})
    api.check("GET", "/api/sessions/{session_id}/diff", 404, path={"session_id": "ses_none"},
              params={"from": turn})
    goal = "/api/sessions/{session_id}/goal"
    api.check("POST", goal, 409, path={"session_id": sid}, json={"condition": "clear"})
    api.check("POST", goal, 404, path={"session_id": "ses_none"}, json={"condition": "x"})
    api.check("POST", goal, 400, path={"session_id": sid}, json={"condition": " $ "})
    rewind = "/api/sessions/{session_id}/rewind"  # (test_rewind*.py rewind for real)
    api.check("POST", rewind, 404, path={"session_id": sid},
              json={"turn": "itm_none", "mode": "conversation"})
    api.check("POST", rewind, 404, path={"session_id": "ses_none"},
              json={"turn": turn, "mode": "conversation"})
    api.check("POST", rewind, 400, path={"session_id": sid}, json={"mode": "sideways"})
    move = "/api/sessions/{session_id}/move"  # (test_move.py moves for real)
    api.check("POST", move, 404, path={"session_id": "ses_none"},
              json={"worker_id": "wrk_none", "workdir": "/srv/app"})
    api.check("POST", move, 400, path={"session_id": sid}, json={"worker_id": "wrk_none"})
    compact = "/api/sessions/{session_id}/compact"
    api.check("POST", compact, 200, path={"session_id": sid})
    api.check("POST", compact, 404, path={"session_id": "ses_none"})
    # slash commands from prompt files (test_slash_commands.py has some for real): none here
    commands = "/api/sessions/{session_id}/commands"
    listed = api.check("GET", commands, 200, path={"session_id": sid}).json()
    assert set(listed) == {"commands", "warnings"}  # (the machine's own ~ may have some)
    api.check("GET", commands, 404, path={"session_id": "ses_none"})
    api.check("POST", commands + "/run", 404, path={"session_id": sid}, json={"name": "nope"})
    api.check("POST", commands + "/run", 404, path={"session_id": "ses_none"},
              json={"name": "x"})
    api.check("POST", commands + "/run", 400, path={"session_id": sid}, json={"name": ""})
    # an ACP agent's mode (test_acp_modes.py has it for real): not an ACP session here
    agent_config = "/api/sessions/{session_id}/agent/config"
    api.check("POST", agent_config, 409, path={"session_id": sid}, json={"mode": "code"})
    api.check("POST", agent_config, 404, path={"session_id": "ses_none"}, json={"mode": "x"})
    api.check("POST", agent_config, 400, path={"session_id": sid}, json={"mode": 3})
    log = api.check("GET", "/api/sessions/{session_id}/log", 200, path={"session_id": sid})
    assert log.headers["content-type"].startswith("application/x-ndjson")
    lines = log.content.splitlines()
    assert lines and all(codec.decode_envelope(line).session_id == sid for line in lines)
    api.check("GET", "/api/sessions/{session_id}/log", 404, path={"session_id": "ses_none"})

    # pairing: the unpaired worker's calls need no login
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        ticket = api.check("POST", "/api/pairing/requests", 201, client=anonymous,
                           json=_pair_request_body()).json()
        api.check("POST", "/api/pairing/requests", 400, client=anonymous,
                  json={**_pair_request_body(), "public_key": "short"})
        wait = "/api/pairing/requests/{request_id}/wait"
        rid = {"request_id": ticket["request_id"]}
        api.check("GET", wait, 200, path=rid, client=anonymous,
                  params={"secret": ticket["poll_secret"], "timeout": 0})
        api.check("GET", wait, 404, path=rid, client=anonymous,
                  params={"secret": "wrong", "timeout": 0})
        api.check("GET", "/api/pairing/requests", 200)
        api.check("GET", "/api/pairing/code/{code}", 200, path={"code": ticket["code"]})
        api.check("GET", "/api/pairing/code/{code}", 404, path={"code": "BBBB-BBBB"})
        approve = "/api/pairing/requests/{request_id}/approve"
        api.check("POST", approve, 403, path=rid, json={"code": "BBBB-BBBB"})
        api.check("POST", approve, 200, path=rid, json={"code": ticket["code"]})
        api.check("POST", approve, 404, path=rid, json={"code": ticket["code"]})
        paired = api.check("GET", wait, 200, path=rid, client=anonymous,
                           params={"secret": ticket["poll_secret"], "timeout": 0}).json()
        other = api.check("POST", "/api/pairing/requests", 201, client=anonymous,
                          json=_pair_request_body()).json()
    deny = "/api/pairing/requests/{request_id}/deny"
    api.check("POST", deny, 200, path={"request_id": other["request_id"]})
    api.check("POST", deny, 404, path={"request_id": other["request_id"]})

    # workers: a direct action on the real worker, then a revocation of the paired one
    actions = "/api/workers/{worker_id}/actions"
    (Path(workdir) / "hello.txt").write_text("hello\n")
    done = api.check("POST", actions, 200, path={"worker_id": worker_id}, json={
        "type": "read_file", "workdir": workdir, "path": "hello.txt"}).json()
    assert done["ok"] and done["result"]["content"] == "hello\n"
    refused = api.check("POST", actions, 200, path={"worker_id": worker_id}, json={
        "type": "read_file", "workdir": workdir, "path": "missing.txt"}).json()
    assert refused["ok"] is False and refused["code"]
    # the worker printed that refusal; its panel shows the line
    worker_log = "/api/workers/{worker_id}/log"
    wait_until(lambda: any(
        "missing.txt" in line["message"] and line["level"] == "error"
        for line in api.check("GET", worker_log, 200, path={"worker_id": worker_id}).json()),
        timeout=15, interval=0.1, what="the worker's line to reach its panel")
    api.check("GET", worker_log, 404, path={"worker_id": "wrk_none"})
    # its name, and where uv is for the Link dialog
    name = "/api/workers/{worker_id}/name"
    assert api.check("POST", name, 200, path={"worker_id": worker_id},
                     json={"name": "build box"}).json()["name"] == "build box"
    api.check("POST", name, 200, path={"worker_id": worker_id}, json={"name": ""})
    api.check("POST", name, 400, path={"worker_id": worker_id}, json={"name": "x" * 81})
    api.check("POST", name, 404, path={"worker_id": "wrk_none"}, json={"name": "x"})
    api.check("GET", "/api/pairing/local-tools", 200)
    api.check("POST", actions, 400, path={"worker_id": worker_id}, json={"type": "nope"})
    api.check("POST", actions, 404, path={"worker_id": "wrk_none"},
              json={"type": "list_dir", "workdir": workdir})
    # terminals: this worker's owner did not enable them (test_terminal.py has the rest)
    off = api.check("POST", "/api/terminals", 403, json={"worker_id": worker_id,
                                                          "workdir": workdir}).json()
    assert "terminal" in off["detail"]
    api.check("POST", "/api/terminals", 404, json={"worker_id": "wrk_none", "workdir": "/w"})
    api.check("POST", "/api/terminals", 400, json={"worker_id": worker_id})
    api.check("POST", "/api/terminals/{terminal_id}/close", 404,
              path={"terminal_id": "term_none"})
    # schedules (test_schedule_runs.py runs one)
    sch = api.check("POST", "/api/schedules", 201, json={
        "name": "nightly", "cron": "0 3 * * *", "worker_id": worker_id, "workdir": workdir,
        "prompt": "run the tests"}).json()
    api.check("POST", "/api/schedules", 400, json={
        "name": "bad", "cron": "nope", "worker_id": worker_id, "workdir": workdir, "prompt": "p"})
    # a one-time schedule, `at` as ISO 8601 text as the document allows
    api.check("POST", "/api/schedules", 201, json={
        "name": "once", "at": "2030-06-01T09:00", "timezone": "Europe/Paris",
        "worker_id": worker_id, "workdir": workdir, "prompt": "release"})
    api.check("POST", "/api/schedules", 400, json={
        "name": "once", "at": "2030-02-30T09:00", "worker_id": worker_id, "workdir": workdir,
        "prompt": "p"})
    api.check("GET", "/api/schedules", 200)
    one = "/api/schedules/{schedule_id}"
    api.check("POST", one, 200, path={"schedule_id": sch["schedule_id"]}, json={
        "name": "nightly", "cron": "0 4 * * *", "worker_id": worker_id, "workdir": workdir,
        "prompt": "run the tests", "enabled": False})
    api.check("POST", one, 404, path={"schedule_id": "sch_none"}, json={
        "name": "x", "cron": "0 4 * * *", "worker_id": worker_id, "workdir": workdir,
        "prompt": "p"})
    api.check("POST", one + "/run", 200, path={"schedule_id": sch["schedule_id"]})
    api.check("POST", one + "/run", 404, path={"schedule_id": "sch_none"})
    api.check("DELETE", one, 200, path={"schedule_id": sch["schedule_id"]})
    api.check("DELETE", one, 404, path={"schedule_id": "sch_none"})
    # triggers (test_triggers.py delivers to them)
    trg = api.check("POST", "/api/triggers", 201, json={
        "name": "on comment", "worker_id": worker_id, "workdir": workdir,
        "prompt": "{{payload.comment.body}}", "events": ["issue_comment"]}).json()
    assert trg["secret"] and trg["url_path"].startswith("/hooks/t/")
    api.check("POST", "/api/triggers", 400, json={
        "name": "x", "worker_id": worker_id, "workdir": workdir, "prompt": "p",
        "events": ["Not An Event"]})
    api.check("POST", "/api/triggers", 404, json={
        "name": "x", "worker_id": "wrk_none", "workdir": workdir, "prompt": "p"})
    api.check("GET", "/api/triggers", 200)
    one = "/api/triggers/{trigger_id}"
    again = api.check("POST", one, 200, path={"trigger_id": trg["trigger_id"]}, json={
        "name": "on comment", "worker_id": worker_id, "workdir": workdir, "prompt": "p",
        "rotate_secret": True}).json()
    assert again["secret"] not in (None, trg["secret"])
    api.check("POST", one, 404, path={"trigger_id": "trg_none"}, json={
        "name": "x", "worker_id": worker_id, "workdir": workdir, "prompt": "p"})
    api.check("POST", one + "/deliveries/{delivery_id}/replay", 404,
              path={"trigger_id": trg["trigger_id"], "delivery_id": "dlv_none"})
    api.check("DELETE", one, 200, path={"trigger_id": trg["trigger_id"]})
    api.check("DELETE", one, 404, path={"trigger_id": "trg_none"})

    # the task board (test_task_board.py runs a task to the end)
    first = api.check("POST", "/api/tasks", 201, json={"title": "design"}).json()["task_id"]
    second = api.check("POST", "/api/tasks", 201, json={
        "title": "build", "depends_on": [first]}).json()["task_id"]
    api.check("POST", "/api/tasks", 400, json={"title": " "})
    api.check("POST", "/api/tasks", 404, json={"title": "x", "depends_on": ["tsk_none"]})
    api.check("GET", "/api/tasks", 200)
    task = "/api/tasks/{task_id}"
    api.check("POST", task, 200, path={"task_id": second},
              json={"title": "build it", "depends_on": [first]})
    api.check("POST", task, 409, path={"task_id": first},
              json={"title": "design", "depends_on": [second]})  # a cycle
    api.check("POST", task, 400, path={"task_id": first}, json={"title": ""})
    api.check("POST", task, 404, path={"task_id": "tsk_none"}, json={"title": "x"})
    move = task + "/move"
    api.check("POST", move, 409, path={"task_id": second}, json={"status": "in_progress"})
    api.check("POST", move, 200, path={"task_id": first}, json={"status": "done"})
    api.check("POST", move, 400, path={"task_id": first}, json={"status": "nowhere"})
    api.check("POST", move, 404, path={"task_id": "tsk_none"}, json={"status": "done"})
    run = task + "/run"
    api.check("POST", run, 201, path={"task_id": second},
              json={"worker_id": worker_id, "workdir": workdir})
    api.check("POST", run, 400, path={"task_id": second}, json={"worker_id": worker_id})
    api.check("POST", run, 404, path={"task_id": "tsk_none"},
              json={"worker_id": worker_id, "workdir": workdir})
    api.check("POST", run, 409, path={"task_id": first},
              json={"worker_id": worker_id, "workdir": workdir})  # it is done
    api.check("DELETE", task, 409, path={"task_id": first})  # build depends on it
    api.check("DELETE", task, 404, path={"task_id": "tsk_none"})
    api.check("DELETE", task, 200, path={"task_id": second})

    # MCP tokens (test_mcp_server.py uses one)
    made = api.check("POST", "/api/mcp/tokens", 201, json={"name": "agent"}).json()
    api.check("POST", "/api/mcp/tokens", 400, json={})
    api.check("GET", "/api/mcp/tokens", 200)
    api.check("DELETE", "/api/mcp/tokens/{token_id}", 200, path={"token_id": made["token_id"]})
    api.check("DELETE", "/api/mcp/tokens/{token_id}", 404, path={"token_id": "mt_none"})
    revoke = "/api/workers/{worker_id}/revoke"
    api.check("POST", revoke, 200, path={"worker_id": paired["worker_id"]})
    api.check("POST", revoke, 404, path={"worker_id": "wrk_none"})

    # provider login
    api.check("GET", "/api/auth/status", 200)
    api.check("POST", "/api/auth/api-key", 200, json={"provider": "keyed", "api_key": "sk-x1"})
    api.check("POST", "/api/auth/api-key", 400, json={"provider": "keyed"})
    api.check("POST", "/api/auth/api-key", 404, json={"provider": "nope", "api_key": "sk-x1"})
    api.check("POST", "/api/auth/logout", 200, json={"provider": "keyed"})
    api.check("POST", "/api/auth/logout", 404, json={"provider": "nope"})
    api.check("POST", "/api/auth/api-key", 409, json={"provider": "scripted", "api_key": "k"})
    api.check("POST", "/api/auth/login-link", 409, json={"provider": "keyed"})
    api.check("POST", "/api/auth/device", 409, json={"provider": "keyed"})
    api.check("POST", "/api/auth/device", 404, json={"provider": "nope"})
    api.check("GET", "/api/auth/callback", 303, params={"state": "nope", "code": "x"})
    # providers of Settings → Models (test_models_settings.py has the rest)
    base_url = server.http.get("/api/config").json()["providers"][0]["base_url"]
    added = {"name": "added", "base_url": base_url, "models": ["scripted-1"], "auth": "none"}
    api.check("POST", "/api/providers", 200, json=added)
    api.check("POST", "/api/providers", 409, json={**added, "name": "scripted"})
    api.check("POST", "/api/providers", 400, json={**added, "name": "-bad"})
    api.check("POST", "/api/providers/models", 200, json={"base_url": base_url})
    api.check("POST", "/api/providers/models", 400, json={"base_url": "ftp://h"})
    api.check("POST", "/api/providers/{name}/test", 200, path={"name": "added"})
    api.check("POST", "/api/providers/{name}/test", 404, path={"name": "nope"})
    api.check("DELETE", "/api/providers/{name}", 200, path={"name": "added"})
    api.check("DELETE", "/api/providers/{name}", 404, path={"name": "added"})
    api.check("DELETE", "/api/providers/{name}", 409, path={"name": "scripted"})

    # the Telegram channel: no token at first, then a pasted one (nothing listens at its
    # api_base, so the bot keeps trying in the background), then none again
    status = api.check("GET", "/api/telegram", 200).json()
    assert status["token_source"] == "none" and status["state"] == "off"
    api.check("PUT", "/api/telegram/token", 400, json={"token": "not a token"})
    pasted = api.check("PUT", "/api/telegram/token", 200,
                       json={"token": "123456:contract-token-0123456789"}).json()
    assert pasted["token_source"] == "file" and "contract-token" not in str(pasted)
    assert api.check("DELETE", "/api/telegram/token", 200).json()["token_source"] == "none"
    code = api.check("POST", "/api/telegram/pairing-code", 201).json()
    assert len(code["code"]) == 8
    api.check("DELETE", "/api/telegram/chats/{chat_id}", 404, path={"chat_id": "42"})
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        api.check("POST", "/api/telegram/webhook", 403, client=anonymous,
                  headers={"X-Telegram-Bot-Api-Secret-Token": "guess"},
                  json={"update_id": 1})

    # Web Push: the key, a device (its push service is not there: the test says so), the
    # preview, a decision from a notification for an approval that does not exist
    push = api.check("GET", "/api/push", 200).json()
    assert push["public_key"] and push["devices"] == []
    browser_key = base64.urlsafe_b64encode(b"\x04" + b"\x01" * 64).decode().rstrip("=")
    subscription = {"endpoint": "https://127.0.0.1:9/push/contract", "name": "Phone",
                    "keys": {"p256dh": browser_key, "auth": _b64(b"\x02" * 16)}}
    device = api.check("POST", "/api/push/devices", 201, json=subscription).json()
    api.check("POST", "/api/push/devices", 409,
              json={**subscription, "endpoint": "http://127.0.0.1:9/push/contract"})
    api.check("POST", "/api/push/devices", 400, json={**subscription, "endpoint": "x"})
    on = {"device_id": device["device_id"]}
    api.check("PUT", "/api/push/devices/{device_id}", 200, path=on, json={"kinds": []})
    api.check("PUT", "/api/push/devices/{device_id}", 404, path=on, json={"kinds": ["x"]})
    api.check("PUT", "/api/push/devices/{device_id}", 400, path=on, json={"kinds": "x"})
    api.check("PUT", "/api/push/devices/{device_id}", 404, path={"device_id": "dev_no"},
              json={"name": "x"})
    tested = api.check("POST", "/api/push/devices/{device_id}/test", 200, path=on).json()
    assert tested["ok"] is False
    api.check("POST", "/api/push/devices/{device_id}/test", 404, path={"device_id": "dev_no"})
    api.check("GET", "/api/push/preview", 200)
    refused = api.check("POST", "/api/push/decide", 200, json={
        "approval_id": "apr_none", "action_hash": "0" * 32, "decision": "approve"}).json()
    assert refused["decided"] is False
    api.check("POST", "/api/push/decide", 400, json={"approval_id": "a"})
    api.check("DELETE", "/api/push/devices/{device_id}", 200, path=on)
    api.check("DELETE", "/api/push/devices/{device_id}", 404, path=on)

    # files sent with prompts, and the pairing link's QR code
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
    stored = api.check("POST", "/api/blobs", 201, content=png,
                       params={"name": "../shot.png", "mime": "image/png"}).json()
    assert stored["name"] == "shot.png" and stored["size"] == len(png)
    api.check("POST", "/api/blobs", 400, content=b"")
    api.check("POST", "/api/blobs", 413, content=b"x" * (10 * 1024 * 1024 + 1))
    blob = "/api/blobs/{digest}"
    got = api.check("GET", blob, 200, path={"digest": stored["hash"]}, params={"mime": "image/png"})
    assert got.content == png and got.headers["content-type"] == "image/png"
    other = api.check("GET", blob, 200, path={"digest": stored["hash"]},
                      params={"mime": "image/svg+xml"})
    assert other.headers["content-disposition"] == "attachment"  # never inline as a page
    api.check("GET", blob, 404, path={"digest": "0" * 64})
    qr = api.check("GET", "/api/qr.svg", 200, params={"text": "http://127.0.0.1/#/pair"})
    assert qr.text.startswith("<svg")
    api.check("GET", "/api/qr.svg", 400, params={"text": "x" * 1025})

    # this browser's own logout, with a second browser session
    with httpx.Client(base_url=server.url, timeout=30,
                      headers={"Origin": server.url}) as second:
        assert second.get(f"/?token={server.token}").status_code == 303
        api.check("POST", "/api/logout", 200, client=second)


def _placeholder(template: str) -> str:
    return template.replace("{", "x").replace("}", "")


def test_every_route_answers_as_the_openapi_document_says(
        server: ServerProcess, worker: WorkerProcess) -> None:
    api = _Contract(server)
    assert api.document["info"]["title"] == "codey-server"

    # the checks can fail: a health answer is not a bootstrap answer
    health = server.http.get("/api/health")
    with pytest.raises(checks.FailureGroup):
        api.schema["/api/state/bootstrap"]["GET"].Case().validate_response(
            health, checks=_CHECKS)

    _exercise(api, server, worker)
    assert api.covered == api.operations(), (
        "routes without a real request here", sorted(api.operations() - api.covered))

    # without a login: exactly the routes documenting 401 give it
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        for method, template in sorted(api.operations()):
            responses = api.document["paths"][template][method.lower()]["responses"]
            r = anonymous.request(method, _placeholder(template), json={})
            assert (r.status_code == 401) == ("401" in responses), (method, template, r.text)

    # OPTIONS lists exactly the documented methods
    for template, item in api.document["paths"].items():
        r = server.http.options(_placeholder(template))
        assert r.status_code == 204, template
        documented = {m.upper() for m in item if m in _METHODS} | {"OPTIONS"}
        assert set(r.headers["allow"].replace(" ", "").split(",")) == documented, template

