"""Anthropic's Messages API: request bodies and stream collection.

Entries become content blocks: an answer's thinking, text and tool calls one ``assistant``
message (thinking first, as the API wants it back), each user entry and tool result a ``user``
message. The body joins adjacent messages of one role (the API wants the turns to alternate;
the results of one answer's calls then share one message), so the cached history keeps one
message per entry and stays independent of where it was cut.

Thinking comes back with its signature (``redacted_thinking`` with its data): kept in the
reasoning item's ``encrypted_content``, tagged (:func:`~.common.thinking_content`) so a session
that changes provider sends each provider only its own reasoning.

Prompt caching: ``cache_control`` breakpoints on the system prompt (which covers the tools
before it), on the last message, and on the last message of the previous call (the user
message before the last answer): the API looks for earlier cached prefixes only some 20
blocks back from a breakpoint, and an answer with many parallel calls adds more than that.

The collector accepts every shape the API allows: ``ping`` events anywhere; text, thinking
and tool input as deltas, or whole in ``content_block_start``; tool input as
``input_json_delta`` pieces cut anywhere; several tool calls; ``signature_delta``; empty text
blocks; usage in ``message_start`` and (cumulative) in ``message_delta``, or only in the
latter; ``stop_reason`` ``max_tokens`` / ``refusal``; an ``error`` event mid-stream.
"""

from __future__ import annotations

import base64
import re
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
    ModelEvent,
    ReasoningDelta,
    ReasoningDone,
    TextDelta,
    ToolCallRequested,
    Usage,
)
from codey_server.agent.tools import ToolSpec
from codey_server.agent.wire import Loader, RequestOptions
from codey_server.agent.wire.common import (
    REDACTED_TAG,
    THINKING_TAG,
    decode_event,
    int_field,
    nonempty,
    thinking_content,
)
from codey_server.agent.wire.errors import error_from_body

__all__ = ["API_VERSION", "WIRE", "AnthropicAssembler", "AnthropicCollector", "AnthropicWire"]

#: the ``anthropic-version`` the events here are parsed by (the SDK's newer default could
#: change their shapes under this module)
API_VERSION = "2023-06-01"

_encode = msgspec.json.encode
_decode = msgspec.json.decode

_USER = b'{"role":"user","content":['
_ASSISTANT = b'{"role":"assistant","content":['
_END = b"]}"
_EPHEMERAL = {"type": "ephemeral"}
#: blocks a breakpoint may not sit on
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
_GONE = {"type": "text", "text": "[an image that is no longer stored]"}
#: what a tool_use id may hold; other providers' call ids are mapped onto it
_BAD_ID = re.compile(r"[^a-zA-Z0-9_-]")


def _id(call_id: str) -> str:
    return _BAD_ID.sub("_", call_id) or "call"


