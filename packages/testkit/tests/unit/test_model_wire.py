"""Wire shapes, validated strictly against the openai SDK's own pydantic models."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from codey_testkit.model_wire import (
    chat_body,
    chat_events,
    plan_reply,
    responses_body,
    responses_events,
)
from codey_testkit.script import Call, Reply, Usage

STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)

REPLY = Reply(
    reasoning=["First look.", "Then act."],
    text="Hello there, world",
    calls=[Call(name="shell", arguments={"argv": ["ls"]}, id="call_fixed"),
           Call(name="read_file", arguments="{broken")],
)
BODY: dict[str, Any] = {"model": "scripted-1", "input": "hi", "tools": []}


def test_responses_events_validate_and_reassemble() -> None:
    plan = plan_reply(REPLY, "scripted-1", BODY, chunk_size=5)
    events = responses_events(plan, BODY)
    parsed = [STREAM_EVENT.validate_python(e.data) for e in events]
    assert [p.type for p in parsed] == [e.name for e in events]
    assert [p.sequence_number for p in parsed] == list(range(len(parsed)))
    summaries = {}
    for p in parsed:
        if p.type == "response.reasoning_summary_text.delta":
            summaries[p.summary_index] = summaries.get(p.summary_index, "") + p.delta
    assert summaries == {0: "First look.", 1: "Then act."}
    args: dict[int, str] = {}
    for p in parsed:
        if p.type == "response.function_call_arguments.delta":
            args[p.output_index] = args.get(p.output_index, "") + p.delta
    assert args == {2: '{"argv": ["ls"]}', 3: "{broken"}
    done = [p for p in parsed if p.type == "response.output_item.done"]
    assert [d.item.type for d in done] == ["reasoning", "message", "function_call",
                                           "function_call"]
    completed = parsed[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "Hello there, world"
    assert completed.response.output[2].call_id == "call_fixed"
    # Only content-carrying events are paced.
    assert {e.name for e in events if e.delta} == {
        "response.reasoning_summary_text.delta", "response.output_text.delta",
        "response.function_call_arguments.delta"}
    assert events[0].encode().startswith(b"event: response.created\ndata: {")


def test_responses_body_validates() -> None:
    plan = plan_reply(Reply(text="x", usage=Usage(input_tokens=7, output_tokens=3)), "m", BODY, 4)
    response = Response.model_validate(responses_body(plan, BODY))
    assert response.output_text == "x"
    assert response.usage is not None and response.usage.total_tokens == 10


def test_chat_events_validate_and_end_with_done() -> None:
    plan = plan_reply(REPLY, "m", {"messages": []}, chunk_size=4)
    events = chat_events(plan, include_usage=True)
    assert events[-1].encode() == b"data: [DONE]\n\n"
    chunks = [ChatCompletionChunk.model_validate(e.data) for e in events[:-1]]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, world"
    pieces: dict[int, list[Any]] = {}
    for c in chunks:
        for choice in c.choices:
            for tc in choice.delta.tool_calls or []:
                pieces.setdefault(tc.index, []).append(tc)
    assert pieces[0][0].id == "call_fixed" and pieces[0][0].function.name == "shell"
    assert all(tc.id is None for tc in pieces[0][1:])
    assert json.loads("".join(tc.function.arguments for tc in pieces[0])) == {"argv": ["ls"]}
    assert "".join(tc.function.arguments for tc in pieces[1]) == "{broken"
    without = chat_events(plan, include_usage=False)
    assert all("usage" not in e.data for e in without[:-1] if isinstance(e.data, dict))


def test_chat_body_validates() -> None:
    plan = plan_reply(REPLY, "m", {"messages": []}, chunk_size=4)
    completion = ChatCompletion.model_validate(chat_body(plan))
    message = completion.choices[0].message
    assert message.content == "Hello there, world"
    assert [c.function.name for c in message.tool_calls or []] == ["shell", "read_file"]
    assert completion.usage is not None and completion.usage.completion_tokens > 0


def test_text_only_reply_finishes_with_stop() -> None:
    plan = plan_reply(Reply(text=""), "m", {"messages": []}, chunk_size=4)
    chunks = [e.data for e in chat_events(plan, include_usage=False)[:-1]]
    assert isinstance(chunks[-1], dict) and chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_calls_process_id_placeholder_is_the_newest_process_in_the_request() -> None:
    from codey_testkit.script import Call

    body = {"messages": [
        {"role": "tool", "tool_call_id": "c1", "content": "process proc_0a1b2c3d is running"},
        {"role": "tool", "tool_call_id": "c2", "content": "process proc_99ffee00 is running"}]}
    reply = Reply(calls=[Call(name="kill", arguments={"process_id": "$PROCESS_ID"})])
    [call] = plan_reply(reply, "m", body, 4).calls
    assert json.loads(call.arguments) == {"process_id": "proc_99ffee00"}
    [none] = plan_reply(reply, "m", {"messages": []}, 4).calls
    assert json.loads(none.arguments) == {"process_id": "proc_none"}
