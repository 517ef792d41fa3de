"""Webhook triggers over the real stack (server, worker, scripted model): GitHub's documented
payloads (``tests/data/github``) signed as GitHub signs them start a session whose first prompt
holds the payload's fields; a wrong or missing signature is refused and recorded; an unknown
URL is a 404 that records nothing; a delivery is replayed; and the attacks: template syntax in
a comment, a huge body, a flood, a replay forged by a browser without a login or from another
site."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from codey_server.triggers.webhook import sign
from codey_testkit.scenarios import idle, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

GITHUB = Path(__file__).resolve().parents[1] / "data" / "github"

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "octo-org/hello-world"}, "reply": {"text": "on it"}},
    {"match": {"any": True}, "reply": {"text": "unexpected"}},
]}

PROMPT = ("Fix {{payload.repository.full_name}}#{{payload.issue.number}} "
          "({{payload.issue.labels[0].name}}): {{payload.comment.body}} "
          "[{{payload.issue.milestone.title}}] PR: {{payload.pull_request.title}}")


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def _raw(name: str) -> bytes:
    return (GITHUB / f"{name}.json").read_bytes()


class GitHub:
    """Delivers as GitHub does: no cookie, no Origin, the raw body signed."""

    def __init__(self, server: ServerProcess) -> None:
        self.http = httpx.Client(base_url=server.url, timeout=30.0)

    def deliver(self, path: str, event: str, body: bytes, secret: str | None = None,
                signature: str | None = None,
                content_type: str = "application/json") -> httpx.Response:
        headers = {"X-GitHub-Event": event, "Content-Type": content_type,
                   "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
                   "User-Agent": "GitHub-Hookshot/044aadd"}
        if signature is not None:
            headers["X-Hub-Signature-256"] = signature
        elif secret is not None:
            headers["X-Hub-Signature-256"] = sign(secret, body)
        return self.http.post(path, content=body, headers=headers)


def _trigger(server: ServerProcess, worker: WorkerProcess, **more: Any) -> dict[str, Any]:
    wd = Path(worker.workdir("hello-world"))
    wd.mkdir(parents=True, exist_ok=True)
    made = server.http.post("/api/triggers", json={
        "name": "fix", "worker_id": worker.worker_id, "workdir": str(wd), "prompt": PROMPT,
        "policy": "suggest", "events": ["issue_comment", "pull_request.opened"], **more})
    assert made.status_code == 201, made.text
    return dict(made.json())


def _deliveries(server: ServerProcess, trigger_id: str) -> list[dict[str, Any]]:
    (info,) = [t for t in server.http.get("/api/triggers").json()
               if t["spec"]["trigger_id"] == trigger_id]
    return list(info["deliveries"])


def _first_prompt(server: ServerProcess, sid: str) -> str:
    s = wait_for(server, sid, idle, timeout=60, what="the triggered session's answer")
    users = [i for i in s["items"] if i["kind"] == "user_message"]
    assert [i["text"] for i in s["items"] if i["kind"] == "assistant_message"] == ["on it"]
    return str(users[0]["text"])


def test_a_signed_github_delivery_starts_a_session_with_the_payloads_fields(
        server: ServerProcess, worker: WorkerProcess) -> None:
    made = _trigger(server, worker)
    secret = made["secret"]
    assert made["url_path"].startswith("/hooks/t/") and len(made["url_path"]) > 40
    assert secret and secret not in json.dumps(server.http.get("/api/triggers").json())
    gh = GitHub(server)

    r = gh.deliver(made["url_path"], "issue_comment", _raw("issue_comment.created"), secret)
    assert r.status_code == 202, r.text
    got = r.json()
    assert got["outcome"] == "started"
    assert got["missing"] == ["payload.issue.milestone.title", "payload.pull_request.title"]
    prompt = _first_prompt(server, got["session_id"])
    assert prompt == ("Fix octo-org/hello-world#1347 (bug): @codey please fix the off-by-one "
                      "in pager.py [] PR: ")
    s = server.http.get(f"/api/sessions/{got['session_id']}").json()
    assert s["policy"] == "suggest" and s["title"] == "fix · issue_comment.created"

    # a pull request opened, as GitHub may send it: form-encoded
    raw = _raw("pull_request.opened")
    form = urlencode({"payload": raw.decode()}).encode()
    r = gh.deliver(made["url_path"], "pull_request", form, secret,
                   content_type="application/x-www-form-urlencoded")
    assert r.status_code == 202 and r.json()["outcome"] == "started", r.text
    assert "PR: Add a pager" in _first_prompt(server, r.json()["session_id"])

    # the same event closed: filtered by the trigger's events
    closed = json.loads(raw)
    closed["action"] = "closed"
    r = gh.deliver(made["url_path"], "pull_request", json.dumps(closed).encode(), secret)
    assert r.status_code == 202 and r.json()["outcome"] == "filtered", r.text

    outcomes = [(d["event"], d["outcome"]) for d in _deliveries(server, made["trigger_id"])]
    assert outcomes == [("issue_comment.created", "started"),
                        ("pull_request.opened", "started"), ("pull_request.closed", "filtered")]


def test_wrong_and_missing_signatures_are_refused_and_an_unknown_url_is_404(
        server: ServerProcess, worker: WorkerProcess) -> None:
    made = _trigger(server, worker)
    gh = GitHub(server)
    body = _raw("issue_comment.created")
    wrong = gh.deliver(made["url_path"], "issue_comment", body, secret="not the secret")
    assert wrong.status_code == 401 and wrong.json()["outcome"] == "refused", wrong.text
    assert "does not match" in wrong.json()["reason"]
    missing = gh.deliver(made["url_path"], "issue_comment", body)
    assert missing.status_code == 401 and "no X-Hub-Signature-256" in missing.json()["reason"]
    # a signature over another body (a tampered payload)
    tampered = gh.deliver(made["url_path"], "issue_comment", body.replace(b"fix", b"rm -rf"),
                          signature=sign(made["secret"], body))
    assert tampered.status_code == 401
    # an unknown id, or one a character off: 404, recorded nowhere
    for path in ("/hooks/t/nope", made["url_path"][:-1] + ("A" if made["url_path"][-1] != "A"
                                                           else "B")):
        r = gh.deliver(path, "issue_comment", body, made["secret"])
        assert r.status_code == 404, r.text
    ds = _deliveries(server, made["trigger_id"])
    assert [(d["outcome"], d["payload"], d["session_id"]) for d in ds] == [
        ("refused", "", None)] * 3
    assert server.http.get("/api/sessions").json() == [] or all(
        s.get("origin") != f"trigger:{made['trigger_id']}"
        for s in server.http.get("/api/sessions").json())


def test_a_delivery_is_replayed_as_a_new_delivery_naming_it(
        server: ServerProcess, worker: WorkerProcess) -> None:
    made = _trigger(server, worker)
    gh = GitHub(server)
    first = gh.deliver(made["url_path"], "issue_comment", _raw("issue_comment.created"),
                       made["secret"]).json()
    _first_prompt(server, first["session_id"])
    again = server.http.post(f"/api/triggers/{made['trigger_id']}/deliveries/"
                             f"{first['delivery_id']}/replay")
    assert again.status_code == 200, again.text
    replay = again.json()
    assert replay["outcome"] == "started" and replay["session_id"] != first["session_id"]
    assert "@codey please fix" in _first_prompt(server, replay["session_id"])
    ds = _deliveries(server, made["trigger_id"])
    assert [(d["delivery_id"], d["replay_of"]) for d in ds] == [
        (first["delivery_id"], ""), (replay["delivery_id"], first["delivery_id"])]
    assert ds[0]["payload"] == ds[1]["payload"] != ""

    # a refused delivery kept no payload: nothing to replay
    refused = gh.deliver(made["url_path"], "issue_comment", b"{}", "wrong").json()
    r = server.http.post(f"/api/triggers/{made['trigger_id']}/deliveries/"
                         f"{refused['delivery_id']}/replay")
    assert r.status_code == 409, r.text
    assert server.http.post(f"/api/triggers/{made['trigger_id']}/deliveries/dlv_none/replay"
                            ).status_code == 404


def test_attacks_template_syntax_huge_body_flood_and_forged_replays(
        server: ServerProcess, worker: WorkerProcess) -> None:
    made = _trigger(server, worker, per_minute=4)
    gh = GitHub(server)
    # 1. a comment whose body is template syntax is put in as text, never expanded again
    hostile = json.loads(_raw("issue_comment.created"))
    hostile["comment"]["body"] = "{{payload.sender.login}} {{payload.comment.body}}"
    r = gh.deliver(made["url_path"], "issue_comment", json.dumps(hostile).encode(),
                   made["secret"])
    assert r.status_code == 202, r.text
    prompt = _first_prompt(server, r.json()["session_id"])
    assert "{{payload.sender.login}} {{payload.comment.body}}" in prompt
    assert "hubot" not in prompt

    # 2. a huge body (over 1 MiB): 413 before it is read whole, recorded nowhere
    huge = b'{"action": "created", "x": "' + b"a" * (2 * 1024 * 1024) + b'"}'
    r = gh.deliver(made["url_path"], "issue_comment", huge, made["secret"])
    assert r.status_code == 413, r.text

    # 3. a browser without a login cannot replay (nor list) deliveries...
    first = _deliveries(server, made["trigger_id"])[0]["delivery_id"]
    replay = f"/api/triggers/{made['trigger_id']}/deliveries/{first}/replay"
    anonymous = httpx.Client(base_url=server.url, timeout=30.0)
    assert anonymous.post(replay, headers={"Origin": server.url}).status_code == 401
    assert anonymous.get("/api/triggers").status_code == 401
    # ... nor can another site's page riding the logged-in browser's cookie
    cookies = dict(server.http.cookies)
    assert cookies, "the test's browser is logged in by cookie"
    forged = httpx.Client(base_url=server.url, timeout=30.0, cookies=cookies)
    r = forged.post(replay, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403, r.text
    r = forged.post(replay, headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403, r.text

    # 4. a flood: past per_minute (4 taken: the hostile one, the huge one counts too) → 429,
    # and the log holds only what was taken
    codes = [gh.deliver(made["url_path"], "issue_comment", b"{}", "wrong").status_code
             for _ in range(4)]
    assert codes == [401, 401, 429, 429], codes
    assert len(_deliveries(server, made["trigger_id"])) == 3
