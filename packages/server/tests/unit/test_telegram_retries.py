"""The Telegram bot's three retries (tenacity: :data:`~codey_server.channels.telegram.
CONNECT_RETRYING` and :data:`~codey_server.channels.telegram.SEND_RETRYING`): reaching
Telegram, polling it, sending to it. Fake bots; the channel's policies get a sleep that
records each delay instead of waiting it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from telegram.error import Conflict, InvalidToken, NetworkError

from codey_server.channels.telegram import TelegramChannel
from codey_server.core.engine import Engine
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES
from codey_server.settings import Settings


async def _channel(tmp_path: Path) -> tuple[TelegramChannel, list[float]]:
    engine = Engine(MemoryEventLog(), RULES)
    await engine.start()
    channel = TelegramChannel(Settings(data_dir=tmp_path), engine)
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    channel.connect_retrying = channel.connect_retrying.copy(sleep=sleep)
    channel.send_retrying = channel.send_retrying.copy(sleep=sleep)
    return channel, slept


class FakeBot:
    """Answers each call with the next of ``answers``: an exception is raised, anything else
    returned; and notes the channel's error as each call starts."""

    id = 1
    username = "codey_test_bot"

    def __init__(self, channel: TelegramChannel, answers: list[Any]) -> None:
        self.channel = channel
        self.answers: Iterator[Any] = iter(answers)
        self.errors: list[str | None] = []

    async def _next(self) -> Any:
        self.errors.append(self.channel._error)
        answer = next(self.answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def initialize(self) -> None:
        await self._next()

    async def get_updates(self, **_: Any) -> Any:
        return await self._next()

    async def delete_webhook(self) -> None:
        pass


def test_reaching_telegram_is_tried_again_1_s_doubling(tmp_path: Path) -> None:
    async def main() -> None:
        channel, slept = await _channel(tmp_path)
        down = NetworkError("no route")
        bot = FakeBot(channel, [down] * 7 + [None])
        assert await channel._connect(bot) is True
        assert slept == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
        assert bot.errors[-1] == "cannot reach Telegram: no route"

    asyncio.run(main())


def test_a_refused_token_is_not_tried_again(tmp_path: Path) -> None:
    async def main() -> None:
        channel, slept = await _channel(tmp_path)
        bot = FakeBot(channel, [NetworkError("down"), InvalidToken()])
        assert await channel._connect(bot) is False
        assert slept == [1.0]
        assert (channel._state, channel._error) == ("error", "Telegram refused the token")

    asyncio.run(main())


def test_polling_backs_off_on_errors_and_starts_again_after_a_poll_that_went_through(
        tmp_path: Path) -> None:
    async def main() -> None:
        channel, slept = await _channel(tmp_path)
        bot = FakeBot(channel, [Conflict("terminated by other getUpdates request"),
                                NetworkError("timed out"), NetworkError("timed out"), [],
                                NetworkError("timed out"), [], InvalidToken()])
        await channel._poll(bot)
        assert slept == [1.0, 2.0, 4.0, 1.0]
        # the error the UI shows while it waits; cleared by a poll that went through
        assert bot.errors == [None, "another client takes this bot's updates",
                              "polling failed: timed out", "polling failed: timed out", None,
                              "polling failed: timed out", None]
        assert (channel._state, channel._error) == ("error", "Telegram refused the token")

    asyncio.run(main())


def test_sending_is_tried_again_every_5_s_until_it_goes_through(tmp_path: Path) -> None:
    async def main() -> None:
        channel, slept = await _channel(tmp_path)
        syncs: list[int] = []
        done = asyncio.Event()

        async def sync() -> None:
            syncs.append(len(syncs))
            if len(syncs) <= 3:
                raise NetworkError("unreachable")
            done.set()

        channel._sync = sync  # type: ignore[method-assign]
        sending = asyncio.create_task(channel._send_loop())
        await asyncio.wait_for(done.wait(), 10)
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        assert slept == [5.0, 5.0, 5.0]
        assert len(syncs) == 4

    asyncio.run(main())
