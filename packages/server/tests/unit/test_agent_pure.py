"""Pure parts of the agent loop: the approval gate, tool-call parsing, the conversation."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.approvals import is_known_safe, path_inside
from codey_server.agent.conversation import (
    AssistantText,
    Entry,
    ToolCallEntry,
    ToolResultEntry,
    UserText,
    conversation_of,
)
from codey_server.agent.models import MODEL_RETRYING, backoff, retry_after
from codey_server.agent.tools import BadToolCall, Gate, mcp_tool_name, parse_call, tool_named
from codey_server.agent.tools.apply_patch import PatchArgs
from codey_server.agent.tools.mcp import MCP, McpArgs
from codey_server.agent.tools.read_file import READ_FILE
from codey_server.agent.tools.shell import SHELL, ShellArgs
from codey_server.agent.tools.write_file import WriteArgs
from codey_server.agent.wire import CallOptions
from codey_server.agent.wire.chat import WIRE as CHAT

# each tool's typed arguments, from the keywords the approval tests use
_ARGS: dict[str, Any] = {
    "shell": lambda c: ShellArgs(list(c.get("command") or [])),
    "apply_patch": lambda c: PatchArgs(c.get("patch") or ""),
    "write_file": lambda c: WriteArgs(c.get("path") or "", ""),
    "mcp": lambda c: McpArgs("s", "t", {}, c.get("mcp")),
}


def needs_approval(policy: str, tool: str, *, approved_prefixes: Any = (), **call: Any) -> bool:
    """Whether ``tool``'s approval rule asks for a call with these arguments."""
    rule = MCP if tool == "mcp" else tool_named(tool)
    assert rule is not None
    args = _ARGS[tool](call) if tool in _ARGS else None
    return rule.ask(args, Gate(policy, approved_prefixes)) is not None


@pytest.mark.parametrize("argv", [
    ["ls"], ["ls", "-la", "src"], ["cat", "a.txt"], ["pwd"], ["git", "status"],
    ["git", "diff", "--stat"], ["git", "log", "-n", "3"], ["rg", "TODO"], ["grep", "-rn", "x", "."],
    ["/usr/bin/ls"],
])
def test_known_safe_read_only_commands(argv: list[str]) -> None:
    assert is_known_safe(argv)


@pytest.mark.parametrize("argv", [
    [], ["rm", "-rf", "/"], ["bash", "-c", "ls"], ["git", "push"], ["git", "-c", "x=y", "log"],
    ["git", "diff", "--output=/tmp/x"], ["git", "log", "--ext-diff"], ["rg", "--pre", "sh", "x"],
    ["rg", "-z", "x"], ["rg", "-nz", "x"], ["rg", "--pre=cat", "x"], ["python3", "-c", "1"],
    ["git"], ["find", ".", "-exec", "rm", "{}", ";"],
])
def test_everything_else_is_not_known_safe(argv: list[str]) -> None:
    assert not is_known_safe(argv)


def test_policies() -> None:
    patch = "*** Begin Patch\n*** Update File: src/a.py\n@@\n-a\n+b\n*** End Patch"
    outside = "*** Begin Patch\n*** Update File: ../x.py\n@@\n-a\n+b\n*** End Patch"
    assert needs_approval("suggest", "shell", command=["make"])
    assert not needs_approval("suggest", "shell", command=["git", "status"])
    assert needs_approval("suggest", "apply_patch", patch=patch)
    assert not needs_approval("auto-edit", "apply_patch", patch=patch)
    assert needs_approval("auto-edit", "apply_patch", patch=outside)
    assert needs_approval("auto-edit", "shell", command=["make"])
    assert not needs_approval("auto-edit", "write_file", path="docs/x.md")
    assert needs_approval("auto-edit", "write_file", path="/etc/passwd")
    assert needs_approval("suggest", "mcp")
    for tool in ("shell", "apply_patch", "write_file", "mcp"):
        assert not needs_approval("full-auto", tool, command=["rm", "-rf", "/"], patch=outside)
    for tool in ("read_file", "list_dir", "update_plan"):
        assert not needs_approval("suggest", tool)


