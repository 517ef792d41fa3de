"""Web Push through the real stack: server, worker, scripted model, and the test kit's push
service (``codey-push-service``), which holds the browser's private key, checks the VAPID
header and decrypts what the server pushes (RFC 8291) with ``http_ece``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import start_model_server
from codey_testkit.push_service import PushServiceHandle
from codey_testkit.scenarios import create_session, provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

SCRIPT = {"model": "scripted-1", "steps": [
    {"match": {"user": "make the file"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": ["touch", "made.txt"]}}]}},
    {"match": {"tool": "shell"}, "reply": {"text": "Made made.txt for you.\nAnd more."}},
    {"match": {"any": True}, "reply": {"text": "Something went differently."}},
]}


@pytest.fixture
def push(tmp_path: Path) -> Iterator[PushServiceHandle]:
    with PushServiceHandle(tmp_path / "push") as handle:
        yield handle


def _payloads(push: PushServiceHandle, sub: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [m["payload"] for m in push.messages(sub)
            if m["payload"] and m["payload"].get("kind") == kind]


def test_an_approval_is_pushed_encrypted_and_decided_from_its_notification(
        tmp_path: Path, push: PushServiceHandle) -> None:
    with start_model_server(SCRIPT, tmp_path / "model") as model:
        config = {**provider_config(model), "push": {"allow_http_endpoints": True}}
        with ServerProcess(tmp_path / "server", config=config) as server, \
                WorkerProcess(server, tmp_path / "worker") as worker:
            status = server.http.get("/api/push").json()
            public_key = status["public_key"]
            assert [k["name"] for k in status["kinds"]] == [
                "approval", "question", "failed", "finished", "budget"]
            sub = push.subscription(application_server_key=public_key)
            r = server.http.post("/api/push/devices", json={**sub, "name": "Phone"})
            assert r.status_code == 201, r.text
            device_id = r.json()["device_id"]
            # the same endpoint again is the same device
            again = server.http.post("/api/push/devices", json={**sub, "name": ""})
            assert again.json()["device_id"] == device_id

            state_text = server.http.get("/api/state/bootstrap").text
            device = server.http.get("/api/state/bootstrap").json()["state"][
                "push_devices"][device_id]
            assert device["name"] == "Phone" and device["endpoint_host"] == "127.0.0.1"
            assert "finished" in device["kinds"]
            # the subscription's secrets never reach a browser (nor the log)
            for secret in (sub["keys"]["auth"], sub["keys"]["p256dh"], sub["endpoint"]):
                assert secret not in state_text
            assert sub["keys"]["auth"].encode() not in (tmp_path / "server" /
                                                        "events.db").read_bytes()

            workdir = worker.workdir("push")
            Path(workdir).mkdir(parents=True)
            sid = create_session(server, worker, workdir, "make the file", policy="suggest")

            message = push.wait_for(lambda m: (m["payload"] or {}).get("kind") == "approval",
                                    sub, what="the approval's push")
            assert message["error"] == ""
            assert message["vapid"]["ok"], message["vapid"]
            assert message["vapid"]["key"] == public_key
            assert message["headers"]["content_encoding"] == "aes128gcm"
            assert message["headers"]["urgency"] == "high"
            assert message["headers"]["topic"] and int(message["headers"]["ttl"]) > 0
            p = message["payload"]
            assert p["session_id"] == sid and p["tag"] == f"codey-session:{sid}"
            assert p["url"] == f"/#/session/{sid}"
            assert "$ touch made.txt" in p["body"] and p["title"].startswith("Approval needed")
            assert [a["action"] for a in p["actions"]] == ["approve", "reject"]
            assert p["risky"] is False and p["approval_id"] and len(p["action_hash"]) == 32

            # a notification that showed another action is refused
            wrong = server.http.post("/api/push/decide", json={
                "approval_id": p["approval_id"], "action_hash": "0" * 32,
                "decision": "approve"}).json()
            assert wrong["decided"] is False and "changed" in wrong["message"]
            ok = server.http.post("/api/push/decide", json={
                "approval_id": p["approval_id"], "action_hash": p["action_hash"],
                "decision": "approve"}).json()
            assert ok == {"decided": True, "message": "Approved", "session_id": sid}
            stale = server.http.post("/api/push/decide", json={
                "approval_id": p["approval_id"], "action_hash": p["action_hash"],
                "decision": "reject"}).json()
            assert stale["decided"] is False
            assert stale["message"] == "Already decided: ✅ approved"

            wait_until(lambda: _payloads(push, sub, "finished"), timeout=60,
                       what="the turn's end pushed")
            (finished,) = _payloads(push, sub, "finished")
            assert finished["body"] == "Made made.txt for you."  # the first line
            assert finished["tag"] == p["tag"]  # replaces the approval's notification
            assert (Path(workdir) / "made.txt").exists()

            # what is pushed is per device: without "finished", a turn's end is not pushed
            r = server.http.put(f"/api/push/devices/{device_id}",
                                json={"kinds": ["approval"], "name": "My phone"})
            assert r.status_code == 200, r.text
            unknown = server.http.put(f"/api/push/devices/{device_id}", json={"kinds": ["x"]})
            assert unknown.status_code == 404

            test = server.http.post(f"/api/push/devices/{device_id}/test").json()
            assert test["ok"] is True and test["status"] == 201, test
            push.wait_for(lambda m: (m["payload"] or {}).get("kind") == "test", sub)

            # the browser unsubscribed: its push service answers 410 and the device goes
            push.gone(sub)
            gone = server.http.post(f"/api/push/devices/{device_id}/test").json()
            assert gone["ok"] is False and gone["status"] == 410
            wait_until(lambda: device_id not in server.http.get(
                "/api/state/bootstrap").json()["state"]["push_devices"],
                timeout=20, what="the gone device removed")


def test_a_subscription_must_be_https_unless_allowed(tmp_path: Path,
                                                     push: PushServiceHandle) -> None:
    with ServerProcess(tmp_path / "server") as server:
        sub = push.subscription()
        r = server.http.post("/api/push/devices", json={**sub, "name": "x"})
        assert r.status_code == 409 and "https" in r.text
        bad_keys = {**sub, "endpoint": "https://push.example/abc",
                    "keys": {"p256dh": "AAAA", "auth": sub["keys"]["auth"]}}
        r = server.http.post("/api/push/devices", json=bad_keys)
        assert r.status_code == 400
        assert server.http.delete("/api/push/devices/dev_nope").status_code == 404
        # the key pair is made once and kept across a restart
        key = server.http.get("/api/push").json()["public_key"]
        server.restart()
        assert server.http.get("/api/push").json()["public_key"] == key
        assert oct((tmp_path / "server" / "push.json").stat().st_mode & 0o777) == "0o600"


def test_a_full_access_sessions_approval_is_pushed_without_actions_and_refused_from_outside(
        tmp_path: Path, push: PushServiceHandle) -> None:
    with start_model_server(SCRIPT, tmp_path / "model") as model:
        config = {**provider_config(model), "push": {"allow_http_endpoints": True}}
        with ServerProcess(tmp_path / "server", config=config) as server, \
                WorkerProcess(server, tmp_path / "worker") as worker:
            key = server.http.get("/api/push").json()["public_key"]
            sub = push.subscription(application_server_key=key)
            assert server.http.post("/api/push/devices", json=sub).status_code == 201
            workdir = worker.workdir("risky")
            Path(workdir).mkdir(parents=True)
            r = server.http.post("/api/sessions", json={
                "worker_id": worker.worker_id, "workdir": workdir, "prompt": "make the file",
                "policy": "suggest", "sandbox": "full-access"})
            assert r.status_code == 201, r.text
            sid = r.json()["session_id"]
            message = push.wait_for(lambda m: (m["payload"] or {}).get("kind") == "approval",
                                    sub, what="the approval's push")
            p = message["payload"]
            assert p["risky"] is True and p["actions"] == []
            assert p["body"].endswith("Open Codey to decide.")
            refused = server.http.post("/api/push/decide", json={
                "approval_id": p["approval_id"], "action_hash": p["action_hash"],
                "decision": "approve"}).json()
            assert refused["decided"] is False and "app only" in refused["message"]
            session = server.http.get(f"/api/sessions/{sid}").json()
            assert session["approvals"][p["approval_id"]]["status"] == "pending"
            assert not (Path(workdir) / "made.txt").exists()
