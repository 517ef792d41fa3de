"""What a worker's executor streams, collected for a test: an ``on_output`` callback that
keeps every call, and a way to run one awaitable from a synchronous test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["Sink", "arun"]

T = TypeVar("T")


def arun(awaitable: Awaitable[T]) -> T:
    """Run ``awaitable`` (a coroutine, or a future made inside) on a fresh event loop."""
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


class Sink:
    """An ``on_output(stream, text)`` callback that collects its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, stream: str, text: str) -> None:
        self.calls.append((stream, text))

    def text(self, stream: str = "stdout") -> str:
        """Everything written to ``stream``, joined."""
        return "".join(t for s, t in self.calls if s == stream)
