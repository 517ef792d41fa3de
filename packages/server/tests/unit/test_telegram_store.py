"""The Telegram channel's store without a server: the pairing code's rules (used once,
replaced by a new one, expired, dead after too many wrong tries), what is kept of a code,
the token file, and the PostgreSQL backend's refusal without a secret key."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from codey_server.channels.telegram_store import (
    FileTelegramStore,
    PgTelegramStore,
    code_digest,
    normalize_code,
)
from codey_server.cluster.crypto import KEY_ENV, SecretKey
from codey_server.cluster.errors import SecretKeyError

TOKEN = "123456789:AAtestTOKENdoNotLog-xyz_0123456789"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _store(tmp_path: Path) -> tuple[FileTelegramStore, _Clock]:
    clock = _Clock()
    return FileTelegramStore(tmp_path / "telegram.json", clock=clock), clock


def test_a_code_is_used_once_and_typed_loosely(tmp_path: Path) -> None:
    async def main() -> None:
        store, _ = _store(tmp_path)
        assert await store.take_code("ABCDEFGH", 5) is False  # none yet
        assert await store.new_code("ABCDEFGH", 600) == 1600.0
        assert await store.take_code("abcd-efgh", 5) is True
        assert await store.take_code("ABCDEFGH", 5) is False  # used

    asyncio.run(main())


def test_a_new_code_replaces_the_old_and_resets_the_tries(tmp_path: Path) -> None:
    async def main() -> None:
        store, _ = _store(tmp_path)
        await store.new_code("AAAAAAAA", 600)
        for _ in range(4):
            assert await store.take_code("WRONGONE", 5) is False
        await store.new_code("BBBBBBBB", 600)
        assert await store.take_code("AAAAAAAA", 5) is False  # the old one stopped working
        for _ in range(3):
            assert await store.take_code("WRONGONE", 5) is False
        assert await store.take_code("BBBBBBBB", 5) is True  # 4 wrong tries in all: alive

    asyncio.run(main())


def test_the_last_wrong_try_ends_the_code_and_so_does_its_expiry(tmp_path: Path) -> None:
    async def main() -> None:
        store, clock = _store(tmp_path)
        await store.new_code("ABCDEFGH", 600)
        for _ in range(5):
            assert await store.take_code("WRONGONE", 5) is False
        assert await store.take_code("ABCDEFGH", 5) is False  # guessed at: dead
        await store.new_code("ABCDEFGH", 600)
        clock.now += 600
        assert await store.take_code("ABCDEFGH", 5) is False

    asyncio.run(main())


def test_only_a_digest_of_the_code_is_kept_keyed_when_there_is_a_key(tmp_path: Path) -> None:
    key = SecretKey(bytes(range(32)))
    assert normalize_code(" abcd-efgh ") == "ABCDEFGH"
    plain, keyed = code_digest("abcd-efgh"), code_digest("ABCDEFGH", key)
    assert plain == code_digest("ABCDEFGH") and "ABCDEFGH" not in plain
    assert keyed != plain and keyed == code_digest("abcd-efgh", key)
    assert keyed != code_digest("ABCDEFGH", SecretKey(bytes(32)))  # useless without the key
    store, _ = _store(tmp_path)

    async def main() -> None:
        await store.new_code("ABCDEFGH", 600)

    asyncio.run(main())
    assert "ABCDEFGH" not in repr(vars(store))


def test_the_token_file_is_private_and_a_change_wakes_the_watchers(tmp_path: Path) -> None:
    async def main() -> None:
        store, _ = _store(tmp_path)
        assert await store.token() is None
        changed = store.watch()
        await store.put_token(TOKEN)
        assert changed.is_set() and not store.watch().is_set()
        assert await store.token() == TOKEN
        assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
        await store.remove_token()
        await store.remove_token()  # none: fine
        assert await store.token() is None and not store.path.exists()
        store.path.write_text("not json")
        assert await store.token() is None

    asyncio.run(main())


def test_among_replicas_without_a_key_a_token_cannot_be_pasted() -> None:
    class _Db:
        def subscribe(self, *_: object) -> None: ...

        def notify_sql(self, *_: object) -> str:
            return ""

        async def execute(self, *_: object) -> list[object]:
            raise AssertionError("nothing may be written")

    store = PgTelegramStore(_Db(), None)  # type: ignore[arg-type]
    with pytest.raises(SecretKeyError) as err:
        asyncio.run(store.put_token(TOKEN))
    assert err.value.code == "not_configured" and KEY_ENV in err.value.message
    assert "every replica" in err.value.message
