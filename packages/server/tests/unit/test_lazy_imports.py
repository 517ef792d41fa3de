"""A feature that is not used is not imported (issue 21, item 9): the server starts without the
libraries of its optional features, and loads each one when it is configured or first used.

Each check runs in a fresh interpreter: it imports ``codey_server.cli`` (what ``codey-server
serve`` imports), builds the app with default settings, runs the lifespan (start, one request,
stop) and reports which of the optional libraries are in ``sys.modules``. Requests go straight
to the ASGI app: Litestar's test client would import httpx itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: loaded only by the feature that needs it (where, in the comment)
OPTIONAL = (
    "telegram",  # channels/telegram.py: a bot token configured
    "mcp",  # mcp/server.py: the first request to /mcp
    "acp",  # never in the server: the worker runs ACP agents (agent/acp.py reads their updates)
    "psycopg", "psycopg_pool",  # eventlog/postgres.py, cluster/: database_url
    "authlib", "joserfc",  # providers/oauth.py: an OAuth login or refresh
    "httpx",  # providers/, agent/models.py (Ollama's model list): a login, an Ollama provider
    "openai", "aiohttp",  # agent/models.py: the first model call
    "anthropic", "httpx2",  # agent/models.py: the first call to an Anthropic provider
    "prometheus_client",  # metrics/exposition.py: the first scrape of /metrics
    "croniter",  # schedules/rules.py: the first schedule
    "segno",  # blobs/routes.py: the first QR code
    "cryptography",  # workers/pairing.py: the first worker or pair request
    "pydantic", "attrs",  # Litestar's plugins for them (app.py leaves them out)
    "rich", "pygments",  # httpx's command line, which `import httpx` loads
)

_PROBE = r"""
import asyncio, json, os, sys, tempfile
from pathlib import Path

import codey_server.cli  # noqa: F401  what `codey-server serve` imports
from codey_server.app import create_app
from codey_server.http.access import load_or_create_token
from codey_server.settings import Settings, TelegramConfig

OPTIONAL, case = json.loads(sys.argv[1]), sys.argv[2]
data = Path(tempfile.mkdtemp())
settings = Settings(data_dir=data)
token = load_or_create_token(data)
if case == "telegram":
    # a well-formed token and a Bot API nobody listens on: the bot starts and fails to connect
    os.environ["CODEY_LAZY_TEST_TOKEN"] = "123456:" + "A" * 35
    settings = Settings(data_dir=data, telegram=TelegramConfig(
        token_env="CODEY_LAZY_TEST_TOKEN", api_base="http://127.0.0.1:9"))
app = create_app(settings)


