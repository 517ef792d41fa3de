"""The wire formats: every stream shape collected into the same model events, and request
bodies built from encoded messages. Streams come from the test kit's scripted model
(``model_wire``), which emits the events real providers send, plus hand-written odd ones."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from codey_server.agent.conversation import (
    AssistantText,
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
    RefusalDelta,
    TextDelta,
    ToolCallRequested,
    Usage,
)
from codey_server.agent.tools import BUILTIN_TOOLS
from codey_server.agent.wire import chat, responses
from codey_server.agent.wire.errors import error_from_body
from codey_testkit.model_wire import chat_events, plan_reply, responses_events
from codey_testkit.script import Reply

WIRES = {"responses": responses.WIRE, "chat": chat.WIRE}
SHAPES = ["deltas", "final_only", "completed_only"]


class _Options:
    reasoning_summary = False
    max_output_tokens: int | None = None
    thinking_budget: int | None = None


def _events(api: str, reply: dict[str, Any], request: dict[str, Any] | None = None,
            chunk: int = 3) -> list[Any]:
    body = request or {"include": ["reasoning.encrypted_content"]}
    plan = plan_reply(msgspec.convert(reply, Reply), "m", body, chunk)
    wire = responses_events(plan, body) if api == "responses" else chat_events(plan, True)
    out = []
    for event in wire:
        data = event.data
        if data == "[DONE]":
            break
        out.append(data)
    return out


def _collect(api: str, events: list[Any]) -> list[ModelEvent]:
    collector = WIRES[api].collector()
    out: list[ModelEvent] = []
    for data in events:
        out += collector.feed(json.loads(json.dumps(data)))
    return out + collector.finish()


def _text(events: list[ModelEvent], kind: type[Any] = TextDelta) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("api", WIRES)
def test_text_arrives_once_whatever_the_shape(api: str, shape: str) -> None:
    events = _collect(api, _events(api, {"text": "Hello there, world.", "shape": shape}))
    assert _text(events) == "Hello there, world."
    assert isinstance(events[-1], Finished) and events[-1].incomplete is None
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].input_tokens > 0


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("api", WIRES)
def test_parallel_calls_with_split_arguments(api: str, shape: str) -> None:
    reply = {"text": "Two things.", "shape": shape, "calls": [
        {"name": "read_file", "arguments": {"path": "a.py"}, "id": "c1"},
        {"name": "list_dir", "arguments": {"path": "src", "depth": 2}, "id": "c2"}]}
    events = _collect(api, _events(api, reply, chunk=2))
    calls = [e for e in events if isinstance(e, ToolCallRequested)]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("c1", "read_file", {"path": "a.py"}), ("c2", "list_dir", {"path": "src", "depth": 2})]
    assert _text(events) == "Two things."


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("api", WIRES)
def test_refusal(api: str, shape: str) -> None:
    events = _collect(api, _events(api, {"refusal": "I can't help with that.", "shape": shape}))
    assert _text(events, RefusalDelta) == "I can't help with that."
    assert _text(events) == ""


@pytest.mark.parametrize("api", WIRES)
@pytest.mark.parametrize("reason", ["max_output_tokens", "content_filter"])
def test_incomplete(api: str, reason: str) -> None:
    events = _collect(api, _events(api, {"text": "Half an ans", "incomplete": reason}))
    assert _text(events) == "Half an ans"
    assert events[-1] == Finished(reason, events[-1].detail)  # type: ignore[arg-type]


@pytest.mark.parametrize("api", WIRES)
def test_an_empty_answer_is_complete_and_empty(api: str) -> None:
    events = _collect(api, _events(api, {}))
    assert not [e for e in events if isinstance(e, (TextDelta, ToolCallRequested))]
    assert isinstance(events[-1], Finished)


@pytest.mark.parametrize("shape", SHAPES)
def test_reasoning_summaries_and_encrypted_content(shape: str) -> None:
    reply = {"reasoning": ["First look.", "Then fix."], "encrypted_reasoning": "opaque==",
             "text": "Done.", "shape": shape}
    events = _collect("responses", _events("responses", reply))
    assert _text(events, ReasoningDelta) == "First look.\n\nThen fix."
    done = [e for e in events if isinstance(e, ReasoningDone)]
    assert len(done) == 1 and done[0].encrypted_content == "opaque=="


def test_chat_reasoning_content() -> None:
    events = _collect("chat", _events("chat", {"reasoning": "Hmm.", "text": "Yes."}))
    assert _text(events, ReasoningDelta) == "Hmm." and _text(events) == "Yes."


def test_chat_usage_in_every_chunk_counts_once() -> None:
    events = _collect("chat", _events("chat", {"text": "a" * 40, "usage_every_chunk": True,
                                               "usage": {"output_tokens": 10}}))
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].output_tokens == 10


@pytest.mark.parametrize("shape", ["deltas", "final_only"])
def test_chat_tool_calls_without_index(shape: str) -> None:
    reply = {"shape": shape, "tool_call_index": False, "calls": [
        {"name": "read_file", "arguments": {"path": "a"}, "id": "x1"},
        {"name": "read_file", "arguments": {"path": "b"}, "id": "x2"}]}
    events = _collect("chat", _events("chat", reply, chunk=2))
    calls = [e for e in events if isinstance(e, ToolCallRequested)]
    assert [(c.call_id, json.loads(c.arguments)) for c in calls] == [
        ("x1", {"path": "a"}), ("x2", {"path": "b"})]


def test_chat_odd_shapes() -> None:
    collector = chat.WIRE.collector()
    out: list[ModelEvent] = []
    # a name repeated in every chunk, arguments as an object, no ids, `message` not `delta`
    for data in [
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"name": "shell", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"name": "shell", "arguments": '{"command": ["ls"]}'}}]}}]},
        {"choices": [{"index": 0, "message": {"tool_calls": [
            {"index": 1, "function": {"name": "read_file", "arguments": {"path": "x"}}}]}}]},
        {"choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "ok"}]},
                      "finish_reason": "tool_calls"}]},
    ]:
        out += collector.feed(data)
    out += collector.finish()
    calls = [e for e in out if isinstance(e, ToolCallRequested)]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_0", "shell", {"command": ["ls"]}), ("call_1", "read_file", {"path": "x"})]
    assert _text(out) == "ok"


def test_responses_stream_without_its_end_is_cut() -> None:
    events = _events("responses", {"text": "Hello"})[:-1]  # no response.completed
    with pytest.raises(ModelError) as err:
        _collect("responses", events)
    assert err.value.code == "stream_cut"


@pytest.mark.parametrize("api", WIRES)
def test_stream_errors_are_model_errors(api: str) -> None:
    reply = {"text": "x", "stream_error": {"status": 400, "code": "context_length_exceeded",
                                           "message": "too long"}}
    events = _events(api, reply)
    if api == "chat":  # the SDK turns an error chunk into an APIError before we see it
        assert events[-1] == {"error": {"code": "context_length_exceeded",
                                        "message": "too long"}}
        return
    with pytest.raises(ModelError) as err:
        _collect(api, events)
    assert err.value.code == "context_length"


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"error": {"message": "Incorrect API key", "code": "invalid_api_key"}}, 401, "auth"),
    ({"error": {"message": "The model `x` does not exist", "code": "model_not_found"}}, 404,
     "not_found"),
    ({"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}},
     429, "quota"),
    ({"error": {"message": "Rate limit reached"}}, 429, "rate_limited"),
    ({"error": {"message": "maximum context length is 8192 tokens"}}, 400, "context_length"),
    ({"detail": "bad gateway"}, 502, "server"),
    ("plain text", 400, "bad_request"),
    (None, 403, "permission"),
])
def test_errors_are_classified_in_plain_words(body: Any, status: int, code: str) -> None:
    err = error_from_body(body, status, prefix="openai")
    assert err.code == code and err.message.startswith("openai: ")
    assert f"HTTP {status}" in err.message


# bodies ---------------------------------------------------------------------------------------

CONVERSATION = [
    SummaryEntry("earlier"), UserText("go"), ReasoningEntry("think", "enc=="),
    AssistantText("Two."), ToolCallEntry("c1", "read_file", "{}"),
    ToolCallEntry("c2", "list_dir", "{}"), ToolResultEntry("c1", "A"),
    ToolResultEntry("c2", "B"), AssistantText("Done."),
]


def _body(api: str) -> dict[str, Any]:
    wire = WIRES[api]
    assembler = wire.assembler()
    for entry in CONVERSATION:
        assembler.add(entry)
    raw = wire.body(model="m", instructions="sys", messages=assembler.finish(),
                    tools=wire.encode_tools(BUILTIN_TOOLS), session_id="ses_1",
                    options=_Options())
    body: dict[str, Any] = json.loads(raw)
    return body


def test_responses_body() -> None:
    body = _body("responses")
    assert body["store"] is False and body["stream"] is True
    assert body["prompt_cache_key"] == "ses_1"
    assert body["include"] == ["reasoning.encrypted_content"]
    assert [i.get("type", i.get("role")) for i in body["input"]] == [
        "user", "user", "reasoning", "assistant", "function_call", "function_call",
        "function_call_output", "function_call_output", "assistant"]
    assert body["input"][0]["content"].endswith("earlier")
    assert body["input"][2] == {"type": "reasoning", "encrypted_content": "enc==",
                                "summary": [{"type": "summary_text", "text": "think"}]}
    assert {t["name"] for t in body["tools"]} >= {"shell", "apply_patch"}


def test_chat_body() -> None:
    body = _body("chat")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "user", "assistant", "tool", "tool", "assistant"]
    assert body["messages"][3]["content"] == "Two."
    assert [c["id"] for c in body["messages"][3]["tool_calls"]] == ["c1", "c2"]
    assert body["stream_options"] == {"include_usage": True}
    assert all(t["type"] == "function" for t in body["tools"])


# images in tool results (view_image) -----------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 8
IMAGE_TURN = [
    UserText("look"), ToolCallEntry("c1", "view_image", "{}"),
    ToolCallEntry("c2", "read_file", "{}"),
    ToolResultEntry("c1", "the image a.png is attached", images=(("image/png", "h1"),)),
    ToolResultEntry("c2", "text"), AssistantText("Seen."),
]


def _image_body(api: str, entries: list[Any]) -> dict[str, Any]:
    wire = WIRES[api]
    assembler = wire.assembler(lambda digest: PNG if digest == "h1" else None)
    for entry in entries:
        assembler.add(entry)
    raw = wire.body(model="m", instructions="sys", messages=assembler.finish(), tools=b"[]",
                    session_id=None, options=_Options())
    body: dict[str, Any] = json.loads(raw)
    return body


def test_responses_carries_a_tool_results_image_in_its_output() -> None:
    body = _image_body("responses", IMAGE_TURN)
    outputs = [i for i in body["input"] if i.get("type") == "function_call_output"]
    assert outputs[1] == {"type": "function_call_output", "call_id": "c2", "output": "text"}
    text, image = outputs[0]["output"]
    assert text == {"type": "input_text", "text": "the image a.png is attached"}
    assert image["type"] == "input_image"
    assert image["image_url"].startswith("data:image/png;base64,iVBORw0KGgo")


def test_chat_follows_the_tool_messages_with_one_user_message_of_their_images() -> None:
    body = _image_body("chat", IMAGE_TURN)
    roles = [m["role"] for m in body["messages"]]
    # a tool message holds text only: the image comes after every result of the answer
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    follow = body["messages"][5]["content"]
    assert follow[0] == {"type": "text", "text": "The image from tool call c1:"}
    assert follow[1]["image_url"]["url"].startswith("data:image/png;base64,")
    # at the end of the conversation (the request right after the call) too
    ends = _image_body("chat", IMAGE_TURN[:5])
    assert [m["role"] for m in ends["messages"]][-3:] == ["tool", "tool", "user"]
    # an image no longer stored is said, not dropped silently
    gone = _image_body("chat", [ToolCallEntry("c9", "view_image", "{}"), ToolResultEntry(
        "c9", "x", images=(("image/png", "gone"),))])
    assert gone["messages"][-1]["content"][1] == {
        "type": "text", "text": "[an image that is no longer stored]"}
