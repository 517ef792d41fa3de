"""An action in flight and its waiters: every caller gets the one outcome, even a late one."""

from __future__ import annotations

import asyncio

import pytest

from codey_protocol import worker as wk
from codey_server.workers import ActionFailed, _InFlight

READ = wk.ReadFile(action_id="a1", session_id="s", workdir="/w", path="f")
CONTENT = wk.FileContent(path="f", content="hi\n", size=3, total_lines=1)


def test_every_waiter_gets_the_outcome_and_a_later_answer_is_ignored() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        flight = _InFlight("w1", READ, None)
        first, second = loop.create_future(), loop.create_future()
        flight.join(first)
        flight.join(second)
        flight.settle(CONTENT)
        flight.settle(ActionFailed("internal", "a second answer"))
        assert await first == CONTENT and await second == CONTENT

    asyncio.run(main())


def test_a_waiter_joining_after_the_outcome_gets_it_at_once() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        flight = _InFlight("w1", READ, None)
        flight.settle(ActionFailed("not_found", "f: no such file"))
        late = loop.create_future()
        flight.join(late)
        with pytest.raises(ActionFailed) as info:
            await asyncio.wait_for(late, 1)
        assert info.value.code == "not_found"

    asyncio.run(main())


def test_a_cancelled_waiter_does_not_take_the_others_with_it() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        flight = _InFlight("w1", READ, None)
        gone, staying = loop.create_future(), loop.create_future()
        flight.join(gone)
        flight.join(staying)
        gone.cancel()
        flight.settle(CONTENT)
        assert await staying == CONTENT

    asyncio.run(main())
