"""Wire formats: how a conversation becomes a request body, and a stream becomes events.

One module per format — :mod:`.responses` (the OpenAI Responses API), :mod:`.chat` (Chat
Completions: OpenAI-compatible servers and Ollama) and :mod:`.anthropic` (Anthropic's
Messages API). Each gives a :class:`Wire`:

- ``assembler()``: a fresh :class:`Assembler` that turns entries into encoded messages;
- ``body(...)``: the whole request body as JSON bytes, built from already encoded messages
  (no second walk over the history, no SDK transform);
- ``collector()``: a fresh :class:`Collector` fed with each decoded stream event;
- ``skipped_events``: the events the collector ignores, which :mod:`.sse` drops undecoded.

Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from codey_server.agent.conversation import Entry
from codey_server.agent.stream import ModelEvent
from codey_server.agent.tools import ToolSpec

__all__ = ["Assembler", "CallOptions", "Collector", "Loader", "RequestOptions", "Wire", "data_url",
           "wire_for"]

#: a stored file's bytes by content hash (None: not there)
Loader = Callable[[str], bytes | None]


def data_url(mime: str, digest: str, load: Loader | None) -> str | None:
    """An image as a ``data:`` URL for the model, or None when its bytes are gone."""
    import base64

    data = load(digest) if load is not None else None
    if data is None:
        return None
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


class Assembler(Protocol):
    def add(self, entry: Entry) -> None:
        """Take the next entry of the conversation."""

    def at_boundary(self) -> bool:
        """True when every entry added so far is in a complete message."""

    def take(self) -> list[bytes]:
        """The complete messages not taken yet (call only at a boundary)."""

    def finish(self) -> list[bytes]:
        """Every message not taken yet, the last one closed."""


class Collector(Protocol):
    def feed(self, data: object) -> list[ModelEvent]:
        """One decoded stream event (a JSON object) → the model events it carries."""

    def feed_sse(self, event: str | None, data: str) -> list[ModelEvent]:
        """One server-sent event as received: decoded here only if it carries anything."""

    def finish(self) -> list[ModelEvent]:
        """The stream ended cleanly: the last events (usage, buffered calls, Finished).
        Raises ModelError(code="stream_cut") when the answer is not complete."""


class RequestOptions(Protocol):
    """What a body needs besides the conversation (see :class:`CallOptions`)."""

    @property
    def reasoning_summary(self) -> bool: ...

    @property
    def effort(self) -> str | None: ...

    #: the answer's token limit (None: the model's known maximum); Anthropic needs one
    @property
    def max_output_tokens(self) -> int | None: ...

    #: Anthropic's extended thinking: its token budget (None: no thinking, unless ``effort``)
    @property
    def thinking_budget(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class CallOptions:
    """One call's options: the provider's (``reasoning_summary``, ``max_output_tokens``,
    ``thinking_budget``) and the session's (its reasoning ``effort``: None leaves it to the
    model, or to the provider's thinking budget)."""

    reasoning_summary: bool = False
    effort: str | None = None
    max_output_tokens: int | None = None
    thinking_budget: int | None = None


class Wire(Protocol):
    name: str
    path: str
    #: server-sent events whose data the collector reads nothing from: the stream's decoder
    #: drops them undecoded (see :mod:`.sse`)
    skipped_events: frozenset[str]

    def assembler(self, load: Loader | None = None) -> Assembler:
        """``load(hash)`` gives an image's bytes (None: it is gone)."""

    def collector(self) -> Collector: ...

    def body(self, *, model: str, instructions: str, messages: list[bytes], tools: bytes,
             session_id: str | None, options: RequestOptions) -> bytes: ...

    def encode_tools(self, tools: list[ToolSpec]) -> bytes: ...


def wire_for(kind: str) -> Wire:
    """The wire of a provider kind: ``responses``, ``anthropic``, or ``chat`` (also for
    ``ollama``)."""
    from codey_server.agent.wire import anthropic, chat, responses

    if kind == "responses":
        return responses.WIRE
    if kind == "anthropic":
        return anthropic.WIRE
    return chat.WIRE
