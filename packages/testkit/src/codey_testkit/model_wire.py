"""Turning a scripted :class:`~codey_testkit.script.Reply` into OpenAI and Anthropic wire
objects.

Pure functions, no I/O: each API gets an event list (for streaming) and a whole body (for
non-streaming). Event shapes follow the real API closely enough for the ``openai`` SDK's
stream helpers (sequence numbers, output/content/summary indexes, item ids), and Anthropic's
event stream as its reference describes it (``ping`` events between blocks included).
:class:`PromptCache` models Anthropic's prompt cache, so usage tells cache reads from writes.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from codey_testkit.script import ErrorReply, Reply, Shape

__all__ = [
    "PlannedCall",
    "PlannedReply",
    "PromptCache",
    "TokenCount",
    "WireEvent",
    "anthropic_body",
    "anthropic_error",
    "anthropic_events",
    "chat_body",
    "chat_events",
    "plan_reply",
    "responses_body",
    "responses_events",
]


@dataclass(frozen=True)
class WireEvent:
    """One streamed event. ``name`` is the SSE event name (None for chat chunks);
    ``delta`` marks events that carry generated content (the ones slow streaming delays)."""

    name: str | None
    data: Mapping[str, Any] | str
    delta: bool = False

    def encode(self) -> bytes:
        data = self.data
        if not isinstance(data, str):
            data = json.dumps(data, separators=_COMPACT)
        head = f"event: {self.name}\n" if self.name else ""
        return f"{head}data: {data}\n\n".encode()


@dataclass(frozen=True)
class TokenCount:
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cached_tokens: int
    cache_write_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class PlannedCall:
    call_id: str
    item_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class PlannedReply:
    """A reply with every id and the usage fixed up front, so headers can be sent first."""

    response_id: str
    created_at: int
    model: str
    reasoning: list[str]
    reasoning_id: str
    text: str | None
    message_id: str
    calls: list[PlannedCall]
    usage: TokenCount
    chunk_size: int
    shape: Shape = "deltas"
    refusal: str | None = None
    incomplete: str | None = None
    encrypted_reasoning: str | None = None
    usage_every_chunk: bool = False
    tool_call_index: bool = True
    stream_error: ErrorReply | None = None
    thinking_signature: str = ""
    redacted_reasoning: str | None = None
    usage_at_end: bool = False
    #: the script fixed the cached tokens (else Anthropic's come from the cache model)
    cached_given: bool = False

    @property
    def has_reasoning(self) -> bool:
        return bool(self.reasoning) or self.encrypted_reasoning is not None

    @property
    def has_message(self) -> bool:
        return self.text is not None or self.refusal is not None


_COMPACT = (",", ":")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _estimate(chars: int) -> int:
    return max(1, (chars + 3) // 4)


#: in a scripted call's arguments, stands for the newest process id (``proc_…``) the request
#: carries: a script can poll, write to or kill the process an earlier ``exec`` started
PROCESS_ID = "$PROCESS_ID"
_PROCESS = re.compile(r"proc_[0-9a-f]{6,}")


def _with_process_id(arguments: str, prompt_text: str) -> str:
    if PROCESS_ID not in arguments:
        return arguments
    found = _PROCESS.findall(prompt_text)
    return arguments.replace(PROCESS_ID, found[-1] if found else "proc_none")


def plan_reply(
    reply: Reply, model: str, request_body: Mapping[str, Any], chunk_size: int
) -> PlannedReply:
    """Fix ids and usage for ``reply``. Usage is estimated at ~4 chars a token unless the
    reply's ``usage`` overrides it. ``$PROCESS_ID`` in a call's arguments becomes the newest
    process id in the request."""
    prompt = request_body.get("input", request_body.get("messages", ""))
    prompt_text = json.dumps(prompt)
    instructions = request_body.get("instructions") or request_body.get("system") or ""
    calls = [
        PlannedCall(
            call_id=call.id or _new_id("call"),
            item_id=_new_id("fc"),
            name=call.name,
            arguments=_with_process_id(call.arguments_json(), prompt_text),
        )
        for call in reply.calls
    ]
    reasoning = reply.reasoning_parts()
    input_tokens = _estimate(len(prompt_text) + len(str(instructions)))
    reasoning_tokens = sum(_estimate(len(p)) for p in reasoning) if reasoning else 0
    generated = len(reply.text or "") + sum(len(c.name) + len(c.arguments) for c in calls)
    output_tokens = reasoning_tokens + (_estimate(generated) if generated else 0)
    usage = TokenCount(input_tokens, max(1, output_tokens), reasoning_tokens, 0)
    if reply.usage is not None:
        u = reply.usage
        usage = TokenCount(
            input_tokens=u.input_tokens if u.input_tokens is not None else usage.input_tokens,
            output_tokens=u.output_tokens if u.output_tokens is not None else usage.output_tokens,
            reasoning_tokens=(
                u.reasoning_tokens if u.reasoning_tokens is not None else usage.reasoning_tokens
            ),
            cached_tokens=u.cached_tokens or 0,
        )
    return PlannedReply(
        response_id=_new_id("resp"),
        created_at=int(time.time()),
        model=model,
        reasoning=reasoning,
        reasoning_id=_new_id("rs"),
        text=reply.text,
        message_id=_new_id("msg"),
        calls=calls,
        usage=usage,
        chunk_size=chunk_size,
        shape=reply.shape,
        refusal=reply.refusal,
        incomplete=reply.incomplete,
        encrypted_reasoning=(
            reply.encrypted_reasoning
            if "reasoning.encrypted_content" in (request_body.get("include") or [])
            else None
        ),
        usage_every_chunk=reply.usage_every_chunk,
        tool_call_index=reply.tool_call_index,
        stream_error=reply.stream_error,
        thinking_signature=reply.encrypted_reasoning or "sig_" + hashlib.sha256(
            "".join(reasoning).encode()).hexdigest()[:32],
        redacted_reasoning=reply.redacted_reasoning,
        usage_at_end=reply.usage_at_end,
        cached_given=reply.usage is not None and reply.usage.cached_tokens is not None,
    )


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# -- Responses API ------------------------------------------------------------------------


def _responses_usage(usage: TokenCount) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total,
    }


def _response_object(
    plan: PlannedReply,
    body: Mapping[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: TokenCount | None,
) -> dict[str, Any]:
    return {
        "id": plan.response_id,
        "object": "response",
        "created_at": plan.created_at,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": plan.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": _responses_usage(usage) if usage is not None else None,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def _reasoning_item(plan: PlannedReply, done: bool) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": p} for p in plan.reasoning] if done else []
    item: dict[str, Any] = {"id": plan.reasoning_id, "type": "reasoning", "summary": summary}
    if plan.encrypted_reasoning is not None:
        item["encrypted_content"] = plan.encrypted_reasoning if done else None
    return item


def _message_content(plan: PlannedReply) -> list[dict[str, Any]]:
    if plan.refusal is not None:
        return [{"type": "refusal", "refusal": plan.refusal}]
    return [_output_text(plan.text or "")]


def _message_item(plan: PlannedReply, done: bool) -> dict[str, Any]:
    content = _message_content(plan) if done else []
    return {
        "id": plan.message_id,
        "type": "message",
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": content,
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _call_item(call: PlannedCall, done: bool) -> dict[str, Any]:
    return {
        "id": call.item_id,
        "type": "function_call",
        "status": "completed" if done else "in_progress",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments if done else "",
    }


def _output_items(plan: PlannedReply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if plan.has_reasoning:
        items.append(_reasoning_item(plan, done=True))
    if plan.has_message:
        items.append(_message_item(plan, done=True))
    items.extend(_call_item(call, done=True) for call in plan.calls)
    return items


def responses_body(plan: PlannedReply, body: Mapping[str, Any]) -> dict[str, Any]:
    """The non-streaming ``POST /v1/responses`` answer."""
    status = "incomplete" if plan.incomplete else "completed"
    out = _response_object(plan, body, status, _output_items(plan), plan.usage)
    if plan.incomplete:
        out["incomplete_details"] = {"reason": plan.incomplete}
    return out


def _error_object(error: ErrorReply) -> dict[str, Any]:
    return {"code": error.code or "server_error",
            "message": error.message or "The model failed (scripted)."}


def responses_events(plan: PlannedReply, body: Mapping[str, Any]) -> list[WireEvent]:
    """The SSE events of a streamed ``POST /v1/responses`` answer, in order."""
    out: list[WireEvent] = []
    deltas = plan.shape == "deltas"

    def emit(name: str, is_delta: bool = False, /, **fields: Any) -> None:
        data = {"type": name, "sequence_number": len(out), **fields}
        out.append(WireEvent(name, data, is_delta))

    emit("response.created", response=_response_object(plan, body, "in_progress", [], None))
    if plan.shape == "completed_only":
        _finish_responses(plan, body, emit)
        return out
    emit("response.in_progress", response=_response_object(plan, body, "in_progress", [], None))
    index = 0
    size = plan.chunk_size
    if plan.has_reasoning:
        rid = plan.reasoning_id
        emit("response.output_item.added", output_index=index,
             item=_reasoning_item(plan, done=False))
        for s, part in enumerate(plan.reasoning):
            at = {"item_id": rid, "output_index": index, "summary_index": s}
            emit("response.reasoning_summary_part.added", **at,
                 part={"type": "summary_text", "text": ""})
            if deltas:
                for piece in _chunks(part, size):
                    emit("response.reasoning_summary_text.delta", True, **at, delta=piece)
            emit("response.reasoning_summary_text.done", **at, text=part)
            emit("response.reasoning_summary_part.done", **at,
                 part={"type": "summary_text", "text": part})
        emit("response.output_item.done", output_index=index, item=_reasoning_item(plan, True))
        index += 1
    if plan.has_message:
        at = {"item_id": plan.message_id, "output_index": index, "content_index": 0}
        emit("response.output_item.added", output_index=index,
             item=_message_item(plan, done=False))
        if plan.refusal is not None:
            emit("response.content_part.added", **at, part={"type": "refusal", "refusal": ""})
            if deltas:
                for piece in _chunks(plan.refusal, size):
                    emit("response.refusal.delta", True, **at, delta=piece)
            emit("response.refusal.done", **at, refusal=plan.refusal)
        else:
            text = plan.text or ""
            emit("response.content_part.added", **at, part=_output_text(""))
            if deltas:
                for piece in _chunks(text, size):
                    emit("response.output_text.delta", True, **at, delta=piece, logprobs=[])
            emit("response.output_text.done", **at, text=text, logprobs=[])
        emit("response.content_part.done", **at, part=_message_content(plan)[0])
        emit("response.output_item.done", output_index=index, item=_message_item(plan, True))
        index += 1
    for call in plan.calls:
        at = {"item_id": call.item_id, "output_index": index}
        emit("response.output_item.added", output_index=index, item=_call_item(call, False))
        if deltas:
            for piece in _chunks(call.arguments, size):
                emit("response.function_call_arguments.delta", True, **at, delta=piece)
        emit("response.function_call_arguments.done", **at, name=call.name,
             arguments=call.arguments)
        emit("response.output_item.done", output_index=index, item=_call_item(call, True))
        index += 1
    _finish_responses(plan, body, emit)
    return out


def _finish_responses(plan: PlannedReply, body: Mapping[str, Any], emit: Any) -> None:
    if plan.stream_error is not None:
        failed = _response_object(plan, body, "failed", [], None)
        failed["error"] = _error_object(plan.stream_error)
        emit("response.failed", response=failed)
    elif plan.incomplete:
        emit("response.incomplete", response=responses_body(plan, body))
    else:
        emit("response.completed", response=responses_body(plan, body))


# -- Chat Completions ---------------------------------------------------------------------


def _chat_usage(usage: TokenCount) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def _finish_reason(plan: PlannedReply) -> str:
    if plan.incomplete == "max_output_tokens":
        return "length"
    if plan.incomplete:
        return "content_filter"
    return "tool_calls" if plan.calls else "stop"


def chat_body(plan: PlannedReply) -> dict[str, Any]:
    """The non-streaming ``POST /v1/chat/completions`` answer.

    Reasoning, if any, is in the message's ``reasoning_content`` (the field DeepSeek, vLLM and
    others use); the official API has no such field and clients ignore it.
    """
    message: dict[str, Any] = {"role": "assistant", "content": plan.text,
                               "refusal": plan.refusal}
    if plan.reasoning:
        message["reasoning_content"] = "\n".join(plan.reasoning)
    if plan.calls:
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in plan.calls
        ]
    return {
        "id": plan.response_id.replace("resp_", "chatcmpl-", 1),
        "object": "chat.completion",
        "created": plan.created_at,
        "model": plan.model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": _finish_reason(plan),
             "logprobs": None}
        ],
        "usage": _chat_usage(plan.usage),
    }


def chat_events(plan: PlannedReply, include_usage: bool) -> list[WireEvent]:
    """The ``data:`` chunks of a streamed Chat Completions answer, ending with ``[DONE]``.

    With ``include_usage`` every chunk has ``usage: null`` and a last chunk with no choices
    carries the usage, as the real API does for ``stream_options.include_usage``
    (``usage_every_chunk``: a running count in every chunk instead, as some servers do).
    """
    cid = plan.response_id.replace("resp_", "chatcmpl-", 1)
    out: list[WireEvent] = []
    running = [0]

    def chunk(delta: dict[str, Any], finish: str | None = None, is_delta: bool = False) -> None:
        data: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": plan.created_at,
            "model": plan.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if plan.usage_every_chunk:
            running[0] += 1
            so_far = TokenCount(plan.usage.input_tokens,
                                min(running[0], plan.usage.output_tokens), 0, 0)
            data["usage"] = _chat_usage(so_far)
        elif include_usage:
            data["usage"] = None
        out.append(WireEvent(None, data, is_delta))

    def call_delta(n: int, fields: dict[str, Any]) -> dict[str, Any]:
        return {"index": n, **fields} if plan.tool_call_index else fields

    chunk({"role": "assistant", "content": "", "refusal": None})
    size = plan.chunk_size
    if plan.shape == "deltas":
        for part in plan.reasoning:
            for piece in _chunks(part, size):
                chunk({"reasoning_content": piece}, is_delta=True)
        if plan.text:
            for piece in _chunks(plan.text, size):
                chunk({"content": piece}, is_delta=True)
        if plan.refusal:
            for piece in _chunks(plan.refusal, size):
                chunk({"refusal": piece}, is_delta=True)
        for n, call in enumerate(plan.calls):
            chunk({"tool_calls": [call_delta(n, {
                "id": call.call_id, "type": "function",
                "function": {"name": call.name, "arguments": ""}})]})
            for piece in _chunks(call.arguments, size):
                chunk({"tool_calls": [call_delta(n, {"function": {"arguments": piece}})]},
                      is_delta=True)
    else:
        whole: dict[str, Any] = {}
        if plan.reasoning:
            whole["reasoning_content"] = "\n".join(plan.reasoning)
        if plan.text:
            whole["content"] = plan.text
        if plan.refusal:
            whole["refusal"] = plan.refusal
        if plan.calls:
            whole["tool_calls"] = [call_delta(n, {
                "id": call.call_id, "type": "function",
                "function": {"name": call.name, "arguments": call.arguments}})
                for n, call in enumerate(plan.calls)]
        if whole:
            chunk(whole, is_delta=True)
    if plan.stream_error is not None:
        out.append(WireEvent(None, {"error": _error_object(plan.stream_error)}))
        return out
    chunk({}, finish=_finish_reason(plan))
    if include_usage or plan.usage_every_chunk:
        out.append(WireEvent(None, {
            "id": cid, "object": "chat.completion.chunk", "created": plan.created_at,
            "model": plan.model, "choices": [], "usage": _chat_usage(plan.usage),
        }))
    out.append(WireEvent(None, "[DONE]"))
    return out


# -- Anthropic Messages -------------------------------------------------------------------

_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def anthropic_error(status: int, message: str, type_: str | None = None) -> dict[str, Any]:
    """Anthropic's error body; ``type`` follows the status unless given."""
    kind = type_ or _ANTHROPIC_TYPES.get(status) or (
        "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _anthropic_usage(usage: TokenCount) -> dict[str, Any]:
    read = min(usage.cached_tokens, usage.input_tokens)
    written = min(usage.cache_write_tokens, usage.input_tokens - read)
    return {"input_tokens": usage.input_tokens - read - written,
            "cache_creation_input_tokens": written, "cache_read_input_tokens": read,
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"thinking_tokens": usage.reasoning_tokens}}


