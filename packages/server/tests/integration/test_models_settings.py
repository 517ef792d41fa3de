"""Settings → Models over the real stack: a server started with no provider gets one through
the API (listed, tested, used at once, kept over a restart, removed), a session that failed for
want of one recovers on Retry, and a session switches model between two turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.scenarios import create_session, session, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

KEY = "sk-settings"
SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "Reply with the single word OK."}, "reply": {"text": "OK"}},
    {"match": {"any": True}, "reply": {"text": "an answer"}},
]}


@pytest.fixture
def keyed(tmp_path: Path) -> Any:
    with start_model_server(SCRIPT, tmp_path / "model", api_key=KEY) as handle:
        yield handle


def _last_answer(s: dict[str, Any]) -> str:
    return next((i.get("text") or "" for i in reversed(s["items"])
                 if i["kind"] == "assistant_message"), "")


def test_a_server_with_no_provider_gets_one_in_settings_and_a_failed_session_recovers(
        tmp_path: Path, keyed: ModelServerHandle) -> None:
    with ServerProcess(tmp_path / "server", config={}) as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        assert server.http.get("/api/config").json() == {"default_provider": "",
                                                         "providers": []}
        assert "no model provider: open Settings → Models" in server.log_text()
        sid = create_session(server, worker, worker.workdir("w"), "hello")
        failed = wait_for(server, sid, lambda s: s["status"] == "error", what="the error")
        assert "add a model provider in Settings → Models" in failed["status_reason"]

        # the models its API lists, with the key pasted (not saved yet); a wrong key: its words
        listed = server.http.post("/api/providers/models", json={
            "kind": "chat", "base_url": keyed.base_url, "api_key": KEY}).json()
        assert listed == {"models": ["scripted-1"], "error": None}
        refused = server.http.post("/api/providers/models", json={
            "kind": "chat", "base_url": keyed.base_url, "api_key": "sk-wrong"}).json()
        assert refused["models"] == [] and "HTTP 401" in refused["error"]

        saved = server.http.post("/api/providers", json={
            "name": "mine", "kind": "chat", "base_url": keyed.base_url,
            "models": ["scripted-1"], "auth": "api_key", "api_key": "sk-wrong"})
        assert saved.status_code == 200, saved.text
        assert saved.json()["state"] == "logged_in" and KEY not in saved.text
        config = server.http.get("/api/config").json()
        assert config["default_provider"] == "mine"
        assert [(p["name"], p["source"], p["models"]) for p in config["providers"]] == [
            ("mine", "settings", ["scripted-1"])]
        tried = server.http.post("/api/providers/mine/test").json()
        assert not tried["ok"] and "rejected the credentials" in tried["error"]
        # the right key, pasted again: used at once, no restart
        assert server.http.post("/api/providers", json={
            "name": "mine", "kind": "chat", "base_url": keyed.base_url,
            "models": ["scripted-1"], "auth": "api_key", "api_key": KEY}).status_code == 200
        tried = server.http.post("/api/providers/mine/test").json()
        assert (tried["ok"], tried["reply"], tried["model"]) == (True, "OK", "scripted-1")

        assert server.http.post(f"/api/sessions/{sid}/retry").status_code == 200
        done = wait_for(server, sid, lambda s: s["status"] == "idle", what="the retried turn")
        assert (done["provider"], done["model"]) == ("mine", "scripted-1")
        assert _last_answer(done) == "an answer"

        # a restart keeps it: it is in the log, its key in auth.json
        server.restart()
        worker.wait_connected()
        assert [p["name"] for p in server.http.get("/api/config").json()["providers"]] == \
            ["mine"]
        assert server.http.post(f"/api/sessions/{sid}/prompt",
                                json={"text": "again"}).status_code == 202
        wait_for(server, sid, lambda s: s["status"] == "idle" and _last_answer(s) and
                 sum(i["kind"] == "assistant_message" for i in s["items"]) == 2,
                 what="the answer after the restart")

        # removed: gone with its key; config.json's providers cannot be removed here
        assert server.http.delete("/api/providers/mine").status_code == 200
        assert server.http.get("/api/config").json()["providers"] == []
        assert server.http.get("/api/auth/status").json() == []
        assert "mine" not in (tmp_path / "server" / "auth.json").read_text()
        assert server.http.delete("/api/providers/mine").status_code == 404


def test_a_session_switches_model_and_effort_between_two_turns(
        tmp_path: Path, keyed: ModelServerHandle) -> None:
    config = {"providers": [{"name": "file", "kind": "chat", "base_url": keyed.base_url,
                             "auth": "api_key", "models": ["scripted-1", "scripted-2"]}]}
    with ServerProcess(tmp_path / "server", config=config) as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        assert server.http.post("/api/auth/api-key", json={
            "provider": "file", "api_key": KEY}).status_code == 200
        sid = create_session(server, worker, worker.workdir("w"), "first")
        wait_for(server, sid, lambda s: s["status"] == "idle" and _last_answer(s),
                 what="the first turn")
        r = server.http.post(f"/api/sessions/{sid}/model", json={
            "provider": "file", "model": "scripted-2", "effort": "high"})
        assert r.status_code == 200, r.text
        s = session(server, sid)
        assert (s["provider"], s["model"], s["effort"]) == ("file", "scripted-2", "high")
        assert server.http.post(f"/api/sessions/{sid}/prompt",
                                json={"text": "second"}).status_code == 202
        wait_for(server, sid, lambda s: s["status"] == "idle" and sum(
            i["kind"] == "assistant_message" for i in s["items"]) == 2, what="turn two")
        bodies = [r["body"] for r in keyed.requests("/v1/chat/completions")]
        assert [(b["model"], b.get("reasoning_effort")) for b in bodies] == [
            ("scripted-1", None), ("scripted-2", "high")]
        # config.json's provider is not Settings' to change or remove
        assert server.http.delete("/api/providers/file").status_code == 409
        assert server.http.post("/api/providers", json={
            "name": "file", "base_url": keyed.base_url}).status_code == 409
        assert server.http.post(f"/api/sessions/{sid}/model", json={
            "provider": "nope"}).status_code == 404
