"""The OpenAPI document is the API's contract, both ways: schemathesis generates requests from
the document a real server serves at /schema and sends them to it.

- A request the document allows is taken, or refused for what it refers to, with a status
  the document gives: an unknown id (404), the state of what it names (409), a locked or
  expired pairing (423, 410), files too large together (413), too many pending (429). Never
  a 400: the rules a body must follow are in its schema (``codey_server.http.fields``).
- A request the document forbids is refused (4xx).
- No request gets a 5xx, and every answer's status, type and body are the documented ones.

Real ids are mixed into the generated ones (a session, a task, a schedule, a worker), so the
requests reach the rules behind the 404s. The run is small (``--max-examples 5``; the
coverage phase, which tries every boundary of every schema, skips the schedules: their time
zone alone has some 600 values): about 45 s on an idle 2-core machine, most of it the
server answering some 1,700 requests, so a loaded one takes twice that (hence its own
timeout). Its negative coverage cases are the ones that found the 500s: keep them.
``test_openapi.py`` makes a real request of every kind too.
"""

from __future__ import annotations

import base64
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from codey_testkit.model_handle import ModelServerHandle
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess

#: a fixed seed: a failure here is reproducible with the line the run prints
SEED = 24
#: what schemathesis checks: answers (status, type, body as documented), no 5xx, and the two
#: directions of the contract
CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_schema_conformance", "positive_data_acceptance", "negative_data_rejection"]
#: schemathesis's other checks, turned off
OTHER_CHECKS = ["allow_header_conformance", "ensure_resource_availability", "ignored_auth",
                "missing_required_header", "object_level_authorization",
                "response_headers_conformance", "unsupported_method", "use_after_free"]
#: statuses a schema-valid request may get: what it refers to, not how it is written
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "410", "413", "423", "429"]


@pytest.fixture
def script() -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [{"match": {"any": True}, "reply": {"text": "ok"}}]}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _paired_worker(server: ServerProcess) -> str:
    """A worker paired through the API (no process behind it), for the run to revoke."""
    key = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    ticket = server.http.post("/api/pairing/requests", json={
        "public_key": _b64(key), "hostname": "revocable", "os": "Linux",
        "python_version": platform.python_version(), "worker_version": "0.1.0",
        "roots": ["/tmp"]}).json()
    approved = server.http.post(f"/api/pairing/requests/{ticket['request_id']}/approve",
                                json={"code": ticket["code"]})
    assert approved.status_code == 200, approved.text
    return str(approved.json()["worker_id"])


def _created(server: ServerProcess, path: str, body: dict[str, Any], key: str) -> str:
    r = server.http.post(path, json=body)
    assert r.status_code == 201, (path, r.text)
    return str(r.json()[key])


def _config(server: ServerProcess, ids: dict[str, str], revocable: str) -> str:
    """schemathesis.toml: the access token, the real ids, the statuses above."""
    lines = [f'headers = {{ Authorization = "Bearer {server.token}" }}', ""]
    for name, value in ids.items():
        lines += [f"[dictionaries.{name}]", f"values = [{json.dumps(value)}]"]
    lines += ["", "[parameters]"]
    for where, name, probability in [
            ("path.worker_id", "worker", 0.5), ("body.worker_id", "worker", 0.8),
            ("path.session_id", "session", 0.5), ("body.target_session", "session", 0.5),
            ("path.task_id", "task", 0.5), ("body.depends_on[*]", "task", 0.5),
            ("body.before", "task", 0.5), ("path.schedule_id", "schedule", 0.5),
            ("path.trigger_id", "trigger", 0.5)]:
        lines.append(f'"{where}" = {{ dictionary = "{name}", probability = {probability} }}')
    # the checks are chosen here, not by --checks: an operation's own settings (below) may
    # then turn one off, which --checks would override
    for check in OTHER_CHECKS:
        lines += ["", f"[checks.{check}]", "enabled = false"]
    lines += [
        "", "[checks.positive_data_acceptance]", f"expected-statuses = {json.dumps(ACCEPTED)}",
        # the run may revoke this one, not the worker the sessions are on
        "", "[[operations]]", 'include-path = "/api/workers/{worker_id}/revoke"',
        f'parameters = {{ "path.worker_id" = "{revocable}" }}',
        # the worker's long poll answers at once (it would hold a request up to a minute)
        "", "[[operations]]", 'include-path = "/api/pairing/requests/{request_id}/wait"',
        'parameters = { "query.timeout" = 0 }',
        "", "[[operations]]", 'include-path-regex = "^/api/schedules"',
        "phases.coverage.enabled = false",
    ]
    # the run defines OAuth providers in Settings → Models with issuers it makes up; a login
    # there asks that issuer, which is not there: the documented 502 (a bad gateway), not a
    # server error of ours
    for path in ("/api/auth/device", "/api/auth/login-link"):
        lines += ["", "[[operations]]", f'include-path = "{path}"',
                  "checks.not_a_server_error.enabled = false",
                  f"checks.positive_data_acceptance.expected-statuses = "
                  f"{json.dumps([*ACCEPTED, '502'])}"]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(300)
def test_every_request_the_document_allows_is_taken_and_none_gets_a_5xx(
        tmp_path: Path, model: ModelServerHandle) -> None:
    config = provider_config(model)
    config["providers"].append({"name": "keyed", "base_url": model.base_url + "/v1",
                                "auth": "api_key", "models": ["m"]})
    # a pasted Telegram token starts a bot: let it find nothing listening, not the internet
    config["telegram"] = {"api_base": "http://127.0.0.1:9"}
    with ServerProcess(tmp_path / "server", config=config) as server:
        worker = _paired_worker(server)
        session = _created(server, "/api/sessions", {
            "worker_id": worker, "workdir": "/tmp/contract", "prompt": "hello"}, "session_id")
        ids = {"worker": worker, "session": session,
               "task": _created(server, "/api/tasks", {"title": "design"}, "task_id"),
               "schedule": _created(server, "/api/schedules", {
                   "name": "nightly", "cron": "0 3 * * *", "worker_id": worker,
                   "workdir": "/tmp/contract", "prompt": "run the tests"}, "schedule_id"),
               "trigger": _created(server, "/api/triggers", {
                   "name": "on comment", "worker_id": worker, "workdir": "/tmp/contract",
                   "prompt": "{{payload.comment.body}}"}, "trigger_id")}
        revocable = _paired_worker(server)
        (tmp_path / "schemathesis.toml").write_text(_config(server, ids, revocable))
        report = tmp_path / "report"
        # the CLI, in its own process and folder (its hypothesis database and cache stay
        # there); --report json is what this test reads
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--config-file", "schemathesis.toml",
             "run", f"{server.url}/schema/openapi.json", "--max-examples", "5",
             "--seed", str(SEED), "--workers", "1",
             "--report", "json", "--report-dir", str(report), "--no-color"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300)
        said = run.stdout[-12000:] + run.stderr[-4000:]
        reports = list(report.glob("*.json"))
        assert len(reports) == 1, said
        result = json.loads(reports[0].read_text())

    assert result["complete"] and not result["errors"], said
    assert result["failures"] == [], said
    assert run.returncode == 0, said
    operations = result["operations"]
    assert operations["tested"] == operations["total"] > 50, operations
    rates = [counts for phases in result["valid_rates"].values() for counts in phases.values()]
    # schema-valid requests: none refused, and enough taken that the run means something
    assert sum(c["rejected"] for c in rates) == 0, said
    assert sum(c["accepted"] for c in rates) > 100, result["valid_rates"]
    assert result["test_cases"]["generated"] > 1000, result["test_cases"]