def _stop_reason(plan: PlannedReply) -> str:
    if plan.incomplete == "max_output_tokens":
        return "max_tokens"
    if plan.incomplete or plan.refusal is not None:
        return "refusal"  # Anthropic's refusal is a stop: what came before it stays
    return "tool_use" if plan.calls else "end_turn"


def _anthropic_blocks(plan: PlannedReply) -> list[dict[str, Any]]:
    """The answer's content blocks, whole."""
    blocks: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": part, "signature": plan.thinking_signature}
        for part in plan.reasoning]
    if plan.redacted_reasoning is not None:
        blocks.append({"type": "redacted_thinking", "data": plan.redacted_reasoning})
    text = plan.refusal if plan.refusal is not None else plan.text
    if text is not None or not (plan.calls or blocks):
        blocks.append({"type": "text", "text": text or ""})  # an empty answer: one empty block
    blocks += [{"type": "tool_use", "id": _tool_use_id(call), "name": call.name,
                "input": _object(call.arguments)} for call in plan.calls]
    return blocks


def _tool_use_id(call: PlannedCall) -> str:
    return call.call_id if call.call_id.startswith("toolu_") else \
        "toolu_" + call.call_id.removeprefix("call_")


def _object(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def anthropic_body(plan: PlannedReply) -> dict[str, Any]:
    """The non-streaming ``POST /v1/messages`` answer."""
    return {"id": plan.message_id, "type": "message", "role": "assistant", "model": plan.model,
            "content": _anthropic_blocks(plan), "stop_reason": _stop_reason(plan),
            "stop_sequence": None, "usage": _anthropic_usage(plan.usage)}


def anthropic_events(plan: PlannedReply) -> list[WireEvent]:
    """The SSE events of a streamed ``POST /v1/messages`` answer, in order, with a ``ping``
    after ``message_start`` and between blocks. ``deltas``: text, thinking and tool input in
    ``chunk_size`` pieces (the input's JSON cut anywhere, inside strings and escapes too);
    ``final_only``: one delta a block; ``completed_only``: each block whole in its start."""
    out: list[WireEvent] = []

    def emit(name: str, is_delta: bool = False, /, **fields: Any) -> None:
        out.append(WireEvent(name, {"type": name, **fields}, is_delta))

    usage = _anthropic_usage(plan.usage)
    message: dict[str, Any] = {
        "id": plan.message_id, "type": "message", "role": "assistant", "model": plan.model,
        "content": [], "stop_reason": None, "stop_sequence": None}
    if not plan.usage_at_end:
        message["usage"] = {**usage, "output_tokens": 1}
    emit("message_start", message=message)
    emit("ping")
    size = plan.chunk_size
    for index, whole in enumerate(_anthropic_blocks(plan)):
        if index:
            emit("ping")
        kind = whole["type"]
        field, delta_type = {"text": ("text", "text_delta"),
                             "thinking": ("thinking", "thinking_delta")}.get(kind, ("", ""))
        if plan.shape == "completed_only" or kind == "redacted_thinking":
            emit("content_block_start", index=index, content_block=whole)
        elif kind == "tool_use":
            emit("content_block_start", index=index, content_block={**whole, "input": {}})
            arguments = json.dumps(whole["input"], ensure_ascii=False)
            pieces = _chunks(arguments, size) if plan.shape == "deltas" else [arguments]
            for piece in pieces:
                emit("content_block_delta", True, index=index,
                     delta={"type": "input_json_delta", "partial_json": piece})
        else:
            empty = {**whole, field: ""} if kind == "text" else \
                {**whole, field: "", "signature": ""}
            emit("content_block_start", index=index, content_block=empty)
            if whole[field]:
                pieces = _chunks(whole[field], size) if plan.shape == "deltas" else [whole[field]]
                for piece in pieces:
                    emit("content_block_delta", True, index=index,
                         delta={"type": delta_type, field: piece})
            if kind == "thinking":
                emit("content_block_delta", index=index,
                     delta={"type": "signature_delta", "signature": whole["signature"]})
        emit("content_block_stop", index=index)
    if plan.stream_error is not None:
        error = plan.stream_error
        emit("error", error={"type": error.type or "overloaded_error",
                             "message": error.message or "Overloaded (scripted)."})
        return out
    emit("message_delta", delta={"stop_reason": _stop_reason(plan), "stop_sequence": None},
         usage=usage if plan.usage_at_end else {"output_tokens": plan.usage.output_tokens})
    emit("message_stop")
    return out


class PromptCache:
    """Anthropic's prompt cache, modelled: a request's prefix up to each ``cache_control``
    breakpoint is written; a later request reads the longest prefix written before that ends
    at a block boundary at most 20 blocks before one of its breakpoints (the API looks no
    further back). Prefixes under 1024 tokens are not cached, as the API's smallest minimum.
    Sizes are estimated at about four characters a token."""

    LOOKBACK = 20
    MIN_TOKENS = 1024

    def __init__(self, capacity: int = 100_000) -> None:
        self._written: OrderedDict[bytes, None] = OrderedDict()
        self._capacity = capacity

    def use(self, body: Mapping[str, Any]) -> tuple[int, int, int]:
        """(tokens of the whole input, tokens read from the cache, tokens written to it)
        for a request, remembering what it wrote."""
        blocks = _cache_blocks(body)
        digest = hashlib.sha256()
        keys: list[bytes] = []
        sizes: list[int] = []
        total = 0
        for block, _marked in blocks:
            text = json.dumps(block, sort_keys=True)
            digest.update(text.encode())
            keys.append(digest.copy().digest())
            total += len(text)
            sizes.append(_estimate(total))
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        read = 0
        for mark in marks:
            for i in range(mark, max(-1, mark - self.LOOKBACK), -1):
                if keys[i] in self._written:
                    self._written.move_to_end(keys[i])
                    read = max(read, sizes[i])
                    break
        written = 0
        for mark in marks:
            if sizes[mark] >= self.MIN_TOKENS:
                written = max(written, sizes[mark] - read)
                self._written[keys[mark]] = None
        while len(self._written) > self._capacity:
            self._written.popitem(last=False)
        whole = sizes[-1] if sizes else 0
        return whole, read, max(0, written)

    def usage(self, plan: PlannedReply, body: Mapping[str, Any]) -> PlannedReply:
        """``plan`` with its input usage as this cache sees ``body`` (unless the script fixed
        the cached tokens)."""
        whole, read, written = self.use(body)
        if plan.cached_given:
            return plan
        return replace(plan, usage=replace(plan.usage, input_tokens=max(
            whole, plan.usage.input_tokens), cached_tokens=read, cache_write_tokens=written))


def _cache_blocks(body: Mapping[str, Any]) -> list[tuple[Any, bool]]:
    """The request's blocks in the cache's order (tools, system, messages), each without its
    ``cache_control`` and whether it carried one."""
    out: list[tuple[Any, bool]] = []

    def add(block: Any, role: str = "") -> None:
        if isinstance(block, Mapping):
            marked = "cache_control" in block
            block = {k: v for k, v in block.items() if k != "cache_control"}
        else:
            marked = False
        out.append(({"role": role, "block": block} if role else block, marked))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    for block in ([{"type": "text", "text": system}] if isinstance(system, str) else
                  system or []):
        add(block)
    for message in body.get("messages") or []:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        role = str(message.get("role"))
        for block in ([{"type": "text", "text": content}] if isinstance(content, str) else
                      content or []):
            add(block, role)
    return out
