"""Provider login as a confidential client, and what the user is told when a provider fails.

Against the test kit's real OIDC provider, configured to require client authentication with
one method (``--token-endpoint-auth-methods``), to lack the device flow, or to answer 5xx.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from codey_testkit.oidc import OIDCProviderProcess
from codey_testkit.stack import ServerProcess
from codey_testkit.waiting import wait_until

pytestmark = pytest.mark.integration

PROVIDER = "corp"
SECRET = "corp-client-secret-" + "x7" * 12
SECRET_ENV = "CODEY_TEST_CORP_CLIENT_SECRET"


class Stack:
    """The provider with one client ``codey``, and a server whose provider ``corp`` uses it."""

    def __init__(self, tmp_path: Path, *, client_secret: str | None = SECRET,
                 secret_env: str | None = SECRET_ENV, server_env: dict[str, str] | None = None,
                 extra_args: tuple[str, ...] = (), **flags: Any) -> None:
        self.oidc = OIDCProviderProcess(log_dir=tmp_path / "logs", extra_args=extra_args,
                                        **flags).start()
        provider: dict[str, Any] = {
            "name": PROVIDER, "kind": "chat", "base_url": "http://127.0.0.1:9/v1",
            "models": ["m"], "auth": "oauth", "issuer": self.oidc.issuer, "client_id": "codey"}
        if secret_env:
            provider["client_secret_env"] = secret_env
        env = {SECRET_ENV: SECRET} if server_env is None else server_env
        self.server = ServerProcess(tmp_path / "server", env=env,
                                    config={"providers": [provider]}).start()
        self.callback = f"{self.server.url}/api/auth/callback"
        self.oidc.add_client("codey", [self.callback], client_secret)

    def close(self) -> None:
        self.server.stop()
        self.oidc.stop()

    def status(self) -> dict[str, Any]:
        entries = self.server.http.get("/api/auth/status").json()
        return dict(next(e for e in entries if e["provider"] == PROVIDER))

    def login(self) -> str:
        """Log in through the browser flow; returns where the UI is sent back to."""
        r = self.server.http.post("/api/auth/login-link", json={"provider": PROVIDER})
        assert r.status_code == 200, r.text
        at_provider = httpx.get(r.json()["url"], follow_redirects=False, timeout=10)
        assert at_provider.status_code in (302, 303), at_provider.text
        back = self.server.http.get(at_provider.headers["location"], follow_redirects=False)
        assert back.status_code == 303
        return str(back.headers["location"])


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def build(**kwargs: Any) -> Stack:
        stacks.append(Stack(tmp_path / str(len(stacks)), **kwargs))
        return stacks[-1]

    try:
        yield build
    finally:
        for s in stacks:
            s.close()


def _login_error(location: str) -> str:
    assert location.startswith("/#/?login_error="), location
    return parse_qs(urlsplit(location.removeprefix("/#/")).query)["login_error"][0]


def _until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "it") -> None:
    wait_until(predicate, timeout=timeout, interval=0.1, what=what)


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_confidential_client_logs_in_and_refreshes_with_the_advertised_method(
        make: Callable[..., Stack], method: str) -> None:
    stack = make(token_endpoint_auth_methods=method, access_token_ttl=4)
    assert stack.login() == "/#/"
    status = stack.status()
    assert status["state"] == "logged_in" and status["account"] == "dev@example.test"
    first = status["expires_at"]
    _until(lambda: stack.status()["expires_at"] > first, timeout=12, what="a refresh")
    assert stack.status()["state"] == "logged_in"
    assert SECRET not in stack.server.log_text()
    assert SECRET not in (stack.server.data_dir / "auth.json").read_text()
    assert SECRET not in stack.server.http.get("/api/state/bootstrap").text


def test_device_flow_as_a_confidential_client(make: Callable[..., Stack]) -> None:
    stack = make(token_endpoint_auth_methods="client_secret_basic")
    r = stack.server.http.post("/api/auth/device", json={"provider": PROVIDER})
    assert r.status_code == 200, r.text
    stack.oidc.approve_device(r.json()["user_code"])
    _until(lambda: stack.status()["state"] == "logged_in", what="the device login")


def test_public_login_to_a_provider_that_requires_client_auth_says_invalid_client(
        make: Callable[..., Stack]) -> None:
    stack = make(secret_env=None, token_endpoint_auth_methods="client_secret_basic")
    assert _login_error(stack.login()).startswith("invalid_client")


def test_a_secret_missing_from_the_environment_is_named(make: Callable[..., Stack]) -> None:
    stack = make(server_env={})
    error = _login_error(stack.login())
    assert error.startswith("not_configured") and SECRET_ENV in error
    r = stack.server.http.post("/api/auth/device", json={"provider": PROVIDER})
    assert r.status_code == 409 and SECRET_ENV in r.json()["detail"]  # the server's config


def test_token_endpoint_5xx_is_reported_with_its_status_and_text(
        make: Callable[..., Stack]) -> None:
    stack = make()
    stack.oidc.fail_next("/token", 503, "upstream IdP maintenance until 14:00")
    error = _login_error(stack.login())
    assert error.startswith("http_503"), error
    assert "503" in error and "upstream IdP maintenance until 14:00" in error
    assert "HTTPStatusError" not in error
    assert stack.status()["state"] == "error"
    assert "maintenance" in stack.status()["error"]


def test_device_login_without_the_device_flow_is_a_4xx_with_a_clear_message(
        make: Callable[..., Stack]) -> None:
    stack = make(extra_args=("--no-device-flow",))
    r = stack.server.http.post("/api/auth/device", json={"provider": PROVIDER})
    assert r.status_code == 409, r.text  # the provider's, not the request's
    detail = r.json()["detail"]
    assert "does not offer the device flow" in detail and "browser" in detail
    assert stack.login() == "/#/"  # the browser flow still works
