"""Token refresh without a provider: failures back off, and a refresh never undoes a logout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from codey_server.core.engine import Engine
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES
from codey_server.providers.oauth import OAuthFailed, TokenSet
from codey_server.providers.service import REFRESH_BACKOFF_MAX_S, AuthService
from codey_server.providers.store import Credential
from codey_server.settings import ProviderConfig, Settings


class FakeProvider:
    """Stands in for ``OAuthProvider``: ``refresh`` fails while ``fail`` is set, and waits for
    ``gate`` when one is given."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def refresh(self, refresh_token: str) -> TokenSet:
        self.calls += 1
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OAuthFailed("unreachable", "cannot reach the provider: ConnectError")
        return TokenSet(access_token=f"at-{self.calls}", refresh_token="rt-new",
                        expires_at=time.time() + 3600)

    async def discovery(self) -> Any:
        return SimpleNamespace(revocation_endpoint=None)


async def _service(tmp_path: Path) -> tuple[AuthService, FakeProvider]:
    engine = Engine(MemoryEventLog(), RULES)
    await engine.start()
    config = ProviderConfig(name="p", base_url="http://127.0.0.1:1", auth="oauth",
                            issuer="http://127.0.0.1:1", client_id="c")
    service = AuthService(Settings(data_dir=tmp_path, providers=[config]), engine)
    fake = FakeProvider()
    service._oauth["p"] = fake  # type: ignore[assignment]
    # due for refresh (inside the 60 s margin) but still usable
    await service.store.put("p", Credential(method="oauth", access_token="at-old",
                                            refresh_token="rt-old", expires_at=time.time() + 30,
                                            obtained_at=time.time() - 3600))
    return service, fake


def test_failed_refreshes_back_off_doubling_to_five_minutes_and_reset_on_success(
        tmp_path: Path) -> None:
    async def main() -> None:
        service, fake = await _service(tmp_path)
        fake.fail = True
        for _ in range(3):  # the old token still works; only the first call reaches out
            assert await service.token_for("p") == "at-old"
        assert fake.calls == 1
        delays = [service._backoff["p"]]
        for _ in range(10):
            service._retry_at["p"] = 0.0  # as if the backoff had passed
            await service.token_for("p")
            delays.append(service._backoff["p"])
        assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
        assert delays[-1] == REFRESH_BACKOFF_MAX_S
        assert fake.calls == 11
        fake.fail = False
        service._retry_at["p"] = 0.0
        assert await service.token_for("p") == "at-12"
        assert "p" not in service._backoff and "p" not in service._retry_at

    asyncio.run(main())


def test_a_logout_during_a_refresh_is_not_undone(tmp_path: Path) -> None:
    async def main() -> None:
        service, fake = await _service(tmp_path)
        fake.gate = asyncio.Event()
        refreshing = asyncio.create_task(service.token_for("p"))
        await asyncio.wait_for(fake.entered.wait(), 5)
        await service.logout("p")
        fake.gate.set()
        await refreshing
        assert await service.store.get("p") is None
        assert (await service.status())[0].state == "logged_out"

    asyncio.run(main())


def test_an_api_key_set_during_a_failing_refresh_is_kept(tmp_path: Path) -> None:
    async def main() -> None:
        service, fake = await _service(tmp_path)
        fake.gate, fake.fail = asyncio.Event(), True
        refreshing = asyncio.create_task(service.token_for("p"))
        await asyncio.wait_for(fake.entered.wait(), 5)
        await service.set_api_key("p", "sk-new-key")
        fake.gate.set()
        await refreshing
        cred = await service.store.get("p")
        assert cred is not None and cred.method == "api_key"
        assert await service.token_for("p") == "sk-new-key"
        assert "p" not in service._backoff  # the failure was about a credential now gone

    asyncio.run(main())


def test_a_rejected_token_is_refreshed_at_once_even_when_not_due(tmp_path: Path) -> None:
    async def main() -> None:
        service, fake = await _service(tmp_path)
        cred = await service.store.get("p")
        assert cred is not None
        cred.expires_at = time.time() + 3000  # far from due: the provider said 401 anyway
        assert await service.token_for("p") == "at-old" and fake.calls == 0
        assert await service.refresh_rejected("p") is True
        assert fake.calls == 1 and await service.token_for("p") == "at-1"
        fake.fail = True  # a refresh that fails: nothing new to try
        assert await service.refresh_rejected("p") is False
        await service.store.remove("p")
        assert await service.refresh_rejected("p") is False  # logged out: nothing to refresh

    asyncio.run(main())
