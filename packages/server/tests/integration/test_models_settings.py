"""Settings → Models over the real stack: a server started with no provider gets one through
the API (listed, tested, used at once, kept over a restart, removed), a session that failed for
want of one recovers on Retry, and a session switches model between two turns."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
        assert listed == {"models": ["scripted-1"], "error": None, "code": None,
                          "status": None}
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


# The audit (issue 32, finding 8): listing a saved provider's models at another URL sent its
# stored key there, and the server fetched any URL and showed the browser the start of its
# error page. A capture server stands for the other URL: an attacker's, or an intranet page.

SECRET_PAGE = "INTRANET-SECRET: the payroll database password is hunter2"


class _Capture(BaseHTTPRequestHandler):
    """Records each request's path and credential headers; answers as its path says."""

    seen: list[dict[str, str | None]]

    def do_GET(self) -> None:
        self.seen.append({"path": self.path,
                          "authorization": self.headers.get("authorization"),
                          "x-api-key": self.headers.get("x-api-key")})
        status, body = {"/teapot/models": (418, SECRET_PAGE),
                        "/page/models": (200, f"<html>{SECRET_PAGE}</html>"),
                        "/broken/models": (500, json.dumps({"error": {"message": SECRET_PAGE}})),
                        "/moved/models": (302, SECRET_PAGE),
                        }.get(self.path, (401, json.dumps({"error": {"message": SECRET_PAGE}})))
        data = body.encode()
        self.send_response(status, f"Secret {SECRET_PAGE}")  # a reason phrase of its own
        self.send_header("content-type", "text/html" if "html" in body else "application/json")
        self.send_header("location", "http://169.254.169.254/latest/meta-data/")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.do_GET()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def capture() -> Iterator[tuple[str, list[dict[str, str | None]]]]:
    seen: list[dict[str, str | None]] = []
    handler = type("Capture", (_Capture,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_a_saved_providers_key_goes_only_to_its_saved_url_and_no_remote_body_comes_back(
        tmp_path: Path, keyed: ModelServerHandle,
        capture: tuple[str, list[dict[str, str | None]]]) -> None:
    there, seen = capture
    env_key = KEY  # what the model server takes; config.json's provider reads it from $ENV
    config = {"providers": [{"name": "fromfile", "kind": "chat", "base_url": keyed.base_url,
                             "models": ["scripted-1"], "auth": "api_key",
                             "api_key_env": "CODEY_TEST_FILE_KEY"}]}
    with ServerProcess(tmp_path / "server", config=config,
                       env={"CODEY_TEST_FILE_KEY": env_key}) as server:
        assert server.http.post("/api/providers", json={
            "name": "mine", "kind": "chat", "base_url": keyed.base_url,
            "models": ["scripted-1"], "api_key": KEY}).status_code == 200

        answered: list[str] = []

        def models(**query: Any) -> dict[str, Any]:
            r = server.http.post("/api/providers/models", json={"kind": "chat", **query})
            assert r.status_code == 200, r.text
            answered.append(r.text)
            return dict(r.json())

        # at its own URL the saved key goes (and lists); at another, no key at all
        assert models(provider="mine", base_url=keyed.base_url)["models"] == ["scripted-1"]
        assert models(provider="fromfile", base_url=keyed.base_url + "/")["models"] == \
            ["scripted-1"]
        elsewhere = [models(provider=provider, base_url=f"{there}/v1", kind=kind)
                     for provider in ("mine", "fromfile") for kind in ("chat", "anthropic",
                                                                       "ollama")]
        assert len(seen) == 6 and all(s["authorization"] is None and s["x-api-key"] is None
                                      for s in seen), seen
        assert all(a["models"] == [] and a.get("code") == "http" for a in elsewhere), elsewhere
        # a key typed in the form goes where the form says: that key only
        seen.clear()
        answer = models(provider="mine", base_url=there, api_key="sk-typed-here")
        assert [s["authorization"] for s in seen] == ["Bearer sk-typed-here"]
        # the answer is a short kind and our words, never the remote's
        assert (answer["code"], answer["status"]) == ("http", 401)
        assert answer["error"] == f"{there}/models answered HTTP 401 Unauthorized"
        for path, code, status in (("/teapot", "http", 418), ("/broken", "http", 500),
                                   ("/moved", "http", 302), ("/page", "not_json", None)):
            answer = models(base_url=there + path)
            assert (answer["code"], answer["status"]) == (code, status), answer
        assert [s["path"] for s in seen][-4:] == ["/teapot/models", "/broken/models",
                                                  "/moved/models", "/page/models"]
        gone = models(base_url="http://127.0.0.1:9/v1")  # the discard port: nobody there
        assert gone["code"] == "unreachable" and gone["error"].startswith("could not reach")

        # URLs that parsers read two ways, or that are not http at all: 400, nothing fetched
        host = there.removeprefix("http://")
        seen.clear()
        for url in (f"http://{KEY}@{host}/", f"http://user:pw@{host}/v1",
                    f"http://{host}\\@evil.example/", f"{there}/v1?x=1", f"{there}/v1#f",
                    f"{there}/v1\n", "file:///etc/passwd", "gopher://127.0.0.1:70/",
                    "ftp://127.0.0.1/", f"{there}/a b", "http://127.0.0.1:0/",
                    "http://127.0.0.1:65536/",
                    # control characters (issue 39 §6: httpx.InvalidURL answered 500)
                    f"{there}/v1\x01", f"{there}/v\x00", f"{there}/v1\t", f"{there}\x7f/v1",
                    f"http://127.0.0.1\x1b:{there.rsplit(':', 1)[1]}/v1"):
            r = server.http.post("/api/providers/models", json={
                "kind": "chat", "base_url": url, "provider": "mine"})
            assert r.status_code == 400, (url, r.status_code, r.text)
        assert seen == []

        # "test when saved": the key stays with the URL it was given for
        moved = server.http.post("/api/providers", json={
            "name": "mine", "kind": "chat", "base_url": f"{there}/v1",
            "models": ["scripted-1"]})
        assert moved.status_code == 200, moved.text
        assert moved.json()["state"] == "logged_out"
        assert "given for another URL" in moved.json()["error"]
        seen.clear()
        tried = server.http.post("/api/providers/mine/test").json()
        assert not tried["ok"] and "not logged in" in tried["error"], tried
        assert seen == []  # the call went nowhere without a key for that URL
        # back to the URL it was given for: the key is used there again
        assert server.http.post("/api/providers", json={
            "name": "mine", "kind": "chat", "base_url": keyed.base_url,
            "models": ["scripted-1"]}).json()["state"] == "logged_in"
        tried = server.http.post("/api/providers/mine/test").json()
        assert tried["ok"], tried
        # a key given with the new URL is that URL's
        seen.clear()
        assert server.http.post("/api/providers", json={
            "name": "mine", "kind": "chat", "base_url": f"{there}/v1",
            "models": ["scripted-1"], "api_key": "sk-for-there"}).json()["state"] == "logged_in"
        server.http.post("/api/providers/mine/test")
        assert {s["authorization"] for s in seen} == {"Bearer sk-for-there"}
        assert KEY not in server.log_text()
        # nothing the remote said reached the browser: no body, no reason phrase
        assert not [t for t in answered if SECRET_PAGE in t or "hunter2" in t]