def test_approved_prefix_matches_longer_commands_only() -> None:
    prefixes = [["npm", "test"]]
    assert not needs_approval("suggest", "shell", command=["npm", "test", "--", "-u"],
                              approved_prefixes=prefixes)
    assert needs_approval("suggest", "shell", command=["npm"], approved_prefixes=prefixes)
    assert needs_approval("suggest", "shell", command=["npm", "install"],
                          approved_prefixes=prefixes)


def test_git_internals_always_ask() -> None:
    # a patched .git/config could make "safe" git commands run programs (core.fsmonitor)
    patch = "*** Begin Patch\n*** Update File: .git/config\n@@\n-a\n+b\n*** End Patch"
    assert needs_approval("auto-edit", "apply_patch", patch=patch)
    assert needs_approval("auto-edit", "write_file", path="sub/.GIT/hooks/pre-commit")


def test_path_inside() -> None:
    assert path_inside("a/b.py") and path_inside("./a")
    assert not path_inside("../a") and not path_inside("/abs") and not path_inside("a/../../b")
    assert not path_inside("") and not path_inside("~/x")


def test_parse_call_checks_arguments() -> None:
    shell = parse_call("shell", json.dumps({"command": ["ls"], "timeout_ms": 1500}), None).args
    assert shell.command == ["ls"] and shell.timeout_s == 1.5
    with pytest.raises(BadToolCall, match="argv list"):
        parse_call("shell", json.dumps({"command": "ls -la"}), None)
    with pytest.raises(BadToolCall, match="not valid JSON"):
        parse_call("shell", "{nope", None)
    with pytest.raises(BadToolCall, match="unknown tool"):
        parse_call("launch_missiles", "{}", None)
    with pytest.raises(BadToolCall, match="plan entry"):
        parse_call("update_plan", json.dumps({"plan": [{"step": "x", "status": "maybe"}]}), None)
    plan = parse_call("update_plan", json.dumps({"plan": [{"step": "x", "status": "done"}]}),
                      None).args
    assert plan.plan == [ev.PlanStep(step="x", status="done")]
    caps = wk.Capabilities(mcp_servers=[wk.McpServerInfo(
        name="time", tools=[wk.McpTool(name="get_current_time")])])
    call = parse_call(mcp_tool_name("time", "get_current_time"), '{"timezone": "UTC"}', caps)
    assert (call.args.server, call.args.tool, call.args.arguments) == (
        "time", "get_current_time", {"timezone": "UTC"})
    action = call.tool.action(call.args, "act_1", "ses_1", "/w")
    assert isinstance(action, wk.McpCall) and action.action_id == "act_1"


def test_format_outcome_for_the_model() -> None:
    format_outcome = SHELL.reads  # each tool reads its own outcome
    text = format_outcome(wk.CommandResult(exit_code=1, stdout="out", stderr="err",
                                           truncated=True))
    assert text == "exit code: 1 (output truncated)\nout\nerr"
    assert "timed out" in format_outcome(wk.CommandResult(exit_code=None, timed_out=True))
    big = READ_FILE.reads(wk.FileContent(path="a", content="x" * 100_000))
    assert len(big) < 30_000 and "characters cut" in big


def _chat_messages(instructions: str, conversation: list[Entry]) -> list[dict[str, object]]:
    assembler = CHAT.assembler()
    for entry in conversation:
        assembler.add(entry)
    body = CHAT.body(model="m", instructions=instructions, messages=assembler.finish(),
                     tools=b"[]", session_id=None, options=CallOptions())
    messages: list[dict[str, object]] = json.loads(body)["messages"]
    return messages


