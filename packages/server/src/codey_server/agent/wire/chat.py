"""Chat Completions (any OpenAI-compatible server, and Ollama): bodies and stream collection.

Tool calls of one answer are one assistant message with ``tool_calls`` (its text, if any, as
``content``), followed by one ``tool`` message per result. A tool message holds text only, so
the images of those results (``view_image``) follow them in one ``user`` message, each
``image_url`` a data URL named by its call, as Codex does. Reasoning is not sent back: the
format has no place for it.

The collector accepts the shapes compatible servers send: text, refusals and reasoning
(``reasoning_content`` or ``reasoning``) as deltas; tool calls whose name and arguments come
in many chunks, with or without ``index``, or whole in one chunk, arguments even as an object;
several calls; ``finish_reason`` ``length`` or ``content_filter``; usage only in the last chunk
(or cumulative in every chunk: only the last counts); ``message`` instead of ``delta``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from codey_server.agent.conversation import (
    SUMMARY_PREFIX,
    AssistantText,
    Entry,
    ReasoningEntry,
    SummaryEntry,
    ToolCallEntry,
    ToolResultEntry,
    UserText,
)
from codey_server.agent.stream import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallRequested,
    Usage,
)
from codey_server.agent.tools import ToolSpec
from codey_server.agent.wire import Loader, RequestOptions, data_url
from codey_server.agent.wire.common import decode_event, int_field
from codey_server.agent.wire.errors import error_from_body

__all__ = ["WIRE", "ChatAssembler", "ChatCollector", "ChatWire"]

_encode = msgspec.json.encode


class ChatAssembler:
    """Entries → messages. An assistant message stays open while its tool calls arrive."""

    __slots__ = ("_calls", "_content", "_images", "_load", "_open", "_out")

    def __init__(self, load: Loader | None = None) -> None:
        self._load = load
        self._out: list[bytes] = []
        self._open = False
        self._content: bytes = b"null"
        self._calls: list[bytes] = []
        #: images of the tool results just added: (call id, mime, hash)
        self._images: list[tuple[str, str, str]] = []

    def _flush_images(self) -> None:
        """The images of the last results, in one user message after their tool messages."""
        parts: list[dict[str, Any]] = []
        for call_id, mime, digest in self._images:
            url = data_url(mime, digest, self._load)
            parts.append({"type": "text", "text": f"The image from tool call {call_id}:"})
            parts.append({"type": "image_url", "image_url": {"url": url}} if url else
                         {"type": "text", "text": "[an image that is no longer stored]"})
        self._images = []
        self._out.append(_encode({"role": "user", "content": parts}))

    def _close(self) -> None:
        if self._open:
            msg = b'{"role":"assistant","content":' + self._content
            if self._calls:
                msg += b',"tool_calls":[' + b",".join(self._calls) + b"]"
            self._out.append(msg + b"}")
            self._open = False
            self._content = b"null"
            self._calls = []

    def add(self, entry: Entry) -> None:
        if self._images and not isinstance(entry, ToolResultEntry):
            self._flush_images()
        if isinstance(entry, ToolCallEntry):
            if not self._open:
                self._open = True
            self._calls.append(_encode({"id": entry.call_id, "type": "function", "function": {
                "name": entry.name, "arguments": entry.arguments}}))
            return
        if isinstance(entry, ReasoningEntry):
            return
        self._close()
        if isinstance(entry, AssistantText):
            self._open = True
            self._content = _encode(entry.text)
        elif isinstance(entry, UserText):
            if not entry.images:
                self._out.append(_encode({"role": "user", "content": entry.text}))
                return
            parts: list[dict[str, Any]] = [{"type": "text", "text": entry.text}]
            for mime, digest in entry.images:
                url = data_url(mime, digest, self._load)
                parts.append({"type": "image_url", "image_url": {"url": url}} if url else
                             {"type": "text", "text": "[an image that is no longer stored]"})
            self._out.append(_encode({"role": "user", "content": parts}))
        elif isinstance(entry, ToolResultEntry):
            self._out.append(_encode({"role": "tool", "tool_call_id": entry.call_id,
                                      "content": entry.output}))
            self._images += [(entry.call_id, mime, digest) for mime, digest in entry.images]
        else:
            assert isinstance(entry, SummaryEntry)
            self._out.append(_encode({"role": "user", "content": SUMMARY_PREFIX + entry.text}))

    def at_boundary(self) -> bool:
        return not self._open and not self._images

    def take(self) -> list[bytes]:
        out, self._out = self._out, []
        return out

    def finish(self) -> list[bytes]:
        self._close()
        if self._images:
            self._flush_images()
        return self.take()


class _Call:
    __slots__ = ("arguments", "call_id", "name")

    def __init__(self) -> None:
        self.call_id = ""
        self.name = ""
        self.arguments = ""


class ChatCollector:
    def __init__(self) -> None:
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._by_id: dict[str, _Call] = {}
        self._finish: str | None = None
        self._usage: Usage | None = None

    def feed_sse(self, event: str | None, data: str) -> list[ModelEvent]:
        return self.feed(decode_event(data))

    def feed(self, data: object) -> list[ModelEvent]:
        if not isinstance(data, dict):
            return []
        if data.get("error"):  # an error in the stream, as some servers send
            raise error_from_body(data, None, prefix="the model failed")
        usage = data.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        out: list[ModelEvent] = []
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) not in (0, None):
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if isinstance(delta, dict):
                out += self._delta(delta)
            if choice.get("finish_reason"):
                self._finish = str(choice["finish_reason"])
        return out

    def _delta(self, delta: dict[str, Any]) -> list[ModelEvent]:
        out: list[ModelEvent] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, list):  # content parts, as some servers send
            content = "".join(p.get("text", "") for p in content
                              if isinstance(p, dict) and isinstance(p.get("text"), str))
        if isinstance(content, str) and content:
            out.append(TextDelta(content))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            out.append(RefusalDelta(refusal))
        for position, raw in enumerate(delta.get("tool_calls") or []):
            if isinstance(raw, dict):
                self._call_delta(raw, position)
        return out

    def _slot(self, raw: dict[str, Any], position: int) -> _Call:
        index = raw.get("index")
        call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else None
        if isinstance(index, int) and not isinstance(index, bool):
            slot = self._by_index.get(index)
            if slot is None:
                slot = self._by_index[index] = _Call()
                self._calls.append(slot)
            return slot
        # no index: an id we know continues that call; a new id (or a name with no id, or a
        # second call in this chunk) starts one; otherwise it continues the last call
        if call_id is not None and call_id in self._by_id:
            return self._by_id[call_id]
        function = raw.get("function") or {}
        if call_id is not None or not self._calls or position > 0 or \
                (isinstance(function, dict) and function.get("name") and self._calls[-1].name):
            slot = _Call()
            self._calls.append(slot)
            return slot
        return self._calls[-1]

    def _call_delta(self, raw: dict[str, Any], position: int) -> None:
        slot = self._slot(raw, position)
        call_id = raw.get("id")
        if isinstance(call_id, str) and call_id and not slot.call_id:
            slot.call_id = call_id
            self._by_id[call_id] = slot
        function = raw.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and name != slot.name:
            slot.name += name  # pieces of a name add up; a repeated whole name does not
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a whole object, as some servers send
            slot.arguments = _encode(arguments).decode()
        elif isinstance(arguments, str):
            slot.arguments += arguments

    def finish(self) -> list[ModelEvent]:
        # A chat stream that ends cleanly is complete even without a finish_reason (some
        # servers omit it); a cut connection surfaces as a transport error, not here.
        out: list[ModelEvent] = [
            ToolCallRequested(c.call_id or f"call_{n}", c.name, c.arguments or "{}")
            for n, c in enumerate(self._calls)]
        if self._usage is not None:
            out.append(self._usage)
        reason = self._finish
        if reason == "length":
            out.append(Finished("max_output_tokens", reason))
        elif reason == "content_filter":
            out.append(Finished("content_filter", reason))
        else:
            out.append(Finished())
        return out


def _usage(usage: dict[str, Any]) -> Usage:
    details = usage.get("completion_tokens_details") or {}
    prompt = usage.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=int_field(usage.get("prompt_tokens")),
        output_tokens=int_field(usage.get("completion_tokens")),
        reasoning_tokens=int_field(details.get("reasoning_tokens") if isinstance(details, dict)
                              else 0),
        total_tokens=int_field(usage.get("total_tokens")),
        cached_tokens=int_field(prompt.get("cached_tokens") if isinstance(prompt, dict) else 0),
    )


class ChatWire:
    name = "chat"
    path = "/chat/completions"
    skipped_events = frozenset[str]()

    def assembler(self, load: Loader | None = None) -> ChatAssembler:
        return ChatAssembler(load)

    def collector(self) -> ChatCollector:
        return ChatCollector()

    def encode_tools(self, tools: list[ToolSpec]) -> bytes:
        return _encode([{"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in tools])

    def body(self, *, model: str, instructions: str, messages: list[bytes], tools: bytes,
             session_id: str | None, options: RequestOptions) -> bytes:
        rest: dict[str, Any] = {"model": model, "stream": True,
                                "stream_options": {"include_usage": True}}
        if options.effort:
            rest["reasoning_effort"] = options.effort  # OpenAI's and compatible servers' name
        system = _encode({"role": "system", "content": instructions})
        parts = [b'{"messages":[', system]
        if messages:
            parts += [b",", b",".join(messages)]
        parts.append(b"],")
        if tools != b"[]":
            parts += [b'"tools":', tools, b","]
        parts.append(_encode(rest)[1:])
        return b"".join(parts)


WIRE = ChatWire()
