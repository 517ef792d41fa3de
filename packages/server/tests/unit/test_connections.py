"""The set-up gate (agent/connections.py): new connections to a provider are set up a few at a
time, each until the server answers on it, and kept-alive connections are reused without
waiting. Driven through a real aiohttp session against a bare asyncio HTTP server in the
test's own loop, whose listen backlog is 5 as a small self-hosted model server's."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from codey_server.agent.connections import SetupGate

Answer = Callable[[], Awaitable[None]]


class _Http:
    """An HTTP/1.1 server answering every request with a small body after ``answer()``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.accepted = 0
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=5)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/responses"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                self.requests += 1
                await self.answer()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for ``condition`` (a busy machine may take its time)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def _post(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(url, data=b"{}") as reply:
        return await reply.text()


def _session(gate: SetupGate) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(trace_configs=[gate.trace_config()],
                                 connector=aiohttp.TCPConnector(limit=1000))


def test_a_burst_opens_connections_a_few_at_a_time_and_then_reuses_them() -> None:
    async def run() -> None:
        gate = SetupGate(4)
        async def answer() -> None:
            await asyncio.sleep(0.01)

        async with _Http(answer) as url, _session(gate) as http:
            assert await asyncio.gather(*[_post(http, url) for _ in range(30)]) == ["{}"] * 30
            assert gate.peak == 4 and gate.setting_up == 0
            assert gate.opened == 30  # all busy at once: each needed its own connection
            # the same burst again: every call takes a kept-alive connection, none waits
            await asyncio.gather(*[_post(http, url) for _ in range(30)])
            assert gate.opened == 30 and gate.setting_up == 0

    asyncio.run(run())


def test_a_slot_is_held_until_the_server_answers_on_the_connection() -> None:
    async def run() -> None:
        gate = SetupGate(2, answer_s=30)
        release = asyncio.Event()

        async def answer() -> None:
            await release.wait()

        server = _Http(answer)
        async with server as url, _session(gate) as http:
            calls = [asyncio.create_task(_post(http, url)) for _ in range(5)]
            await _until(lambda: server.requests == 2)
            await asyncio.sleep(0.2)
            # connected, even accepted and read, but not answered: the rest wait their turn
            assert gate.setting_up == 2 and gate.opened == 2 and server.accepted == 2
            release.set()
            await asyncio.gather(*calls)
            assert gate.opened == 5 and gate.peak == 2 and gate.setting_up == 0

    asyncio.run(run())


def test_a_server_slow_to_answer_holds_a_slot_for_answer_s_at_most() -> None:
    async def run() -> None:
        gate = SetupGate(1, answer_s=0.05)

        async def answer() -> None:
            await asyncio.sleep(3.0)  # a model thinking before its first byte

        server = _Http(answer)
        async with server as url, _session(gate) as http:
            calls = [asyncio.create_task(_post(http, url)) for _ in range(4)]
            # one after another, 50 ms apart, long before any answer
            await _until(lambda: server.requests == 4, timeout=2.5)
            assert gate.opened == 4
            await asyncio.gather(*calls)
            assert gate.setting_up == 0

    asyncio.run(run())


@pytest.mark.parametrize("how", ["refused", "cancelled"])
def test_a_failed_or_cancelled_set_up_gives_its_slot_back(how: str) -> None:
    async def run() -> None:
        gate = SetupGate(1, answer_s=30)
        never = asyncio.Event()

        async def answer() -> None:
            await never.wait()

        async with _Http(answer) as url, _session(gate) as http:
            if how == "refused":
                server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
                port = server.sockets[0].getsockname()[1]
                server.close()
                await server.wait_closed()
                with pytest.raises(aiohttp.ClientConnectionError):
                    await _post(http, f"http://127.0.0.1:{port}/")
            else:
                call = asyncio.create_task(_post(http, url))
                await _until(lambda: gate.setting_up == 1)
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)
            assert gate.setting_up == 0 and gate.opened == 1
            never.set()
            assert await _post(http, url) == "{}"  # the one slot is free again

    asyncio.run(run())


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_the_sdks_client_runs_on_a_pool_that_carries_the_gate(sdk: str) -> None:
    from codey_server.agent.connections import http_client

    async def run() -> tuple[list[object], SetupGate]:
        module = importlib.import_module(sdk)
        gate = SetupGate(3)

        async def answer() -> None:
            await asyncio.sleep(0.01)

        async with _Http(answer) as url:
            base = url.rsplit("/", 2)[0]
            client = (module.AsyncOpenAI if sdk == "openai" else module.AsyncAnthropic)(
                api_key="k", base_url=base, max_retries=0, http_client=http_client(module, gate))
            replies = await asyncio.gather(*[client.post("/v1/responses", cast_to=object,
                                                         body={}) for _ in range(8)])
            await client.close()
        return replies, gate

    replies, gate = asyncio.run(run())
    assert replies == [{}] * 8
    assert gate.peak == 3 and gate.opened == 8 and gate.setting_up == 0


def test_a_proxy_from_the_environment_is_still_used_and_gated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import openai

    from codey_server.agent.connections import http_client

    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def run() -> tuple[object, SetupGate, _Http]:
        gate = SetupGate(2)

        async def answer() -> None:
            await asyncio.sleep(0)

        proxy = _Http(answer)  # answers whatever it is asked: as a proxy would, from upstream
        async with proxy as url:
            monkeypatch.setenv("HTTP_PROXY", url.rsplit("/", 2)[0])
            client = openai.AsyncOpenAI(api_key="k", base_url="http://model.invalid:1/v1",
                                        max_retries=0, http_client=http_client(openai, gate))
            reply = await client.post("/responses", cast_to=object, body={})
            await client.close()
        return reply, gate, proxy

    reply, gate, proxy = asyncio.run(run())
    assert reply == {} and proxy.requests == 1  # through the proxy: model.invalid is no host
    assert gate.opened == 1 and gate.setting_up == 0


_FIRST_CLIENT = r"""
import asyncio, json, sys, threading

sdk = sys.argv[1]

from codey_server.agent.models import ModelProvider
from codey_server.settings import ProviderConfig


class Key:
    async def token(self):
        return "key"

    async def refresh(self):
        return False


provider = ModelProvider(ProviderConfig(name="p", kind="anthropic" if sdk == "anthropic"
                                        else "chat", base_url="http://127.0.0.1:9/v1"), Key())


async def main():
    provider.prepare()
    await provider._sdk.load()  # the import and its warm-up, in their thread
    loaded = set(sys.modules)
    first = await provider._acquire()  # the first client, built on the loop
    second = provider._sdk.client(sys.modules[sdk], provider.config, "other", provider.gate)
    contexts = {id(c._client._transport.ssl_context) for c in (first.client, second)}
    # the platform for the request headers known: the first request asks no thread for it
    platforms = [c._platform is not None for c in (first.client, second)]
    return sorted(set(sys.modules) - loaded), len(contexts), platforms


print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_the_first_client_imports_nothing_and_shares_the_ssl_context_made_in_the_thread(
        sdk: str) -> None:
    # ... and knows the platform its headers name (looked up in a thread of the loop's
    # executor on the first request otherwise: ~20 ms of the first call after a start)
    # building the first client used to import the HTTP stack and load the CA store on the
    # event loop: half a second and more on a busy machine, on the first model call
    out = subprocess.run([sys.executable, "-c", _FIRST_CLIENT, sdk], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    imported, contexts, platforms = json.loads(out.stdout.strip().splitlines()[-1])
    assert imported == [] and contexts == 1 and platforms == [True, True]
