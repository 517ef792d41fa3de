"""auth.json storage, and device-flow polling against a scripted token endpoint."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from codey_server.providers import device
from codey_server.providers.device import DeviceGrant, poll_device
from codey_server.providers.oauth import OAuthFailed, OAuthProvider
from codey_server.providers.store import Credential, FileCredentialStore
from codey_server.settings import ProviderConfig

SECRET = "at-" + "s3cr3t" * 5


def test_store_writes_0600_atomically_and_reloads(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "auth.json"
        store = FileCredentialStore(path)
        assert await store.get("p") is None and not path.exists()
        await store.put("p", Credential(method="oauth", access_token=SECRET, refresh_token="rt",
                                        expires_at=123.0, account="me@example.test"))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == ["auth.json"]  # no temp file left
        again = FileCredentialStore(path)
        cred = await again.get("p")
        assert cred is not None and cred.access_token == SECRET
        assert cred.account == "me@example.test"
        assert await again.remove("p") and not await again.remove("p")
        assert await FileCredentialStore(path).get("p") is None

    asyncio.run(main())


def test_credential_repr_never_shows_a_secret() -> None:
    cred = Credential(method="api_key", api_key=SECRET)
    assert SECRET not in repr(cred) and SECRET not in str(cred) and SECRET not in f"{cred}"


def test_unreadable_store_is_moved_aside_and_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    path.write_text("{not json")
    store = FileCredentialStore(path)
    assert asyncio.run(store.names()) == []
    assert (tmp_path / "auth.json.broken").read_text() == "{not json"


ISSUER = "http://idp.test"


def _provider(token_answers: list[tuple[int, dict[str, Any]]],
              seen: list[dict[str, str]]) -> tuple[OAuthProvider, httpx.AsyncClient]:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/openid-configuration":
            return httpx.Response(200, json={
                "issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/authorize",
                "token_endpoint": f"{ISSUER}/token",
                "device_authorization_endpoint": f"{ISSUER}/device_authorization"})
        assert request.url.path == "/token"
        seen.append(dict(httpx.QueryParams(request.content.decode())))
        status, body = token_answers.pop(0)
        return httpx.Response(status, json=body)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    config = ProviderConfig(name="idp", base_url="http://model.test", auth="oauth",
                            issuer=ISSUER, client_id="codey")
    return OAuthProvider(config, http), http


def _run_poll(monkeypatch: pytest.MonkeyPatch, answers: list[tuple[int, dict[str, Any]]],
              interval: float = 2.0) -> tuple[Any, list[float], list[dict[str, str]]]:
    sleeps: list[float] = []
    seen: list[dict[str, str]] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(device.asyncio, "sleep", fake_sleep)

    async def run() -> Any:
        provider, http = _provider(answers, seen)
        grant = DeviceGrant(device_code="dc", user_code="ABCD-EFGH",
                            verification_uri=f"{ISSUER}/device", interval=interval,
                            expires_in=600)
        try:
            return await poll_device(provider, http, grant)
        finally:
            await http.aclose()

    try:
        result: Any = asyncio.run(run())
    except OAuthFailed as err:
        result = err
    return result, sleeps, seen


def test_device_polling_honours_interval_and_slow_down(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens, sleeps, seen = _run_poll(monkeypatch, [
        (400, {"error": "authorization_pending"}),
        (400, {"error": "slow_down"}),
        (400, {"error": "authorization_pending"}),
        (200, {"access_token": SECRET, "refresh_token": "rt", "expires_in": 60,
               "token_type": "Bearer"}),
    ])
    assert tokens.access_token == SECRET and tokens.refresh_token == "rt"
    assert sleeps == [2.0, 2.0, 7.0, 7.0]  # slow_down adds 5 s for this and every later poll
    assert all(s["grant_type"] == device.DEVICE_GRANT and s["device_code"] == "dc"
               and s["client_id"] == "codey" for s in seen)


def test_device_polling_stops_on_denial(monkeypatch: pytest.MonkeyPatch) -> None:
    err, sleeps, _ = _run_poll(monkeypatch, [
        (400, {"error": "authorization_pending"}),
        (400, {"error": "access_denied", "error_description": "the user said no"}),
    ], interval=0)
    assert isinstance(err, OAuthFailed) and err.code == "access_denied"
    assert sleeps == [1.0, 1.0]  # never faster than once a second, whatever the server says
    assert json.dumps(err.message) == '"the user said no"'
