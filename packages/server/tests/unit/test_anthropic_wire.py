"""Anthropic's Messages wire: every stream shape collected into the same model events as the
other wires, and request bodies (alternating turns, thinking sent back with its signature,
cache breakpoints). Streams come from the test kit's scripted model (``model_wire``), plus
hand-written odd ones."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from codey_server.agent.conversation import (
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
from codey_server.agent.tools import BUILTIN_TOOLS
from codey_server.agent.wire import responses, wire_for
from codey_server.agent.wire.anthropic import WIRE, max_output_for, merge_turns
from codey_server.agent.wire.common import REDACTED_TAG, THINKING_TAG
from codey_server.agent.wire.errors import error_from_body
from codey_testkit.model_wire import PromptCache, anthropic_events, plan_reply
from codey_testkit.script import Reply

SHAPES = ["deltas", "final_only", "completed_only"]


class _Options:
    reasoning_summary = False
    effort: str | None = None
    max_output_tokens: int | None = None
    thinking_budget: int | None = None


def _events(reply: dict[str, Any], chunk: int = 3) -> list[tuple[str, str]]:
    plan = plan_reply(msgspec.convert(reply, Reply), "claude-x", {"messages": []}, chunk)
    return [(e.name or "", json.dumps(e.data)) for e in anthropic_events(plan)]


def _collect(events: list[tuple[str, str]]) -> list[ModelEvent]:
    collector = WIRE.collector()
    out: list[ModelEvent] = []
    for name, data in events:
        out += collector.feed_sse(name, data)
    return out + collector.finish()


def _text(events: list[ModelEvent], kind: type[Any] = TextDelta) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


def test_the_kind_picks_this_wire() -> None:
    assert wire_for("anthropic") is WIRE and WIRE.path == "/v1/messages"


# the stream ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
def test_text_arrives_once_whatever_the_shape(shape: str) -> None:
    events = _collect(_events({"text": "Hello there, world.", "shape": shape}))
    assert _text(events) == "Hello there, world."
    assert events[-1] == Finished()
    [usage] = [e for e in events if isinstance(e, Usage)]
    assert usage.input_tokens > 0 and usage.output_tokens > 0


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_parallel_calls_with_input_cut_anywhere(shape: str, chunk: int) -> None:
    # quotes, backslashes and non-ASCII: pieces end inside strings and escapes
    tricky = {"path": 'dir "x"\\ä.py', "lines": [1, 2], "note": "日本"}
    reply = {"text": "Two things.", "shape": shape, "calls": [
        {"name": "read_file", "arguments": tricky, "id": "toolu_1"},
        {"name": "list_dir", "arguments": {}, "id": "toolu_2"}]}
    events = _collect(_events(reply, chunk=chunk))
    calls = [e for e in events if isinstance(e, ToolCallRequested)]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("toolu_1", "read_file", tricky), ("toolu_2", "list_dir", {})]
    assert _text(events) == "Two things."


@pytest.mark.parametrize("shape", SHAPES)
def test_thinking_keeps_its_signature_and_redacted_thinking_its_data(shape: str) -> None:
    reply = {"reasoning": ["First look.", "Then fix."], "encrypted_reasoning": "sig==",
             "redacted_reasoning": "secret-data", "text": "Done.", "shape": shape}
    events = _collect(_events(reply))
    assert _text(events, ReasoningDelta) == "First look.Then fix."
    done = [e for e in events if isinstance(e, ReasoningDone)]
    assert [d.encrypted_content for d in done] == [
        THINKING_TAG + "sig==", THINKING_TAG + "sig==", REDACTED_TAG + "secret-data"]
    # each thinking block closes its own reasoning item before the next one starts
    kinds = [type(e).__name__ for e in events if isinstance(e, (ReasoningDelta, ReasoningDone))]
    assert kinds.index("ReasoningDone") > kinds.index("ReasoningDelta")
    assert _text(events) == "Done."


@pytest.mark.parametrize(("reply", "finished"), [
    ({"text": "Half an ans", "incomplete": "max_output_tokens"},
     Finished("max_output_tokens", "max_tokens")),
    ({"text": "Half an ans", "incomplete": "content_filter"},
     Finished("content_filter", "refusal")),
    ({"refusal": "I can't help with that."}, Finished("content_filter", "refusal")),
    ({"calls": [{"name": "shell", "arguments": {"command": ["ls"]}}]}, Finished()),
])
def test_stop_reasons(reply: dict[str, Any], finished: Finished) -> None:
    events = _collect(_events(reply))
    assert events[-1] == finished


def test_an_empty_text_block_is_an_empty_answer() -> None:
    events = _events({})
    assert ("content_block_start", json.dumps({
        "type": "content_block_start", "index": 0,
        "content_block": {"type": "text", "text": ""}})) in events
    collected = _collect(events)
    assert not [e for e in collected if isinstance(e, (TextDelta, ToolCallRequested))]
    assert collected[-1] == Finished()


def test_usage_counts_cache_reads_and_writes_into_the_input() -> None:
    for at_end in (False, True):
        reply = {"text": "ok", "usage_at_end": at_end,
                 "usage": {"input_tokens": 1000, "output_tokens": 9, "cached_tokens": 700}}
        [usage] = [e for e in _collect(_events(reply)) if isinstance(e, Usage)]
        assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (1000, 700, 9)
    collector = WIRE.collector()
    for data in [
        {"type": "message_start", "message": {"usage": {
            "input_tokens": 10, "cache_read_input_tokens": 5000,
            "cache_creation_input_tokens": 300, "output_tokens": 1}}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 42, "output_tokens_details": {"thinking_tokens": 30}}},
    ]:
        collector.feed(data)
    usage, finished = collector.finish()
    assert usage == Usage(input_tokens=5310, output_tokens=42, reasoning_tokens=30,
                          total_tokens=5352, cached_tokens=5000, cache_write_tokens=300)
    assert finished == Finished()


def test_pings_anywhere_and_unknown_events_are_ignored() -> None:
    events = _events({"text": "Hi."})
    noisy: list[tuple[str, str]] = []
    for event in events:
        noisy += [event, ("ping", '{"type": "ping"}')]
    noisy.insert(3, ("future_event", '{"type": "future_event", "x": 1}'))
    assert _text(_collect(noisy)) == "Hi."


def test_a_stream_without_its_end_is_cut() -> None:
    events = [e for e in _events({"text": "Hello"}) if e[0] not in ("message_delta",
                                                                    "message_stop")]
    with pytest.raises(ModelError) as err:
        _collect(events)
    assert err.value.code == "stream_cut"


@pytest.mark.parametrize(("kind", "code"), [
    ("overloaded_error", "server"), ("api_error", "server"),
    ("rate_limit_error", "rate_limited"), ("authentication_error", "auth")])
def test_an_error_event_is_the_error_its_status_would_be(kind: str, code: str) -> None:
    reply = {"text": "x", "stream_error": {"type": kind, "message": "The model is busy."}}
    with pytest.raises(ModelError) as err:
        _collect(_events(reply))
    assert err.value.code == code and "The model is busy." in err.value.message
    assert err.value.status is None and "HTTP" not in err.value.message


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, 529,
     "server"),
    ({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, 429,
     "rate_limited"),
    ({"type": "error", "error": {"type": "invalid_request_error",
                                 "message": "prompt is too long: 210000 tokens > 200000 maximum"}},
     400, "context_length"),
    ({"type": "error", "error": {"type": "invalid_request_error", "message":
      "input length and `max_tokens` exceed context limit: 190000 + 32000 > 200000"}}, 400,
     "context_length"),
])
def test_http_errors_in_anthropics_shape(body: Any, status: int, code: str) -> None:
    err = error_from_body(body, status, prefix="claude")
    assert err.code == code and err.status == status and f"HTTP {status}" in err.message


# bodies -------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 8
CONVERSATION: list[Entry] = [
    SummaryEntry("earlier"), UserText("go"),
    ReasoningEntry("think", THINKING_TAG + "sig=="), ReasoningEntry("", REDACTED_TAG + "data"),
    AssistantText("Two."), ToolCallEntry("c1", "read_file", '{"path": "a"}'),
    ToolCallEntry("functions.list_dir:1", "list_dir", "{}"), ToolResultEntry("c1", "A"),
    ToolResultEntry("functions.list_dir:1", "B", images=(("image/png", "h1"),)),
    ReasoningEntry("openai's", "gAAAA-encrypted"), AssistantText("Done."), UserText("next"),
]


def _body(entries: list[Entry], tools: bytes | None = None,
          options: Any = None) -> dict[str, Any]:
    assembler = WIRE.assembler(lambda digest: PNG if digest == "h1" else None)
    for entry in entries:
        assembler.add(entry)
    raw = WIRE.body(model="claude-sonnet-4-5", instructions="sys",
                    messages=assembler.finish(),
                    tools=WIRE.encode_tools(BUILTIN_TOOLS) if tools is None else tools,
                    session_id="ses_1", options=options or _Options())
    body: dict[str, Any] = json.loads(raw)
    return body


def test_body_alternates_turns_and_sends_thinking_back_first() -> None:
    body = _body(CONVERSATION)
    assert body["stream"] is True and body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 64_000 and "thinking" not in body
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert [b["type"] for b in messages[0]["content"]] == ["text", "text"]
    assert messages[0]["content"][0]["text"].endswith("earlier")
    assistant = messages[1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "think", "signature": "sig=="}
    assert assistant[1] == {"type": "redacted_thinking", "data": "data"}
    assert [b["type"] for b in assistant[2:]] == ["text", "tool_use", "tool_use"]
    assert assistant[3]["input"] == {"path": "a"}
    # another provider's call id is made one the API takes, in its call and its result
    assert assistant[4]["id"] == "functions_list_dir_1"
    results = messages[2]["content"]
    assert [r["tool_use_id"] for r in results] == ["c1", "functions_list_dir_1"]
    assert results[0]["content"] == "A"
    text, image = results[1]["content"]
    assert text == {"type": "text", "text": "B"} and image["type"] == "image"
    assert image["source"]["media_type"] == "image/png"
    # OpenAI's encrypted reasoning is not Anthropic's to read
    assert messages[3]["content"] == [{"type": "text", "text": "Done."}]
    assert {t["name"] for t in body["tools"]} >= {"shell", "apply_patch"}
    assert all("input_schema" in t for t in body["tools"])


def test_cache_breakpoints_on_the_system_the_last_message_and_the_one_before() -> None:
    body = _body(CONVERSATION)
    assert body["system"] == [{"type": "text", "text": "sys",
                               "cache_control": {"type": "ephemeral"}}]
    marked = [(n, b["type"]) for n, m in enumerate(body["messages"])
              for b in m["content"] if "cache_control" in b]
    # this call's last message, and the previous call's (the user message before the answer)
    assert marked == [(2, "tool_result"), (4, "text")]


def test_thinking_budget_enables_thinking_under_max_tokens() -> None:
    options = _Options()
    options.thinking_budget = 16_000
    options.max_output_tokens = 8_000
    body = _body([UserText("hi")], options=options)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16_000}
    assert body["max_tokens"] > 16_000


def test_a_call_offering_no_tools_gets_tool_blocks_as_text() -> None:
    body = _body(CONVERSATION, tools=b"[]")
    assert "tools" not in body
    kinds = {b["type"] for m in body["messages"] for b in m["content"]}
    assert kinds <= {"text", "image"}
    said = json.dumps(body["messages"])
    assert "[called read_file with" in said and "[tool result c1:] A" in said


def test_the_responses_wire_leaves_anthropics_thinking_out() -> None:
    assembler = responses.WIRE.assembler()
    for entry in CONVERSATION:
        assembler.add(entry)
    sent = [json.loads(m) for m in assembler.finish()]
    reasoning = [m for m in sent if m.get("type") == "reasoning"]
    assert [r["encrypted_content"] for r in reasoning] == ["gAAAA-encrypted"]


def test_merge_turns_joins_adjacent_messages_of_one_role() -> None:
    user = b'{"role":"user","content":[{"type":"text","text":"a"}]}'
    user2 = b'{"role":"user","content":[{"type":"text","text":"b"}]}'
    assistant = b'{"role":"assistant","content":[{"type":"text","text":"c"}]}'
    merged = merge_turns([user, user2, assistant, user])
    assert [json.loads(m) for m in merged] == [
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "text", "text": "b"}]},
        json.loads(assistant), json.loads(user)]


@pytest.mark.parametrize(("model", "limit"), [
    ("claude-opus-4-1-20250805", 32_000), ("claude-opus-4-5", 64_000),
    ("claude-3-5-haiku-latest", 8_192), ("anthropic/claude-sonnet-4-20250514", 64_000),
    ("something-else", 8_192)])
def test_max_output_per_model(model: str, limit: int) -> None:
    assert max_output_for(model) == limit


def test_the_scripted_prompt_cache_reads_what_an_earlier_call_wrote() -> None:
    """The test kit's model of Anthropic's cache, on the bodies this wire builds: the second
    call of a turn reads everything up to the first call's last message."""
    cache = PromptCache()
    big = "x" * 20_000  # over the smallest cacheable prefix
    first = _body([UserText(big)])
    whole, read, written = cache.use(first)
    assert read == 0 and written == whole
    second = _body([UserText(big), ToolCallEntry("c1", "shell", "{}"),
                    ToolResultEntry("c1", "out")])
    whole2, read2, written2 = cache.use(second)
    assert read2 == whole and written2 == whole2 - whole
