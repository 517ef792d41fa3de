"""The OpenAI Responses API: request bodies and stream collection.

Calls are stateless (``store: false``): the whole input goes with every call, built from
already encoded messages. Reasoning models keep their reasoning through
``include: ["reasoning.encrypted_content"]``: the encrypted items come back in the stream and
are sent back (without their ids, which a stateless call cannot resolve). The session id is
the ``prompt_cache_key``, so consecutive calls of one session hit the provider's prompt cache.

The collector accepts every shape the API allows: text as deltas or only in
``response.output_item.done`` / ``response.completed``; refusals; reasoning summaries (as
deltas or whole); function calls whose arguments arrive in many pieces; several calls;
``response.incomplete``; usage only at the end; ``response.failed`` and ``error`` events.
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
from codey_server.agent.errors import ModelError
from codey_server.agent.stream import (
    Finished,
    IncompleteReason,
    ModelEvent,
    ReasoningDelta,
    ReasoningDone,
    RefusalDelta,
    TextDelta,
    ToolCallRequested,
    Usage,
)
from codey_server.agent.tools import ToolSpec
from codey_server.agent.wire import Loader, RequestOptions, data_url
from codey_server.agent.wire.common import decode_event, int_field, nonempty, thinking_content
from codey_server.agent.wire.errors import error_from_body

__all__ = ["WIRE", "ResponsesAssembler", "ResponsesCollector", "ResponsesWire"]

_encode = msgspec.json.encode


def encode_entry(entry: Entry, load: Loader | None = None) -> bytes:
    if isinstance(entry, UserText):
        if not entry.images:
            return _encode({"role": "user", "content": entry.text})
        parts: list[dict[str, Any]] = [{"type": "input_text", "text": entry.text}]
        for mime, digest in entry.images:
            url = data_url(mime, digest, load)
            parts.append({"type": "input_image", "image_url": url} if url is not None else
                         {"type": "input_text", "text": "[an image that is no longer stored]"})
        return _encode({"role": "user", "content": parts})
    if isinstance(entry, AssistantText):
        return _encode({"role": "assistant", "content": entry.text})
    if isinstance(entry, ToolCallEntry):
        return _encode({"type": "function_call", "call_id": entry.call_id, "name": entry.name,
                        "arguments": entry.arguments})
    if isinstance(entry, ToolResultEntry):
        if not entry.images:
            return _encode({"type": "function_call_output", "call_id": entry.call_id,
                            "output": entry.output})
        # a result with an image: the output as a list of content parts, the image one of
        # them (input_image, as a data URL)
        output: list[dict[str, Any]] = [{"type": "input_text", "text": entry.output}]
        for mime, digest in entry.images:
            url = data_url(mime, digest, load)
            output.append({"type": "input_image", "image_url": url} if url is not None else
                          {"type": "input_text", "text": "[an image that is no longer stored]"})
        return _encode({"type": "function_call_output", "call_id": entry.call_id,
                        "output": output})
    if isinstance(entry, ReasoningEntry):
        summary = [{"type": "summary_text", "text": entry.summary}] if entry.summary else []
        return _encode({"type": "reasoning", "summary": summary,
                        "encrypted_content": entry.encrypted_content})
    assert isinstance(entry, SummaryEntry)
    return _encode({"role": "user", "content": SUMMARY_PREFIX + entry.text})


class ResponsesAssembler:
    """One message per entry (none for another provider's reasoning): every point is a
    boundary."""

    __slots__ = ("_load", "_out")

    def __init__(self, load: Loader | None = None) -> None:
        self._out: list[bytes] = []
        self._load = load

    def add(self, entry: Entry) -> None:
        if isinstance(entry, ReasoningEntry) and \
                thinking_content(entry.encrypted_content)[0] is not None:
            return  # Anthropic's thinking, from before the session changed provider
        self._out.append(encode_entry(entry, self._load))

    def at_boundary(self) -> bool:
        return True

    def take(self) -> list[bytes]:
        out, self._out = self._out, []
        return out

    finish = take


#: events that carry nothing the collector needs: not even decoded (``response.created`` and
#: ``response.in_progress`` repeat the whole request's tools and instructions)
_SKIPPED = frozenset({
    "response.created", "response.in_progress", "response.output_item.added",
    "response.content_part.added", "response.content_part.done", "response.output_text.done",
    "response.refusal.done", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.done", "response.reasoning_text.done",
    "response.output_text.annotation.added",
})


class ResponsesCollector:
    def __init__(self) -> None:
        self._streamed: set[tuple[str, str]] = set()  # (item id, text|refusal|reasoning)
        self._done: set[str] = set()
        self._summary_parts: dict[str, int] = {}
        self._finished: Finished | None = None
        self._usage: Usage | None = None

    def feed_sse(self, event: str | None, data: str) -> list[ModelEvent]:
        if event in _SKIPPED:
            return []
        return self.feed(decode_event(data))

    def feed(self, data: object) -> list[ModelEvent]:
        if not isinstance(data, dict):
            return []
        kind = data.get("type")
        if kind == "response.output_text.delta":
            self._streamed.add((str(data.get("item_id")), "text"))
            return nonempty(TextDelta, data.get("delta"))
        if kind == "response.refusal.delta":
            self._streamed.add((str(data.get("item_id")), "refusal"))
            return nonempty(RefusalDelta, data.get("delta"))
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            item_id = str(data.get("item_id"))
            self._streamed.add((item_id, "reasoning"))
            out: list[ModelEvent] = []
            index = data.get("summary_index", 0)
            last = self._summary_parts.get(item_id)
            if last is not None and isinstance(index, int) and index != last:
                out.append(ReasoningDelta("\n\n"))  # a new summary part
            if isinstance(index, int):
                self._summary_parts[item_id] = index
            return out + nonempty(ReasoningDelta, data.get("delta"))
        if kind == "response.output_item.done":
            item = data.get("item")
            return self._item_done(item, data.get("output_index")) if isinstance(item, dict) \
                else []
        if kind in ("response.completed", "response.incomplete"):
            return self._completed(data.get("response"), kind == "response.incomplete")
        if kind == "response.failed":
            response = data.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            raise error_from_body({"error": error} if error else data, None,
                                  prefix="the model failed")
        if kind == "error" or (kind is None and data.get("error")):
            raise error_from_body({"error": data.get("error") or data}, None,
                                  prefix="the model failed")
        return []

    def _item_done(self, item: dict[str, Any], index: object) -> list[ModelEvent]:
        item_id = str(item.get("id") or f"#{index}")
        if item_id in self._done:
            return []
        self._done.add(item_id)
        kind = item.get("type")
        out: list[ModelEvent] = []
        if kind == "message":
            for part in item.get("content") or []:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "output_text" and (item_id, "text") not in self._streamed:
                    out += nonempty(TextDelta, part.get("text"))
                elif part.get("type") == "refusal" and \
                        (item_id, "refusal") not in self._streamed:
                    out += nonempty(RefusalDelta, part.get("refusal"))
        elif kind == "reasoning":
            if (item_id, "reasoning") not in self._streamed:
                parts = [p.get("text") for p in (item.get("summary") or [])
                         if isinstance(p, dict) and isinstance(p.get("text"), str)]
                parts += [p.get("text") for p in (item.get("content") or [])
                          if isinstance(p, dict) and isinstance(p.get("text"), str)]
                out += nonempty(ReasoningDelta, "\n\n".join(p for p in parts if p))
            encrypted = item.get("encrypted_content")
            out.append(ReasoningDone(item.get("id"), encrypted if isinstance(encrypted, str)
                                     and encrypted else None))
        elif kind == "function_call":
            arguments = item.get("arguments")
            if not isinstance(arguments, str):
                arguments = msgspec.json.encode(arguments).decode() if arguments else "{}"
            out.append(ToolCallRequested(str(item.get("call_id") or item_id),
                                         str(item.get("name") or ""), arguments or "{}"))
        return out

    def _completed(self, response: object, incomplete: bool) -> list[ModelEvent]:
        out: list[ModelEvent] = []
        if not isinstance(response, dict):
            response = {}
        for n, item in enumerate(response.get("output") or []):
            if isinstance(item, dict):
                out += self._item_done(item, n)
        usage = response.get("usage")
        if isinstance(usage, dict):
            details = usage.get("output_tokens_details") or {}
            cached = usage.get("input_tokens_details") or {}
            self._usage = Usage(
                input_tokens=int_field(usage.get("input_tokens")),
                output_tokens=int_field(usage.get("output_tokens")),
                reasoning_tokens=int_field(details.get("reasoning_tokens")),
                total_tokens=int_field(usage.get("total_tokens")),
                cached_tokens=int_field(cached.get("cached_tokens")),
            )
        reason: IncompleteReason | None = None
        detail = ""
        if incomplete or response.get("status") == "incomplete":
            details = response.get("incomplete_details") or {}
            raw = details.get("reason") if isinstance(details, dict) else None
            reason = raw if raw in ("max_output_tokens", "content_filter") else "other"
            detail = str(raw or "")
        self._finished = Finished(incomplete=reason, detail=detail)
        return out

    def finish(self) -> list[ModelEvent]:
        if self._finished is None:
            raise ModelError("the model's answer stopped before it was complete",
                             code="stream_cut")
        out: list[ModelEvent] = []
        if self._usage is not None:
            out.append(self._usage)
        out.append(self._finished)
        return out


class ResponsesWire:
    name = "responses"
    path = "/responses"
    skipped_events = _SKIPPED

    def assembler(self, load: Loader | None = None) -> ResponsesAssembler:
        return ResponsesAssembler(load)

    def collector(self) -> ResponsesCollector:
        return ResponsesCollector()

    def encode_tools(self, tools: list[ToolSpec]) -> bytes:
        return _encode([{"type": "function", "name": t.name, "description": t.description,
                         "parameters": t.parameters, "strict": False} for t in tools])

    def body(self, *, model: str, instructions: str, messages: list[bytes], tools: bytes,
             session_id: str | None, options: RequestOptions) -> bytes:
        rest: dict[str, Any] = {
            "model": model, "instructions": instructions, "stream": True, "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if tools != b"[]":
            rest["tool_choice"] = "auto"
            rest["parallel_tool_calls"] = True
        reasoning: dict[str, str] = {}
        if options.reasoning_summary:
            reasoning["summary"] = "auto"
        if options.effort:
            reasoning["effort"] = options.effort
        if reasoning:
            rest["reasoning"] = reasoning
        if session_id:
            rest["prompt_cache_key"] = session_id
        head = _encode(rest)
        return b"".join((b'{"input":[', b",".join(messages), b'],"tools":', tools, b",",
                         head[1:]))


WIRE = ResponsesWire()
