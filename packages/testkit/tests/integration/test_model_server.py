"""The scripted model server as a real process, driven by the real ``openai`` and ``anthropic``
SDKs."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from codey_testkit.errors import ProcessExitedError, TestkitError
from codey_testkit.model_server import ModelServerHandle, start_model_server

pytestmark = pytest.mark.integration

READ_FILE_TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
CHAT_READ_FILE_TOOL = {
    "type": "function",
    "function": {k: v for k, v in READ_FILE_TOOL.items() if k != "type"},
}

FIX_SCRIPT: dict[str, Any] = {
    "model": ["scripted-1", "scripted-2"],
    "steps": [
        {
            "match": {"user": "fix the tests"},
            "reply": {
                "reasoning": "Look at the file first",
                "text": "Let me look at app.py.",
                "calls": [{"name": "read_file", "arguments": {"path": "app.py"}}],
                "chunk_size": 4,
            },
        },
        {"match": {"tool": "shell", "tool_output": "def add"}, "reply": {"text": "wrong tool"}},
        {"match": {"tool": "read_file", "tool_output": "def add"},
         "reply": {"text": "The bug is in add."}},
    ],
}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServerHandle]:
    """One server for the module; every test installs its own script and clears records."""
    with start_model_server({"steps": []}, tmp_path_factory.mktemp("model")) as handle:
        yield handle


def fresh(model: ModelServerHandle, script: dict[str, Any]) -> openai.OpenAI:
    model.set_script(script)
    model.clear_requests()
    return openai.OpenAI(base_url=model.base_url, api_key="sk-any", max_retries=0, timeout=10)


def test_responses_stream_text_reasoning_call_then_tool_output(model: ModelServerHandle) -> None:
    client = fresh(model, FIX_SCRIPT)
    with client.responses.create(
        model="scripted-1", input="please fix the tests", tools=[READ_FILE_TOOL], stream=True
    ) as stream:
        events = list(stream)
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    for name in ("response.reasoning_summary_text.done", "response.output_text.done",
                 "response.content_part.added", "response.content_part.done",
                 "response.function_call_arguments.done", "response.output_item.done"):
        assert name in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text_deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(text_deltas) == "Let me look at app.py."
    assert len(text_deltas) == 6  # 22 chars in chunks of 4
    reasoning = "".join(
        e.delta for e in events if e.type == "response.reasoning_summary_text.delta"
    )
    assert reasoning == "Look at the file first"
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"path": "app.py"}

    final = events[-1].response
    assert final.status == "completed"
    assert final.output_text == "Let me look at app.py."
    assert final.usage is not None and final.usage.total_tokens > 0
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "read_file"

    # Second turn the stateful way: only the tool output, chained by previous_response_id,
    # so the server must remember which tool that call_id belonged to.
    second = client.responses.create(
        model="scripted-1",
        previous_response_id=final.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                "output": "def add(a, b):\n    return a - b\n"}],
    )
    assert second.output_text == "The bug is in add."

    recorded = model.requests("/v1/responses")
    assert [r["step"] for r in recorded] == [0, 2]
    assert recorded[1]["latest"]["tool_results"][0]["name"] == "read_file"
    assert model.step_uses() == [1, 0, 1]


def test_responses_stream_helper_and_full_history(model: ModelServerHandle) -> None:
    client = fresh(model, FIX_SCRIPT)
    with client.responses.stream(model="scripted-2", input="fix the tests") as stream:
        final = stream.get_final_response()
    call = next(item for item in final.output if item.type == "function_call")
    history: list[Any] = [{"role": "user", "content": "fix the tests"}]
    history += [item.model_dump(exclude_none=True) for item in final.output]
    history.append({"type": "function_call_output", "call_id": call.call_id,
                    "output": "def add(a, b): ..."})
    second = client.responses.create(model="scripted-2", input=history)
    assert second.output_text == "The bug is in add."
    assert second.model == "scripted-2"


def test_chat_completions_stream_with_tool_calls(model: ModelServerHandle) -> None:
    client = fresh(model, FIX_SCRIPT)
    messages: list[Any] = [{"role": "user", "content": "fix the tests please"}]
    stream = client.chat.completions.create(
        model="scripted-1", messages=messages, tools=[CHAT_READ_FILE_TOOL], stream=True,
        stream_options={"include_usage": True},
    )
    content, calls, finish, usage = "", {}, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
    assert content == "Let me look at app.py."
    assert finish == "tool_calls"
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert list(calls) == [0]
    call = calls[0]
    assert call["name"] == "read_file" and json.loads(call["arguments"]) == {"path": "app.py"}
    assert call["id"].startswith("call_")

    messages.append({"role": "assistant", "content": content, "tool_calls": [
        {"id": call["id"], "type": "function",
         "function": {"name": call["name"], "arguments": call["arguments"]}}]})
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "def add(a, b):"})
    answer = client.chat.completions.create(model="scripted-1", messages=messages)
    assert answer.choices[0].message.content == "The bug is in add."
    assert answer.choices[0].finish_reason == "stop"
    assert [r["step"] for r in model.requests()] == [0, 2]


def test_429_with_retry_after_then_success(model: ModelServerHandle) -> None:
    client = fresh(model, {"steps": [
        {"match": {"user": "flaky"}, "times": 1,
         "reply": {"error": {"status": 429, "retry_after": 1}}},
        {"match": {"user": "flaky"}, "reply": {"text": "ok now"}},
    ]})
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="scripted-1", input="flaky one")
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.headers["x-ratelimit-limit-requests"]
    assert caught.value.code == "rate_limit_exceeded"
    assert client.responses.create(model="scripted-1", input="flaky two").output_text == "ok now"
    assert [r["status"] for r in model.requests()] == [429, 200]


def test_sdk_retry_honours_retry_after(model: ModelServerHandle) -> None:
    fresh(model, {"steps": [
        {"match": {"user": "x"}, "times": 1,
         "reply": {"error": {"status": 429, "retry_after": 0.3}}},
        {"match": {"any": True}, "reply": {"text": "after retry"}},
    ]})
    client = openai.OpenAI(base_url=model.base_url, api_key="k", max_retries=2, timeout=10)
    started = time.monotonic()
    answer = client.chat.completions.create(model="scripted-1",
                                            messages=[{"role": "user", "content": "x"}])
    assert answer.choices[0].message.content == "after retry"
    assert time.monotonic() - started >= 0.3
    assert len(model.requests()) == 2


def test_scripted_500_and_unmatched_request(model: ModelServerHandle) -> None:
    client = fresh(model, {"steps": [
        {"match": {"user": "boom"}, "reply": {"error": {"status": 500}}},
    ]})
    with pytest.raises(openai.InternalServerError) as scripted:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "boom"}])
    assert scripted.value.status_code == 500
    with pytest.raises(openai.InternalServerError) as unmatched:
        client.responses.create(model="m", input="something else")
    body = unmatched.value.body
    assert isinstance(body, dict) and body["code"] == "no_step_matched"
    assert "something else" in body["message"]
    assert [r["step"] for r in model.requests()] == [0, None]
    assert "no script step matched" in model.process.read_log()


def test_slow_streaming_is_slow(model: ModelServerHandle) -> None:
    client = fresh(model, {"steps": [
        {"match": {"any": True},
         "reply": {"text": "aaaaabbbbbccccc", "chunk_size": 5, "delay_ms": 150}},
    ]})
    arrivals = []
    with client.responses.create(model="m", input="go", stream=True) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                arrivals.append((time.monotonic(), event.delta))
    assert [d for _, d in arrivals] == ["aaaaa", "bbbbb", "ccccc"]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
    assert all(gap >= 0.12 for gap in gaps), gaps


def test_scripted_disconnect_breaks_the_stream(model: ModelServerHandle) -> None:
    client = fresh(model, {"steps": [
        {"match": {"any": True}, "reply": {"text": "never finished", "disconnect_after": 4}},
    ]})
    seen = []
    with (
        pytest.raises(openai.APIConnectionError),
        client.responses.create(model="m", input="go", stream=True) as stream,
    ):
        for event in stream:
            seen.append(event.type)
    assert len(seen) == 4 and "response.completed" not in seen


def test_models_and_ollama_tags(model: ModelServerHandle) -> None:
    client = fresh(model, FIX_SCRIPT)
    assert [m.id for m in client.models.list()] == ["scripted-1", "scripted-2"]
    assert [(r["path"], r["status"]) for r in model.requests()] == [("/v1/models", 200)]
    tags = httpx.get(f"{model.url}/api/tags", timeout=5).json()
    assert [m["name"] for m in tags["models"]] == ["scripted-1", "scripted-2"]
    assert httpx.get(f"{model.url}/_health", timeout=5).json() == {"status": "ok"}


def test_rate_limit_headers_count_down(model: ModelServerHandle) -> None:
    client = fresh(model, {
        "options": {"rate_limit": {"limit_requests": 50, "limit_tokens": 1000}},
        "steps": [{"match": {"any": True}, "reply": {"text": "hi", "usage": {
            "input_tokens": 10, "output_tokens": 5}}}],
    })
    seen = []
    for _ in range(2):
        raw = client.responses.with_raw_response.create(model="m", input="x")
        seen.append(raw.headers)
        assert raw.parse().usage.total_tokens == 15
    for name in ("limit-requests", "remaining-requests", "reset-requests", "limit-tokens",
                 "remaining-tokens", "reset-tokens"):
        assert f"x-ratelimit-{name}" in seen[0]
    assert seen[0]["x-ratelimit-limit-requests"] == "50"
    remaining = [int(h["x-ratelimit-remaining-requests"]) for h in seen]
    tokens = [int(h["x-ratelimit-remaining-tokens"]) for h in seen]
    assert remaining[0] - remaining[1] == 1
    assert tokens[0] - tokens[1] == 15


def test_set_script_rejects_bad_scripts(model: ModelServerHandle) -> None:
    with pytest.raises(TestkitError, match="usr"):
        model.set_script({"steps": [{"match": {"usr": "typo"}, "reply": {"text": "x"}}]})


def test_recorded_requests_hide_the_bearer(model: ModelServerHandle) -> None:
    client = fresh(model, FIX_SCRIPT)
    client.responses.create(model="scripted-1", input="fix the tests", stream=True).close()
    httpx.post(f"{model.base_url}/chat/completions", timeout=5,
               json={"model": "m", "messages": [{"role": "user", "content": "fix the tests"}]})
    first, second = model.requests()
    assert first["path"] == "/v1/responses" and first["bearer"] is True
    assert first["body"]["input"] == "fix the tests" and first["body"]["stream"] is True
    assert first["step"] == 0 and first["api"] == "responses"
    assert "authorization" not in first["headers"]
    assert "sk-any" not in json.dumps(first)
    assert second["path"] == "/v1/chat/completions" and second["bearer"] is False


def test_each_record_names_the_connection_it_came_over(model: ModelServerHandle) -> None:
    fresh(model, {"steps": [{"match": {"any": True}, "reply": {"text": "hi"}}]})
    body = {"model": "m", "input": "hi"}
    with httpx.Client(timeout=5) as kept:  # one kept-alive connection for both calls
        kept.post(f"{model.base_url}/responses", json=body).raise_for_status()
        kept.post(f"{model.base_url}/responses", json=body).raise_for_status()
    httpx.post(f"{model.base_url}/responses", json=body, timeout=5).raise_for_status()
    first, second, third = (r["peer"] for r in model.requests())
    assert first == second != third
    assert first.startswith("127.0.0.1:")


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_the_listen_backlog_is_the_one_asked_for(tmp_path: Path) -> None:
    # a small accept queue, as many self-hosted model servers have: the herd test needs it
    with start_model_server({"steps": []}, tmp_path, backlog=5) as model:
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{model.port}"],
                                   capture_output=True, text=True, check=True).stdout.split()
        assert listening[0] == "LISTEN" and listening[2] == "5"  # Send-Q: the backlog


def test_api_key_required(tmp_path: Path) -> None:
    script = {"steps": [{"match": {"any": True}, "reply": {"text": "hello"}}]}
    with start_model_server(script, tmp_path, api_key="sk-secret") as model:
        bare = httpx.post(f"{model.base_url}/responses", json={"input": "hi"}, timeout=5)
        assert bare.status_code == 401
        assert bare.json()["error"]["code"] == "invalid_api_key"
        assert bare.json()["error"]["type"] == "invalid_request_error"
        wrong = openai.OpenAI(base_url=model.base_url, api_key="sk-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.responses.create(model="m", input="hi")
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        right = openai.OpenAI(base_url=model.base_url, api_key="sk-secret", max_retries=0)
        assert right.responses.create(model="m", input="hi").output_text == "hello"
        assert [r["status"] for r in model.requests()] == [401, 401, 401, 200]
        assert "sk-secret" not in json.dumps(model.requests())


ANTHROPIC_SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "fix the tests"}, "reply": {
        "reasoning": ["Look first.", "Then act."], "encrypted_reasoning": "sig==",
        "redacted_reasoning": "hidden", "text": "Let me look.", "chunk_size": 3,
        "calls": [{"name": "read_file", "arguments": {"path": 'a "b".py'}, "id": "toolu_1"},
                  {"name": "list_dir", "arguments": {}, "id": "toolu_2"}]}},
    {"match": {"user": "busy"}, "reply": {"error": {"status": 529, "retry_after": 2}}},
]}


def test_the_anthropic_sdk_reads_the_messages_stream(model: ModelServerHandle) -> None:
    """The official SDK's stream accumulator takes every event the server sends: thinking
    with its signature, redacted thinking, text, two tool calls from input_json_delta."""
    model.set_script(ANTHROPIC_SCRIPT)
    model.clear_requests()
    client = anthropic.Anthropic(api_key="sk-ant-any", base_url=model.url, max_retries=0)
    with client.messages.stream(model="scripted-1", max_tokens=1024, messages=[
            {"role": "user", "content": "fix the tests"}]) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == [
        "thinking", "thinking", "redacted_thinking", "text", "tool_use", "tool_use"]
    first = message.content[0]
    assert first.type == "thinking" and (first.thinking, first.signature) == (
        "Look first.", "sig==")
    tool = message.content[4]
    assert tool.type == "tool_use" and tool.input == {"path": 'a "b".py'}
    assert message.stop_reason == "tool_use" and message.usage.output_tokens > 0
    [record] = model.requests("/v1/messages")
    assert record["api"] == "anthropic" and record["latest"] == {
        "kind": "user", "text": "fix the tests"}
    assert "sk-ant-any" not in json.dumps(record)


def test_anthropic_errors_in_its_shape(tmp_path: Path) -> None:
    with start_model_server(ANTHROPIC_SCRIPT, tmp_path, api_key="sk-ant-secret") as model:
        bare = httpx.post(f"{model.url}/v1/messages", json={"messages": []}, timeout=5)
        assert bare.status_code == 401
        assert bare.json() == {"type": "error", "error": {
            "type": "authentication_error", "message": bare.json()["error"]["message"]}}
        keyed = httpx.post(f"{model.url}/v1/messages", timeout=5,
                           headers={"x-api-key": "sk-ant-secret"},
                           json={"messages": [{"role": "user", "content": "busy"}]})
        assert keyed.status_code == 529 and keyed.headers["retry-after"] == "2"
        assert keyed.json()["error"]["type"] == "overloaded_error"
        client = anthropic.Anthropic(api_key="sk-ant-secret", base_url=model.url,
                                     max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as err:
            client.messages.create(model="m", max_tokens=10,
                                   messages=[{"role": "user", "content": "busy"}])
        assert err.value.status_code == 529
        records = model.requests()
        assert [r["api_key"] for r in records] == [False, True, False]
        assert "sk-ant-secret" not in json.dumps(records)


def test_bad_script_file_fails_fast(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps:\n  - match: {}\n    reply: {text: x}\n")
    with pytest.raises(ProcessExitedError, match="match needs one of"):
        start_model_server(bad, tmp_path)
