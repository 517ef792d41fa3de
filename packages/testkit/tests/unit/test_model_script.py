"""Script loading and matching of a request's latest input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codey_testkit.errors import ScriptError
from codey_testkit.script import (
    LatestInput,
    ScriptRunner,
    ToolResult,
    chat_latest,
    load_script,
    responses_latest,
)


def runner(steps: list[dict[str, Any]]) -> ScriptRunner:
    return ScriptRunner(load_script({"steps": steps}))


def user(text: str) -> LatestInput:
    return LatestInput("user", text=text)


def tool(name: str | None, output: str) -> LatestInput:
    return LatestInput("tool", tool_results=(ToolResult("call_1", name, output),))


def test_first_matching_step_wins_and_times_falls_through() -> None:
    r = runner([
        {"match": {"user": "flaky"}, "times": 1, "reply": {"error": {"status": 429}}},
        {"match": {"user": "flaky"}, "reply": {"text": "ok"}},
        {"match": {"any": True}, "reply": {"text": "fallback"}},
    ])
    assert [r.select(user("a flaky test"), "responses", None) for _ in range(3)] == [0, 1, 1]
    assert r.select(user("other"), "chat", None) == 2
    assert r.used == [1, 2, 1]


def test_results_below_counts_the_tool_results_of_the_whole_request() -> None:
    r = runner([
        {"match": {"tool": "shell", "results_below": 3}, "reply": {"text": "again"}},
        {"match": {"tool": "shell"}, "reply": {"text": "done"}},
    ])

    def after(n: int) -> LatestInput:
        return LatestInput("tool", tool_results=(ToolResult("c", "shell", ""),),
                           results_so_far=n)

    assert [r.select(after(n), "responses", None) for n in (1, 2, 3, 4)] == [0, 0, 1, 1]
    body = {"input": [{"role": "user", "content": "go"}] + [
        item for k in range(3) for item in (
            {"type": "function_call", "call_id": f"c{k}", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{k}", "output": ""})]}
    assert responses_latest(body, {}).results_so_far == 3
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [
        {"id": "c1", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": ""}]
    assert chat_latest({"messages": messages}).results_so_far == 1


def test_times_inside_reply_counts_too() -> None:
    r = runner([{"match": {"any": True}, "reply": {"text": "x", "times": 2}}])
    assert [r.select(user("q"), "chat", None) for _ in range(3)] == [0, 0, None]


def test_user_and_tool_matchers_need_the_right_kind_of_latest_input() -> None:
    r = runner([
        {"match": {"user": "def add"}, "reply": {"text": "user"}},
        {"match": {"tool": "shell", "tool_output": "passed"}, "reply": {"text": "shell"}},
        {"match": {"tool_output": "def add"}, "reply": {"text": "any tool"}},
    ])
    assert r.select(tool("read_file", "def add(a, b)"), "responses", None) == 2
    assert r.select(tool("shell", "3 passed"), "responses", None) == 1
    assert r.select(tool("read_file", "3 passed"), "responses", None) is None
    assert r.select(user("where is def add?"), "responses", None) == 0
    assert r.select(user("Def Add"), "responses", None) is None  # case-sensitive


def test_tool_and_output_must_hold_for_the_same_result() -> None:
    r = runner([{"match": {"tool": "shell", "tool_output": "ok"}, "reply": {"text": "x"}}])
    mixed = LatestInput("tool", tool_results=(
        ToolResult("c1", "shell", "failed"), ToolResult("c2", "read_file", "ok")))
    assert r.select(mixed, "chat", None) is None
    both = LatestInput("tool", tool_results=(
        ToolResult("c1", "read_file", "x"), ToolResult("c2", "shell", "all ok")))
    assert r.select(both, "chat", None) == 0


def test_api_and_model_filters() -> None:
    r = runner([
        {"match": {"any": True, "api": "chat"}, "reply": {"text": "chat"}},
        {"match": {"any": True, "model": "big"}, "reply": {"text": "big"}},
    ])
    assert r.select(user("x"), "chat", "small") == 0
    assert r.select(user("x"), "responses", "big") == 1
    assert r.select(user("x"), "responses", "small") is None


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"match": {}, "reply": {}}], "match needs one of"),
        ([{"match": {"usr": "x"}, "reply": {}}], "usr"),
        ([{"match": {"any": True}, "reply": {"txt": "x"}}], "txt"),
        ([{"match": {"any": True}, "times": 0, "reply": {}}], "times must be"),
        ([{"match": {"any": True}, "times": 1, "reply": {"times": 1}}], "not both"),
        ([{"match": {"any": True}, "reply": {"error": {"status": 200}}}], "4xx or 5xx"),
        ([{"match": {"any": True}, "reply": {"calls": [{"arguments": {}}]}}], "name"),
    ],
)
def test_invalid_scripts_are_rejected_with_a_location(
    steps: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ScriptError, match=message):
        load_script({"steps": steps})


def test_yaml_and_json_files(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "model: [a, b]\noptions: {delay_ms: 5}\nsteps:\n"
        "  - match: {user: hi}\n    reply: {calls: [{name: shell, arguments: {argv: [ls]}}]}\n"
    )
    script = load_script(tmp_path / "s.yaml")
    assert script.models == ["a", "b"]
    assert script.options.delay_ms == 5
    assert script.steps[0].reply.calls[0].arguments_json() == '{"argv": ["ls"]}'
    (tmp_path / "s.json").write_text('[{"match": {"any": true}, "reply": {"text": "x"}}]')
    assert load_script(tmp_path / "s.json").models == ["scripted-1"]
    (tmp_path / "broken.json").write_text("{nope")
    with pytest.raises(ScriptError, match="cannot read"):
        load_script(tmp_path / "broken.json")


def test_responses_latest_input_shapes() -> None:
    assert responses_latest({"input": "hello"}, {}) == user("hello")
    parts = {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "one"}, {"type": "input_text", "text": "two"}]}]}
    assert responses_latest(parts, {}) == user("one\ntwo")
    body = {"input": [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ran"},
        {"type": "function_call_output", "call_id": "c2", "output": "text"},
    ]}
    latest = responses_latest(body, {})
    assert latest.kind == "tool"
    assert [(r.name, r.output) for r in latest.tool_results] == [
        ("shell", "ran"), ("read_file", "text")]
    chained = {"previous_response_id": "resp_1",
               "input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}
    assert responses_latest(chained, {"c9": "list_dir"}).tool_results[0].name == "list_dir"
    assert responses_latest(chained, {}).tool_results[0].name is None
    assert responses_latest({"input": []}, {}).kind == "empty"
    assert responses_latest({"input": [{"role": "assistant", "content": "x"}]}, {}).kind == "other"
    steer = {"input": [*body["input"], {"type": "message", "role": "user", "content": "stop"}]}
    assert responses_latest(steer, {}) == user("stop")


def test_chat_latest_input_shapes() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
    ]
    assert chat_latest({"messages": messages}) == user("fix it")
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "exit 0"},
    ]
    latest = chat_latest({"messages": messages})
    assert latest.tool_results == (ToolResult("t1", "shell", "exit 0"),)
    assert latest.to_json() == {"kind": "tool", "tool_results": [
        {"call_id": "t1", "name": "shell", "output": "exit 0"}]}
    assert chat_latest({}).kind == "empty"
    # the images of tool results follow them in a user message: still the tool's turn
    images = {"role": "user", "content": [
        {"type": "text", "text": "The image from tool call t1:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}
    assert chat_latest({"messages": [*messages, images]}) == latest
    # a prompt after the results (a steer) is the user's
    steer = {"role": "user", "content": "stop"}
    assert chat_latest({"messages": [*messages, steer]}) == user("stop")