async def get(path, query=b"", headers=()):
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": query, "root_path": "", "client": ("127.0.0.1", 40000),
             "server": ("127.0.0.1", 8765),
             "headers": [(b"host", b"127.0.0.1:8765"), *headers]}
    sent, status = [{"type": "http.request", "body": b"", "more_body": False}], []

    async def receive():
        return sent.pop() if sent else {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


async def main():
    statuses = {}
    async with app.lifespan():
        statuses["health"] = await get("/api/health")
        if case == "metrics":
            statuses["metrics"] = await get(
                "/metrics", headers=[(b"authorization", f"Bearer {token}".encode())])
        if case == "telegram":
            for _ in range(500):  # the bot's task imports the library first thing
                if "telegram" in sys.modules:
                    break
                await asyncio.sleep(0.01)
    return statuses


statuses = asyncio.run(main())
print(json.dumps({"statuses": statuses,
                  "loaded": sorted(m for m in OPTIONAL if m in sys.modules)}))
"""


def _probe(case: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(OPTIONAL), case],
                         capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_bare_server_starts_without_any_optional_library() -> None:
    result = _probe("bare")
    assert result["statuses"] == {"health": 200}
    assert result["loaded"] == []


def test_scraping_metrics_loads_prometheus_client_and_nothing_else() -> None:
    result = _probe("metrics")
    assert result["statuses"] == {"health": 200, "metrics": 200}
    assert result["loaded"] == ["prometheus_client"]


def test_a_configured_telegram_bot_loads_the_telegram_library() -> None:
    result = _probe("telegram")
    assert result["statuses"] == {"health": 200}
    assert "telegram" in result["loaded"]  # (and httpx, its transport)


_SDK_PROBE = r"""
import asyncio, json, sys, threading

sdk, kind, client_class = sys.argv[1:4]

from codey_server.agent.models import ModelProvider
from codey_server.settings import ProviderConfig

importers = []


class Watch:  # asked first where to find each module: says on which thread openai is loaded
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == sdk:
            importers.append(threading.current_thread() is threading.main_thread())
        return None


sys.meta_path.insert(0, Watch)


class Key:
    async def token(self):
        return "key"

    async def refresh(self):
        return False


provider = ModelProvider(ProviderConfig(name="p", kind=kind, base_url="http://127.0.0.1:9/v1",
                                        models=["m"], max_retries=0), Key())


async def main():
    async def call():
        async for _ in provider.stream(model="m", body=b"{}"):
            pass

    task = asyncio.create_task(call())
    for _ in range(3000):  # the call fails to connect once the SDK is loaded
        if task.done() or (sdk in sys.modules and hasattr(sys.modules[sdk], client_class)):
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


asyncio.run(main())
print(json.dumps(importers))
"""


@pytest.mark.parametrize(("sdk", "kind", "client_class"), [
    ("openai", "chat", "AsyncOpenAI"), ("anthropic", "anthropic", "AsyncAnthropic")])
def test_the_first_model_call_loads_the_sdk_off_the_event_loop(sdk: str, kind: str,
                                                                client_class: str) -> None:
    # importing an SDK (pydantic, aiohttp, its types) is about a second of CPU, several on a
    # busy machine: on the loop it would stall every socket and heartbeat of the server, and
    # among replicas the lease renewals (6 s leases, renewed every 1.5 s)
    out = subprocess.run([sys.executable, "-c", _SDK_PROBE, sdk, kind, client_class],
                         capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    on_main_thread: list[bool] = json.loads(out.stdout.strip().splitlines()[-1])
    assert on_main_thread == [False]


_START_PROBE = r"""
import asyncio, json, sys, tempfile, threading
from pathlib import Path

sdk, kind, client_class = sys.argv[1:4]
importers = []


class Watch:  # asked first where to find each module: says on which thread the SDK is loaded
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == sdk:
            importers.append(threading.current_thread() is threading.main_thread())
        return None


sys.meta_path.insert(0, Watch)

from codey_server.app import create_app
from codey_server.http.access import load_or_create_token
from codey_server.settings import ProviderConfig, Settings

data = Path(tempfile.mkdtemp())
load_or_create_token(data)
# nobody listens there: a model call would fail, and none is made
provider = ProviderConfig(name="p", kind=kind, base_url="http://127.0.0.1:9/v1", models=["m"])
app = create_app(Settings(data_dir=data, providers=[provider]))


async def main():
    async with app.lifespan():
        for _ in range(6000):
            module = sys.modules.get(sdk)
            if module is not None and hasattr(module, client_class):
                return True
            await asyncio.sleep(0.01)
    return False


print(json.dumps({"loaded": asyncio.run(main()), "importers": importers}))
"""


@pytest.mark.parametrize(("sdk", "kind", "client_class"), [
    ("openai", "responses", "AsyncOpenAI"), ("anthropic", "anthropic", "AsyncAnthropic")])
def test_a_configured_providers_sdk_loads_at_the_start_in_a_thread(sdk: str, kind: str,
                                                                   client_class: str) -> None:
    # issue 34: loaded on the first model call, the SDK made every session started meanwhile
    # wait for it (seconds), and then call the model all at once
    out = subprocess.run([sys.executable, "-c", _START_PROBE, sdk, kind, client_class],
                         capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"loaded": True, "importers": [False]}
