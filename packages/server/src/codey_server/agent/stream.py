"""What one streamed model call yields, whatever the wire format: :data:`ModelEvent` values.

Each wire module (:mod:`codey_server.agent.wire`) turns its provider's stream into these; the
turn loop consumes them. Order: any number of deltas, tool calls and notes, then
:class:`Usage` (once, at the end, when the provider reports it) and exactly one
:class:`Finished`. A stream that ends without its terminal event raises
:class:`~codey_server.agent.errors.ModelError` with code ``stream_cut`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Finished",
    "ModelEvent",
    "RateLimits",
    "ReasoningDelta",
    "ReasoningDone",
    "RefusalDelta",
    "Retrying",
    "TextDelta",
    "ToolCallRequested",
    "Usage",
]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class RefusalDelta:
    """The model declines; the text says why (Responses ``refusal`` parts, Chat ``refusal``)."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDone:
    """A finished reasoning item; ``encrypted_content`` goes back to the model next call."""

    reasoning_id: str | None
    encrypted_content: str | None


@dataclass(frozen=True, slots=True)
class ToolCallRequested:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    #: of ``input_tokens``: read from the provider's prompt cache, and written to it
    cached_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RateLimits:
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Retrying:
    attempt: int
    delay_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Queued:
    """The call waits in its provider's rate-limit window (``reason``: ``queued for rate
    limit (resets in 42 s)``); ``reason`` "": it goes now."""

    reason: str


IncompleteReason = Literal["max_output_tokens", "content_filter", "other"]


@dataclass(frozen=True, slots=True)
class Finished:
    """The answer is complete. ``incomplete`` says why it stopped early, if it did."""

    incomplete: IncompleteReason | None = None
    detail: str = ""


ModelEvent = (
    TextDelta | RefusalDelta | ReasoningDelta | ReasoningDone | ToolCallRequested | Usage
    | RateLimits | Retrying | Finished | Queued
)
