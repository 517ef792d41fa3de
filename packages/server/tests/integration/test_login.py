"""Model-provider login run by the server, against the real local OIDC provider process."""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.oidc import OIDCProviderProcess
from codey_testkit.scenarios import create_session, idle, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.wsclient import BrowserSocket

PROVIDER = "idp"
API_KEY = "sk-test-" + "k3y" * 8


def _config(issuer: str, base_url: str = "http://127.0.0.1:9/v1") -> dict[str, Any]:
    return {"providers": [
        {"name": PROVIDER, "kind": "chat", "base_url": base_url, "models": ["scripted-1"],
         "auth": "oauth", "issuer": issuer, "client_id": "codey"},
        {"name": "keyed", "kind": "chat", "base_url": "http://127.0.0.1:9/v1",
         "models": ["m"], "auth": "api_key"},
        {"name": "open", "kind": "ollama", "base_url": "http://127.0.0.1:9", "models": ["m"]},
    ], "default_provider": PROVIDER}


class Stack:
    def __init__(self, tmp_path: Path, oidc_flags: dict[str, Any] | None = None,
                 model: ModelServerHandle | None = None) -> None:
        self.oidc = OIDCProviderProcess(log_dir=tmp_path / "logs", **(oidc_flags or {}))
        self.oidc.start()
        base_url = model.base_url if model else "http://127.0.0.1:9/v1"
        self.server = ServerProcess(tmp_path / "server", config=_config(self.oidc.issuer,
                                                                         base_url))
        self.server.start()
        self.callback = f"{self.server.url}/api/auth/callback"
        self.oidc.add_client("codey", [self.callback])

    def close(self) -> None:
        self.server.stop()
        self.oidc.stop()

    def status(self, provider: str = PROVIDER) -> dict[str, Any]:
        entries = self.server.http.get("/api/auth/status").json()
        return next(e for e in entries if e["provider"] == provider)

    def link(self, http: httpx.Client | None = None) -> dict[str, str]:
        r = (http or self.server.http).post("/api/auth/login-link", json={"provider": PROVIDER})
        assert r.status_code == 200, r.text
        return dict(r.json())

    def authorize(self, url: str) -> str:
        """The user at the provider: returns where it sends the browser back to."""
        r = httpx.get(url, follow_redirects=False, timeout=10)
        assert r.status_code in (302, 303), r.text
        return str(r.headers["location"])

    def callback_to(self, location: str, http: httpx.Client | None = None) -> str:
        r = (http or self.server.http).get(location, follow_redirects=False)
        assert r.status_code == 303, r.text
        return str(r.headers["location"])

    def login(self) -> None:
        assert self.callback_to(self.authorize(self.link()["url"])) == "/#/"

    def stored(self) -> dict[str, Any]:
        path = self.server.data_dir / "auth.json"
        if not path.exists():
            return {}
        data: dict[str, Any] = json.loads(path.read_text())
        return dict(data["providers"])


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        yield s
    finally:
        s.close()


def _until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "it") -> None:
    wait_until(predicate, timeout=timeout, interval=0.1, what=what)


def _login_error(location: str) -> str:
    assert location.startswith("/#/?login_error="), location
    return parse_qs(urlsplit(location.removeprefix("/#/")).query)["login_error"][0]


def _secrets_in(stack: Stack) -> list[str]:
    values = [API_KEY]
    for cred in stack.stored().values():
        values += [cred.get(k) for k in ("access_token", "refresh_token", "api_key")
                   if cred.get(k)]
    return values


# --- authorization code + PKCE ---------------------------------------------------------------


