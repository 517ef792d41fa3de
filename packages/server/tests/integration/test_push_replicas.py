"""Web Push among replicas on PostgreSQL: one VAPID key for the cluster (a browser subscribed
through one replica takes pushes signed by any), the subscriptions shared as rows, and each
event pushed once, by the replica that appended it."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import start_model_server
from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.push_service import PushServiceHandle
from codey_testkit.scenarios import create_session, provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

SECRET_KEY = base64.b64encode(secrets.token_bytes(32)).decode()
SCRIPT = {"model": "scripted-1", "steps": [
    {"match": {"user": "make the file"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": ["touch", "made.txt"]}}]}},
    {"match": {"tool": "shell"}, "reply": {"text": "Made it."}},
    {"match": {"any": True}, "reply": {"text": "Something went differently."}},
]}


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresCluster]:
    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed")
    with PostgresCluster() as cluster:
        yield cluster


def _kinds(push: PushServiceHandle, sub: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [m for m in push.messages(sub) if (m["payload"] or {}).get("kind") == kind]


def test_one_key_shared_rows_and_one_push_per_event(tmp_path: Path,
                                                     pg: PostgresCluster) -> None:
    dsn = pg.create_database("push")
    with start_model_server(SCRIPT, tmp_path / "model") as model, \
            PushServiceHandle(tmp_path / "push") as push:
        config = {**provider_config(model), "push": {"allow_http_endpoints": True}}

        def replica(name: str) -> ServerProcess:
            return ServerProcess(tmp_path / name, config=config,
                                 env={"CODEY_SECRET_KEY": SECRET_KEY},
                                 extra_args=["--database-url", dsn, "--replica-id", name])

        with replica("r0") as r0, replica("r1") as r1, \
                WorkerProcess(r0, tmp_path / "worker") as worker:
            key = r0.http.get("/api/push").json()["public_key"]
            assert r1.http.get("/api/push").json()["public_key"] == key
            sub = push.subscription(application_server_key=key)
            r = r0.http.post("/api/push/devices", json={**sub, "name": "Phone"})
            assert r.status_code == 201, r.text
            device_id = r.json()["device_id"]
            wait_until(lambda: device_id in r1.http.get("/api/state/bootstrap").json()[
                "state"]["push_devices"], timeout=30, what="the device on the other replica")
            # the other replica reads the subscription's row and signs with the same key
            tested = r1.http.post(f"/api/push/devices/{device_id}/test").json()
            assert tested["ok"] is True and tested["status"] == 201, tested
            (test,) = _kinds(push, sub, "test")
            assert test["vapid"]["ok"] and test["vapid"]["key"] == key

            workdir = Path(worker.workdir("push"))
            workdir.mkdir(parents=True)
            sid = create_session(r0, worker, str(workdir), "make the file", policy="suggest")
            push.wait_for(lambda m: (m["payload"] or {}).get("kind") == "approval", sub,
                          timeout=60, what="the approval's push")
            approval_id = _kinds(push, sub, "approval")[0]["payload"]["approval_id"]
            r1.http.post(f"/api/sessions/{sid}/approvals/{approval_id}",
                         json={"decision": "approve"}).raise_for_status()
            wait_until(lambda: _kinds(push, sub, "finished"), timeout=60,
                       what="the turn's end pushed")
            # both replicas folded each event; each was pushed once
            assert len(_kinds(push, sub, "approval")) == 1, push.messages(sub)
            assert len(_kinds(push, sub, "finished")) == 1, push.messages(sub)

            # removed through one replica: no replica reaches it any more
            assert r1.http.delete(f"/api/push/devices/{device_id}").status_code == 200
            wait_until(lambda: r0.http.post(f"/api/push/devices/{device_id}/test")
                       .status_code == 404, timeout=30, what="the removal on the other replica")