def _image(mime: str, digest: str, load: Loader | None) -> dict[str, Any]:
    data = load(digest) if load is not None else None
    if data is None:
        return _GONE
    return {"type": "image", "source": {"type": "base64", "media_type": mime,
                                        "data": base64.b64encode(data).decode()}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object ``tool_use.input`` must be. Claude only sends
    objects; arguments another provider left malformed go back as they were, in a field."""
    try:
        value = _decode(arguments) if arguments.strip() else {}
    except msgspec.DecodeError:
        return {"_unparsed_arguments": arguments}
    return value if isinstance(value, dict) else {"_unparsed_arguments": arguments}


def _user_blocks(entry: Entry, load: Loader | None) -> list[dict[str, Any]]:
    if isinstance(entry, UserText):
        blocks = [_text(entry.text)] if entry.text else []
        blocks += [_image(mime, digest, load) for mime, digest in entry.images]
        return blocks or [_text("(an empty message)")]  # an empty text block is refused
    if isinstance(entry, ToolResultEntry):
        content: str | list[dict[str, Any]] = entry.output or "(no output)"
        if entry.images:
            content = [_text(entry.output or "(no output)"),
                       *(_image(mime, digest, load) for mime, digest in entry.images)]
        return [{"type": "tool_result", "tool_use_id": _id(entry.call_id), "content": content}]
    assert isinstance(entry, SummaryEntry)
    return [_text(SUMMARY_PREFIX + entry.text)]


def _assistant_block(entry: Entry) -> dict[str, Any] | None:
    if isinstance(entry, AssistantText):
        return _text(entry.text)
    if isinstance(entry, ToolCallEntry):
        return {"type": "tool_use", "id": _id(entry.call_id), "name": entry.name,
                "input": _input(entry.arguments)}
    assert isinstance(entry, ReasoningEntry)
    kind, value = thinking_content(entry.encrypted_content)
    if kind == "thinking":
        return {"type": "thinking", "thinking": entry.summary, "signature": value}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": value}
    return None  # another provider's reasoning: this one cannot read it


def _message(head: bytes, blocks: list[bytes]) -> bytes:
    return head + b",".join(blocks) + _END


class AnthropicAssembler:
    """Entries → messages: an answer's blocks stay open as one assistant message until the
    next user-side entry; every user-side entry is a message of its own at once."""

    __slots__ = ("_blocks", "_load", "_out")

    def __init__(self, load: Loader | None = None) -> None:
        self._load = load
        self._out: list[bytes] = []
        self._blocks: list[bytes] = []

    def _close(self) -> None:
        if self._blocks:
            self._out.append(_message(_ASSISTANT, self._blocks))
            self._blocks = []

    def add(self, entry: Entry) -> None:
        if isinstance(entry, (AssistantText, ToolCallEntry, ReasoningEntry)):
            block = _assistant_block(entry)
            if block is not None:
                self._blocks.append(_encode(block))
            return
        self._close()
        self._out.append(_message(_USER, [_encode(b) for b in _user_blocks(entry, self._load)]))

    def at_boundary(self) -> bool:
        return not self._blocks

    def take(self) -> list[bytes]:
        out, self._out = self._out, []
        return out

    def finish(self) -> list[bytes]:
        self._close()
        return self.take()


def merge_turns(messages: list[bytes]) -> list[bytes]:
    """Adjacent messages of one role as one message (their blocks in order)."""
    out: list[bytes] = []
    run: list[bytes] = []
    head = b""
    for message in messages:
        this = _USER if message.startswith(_USER) else _ASSISTANT
        if run and this != head:
            out.append(_joined(head, run))
            run = []
        head = this
        run.append(message)
    if run:
        out.append(_joined(head, run))
    return out


def _joined(head: bytes, run: list[bytes]) -> bytes:
    if len(run) == 1:
        return run[0]
    inner = [m[len(head):-len(_END)] for m in run]
    return _message(head, [i for i in inner if i])


def _marked(message: bytes) -> bytes:
    """``message`` with a cache breakpoint on its last block that may carry one."""
    decoded = _decode(message)
    for block in reversed(decoded.get("content") or []):
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE:
            block["cache_control"] = _EPHEMERAL
            return _encode(decoded)
    return message


def _as_text(message: bytes) -> bytes:
    """Tool calls and results as text, thinking left out: for a call offering no tools (the
    compaction's summary), which the API refuses to give tool blocks."""
    decoded = _decode(message)
    blocks: list[dict[str, Any]] = []
    for block in decoded.get("content") or []:
        kind = block.get("type")
        if kind == "tool_use":
            blocks.append(_text(f"[called {block['name']} with "
                                f"{_encode(block['input']).decode()}]"))
        elif kind == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                blocks.append(_text(f"[tool result {block['tool_use_id']}:]"))
                blocks += [b for b in content if isinstance(b, dict)]
            else:
                blocks.append(_text(f"[tool result {block['tool_use_id']}:] {content}"))
        elif kind not in _UNMARKABLE:
            blocks.append(block)
    decoded["content"] = blocks or [_text("(thinking only)")]
    return _encode(decoded)


# the stream -----------------------------------------------------------------------------------

class _Block:
    __slots__ = ("data", "id", "kind", "name", "parts", "signature")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.id = ""
        self.name = ""
        self.parts: list[str] = []  # a tool call's input JSON, in the pieces it came in
        self.signature = ""
        self.data = ""


class AnthropicCollector:
    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._calls = 0
        self._stop_reason: str | None = None
        self._stopped = False
        self._usage: dict[str, int] = {}

    def feed_sse(self, event: str | None, data: str) -> list[ModelEvent]:
        if event == "ping":
            return []
        return self.feed(decode_event(data))

    def feed(self, data: object) -> list[ModelEvent]:
        if not isinstance(data, dict):
            return []
        kind = data.get("type")
        if kind == "content_block_delta":
            return self._delta(data.get("index"), data.get("delta"))
        if kind == "content_block_start":
            return self._start(data.get("index"), data.get("content_block"))
        if kind == "content_block_stop":
            return self._stop(data.get("index"))
        if kind == "message_start":
            message = data.get("message")
            if isinstance(message, dict):
                self._count(message.get("usage"))
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            self._count(data.get("usage"))
        elif kind == "message_stop":
            self._stopped = True
        elif kind == "error" or (kind is None and data.get("error")):
            raise error_from_body(data, None, prefix="the model failed")
        return []

    def _count(self, usage: object) -> None:
        """Usage is cumulative: a later figure replaces an earlier one."""
        if not isinstance(usage, dict):
            return
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                     "cache_creation_input_tokens"):
            if isinstance(usage.get(name), int):
                self._usage[name] = int_field(usage[name])
        details = usage.get("output_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("thinking_tokens"), int):
            self._usage["thinking_tokens"] = int_field(details["thinking_tokens"])

    def _start(self, index: object, raw: object) -> list[ModelEvent]:
        if not isinstance(index, int) or not isinstance(raw, dict):
            return []
        block = self._blocks[index] = _Block(str(raw.get("type")))
        if block.kind == "text":
            return nonempty(TextDelta, raw.get("text"))
        if block.kind == "thinking":
            block.signature = str(raw.get("signature") or "")
            return nonempty(ReasoningDelta, raw.get("thinking"))
        if block.kind == "redacted_thinking":
            block.data = str(raw.get("data") or "")
        elif block.kind == "tool_use":
            block.id = str(raw.get("id") or "")
            block.name = str(raw.get("name") or "")
            given = raw.get("input")
            if isinstance(given, dict) and given:  # whole, as a non-streamed block has it
                block.parts.append(_encode(given).decode())
        return []

    def _delta(self, index: object, delta: object) -> list[ModelEvent]:
        if not isinstance(delta, dict):
            return []
        block = self._blocks.get(index) if isinstance(index, int) else None
        kind = delta.get("type")
        if kind == "text_delta":
            return nonempty(TextDelta, delta.get("text"))
        if kind == "thinking_delta":
            return nonempty(ReasoningDelta, delta.get("thinking"))
        if block is None:
            return []
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            block.parts.append(delta["partial_json"])
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block.signature += delta["signature"]
        return []

    def _stop(self, index: object) -> list[ModelEvent]:
        block = self._blocks.pop(index, None) if isinstance(index, int) else None
        if block is None:
            return []
        if block.kind == "thinking":
            # a thinking block without its signature cannot go back: shown, not kept
            return [ReasoningDone(None, THINKING_TAG + block.signature if block.signature
                                  else None)]
        if block.kind == "redacted_thinking":
            return [ReasoningDone(None, REDACTED_TAG + block.data if block.data else None)]
        if block.kind == "tool_use":
            self._calls += 1
            arguments = "".join(block.parts).strip() or "{}"
            return [ToolCallRequested(block.id or f"toolu_{self._calls}", block.name,
                                      arguments)]
        return []

    def finish(self) -> list[ModelEvent]:
        # message_delta's stop_reason is the answer's last content; message_stop only closes
        if not self._stopped and self._stop_reason is None:
            raise ModelError("the model's answer stopped before it was complete",
                             code="stream_cut")
        out: list[ModelEvent] = []
        u = self._usage
        if u:
            read = u.get("cache_read_input_tokens", 0)
            written = u.get("cache_creation_input_tokens", 0)
            # input_tokens counts only what is neither read from the cache nor written to
            # it; Codey's input is the whole context the call took in, as the other wires'
            taken = u.get("input_tokens", 0) + read + written
            output = u.get("output_tokens", 0)
            out.append(Usage(input_tokens=taken, output_tokens=output,
                             reasoning_tokens=u.get("thinking_tokens", 0),
                             total_tokens=taken + output, cached_tokens=read,
                             cache_write_tokens=written))
        reason = self._stop_reason
        if reason == "max_tokens":
            out.append(Finished("max_output_tokens", reason))
        elif reason == "refusal":
            # Claude's safety classifier stopped it; what came before stays shown
            out.append(Finished("content_filter", reason))
        elif reason in ("model_context_window_exceeded", "pause_turn"):
            out.append(Finished("other", reason))
        else:
            out.append(Finished())
        return out


class AnthropicWire:
    name = "anthropic"
    path = "/v1/messages"
    skipped_events = frozenset({"ping"})

    def assembler(self, load: Loader | None = None) -> AnthropicAssembler:
        return AnthropicAssembler(load)

    def collector(self) -> AnthropicCollector:
        return AnthropicCollector()

    def encode_tools(self, tools: list[ToolSpec]) -> bytes:
        return _encode([{"name": t.name, "description": t.description,
                         "input_schema": t.parameters} for t in tools])

    def body(self, *, model: str, instructions: str, messages: list[bytes], tools: bytes,
             session_id: str | None, options: RequestOptions) -> bytes:
        turns = merge_turns(messages)
        if tools == b"[]":
            turns = [_as_text(t) if b'"tool_use"' in t or b'"tool_result"' in t else t
                     for t in turns]
        for at in (-3, -1):  # the previous call's last message, and this one's
            if len(turns) >= -at:
                turns[at] = _marked(turns[at])
        rest: dict[str, Any] = {
            "model": model, "max_tokens": options.max_output_tokens or max_output_for(model),
            "stream": True,
            "system": [{"type": "text", "text": instructions or "(none)",
                        "cache_control": _EPHEMERAL}],
        }
        # the session's reasoning effort, where the provider sets no budget of its own
        budget = options.thinking_budget or THINKING_FOR_EFFORT.get(options.effort or "")
        if budget:
            rest["thinking"] = {"type": "enabled", "budget_tokens": budget}
            # the budget must stay under max_tokens, and a thought needs room for an answer
            rest["max_tokens"] = max(rest["max_tokens"], budget + 4096)
        parts = [b'{"messages":[', b",".join(turns), b"],"]
        if tools != b"[]":
            parts += [b'"tools":', tools, b","]
        parts.append(_encode(rest)[1:])
        return b"".join(parts)


#: a session's reasoning effort as an extended-thinking budget (``minimal``: no thinking);
#: Anthropic's smallest budget is 1024 tokens
THINKING_FOR_EFFORT: dict[str, int] = {"low": 2_048, "medium": 8_192, "high": 24_576}

#: prefix of a Claude model name → the most output tokens it may be asked for (``max_tokens``
#: is required); longest prefix wins, other models get 8192, which every Claude model allows
KNOWN_MAX_OUTPUT: dict[str, int] = {
    "claude-3-haiku": 4_096,
    "claude-3-opus": 4_096,
    "claude-3-sonnet": 4_096,
    "claude-3-5": 8_192,
    "claude-3-7-sonnet": 64_000,
    "claude-sonnet-4": 64_000,
    "claude-haiku-4": 64_000,
    "claude-opus-4": 32_000,
    "claude-opus-4-5": 64_000,
}


def max_output_for(model: str) -> int:
    name = model.rsplit("/", 1)[-1].lower()
    best = ""
    for prefix in KNOWN_MAX_OUTPUT:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return KNOWN_MAX_OUTPUT[best] if best else 8_192


WIRE = AnthropicWire()