def _session(items: list[ev.Item]) -> SessionInfo:
    return SessionInfo(session_id="s", title="t", worker_id="w", workdir="/w", provider="p",
                       model="m", items=items)


def test_conversation_groups_parallel_calls_and_skips_queued_prompts() -> None:
    items: list[ev.Item] = [
        ev.UserMessage(id="1", ts=0, text="go"),
        ev.Reasoning(id="2", ts=0, text="thinking"),
        ev.AssistantMessage(id="3", ts=0, text="Two things."),
        ev.ToolCall(id="4", ts=0, call_id="c1", name="read_file", arguments="{}", result="A",
                    response_id="r1"),
        ev.ToolCall(id="5", ts=0, call_id="c2", name="list_dir", arguments="{}", result="B",
                    response_id="r1"),
        ev.ToolCall(id="6", ts=0, call_id="c3", name="shell", arguments="{}", result="C",
                    response_id="r2"),
        ev.UserMessage(id="7", ts=0, text="later", queued=True),
        ev.ToolCall(id="8", ts=0, call_id="c4", name="shell", arguments="{}",
                    response_id="r3"),  # unanswered
    ]
    conv = conversation_of(_session(items))
    assert conv == [
        UserText("go"), AssistantText("Two things."),
        ToolCallEntry("c1", "read_file", "{}"), ToolCallEntry("c2", "list_dir", "{}"),
        ToolResultEntry("c1", "A"), ToolResultEntry("c2", "B"),
        ToolCallEntry("c3", "shell", "{}"), ToolResultEntry("c3", "C"),
    ]
    messages = _chat_messages("sys", conv)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool",
                                             "assistant", "tool"]
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["c1", "c2"]
    assert messages[2]["content"] == "Two things."


def test_retry_after_forms() -> None:
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "1500"}) == 1.5
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


def test_a_model_call_waits_half_a_second_doubling_to_thirty_in_the_upper_half() -> None:
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 16.0), (7, 30.0), (40, 30.0)]:
        delays = [backoff(attempt) for _ in range(200)]
        assert ceiling / 2 <= min(delays) < ceiling * 0.6 < ceiling * 0.9 < max(delays) <= ceiling


def test_a_model_call_waits_what_retry_after_asks_at_most_two_minutes() -> None:
    from tenacity import RetryCallState

    from codey_server.agent.errors import ModelError
    from codey_server.agent.models import _Busy

    def wait(after: float | None) -> float:
        state = RetryCallState(MODEL_RETRYING, fn=None, args=(), kwargs={})
        try:
            raise _Busy(ModelError("busy", code="server"), "HTTP 503", after)
        except _Busy:
            state.set_exception(sys.exc_info())  # type: ignore[arg-type]
        return float(MODEL_RETRYING.wait(state))

    assert wait(3.0) == 3.0
    assert wait(600.0) == 120.0
    assert 0.25 <= wait(None) <= 0.5  # none: the backoff
    assert 0.25 <= wait(0.0) <= 0.5  # "Retry-After: 0" is no answer either


def test_read_file_numbers_its_lines_and_says_what_it_left_out() -> None:
    whole = READ_FILE.reads(wk.FileContent(path="a.py", content="x = 1\ny = 2\n",
                                           total_lines=2))
    assert whole == "     1\tx = 1\n     2\ty = 2"
    # a piece from line 11 on: numbered from 11, and where to read on
    piece = READ_FILE.reads(wk.FileContent(path="a.py", content="k\nl\n", total_lines=40,
                                           offset=10))
    assert piece.splitlines() == ["    11\tk", "    12\tl",
                                  "… [lines 13–40 not shown: read them with offset=12]"]
    assert READ_FILE.reads(wk.FileContent(path="e", total_lines=0)) == "(e is empty)"
    assert "has 3 lines" in READ_FILE.reads(wk.FileContent(path="e", total_lines=3,
                                                            offset=7))
