"""Conformance: every wire shape a provider may send, for every provider kind, through the real
server, a real worker and the scripted model server (real processes, real HTTP)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codey_server.agent.wire.common import REDACTED_TAG, THINKING_TAG
from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.scenarios import create_session, idle, provider_config, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

KINDS = ["responses", "chat", "ollama", "anthropic"]
PATHS = {"responses": "/v1/responses", "anthropic": "/v1/messages"}
#: the Anthropic stack's model server wants this key, in x-api-key
ANTHROPIC_KEY = "sk-ant-conformance"
Check = Callable[[dict[str, Any], list[dict[str, Any]], str], None]


@dataclass
class Case:
    name: str
    steps: list[dict[str, Any]]
    check: Check


def _texts(s: dict[str, Any]) -> list[str]:
    return [i["text"] for i in s["items"] if i["kind"] == "assistant_message" and
            not i.get("partial")]


def _notices(s: dict[str, Any]) -> list[str]:
    return [i["code"] for i in s["items"] if i["kind"] == "notice"]


def _one_request(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert len(requests) == 1, "the model must not be called again"


def _check_text(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert _texts(s) == ["All done, nothing left."]
    assert s["usage"]["context_tokens"] > 0 and s["usage"]["turns"] == 1
    _one_request(s, requests, kind)


def _check_empty(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert _notices(s) == ["empty_answer"] and s["status"] == "idle"
    _one_request(s, requests, kind)


def _check_incomplete(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert _texts(s) == ["Partial ans"] and _notices(s) == ["incomplete"]
    _one_request(s, requests, kind)


def _check_refusal(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    [message] = [i for i in s["items"] if i["kind"] == "assistant_message"]
    assert message["text"] == "I can't help with that."
    if kind == "anthropic":
        # Claude's refusal is a stop reason, not a kind of text: what it said stays, and
        # the turn says why it ended
        assert _notices(s) == ["incomplete"] and "content filter" in s["items"][-1]["text"]
    else:
        assert message["refusal"]
    _one_request(s, requests, kind)


def _check_parallel(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    calls = tools(s)
    assert [(c["name"], c["status"]) for c in calls] == [("shell", "done"), ("list_dir", "done")]
    assert "parallel-a" in calls[0]["result"]
    assert _texts(s)[-1] == "Both seen."
    assert len(requests) == 2


def _check_reasoning(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert _texts(s)[-1] == "Reasoned."
    if kind == "anthropic":
        _check_thinking(s, requests, [("thinking", "Look first."), ("thinking", "Then act.")])
        return
    [reasoning] = [i for i in s["items"] if i["kind"] == "reasoning"]
    assert "Look first" in reasoning["text"]
    if kind == "responses":
        assert reasoning["encrypted_content"] == "opaque-reasoning=="
        second = requests[1]["body"]["input"]
        sent = [i for i in second if i.get("type") == "reasoning"]
        assert sent and sent[0]["encrypted_content"] == "opaque-reasoning=="
        assert requests[0]["body"]["include"] == ["reasoning.encrypted_content"]
        assert requests[0]["body"]["prompt_cache_key"] == s["session_id"]


def _check_thinking(s: dict[str, Any], requests: list[dict[str, Any]],
                    blocks: list[tuple[str, str]]) -> None:
    """Each thinking block is a reasoning item of its own, and the next request sends them
    back, unchanged and in order, with their signatures, before the answer's tool call."""
    reasoning = [i for i in s["items"] if i["kind"] == "reasoning"]
    tags = {"thinking": THINKING_TAG + "opaque-reasoning==", "redacted_thinking":
            REDACTED_TAG + "redacted-data"}
    assert [(i["text"], i["encrypted_content"]) for i in reasoning] == [
        (text if kind == "thinking" else "", tags[kind]) for kind, text in blocks]
    assert len(requests) == 2
    [answer] = [m for m in requests[1]["body"]["messages"] if m["role"] == "assistant"]
    sent = [b for b in answer["content"] if b["type"] in ("thinking", "redacted_thinking")]
    assert sent == [{"type": "thinking", "thinking": text, "signature": "opaque-reasoning=="}
                    if kind == "thinking" else {"type": kind, "data": "redacted-data"}
                    for kind, text in blocks]
    assert [b["type"] for b in answer["content"]][-1] == "tool_use"


