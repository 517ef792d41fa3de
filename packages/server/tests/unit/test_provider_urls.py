"""A provider's credential goes only to the endpoint it was given for, and a base URL has one
reading: the pure rules (``http.urls``) and the credential's binding in ``AuthService``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_server.core.engine import Engine
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES
from codey_server.http.urls import same_endpoint, url_problem
from codey_server.providers.oauth import TokenSet
from codey_server.providers.service import AuthService
from codey_server.providers.store import Credential
from codey_server.settings import ProviderConfig, Settings

HERE = "http://127.0.0.1:8001/v1"
THERE = "http://127.0.0.1:8002/v1"


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:11434/v1", "https://api.openai.com/v1", "https://api.anthropic.com",
    "http://localhost", "https://gw.example.com/v1/acct-1/gw/openai",
    "http://x:65535/", "https://example.com/a%20b/~c",
])
def test_a_plain_base_url_is_taken(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize("url", [
    "http://sk-key@127.0.0.1/", "http://user:pw@127.0.0.1:1/v1",  # a user part
    "http://127.0.0.1\\@evil.example/", "http://127.0.0.1\\evil/",  # read as / by some
    "http://x/v1?q=1", "http://x/v1#f", "http://x/v1\n", "http://x/a b", "http:// x/",
    "file:///etc/passwd", "gopher://x/", "ftp://x/", "javascript:alert(1)", "HTTP://x/",
    "http:///x", "http://x:0/", "http://x:65536/", "http://x:080/", "http://é.example/",
    "http://x/" + "a" * 2000, "http://[::1]:8080/", "http://[0]/",
])
def test_a_url_that_parsers_could_read_two_ways_is_refused(url: str) -> None:
    assert url_problem(url) is not None


def test_the_same_endpoint_is_scheme_host_port_and_path() -> None:
    assert same_endpoint("https://API.example.com:443/v1/", "https://api.example.com/v1")
    assert same_endpoint("http://h/v1", "http://h:80/v1")
    assert not same_endpoint(HERE, THERE)  # another port: another server
    assert not same_endpoint("http://h/v1", "https://h/v1")
    assert not same_endpoint("http://h/v1", "http://h/v2")
    assert not same_endpoint("http://h.example/v1", "http://h.example.evil/v1")
    assert not same_endpoint("http://[0]/v1", "http://0/v1")  # unreadable: no match, no raise


def _config(base_url: str = HERE) -> ProviderConfig:
    return ProviderConfig(name="p", base_url=base_url, auth="api_key")


async def _service(tmp_path: Path, *providers: ProviderConfig) -> AuthService:
    engine = Engine(MemoryEventLog(), RULES)
    await engine.start()
    service = AuthService(Settings(data_dir=tmp_path, providers=list(providers)), engine)
    return service


def test_a_key_given_for_one_url_is_not_sent_once_the_provider_points_elsewhere(
        tmp_path: Path) -> None:
    async def main() -> None:
        service = await _service(tmp_path)
        await service.start()
        try:
            entry = ev.ProviderEntry(name="p", base_url=HERE, models=["m"])
            await service.engine.execute(cl.SaveProvider(provider=entry))
            await service.set_api_key("p", "sk-here")
            assert (await service.store.get("p")).base_url == HERE  # type: ignore[union-attr]
            assert await service.token_for("p") == "sk-here"
            moved = msgspec.structs.replace(entry, base_url=THERE)
            await service.engine.execute(cl.SaveProvider(provider=moved))
            assert await service.token_for("p") is None
            status = await service.status_of("p")
            assert status.state == "logged_out" and "another URL" in (status.error or "")
            back = msgspec.structs.replace(entry, base_url=HERE + "/")
            await service.engine.execute(cl.SaveProvider(provider=back))
            assert await service.token_for("p") == "sk-here"
            assert (await service.status_of("p")).state == "logged_in"
        finally:
            await service.stop()

    asyncio.run(main())


def test_a_login_is_bound_where_it_was_made_and_a_refresh_keeps_that(tmp_path: Path) -> None:
    async def main() -> None:
        service = await _service(tmp_path, _config())
        tokens = TokenSet(access_token="at", refresh_token="rt", expires_at=time.time() + 3600)
        await service._logged_in("p", "oauth", tokens, "me")
        assert (await service.store.get("p")).base_url == HERE  # type: ignore[union-attr]
        await service._logged_in("p", "oauth", tokens, "me", quiet=True, base_url=THERE)
        assert await service.token_for("p") is None

    asyncio.run(main())


def test_a_credential_stored_before_binding_is_bound_to_the_url_at_start(
        tmp_path: Path) -> None:
    async def main() -> None:
        old = await _service(tmp_path, _config())
        await old.store.put("p", Credential(method="api_key", api_key="sk-old"))
        service = await _service(tmp_path, _config())
        await service.start()
        try:
            assert (await service.store.get("p")).base_url == HERE  # type: ignore[union-attr]
            assert await service.token_for("p") == "sk-old"
        finally:
            await service.stop()

    asyncio.run(main())
