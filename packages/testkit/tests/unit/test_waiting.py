"""codey_testkit.waiting: the value comes back, a timeout says what was waited for and what
was last seen, retried errors are looked past and named, others end the wait."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from codey_testkit.waiting import Deadline, WaitTimedOut, until, wait_until


def test_wait_until_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "three", interval=0) == "three"


def test_ok_tests_the_value_and_the_timeout_shows_the_last_one() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter), ok=lambda n: n == 2, interval=0) == 2
    with pytest.raises(WaitTimedOut, match=r"after 0.05 s waiting for ten; last seen: 'nine'"):
        wait_until(lambda: "nine", ok=lambda s: s == "ten", timeout=0.05, what="ten")
    with pytest.raises(WaitTimedOut, match=r"last seen: 9$"):
        wait_until(lambda: "x" * 9, ok=lambda s: len(s) > 9, show=len, timeout=0.01)


def test_a_yes_no_check_does_not_say_its_last_false() -> None:
    with pytest.raises(WaitTimedOut) as timed_out:
        wait_until(lambda: False, timeout=0.01, what="nothing")
    assert str(timed_out.value) == "timed out after 0.01 s waiting for nothing"
    assert isinstance(timed_out.value, AssertionError)  # pytest: a failure, not an error


def test_a_long_value_is_cut_to_its_end() -> None:
    with pytest.raises(WaitTimedOut) as timed_out:
        wait_until(lambda: "a" * 5000 + "END", ok=lambda _: False, show=str, timeout=0.01)
    assert str(timed_out.value).endswith("a" * 1997 + "END")
    assert len(str(timed_out.value)) < 2100


def test_retried_errors_are_looked_past_and_named_and_others_end_the_wait() -> None:
    tries = itertools.count()

    def flaky() -> str:
        if next(tries) < 2:
            raise ConnectionError("restarting")
        return "up"

    assert wait_until(flaky, retry=ConnectionError, interval=0) == "up"
    with pytest.raises(WaitTimedOut, match=r"last error: ConnectionError\('down'\)") as err:
        wait_until(lambda: (_ for _ in ()).throw(ConnectionError("down")),
                   retry=(ConnectionError, KeyError), timeout=0.01)
    assert isinstance(err.value.__cause__, ConnectionError)
    with pytest.raises(ValueError):
        wait_until(lambda: int("x"), retry=ConnectionError)


def test_until_awaits_a_check_that_returns_an_awaitable() -> None:
    async def main() -> None:
        reads = itertools.count()

        async def read() -> int:
            await asyncio.sleep(0)
            return next(reads)

        assert await until(read, ok=lambda n: n >= 3, interval=0) == 3
        assert await until(lambda: "plain") == "plain"
        with pytest.raises(WaitTimedOut, match=r"waiting for four; last seen: 1$"):
            await until(lambda: asyncio.sleep(0, 1), ok=lambda n: n == 4, timeout=0.02,
                        what="four")

    asyncio.run(main())


def test_deadline_counts_down_then_says_what_and_the_last_seen() -> None:
    deadline = Deadline(10, what="seq 5")
    assert 9 < deadline.left() <= 10 and not deadline.passed
    late = Deadline(0, what="seq 5")
    assert late.passed
    with pytest.raises(WaitTimedOut, match=r"after 0 s waiting for seq 5; last seen: seq 3$"):
        late.left(last="seq 3")
    with pytest.raises(WaitTimedOut, match=r"waiting for seq 5$"):
        late.left()