def _check_redacted(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert _texts(s)[-1] == "Reasoned."
    if kind == "anthropic":
        _check_thinking(s, requests, [("thinking", "Hidden next."),
                                      ("redacted_thinking", "")])


def _check_cut(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    partial = [i for i in s["items"] if i["kind"] == "assistant_message" and i["partial"]]
    assert partial, "the cut answer stays visible, marked partial"
    assert _texts(s) == ["Recovered after the cut."]
    assert len(requests) == 2
    assert "This answer will" not in str(requests[1]["body"])


def _check_usage_once(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert s["usage"]["turns"] == 1 and s["usage"]["output_tokens"] == 7


def _check_stream_error(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    errors = [i for i in s["items"] if i["kind"] == "error_item"]
    assert len(errors) == 1, s["items"]
    error = errors[0]
    assert "overloaded right now" in error["message"] and s["status"] == "error"
    assert "Traceback" not in error["message"]


def _check_retried(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert _texts(s) == ["Through after a wait."]
    assert len(requests) == 2, "one refused call, one retry"
    assert requests[1]["ts"] - requests[0]["ts"] >= 0.3, "Retry-After is honoured"


def _check_split_input(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    [call] = tools(s)
    assert call["status"] == "done" and 'naïve "quoted" \\ ünïcode' in call["result"]
    assert _texts(s)[-1] == "Split seen."


def _usage_events(stack: Stack, sid: str) -> list[dict[str, Any]]:
    r = stack.server.http.get(f"/api/sessions/{sid}/log")
    assert r.status_code == 200, r.text
    events = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    return [e["event"] for e in events if e["event"]["type"] == "token_usage_recorded"]


def _check_cached(s: dict[str, Any], requests: list[dict[str, Any]], kind: str) -> None:
    assert _texts(s)[-1] == "Cached."
    if kind != "anthropic":
        return
    body = requests[1]["body"]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    marked = [n for n, m in enumerate(body["messages"]) for b in m["content"]
              if "cache_control" in b]
    assert marked == [len(body["messages"]) - 3, len(body["messages"]) - 1]
    assert s["usage"]["cache_write_tokens"] > 0


def _reply(name: str, reply: dict[str, Any], **match: Any) -> dict[str, Any]:
    return {"match": {"user": f"case {name}", **match}, "reply": reply}


TEXT = "All done, nothing left."
CASES = [
    Case("deltas", [_reply("deltas", {"text": TEXT, "chunk_size": 3})], _check_text),
    Case("final_only", [_reply("final_only", {"text": TEXT, "shape": "final_only"})],
         _check_text),
    Case("completed_only", [_reply("completed_only", {"text": TEXT,
                                                      "shape": "completed_only"})],
         _check_text),
    Case("empty", [_reply("empty", {})], _check_empty),
    Case("empty_final", [_reply("empty_final", {"shape": "completed_only"})], _check_empty),
    Case("incomplete", [_reply("incomplete", {"text": "Partial ans",
                                              "incomplete": "max_output_tokens"})],
         _check_incomplete),
    Case("filtered", [_reply("filtered", {"text": "Partial ans",
                                          "incomplete": "content_filter"})],
         _check_incomplete),
    Case("refusal", [_reply("refusal", {"refusal": "I can't help with that."})],
         _check_refusal),
    Case("refusal_final", [_reply("refusal_final", {"refusal": "I can't help with that.",
                                                    "shape": "final_only"})], _check_refusal),
    Case("parallel", [
        _reply("parallel", {"chunk_size": 2, "calls": [
            {"name": "shell", "arguments": {"command": ["echo", "parallel-a"]}},
            {"name": "list_dir", "arguments": {"path": "."}}]}),
        {"match": {"tool": "shell", "tool_output": "parallel-a"}, "reply": {"text": "Both seen."}},
    ], _check_parallel),
    Case("parallel_no_index", [
        _reply("parallel_no_index", {"tool_call_index": False, "calls": [
            {"name": "shell", "arguments": {"command": ["echo", "parallel-a"]}},
            {"name": "list_dir", "arguments": {"path": "."}}]}),
        {"match": {"tool": "shell", "tool_output": "parallel-a"}, "reply": {"text": "Both seen."}},
    ], _check_parallel),
    Case("reasoning", [
        _reply("reasoning", {"reasoning": ["Look first.", "Then act."],
                             "encrypted_reasoning": "opaque-reasoning==",
                             "calls": [{"name": "shell",
                                        "arguments": {"command": ["echo", "after-thinking"]}}]}),
        {"match": {"tool": "shell", "tool_output": "after-thinking"},
         "reply": {"text": "Reasoned."}},
    ], _check_reasoning),
    Case("cut", [
        {**_reply("cut", {"text": "This answer will stop in the middle of it.", "chunk_size": 4,
                          "disconnect_after": 6}), "times": 1},
        _reply("cut", {"text": "Recovered after the cut."}),
    ], _check_cut),
    Case("usage_every_chunk", [_reply("usage_every_chunk", {
        "text": "counted once", "usage_every_chunk": True, "usage": {"output_tokens": 7}})],
        _check_usage_once),
    Case("usage_at_end", [_reply("usage_at_end", {"text": "counted once",
                                                  "usage": {"output_tokens": 7}})],
         _check_usage_once),
    Case("stream_error", [_reply("stream_error", {"text": "x", "stream_error": {
        "code": "server_error", "message": "The model is overloaded right now."}})],
         _check_stream_error),
    Case("usage_only_at_end", [_reply("usage_only_at_end", {
        "text": "counted once", "usage_at_end": True, "usage": {"output_tokens": 7}})],
        _check_usage_once),
    Case("redacted", [
        _reply("redacted", {"reasoning": "Hidden next.", "encrypted_reasoning":
                            "opaque-reasoning==", "redacted_reasoning": "redacted-data",
                            "calls": [{"name": "shell",
                                       "arguments": {"command": ["echo", "after-redacted"]}}]}),
        {"match": {"tool": "shell", "tool_output": "after-redacted"},
         "reply": {"text": "Reasoned."}},
    ], _check_redacted),
    Case("overloaded", [
        {**_reply("overloaded", {"error": {"status": 529, "retry_after": 0.4}}), "times": 1},
        _reply("overloaded", {"text": "Through after a wait."}),
    ], _check_retried),
    Case("rate_limited", [
        {**_reply("rate_limited", {"error": {"status": 429, "retry_after": 0.4}}), "times": 1},
        _reply("rate_limited", {"text": "Through after a wait."}),
    ], _check_retried),
    Case("split_input", [
        _reply("split_input", {"chunk_size": 1, "calls": [{"name": "shell", "arguments": {
            "command": ["echo", 'naïve "quoted" \\ ünïcode']}}]}),
        {"match": {"tool": "shell", "tool_output": "naïve"}, "reply": {"text": "Split seen."}},
    ], _check_split_input),
    Case("cached", [
        _reply("cached", {"calls": [{"name": "shell",
                                     "arguments": {"command": ["echo", "cache-me"]}}]}),
        {"match": {"tool": "shell", "tool_output": "cache-me"}, "reply": {"text": "Cached."}},
    ], _check_cached),
]


@dataclass
class Stack:
    kind: str
    model: ModelServerHandle
    server: ServerProcess
    worker: WorkerProcess
    project: Path


@pytest.fixture(scope="module", params=KINDS)
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    kind = request.param
    root = tmp_path_factory.mktemp(f"conformance-{kind}")
    steps = [step for case in CASES for step in case.steps]
    key = ANTHROPIC_KEY if kind == "anthropic" else None
    with start_model_server({"model": "scripted-1", "steps": steps}, root / "model",
                            api_key=key) as model:
        config = provider_config(model, kind=kind)
        config["providers"][0]["max_retries"] = 1
        env = {}
        if key is not None:
            config["providers"][0].update(auth="api_key", api_key_env="CODEY_TEST_ANTHROPIC_KEY")
            env["CODEY_TEST_ANTHROPIC_KEY"] = key
        with ServerProcess(root / "server", config=config, env=env) as server, \
                WorkerProcess(server, root / "worker") as worker:
            project = Path(worker.workdir("conformance"))
            project.mkdir(parents=True)
            yield Stack(kind, model, server, worker, project)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_shape(stack: Stack, case: Case) -> None:
    """Chat-only options (``tool_call_index``, ``usage_every_chunk``) change nothing on the
    Responses wire; those cases still run there, as plain ones."""
    path = PATHS.get(stack.kind, "/v1/chat/completions")
    before = len(stack.model.requests(path))
    sid = create_session(stack.server, stack.worker, str(stack.project), f"case {case.name}")
    s = wait_for(stack.server, sid, idle, what=f"the {case.name} turn to end")
    requests = [r for r in stack.model.requests(path)[before:]
                if f"case {case.name}" in str(r["body"])]
    case.check(s, requests, stack.kind)
    if stack.kind == "anthropic":
        for r in requests:
            assert r["api_key"] and not r["bearer"], "the key goes in x-api-key"
            assert r["headers"]["anthropic-version"] == "2023-06-01"


@pytest.mark.parametrize("stack", ["anthropic"], indirect=True)
def test_anthropic_turns_read_most_of_their_input_from_the_prompt_cache(stack: Stack) -> None:
    """A turn of several calls: each call after the first reads what the one before wrote
    (the system prompt, the tools, the conversation up to its last message)."""
    # a prompt of its own (the "case cached" steps answer it): the session's conversation
    # is new to the cache, only the system prompt and the tools are there already
    sid = create_session(stack.server, stack.worker, str(stack.project),
                         "case cached, once more")
    wait_for(stack.server, sid, idle, what="the cached turn to end")
    first, second = _usage_events(stack, sid)
    assert first["cache_write_tokens"] > 0 and first["cached_tokens"] > 0
    assert second["cached_tokens"] >= first["input_tokens"] > 0
    assert second["cached_tokens"] > 0.8 * second["input_tokens"], second
