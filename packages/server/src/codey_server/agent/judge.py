"""The reviewer's one model call: :func:`judge` ``(provider, model, rubric, data) -> Verdict``
(the pure parts — the body, the data block, the verdict's parsing — are
:mod:`~codey_server.agent.reviewer`'s). Reusable for any "judge this evidence against this
condition"."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from codey_server.agent.errors import ModelError
from codey_server.agent.reviewer import (
    JUDGE_ACTION,
    ReviewFailed,
    Verdict,
    build_body,
    parse_verdict,
)
from codey_server.agent.stream import ModelEvent, RefusalDelta, TextDelta
from codey_server.agent.wire import Wire

__all__ = ["judge"]


class Streams(Protocol):
    """What :func:`judge` needs of a provider (``ModelProvider``)."""

    wire: Wire

    def stream(self, *, model: str, body: bytes) -> Any: ...


async def judge(provider: Streams | None, model: str, rubric: str, data: Any, *,
                timeout: float, ask: str = JUDGE_ACTION) -> Verdict:
    """Ask ``model`` of ``provider`` to judge ``data`` by ``rubric`` (``ask``: what the user
    message asks, before the data block); its typed verdict.
    Raises :class:`ReviewFailed` on anything else: no provider, a model error, no answer
    within ``timeout`` seconds, an answer that is not exactly one verdict."""
    if provider is None:
        raise ReviewFailed("the reviewer's provider is not configured")
    body = build_body(provider.wire, model, rubric, data, ask)
    parts: list[str] = []

    async def read() -> None:
        part: ModelEvent
        async for part in provider.stream(model=model, body=body):
            if isinstance(part, TextDelta):
                parts.append(part.text)
            elif isinstance(part, RefusalDelta):
                raise ReviewFailed(f"the reviewer refused: {part.text}")

    try:
        await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise ReviewFailed(f"the reviewer did not answer within {timeout:g} s") from None
    except ModelError as err:
        raise ReviewFailed(f"the reviewer's model failed: {err.message}") from None
    return parse_verdict("".join(parts))