def test_pkce_login_end_to_end_stores_0600_credentials_and_reports_the_account(
        stack: Stack) -> None:
    assert stack.status()["state"] == "logged_out"
    link = stack.link()
    query = parse_qs(urlsplit(link["url"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    assert query["redirect_uri"] == [stack.callback]
    assert query["state"] == [link["state"]] and query["nonce"][0]
    assert "code_verifier" not in link["url"]
    assert stack.callback_to(stack.authorize(link["url"])) == "/#/"
    status = stack.status()
    assert status["state"] == "logged_in" and status["method"] == "oauth"
    assert status["account"] == "dev@example.test"
    assert status["expires_at"] > time.time() + 600
    path = stack.server.data_dir / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cred = stack.stored()[PROVIDER]
    assert cred["access_token"].count(".") == 2 and cred["refresh_token"]
    text = json.dumps(stack.server.http.get("/api/auth/status").json()) + \
        stack.server.http.get("/api/state/bootstrap").text
    assert cred["access_token"] not in text and cred["refresh_token"] not in text


def test_callback_without_the_strict_cookie_is_bound_by_the_login_cookie(stack: Stack) -> None:
    location = stack.authorize(stack.link()["url"])
    login_cookies = {k: v for k, v in stack.server.http.cookies.items() if k.endswith("_login")}
    assert login_cookies  # set by login-link, Path=/api/auth/callback, SameSite=Lax
    with httpx.Client(base_url=stack.server.url, cookies=login_cookies, timeout=10) as http:
        assert stack.callback_to(location, http) == "/#/"
    assert stack.status()["state"] == "logged_in"


def test_bad_state_is_refused(stack: Stack) -> None:
    location = stack.authorize(stack.link()["url"])
    code = parse_qs(urlsplit(location).query)["code"][0]
    bad = f"/api/auth/callback?code={code}&state=forged-state"
    assert _login_error(stack.callback_to(bad)).startswith("bad_state")
    assert stack.status()["state"] == "logged_out"


def test_state_from_another_browser_is_refused(stack: Stack) -> None:
    location = stack.authorize(stack.link()["url"])
    with httpx.Client(base_url=stack.server.url, timeout=10,
                      headers={"Origin": stack.server.url}) as other:
        other.get(f"/?token={stack.server.token}")  # logged in, but a different session
        assert _login_error(stack.callback_to(location, other)).startswith("bad_state")
    assert stack.status()["state"] == "logged_out"


def test_replayed_state_and_replayed_code_are_refused(stack: Stack) -> None:
    location = stack.authorize(stack.link()["url"])
    assert stack.callback_to(location) == "/#/"
    # the same callback again: the state was single-use
    assert _login_error(stack.callback_to(location)).startswith("bad_state")
    # the used code under a fresh, valid state: the provider refuses the replay
    code = parse_qs(urlsplit(location).query)["code"][0]
    fresh = stack.link()["state"]
    replay = f"/api/auth/callback?code={code}&state={fresh}"
    assert _login_error(stack.callback_to(replay)).startswith("invalid_grant")


def test_code_exchanged_with_the_wrong_verifier_is_refused(stack: Stack) -> None:
    first = stack.authorize(stack.link()["url"])  # a code bound to the first verifier
    code = parse_qs(urlsplit(first).query)["code"][0]
    second = stack.link()["state"]  # the server keeps another verifier for this state
    swapped = f"/api/auth/callback?code={code}&state={second}"
    assert _login_error(stack.callback_to(swapped)).startswith("invalid_grant")
    assert stack.status()["state"] == "error"


def test_other_redirect_uri_is_refused(stack: Stack) -> None:
    # Reached under another host name, the server asks for another redirect URI, which the
    # provider does not know: it refuses to issue a code at all.
    port = stack.server.url.rsplit(":", 1)[1]
    other = f"http://localhost:{port}"
    with httpx.Client(base_url=other, timeout=10, headers={"Origin": other}) as http:
        http.get(f"/?token={stack.server.token}")
        link = stack.link(http)
    assert parse_qs(urlsplit(link["url"]).query)["redirect_uri"] == [
        f"{other}/api/auth/callback"]
    r = httpx.get(link["url"], follow_redirects=False, timeout=10)
    assert r.status_code == 400 and "location" not in r.headers
    # and a code for the registered URI cannot be redeemed with another one
    location = stack.authorize(stack.link()["url"])
    code = parse_qs(urlsplit(location).query)["code"][0]
    token = httpx.post(f"{stack.oidc.issuer}/token", timeout=10, data={
        "grant_type": "authorization_code", "code": code, "client_id": "codey",
        "redirect_uri": f"{other}/api/auth/callback", "code_verifier": "x" * 43})
    assert token.status_code == 400


def test_provider_error_returns_to_the_ui_with_the_error(stack: Stack) -> None:
    state = stack.link()["state"]
    location = stack.callback_to(
        f"/api/auth/callback?state={state}&error=access_denied&error_description=no")
    assert _login_error(location).startswith("access_denied")
    assert stack.status()["state"] == "error"


# --- device code, refresh, logout, API keys ---------------------------------------------------


def test_device_flow_end_to_end_with_pending_then_logged_in_events(stack: Stack) -> None:
    browser = BrowserSocket(stack.server)
    r = stack.server.http.post("/api/auth/device", json={"provider": PROVIDER})
    assert r.status_code == 200, r.text
    grant = r.json()
    assert grant["user_code"] and grant["verification_uri"].startswith(stack.oidc.issuer)
    assert "device_code" not in grant
    pending = stack.status()
    assert pending["state"] == "pending" and pending["user_code"] == grant["user_code"]
    stack.oidc.approve_device(grant["user_code"])
    _until(lambda: stack.status()["state"] == "logged_in", what="the device login")
    assert stack.status()["method"] == "device_code"
    assert stack.status()["account"] == "dev@example.test"
    # every event up to the server's last (the login's among them), not 0.5 s of them
    browser.until_seq(stack.server.http.get("/api/state/bootstrap").json()["seq"])
    states = [e["event"]["state"] for e in browser.envelopes
              if e["event"]["type"] == "auth_status_updated" and
              e["event"]["provider"] == PROVIDER]
    assert states[-2:] == ["pending", "logged_in"]
    browser.close()


def test_denied_device_login_ends_in_error(stack: Stack) -> None:
    grant = stack.server.http.post("/api/auth/device", json={"provider": PROVIDER}).json()
    stack.oidc.deny_device(grant["user_code"])
    _until(lambda: stack.status()["state"] == "error", what="the denial")
    assert stack.status()["error"] and PROVIDER not in stack.stored()


def test_tokens_are_refreshed_before_they_expire(tmp_path: Path) -> None:
    stack = Stack(tmp_path, {"access_token_ttl": 4})
    try:
        stack.login()
        first = stack.stored()[PROVIDER]
        assert first["expires_at"] - time.time() <= 4.5
        _until(lambda: stack.stored()[PROVIDER]["access_token"] != first["access_token"],
               timeout=10, what="a refresh")
        second = stack.stored()[PROVIDER]
        assert second["expires_at"] > first["expires_at"]
        assert stack.status()["state"] == "logged_in"
        _until(lambda: stack.status()["expires_at"] > first["expires_at"], what="the event")
    finally:
        stack.close()


def test_provider_logout_forgets_credentials_and_browser_stays_in(stack: Stack) -> None:
    stack.login()
    r = stack.server.http.post("/api/auth/logout", json={"provider": PROVIDER})
    assert r.status_code == 200 and r.json()["state"] == "logged_out"
    assert PROVIDER not in stack.stored()
    assert stack.status()["state"] == "logged_out"
    assert stack.server.http.get("/api/sessions").status_code == 200


def test_api_key_is_stored_never_echoed_and_status_survives_restart(stack: Stack) -> None:
    http = stack.server.http
    assert http.post("/api/auth/api-key", json={"provider": "keyed"}).status_code == 400
    assert http.post("/api/auth/api-key", json={"provider": "nope", "api_key": API_KEY}
                     ).status_code == 404
    r = http.post("/api/auth/api-key", json={"provider": "keyed", "api_key": API_KEY})
    assert r.status_code == 200 and API_KEY not in r.text
    assert r.json()["state"] == "logged_in" and r.json()["method"] == "api_key"
    assert stack.stored()["keyed"]["api_key"] == API_KEY
    assert stack.status("open")["state"] == "logged_in"  # auth "none" needs nothing
    seq = http.get("/api/state/bootstrap").json()["seq"]
    stack.server.restart()
    assert stack.status("keyed")["state"] == "logged_in"
    # nothing changed, so the restart appended no auth event
    assert stack.server.http.get("/api/state/bootstrap").json()["seq"] == seq


def test_no_token_or_key_ever_appears_in_the_server_log(stack: Stack) -> None:
    stack.login()
    stack.server.http.post("/api/auth/api-key", json={"provider": "keyed", "api_key": API_KEY})
    grant = stack.server.http.post("/api/auth/device", json={"provider": PROVIDER}).json()
    stack.oidc.approve_device(grant["user_code"])
    _until(lambda: stack.status()["method"] == "device_code", what="the device login")
    secrets = _secrets_in(stack)
    assert len(secrets) >= 3
    stack.server.stop()
    log = stack.server.log_text()
    assert "logged in as dev@example.test" in log  # the log is there and has auth lines
    for secret in secrets:
        assert secret not in log
    # the access token is printed once, on the line telling the owner what to open
    lines = [line for line in log.splitlines() if stack.server.token in line]  # type: ignore[operator]
    assert lines and all(line.startswith("Open http://") for line in lines)


# --- the model server accepts what the server got --------------------------------------------


def test_token_for_gives_a_bearer_the_model_server_accepts(tmp_path: Path) -> None:
    script = {"steps": [{"match": {"any": True}, "reply": {"text": "hello from the model"}}]}
    oidc = OIDCProviderProcess(log_dir=tmp_path / "logs").start()
    model = start_model_server(script, tmp_path / "model", oidc_issuer=oidc.issuer)
    server = ServerProcess(tmp_path / "server", config=_config(oidc.issuer, model.base_url))
    try:
        server.start()
        oidc.add_client("codey", [f"{server.url}/api/auth/callback"])
        with WorkerProcess(server, tmp_path / "worker") as worker:
            workdir = str(worker.root / "proj")
            Path(workdir).mkdir(parents=True, exist_ok=True)
            sid = create_session(server, worker, workdir, "before login")
            refused = wait_for(server, sid, idle, what="the refused turn")
            assert "not logged in" in json.dumps(refused["items"])
            # the server did not even try; without a token the model would refuse anyway
            assert model.requests("/v1/chat/completions") == []
            bare = httpx.post(f"{model.base_url}/chat/completions", timeout=10,
                              json={"model": "scripted-1", "messages": []})
            assert bare.status_code == 401
            link = server.http.post("/api/auth/login-link", json={"provider": PROVIDER}).json()
            location = httpx.get(link["url"], timeout=10).headers["location"]
            assert server.http.get(location).status_code in (200, 303)
            r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "after login"})
            assert r.status_code == 202, r.text
            wait_for(server, sid, lambda s: s["status"] == "idle" and any(
                i.get("text") == "hello from the model" for i in s["items"]),
                what="the model's answer")
            last = model.requests("/v1/chat/completions")[-1]
            assert last["status"] == 200 and last["bearer"]
    finally:
        server.stop()
        model.stop()
        oidc.stop()
