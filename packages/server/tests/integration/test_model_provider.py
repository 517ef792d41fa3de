"""A provider against the scripted model server over real HTTP: one pooled client, a 401
refreshed once, retries that honour Retry-After, and errors in plain words."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_server.agent.errors import ModelError
from codey_server.agent.models import ModelProvider
from codey_server.agent.stream import Finished, ModelEvent, Retrying, TextDelta
from codey_server.settings import ProviderConfig
from codey_testkit.model_handle import ModelServerHandle, start_model_server

KEY = "sk-right"
SCRIPT = {"model": "scripted-1", "steps": [
    {"match": {"user": "quota"}, "reply": {"error": {
        "status": 429, "code": "insufficient_quota",
        "message": "You exceeded your current quota, please check your plan."}}},
    {"match": {"user": "missing"}, "reply": {"error": {
        "status": 404, "code": "model_not_found",
        "message": "The model `nope` does not exist or you do not have access to it."}}},
    {"match": {"user": "busy"}, "times": 2, "reply": {"error": {"status": 503,
                                                                "retry_after": 0.2}}},
    {"match": {"user": "down"}, "times": 4, "reply": {"error": {"status": 502}}},
    {"match": {"any": True}, "reply": {"text": "pong"}},
]}


class Keys:
    """Credentials whose token can be wrong until refreshed."""

    def __init__(self, token: str) -> None:
        self.current = token
        self.refreshes = 0

    async def token(self) -> str | None:
        return self.current

    async def refresh(self) -> bool:
        self.refreshes += 1
        self.current = KEY
        return True


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServerHandle]:
    with start_model_server(SCRIPT, tmp_path_factory.mktemp("model"), api_key=KEY) as handle:
        yield handle


def _provider(model: ModelServerHandle, keys: Keys, **config: Any) -> ModelProvider:
    return ModelProvider(ProviderConfig(name="openai", kind=config.pop("kind", "responses"),
                                        base_url=model.base_url, auth=config.pop("auth", "oauth"),
                                        max_retries=3, **config), keys)


def _body(text: str) -> bytes:
    return json.dumps({"model": "scripted-1", "input": [{"role": "user", "content": text}],
                       "stream": True, "store": False}).encode()


async def _call(provider: ModelProvider, text: str) -> list[ModelEvent]:
    return [e async for e in provider.stream(model="scripted-1", body=_body(text))]


def _no_waiting(provider: ModelProvider) -> list[float]:
    """Tenacity's seam: the provider's retries record each delay instead of waiting it."""
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    provider.retrying = provider.retrying.copy(sleep=sleep)
    return slept


def test_one_client_serves_every_call_until_the_credential_changes(
        model: ModelServerHandle) -> None:
    async def run() -> None:
        keys = Keys(KEY)
        provider = _provider(model, keys)
        results = await asyncio.gather(*[_call(provider, f"ping {n}") for n in range(20)])
        assert all(isinstance(r[-1], Finished) for r in results)
        assert provider.clients_built == 1
        keys.current = "sk-rotated"  # a new credential: the next call builds a new client
        events = await _call(provider, "ping")  # 401, refreshed to the right key, again
        assert isinstance(events[-1], Finished) and keys.refreshes == 1
        assert provider.clients_built == 3
        await provider.aclose()

    asyncio.run(run())


def test_calls_reuse_kept_alive_connections_and_set_up_new_ones_a_few_at_a_time(
        model: ModelServerHandle) -> None:
    async def run() -> None:
        provider = _provider(model, Keys(KEY), max_connecting=3)
        for n in range(5):  # one after another: one connection, kept alive
            await _call(provider, f"ping {n}")
        assert provider.gate.opened == 1
        assert len({r["peer"] for r in model.requests("/v1/responses")[-5:]}) == 1
        # twenty at once: each needs a connection of its own, at most three set up at a time
        results = await asyncio.gather(*[_call(provider, f"ping {n}") for n in range(20)])
        assert all(isinstance(r[-1], Finished) for r in results)
        assert provider.gate.peak == 3 and provider.gate.setting_up == 0
        assert 1 < provider.gate.opened <= 20 and provider.clients_built == 1
        await provider.aclose()

    asyncio.run(run())


def test_a_401_on_an_oauth_provider_refreshes_once_and_retries(model: ModelServerHandle) -> None:
    async def run() -> None:
        keys = Keys("sk-expired")
        provider = _provider(model, keys)
        events = await _call(provider, "ping")
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "pong"
        assert keys.refreshes == 1
        await provider.aclose()

    asyncio.run(run())


def test_a_bad_api_key_is_said_plainly_and_not_retried(model: ModelServerHandle) -> None:
    async def run() -> None:
        keys = Keys("sk-wrong")
        provider = _provider(model, keys, auth="api_key")
        before = len(model.requests("/v1/responses"))
        with pytest.raises(ModelError) as err:
            await _call(provider, "ping")
        assert err.value.code == "auth" and "rejected the credentials" in err.value.message
        assert keys.refreshes == 0 and len(model.requests("/v1/responses")) == before + 1
        await provider.aclose()

    asyncio.run(run())


@pytest.mark.parametrize(("text", "code", "words"), [
    ("quota", "quota", "quota is used up"),
    ("missing", "not_found", "model or endpoint not found"),
])
def test_errors_that_retrying_cannot_fix(model: ModelServerHandle, text: str, code: str,
                                         words: str) -> None:
    async def run() -> None:
        provider = _provider(model, Keys(KEY))
        before = len(model.requests("/v1/responses"))
        with pytest.raises(ModelError) as err:
            await _call(provider, text)
        assert err.value.code == code and words in err.value.message
        assert "HTTP" in err.value.message and "openai: " in err.value.message
        assert len(model.requests("/v1/responses")) == before + 1, "not retried"
        await provider.aclose()

    asyncio.run(run())


def test_5xx_is_retried_after_retry_after(model: ModelServerHandle) -> None:
    async def run() -> None:
        provider = _provider(model, Keys(KEY))
        slept = _no_waiting(provider)
        events = await _call(provider, "busy")
        retries = [e for e in events if isinstance(e, Retrying)]
        assert [r.reason for r in retries] == ["HTTP 503", "HTTP 503"]
        assert all(r.delay_s == pytest.approx(0.2) for r in retries)
        assert slept == [r.delay_s for r in retries]
        assert isinstance(events[-1], Finished)
        await provider.aclose()

    asyncio.run(run())


def test_an_unreachable_provider_is_a_connection_error(tmp_path: Path) -> None:
    async def run() -> None:
        provider = ModelProvider(ProviderConfig(name="local", base_url="http://127.0.0.1:9/v1",
                                                max_retries=1), Keys(KEY))
        slept = _no_waiting(provider)
        events: list[ModelEvent] = []
        with pytest.raises(ModelError) as err:
            async for event in provider.stream(model="m", body=_body("x")):
                events.append(event)
        assert err.value.code == "connection" and "cannot reach" in err.value.message
        assert [type(e) for e in events] == [Retrying]
        assert slept == [e.delay_s for e in events if isinstance(e, Retrying)]
        assert 0.25 <= slept[0] <= 0.5
        await provider.aclose()

    asyncio.run(run())


def test_a_5xx_without_retry_after_backs_off_doubling_then_is_the_error(
        model: ModelServerHandle) -> None:
    """max_retries (3) retries, each announced with the delay then waited: 0.5 s doubling,
    in the upper half of each (half fixed, half random); then the error itself."""
    async def run() -> None:
        provider = _provider(model, Keys(KEY))
        slept = _no_waiting(provider)
        before = len(model.requests("/v1/responses"))
        events: list[ModelEvent] = []
        with pytest.raises(ModelError) as err:
            async for event in provider.stream(model="scripted-1", body=_body("down")):
                events.append(event)
        assert err.value.code == "server" and "HTTP 502" in err.value.message
        assert len(model.requests("/v1/responses")) == before + 4
        retries = [e for e in events if isinstance(e, Retrying)]
        assert [(r.attempt, r.reason) for r in retries] == [
            (1, "HTTP 502"), (2, "HTTP 502"), (3, "HTTP 502")]
        assert slept == [r.delay_s for r in retries]
        for delay, ceiling in zip(slept, [0.5, 1.0, 2.0], strict=True):
            assert ceiling / 2 <= delay <= ceiling
        await provider.aclose()

    asyncio.run(run())
