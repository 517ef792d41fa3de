"""``codey_worker.acp``: ACP updates as Codey passes them on, and the config of agents."""

from __future__ import annotations

import pytest
from acp import (
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
)
from acp.helpers import plan_entry, tool_diff_content, update_current_mode
from acp.schema import (
    ConfigOptionUpdate,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectGroup,
    SessionConfigSelectOption,
    Usage,
    UsageUpdate,
)

from codey_protocol.worker import AcpConfigChoice, AcpConfigOption, AcpUpdate, AcpUsage
from codey_worker.acp import _convert, _turn_usage
from codey_worker.config import ConfigError, WorkerConfig


def test_updates_become_acp_updates() -> None:
    assert _convert(update_agent_message_text("hi")) == AcpUpdate(kind="text", text="hi")
    assert _convert(update_agent_thought_text("hm")) == AcpUpdate(kind="thought", text="hm")
    started = _convert(start_tool_call("t1", "Edit a.py", kind="edit", status="pending"))
    assert started == AcpUpdate(kind="tool", tool_call_id="t1", title="Edit a.py",
                                status="pending", tool_kind="edit")
    changed = _convert(update_tool_call("t1", status="completed", content=[
        tool_content(text_block("done")), tool_diff_content("a.py", "x = 1\n")]))
    assert changed is not None
    assert (changed.status, changed.text) == ("completed", "done\n--- a.py\nx = 1\n")
    plan = _convert(update_plan([plan_entry("read", status="completed"), plan_entry("edit")]))
    assert plan is not None and plan.entries == [("read", "completed"), ("edit", "pending")]
    # issue 39 §5: the mode is shown now (it was dropped before)
    assert _convert(update_current_mode("code")) == AcpUpdate(kind="mode", current_mode="code")


def test_modes_config_options_and_usage_become_acp_updates() -> None:
    grouped = SessionConfigOptionSelect(
        id="model", name="Model", type="select", current_value="opus", category="model",
        options=[SessionConfigSelectGroup(group="big", name="Big", options=[
            SessionConfigSelectOption(value="opus", name="Opus")]),
            SessionConfigSelectGroup(group="small", name="Small", options=[
                SessionConfigSelectOption(value="haiku", name="Haiku")])])
    flag = SessionConfigOptionBoolean(id="web", name="Web", type="boolean", current_value=True)
    update = _convert(ConfigOptionUpdate(session_update="config_option_update",
                                         config_options=[grouped, flag]))
    assert update == AcpUpdate(kind="config", config_options=[
        AcpConfigOption(id="model", name="Model", current="opus", category="model", choices=[
            AcpConfigChoice(value="opus", name="Opus", group="Big"),
            AcpConfigChoice(value="haiku", name="Haiku", group="Small")]),
        AcpConfigOption(id="web", name="Web", type="boolean", current=True)])
    usage = _convert(UsageUpdate(session_update="usage_update", used=5000, size=200_000))
    assert usage == AcpUpdate(kind="usage", usage=AcpUsage(context_tokens=5000,
                                                           context_window=200_000))
    # a prompt's answer without usage (it is unstable in ACP) reports none
    assert _turn_usage(None) is None
    assert _turn_usage(Usage(input_tokens=3, output_tokens=2, total_tokens=6,
                             thought_tokens=1)) == AcpUsage(
        input_tokens=3, output_tokens=2, reasoning_tokens=1, total_tokens=6)


@pytest.mark.parametrize(("raw", "text"), [
    # codex-acp's exec end: the output only in raw_output, formatted first
    ({"stdout": "a\n", "stderr": "", "aggregated_output": "a\n", "formatted_output": "a\nb\n",
      "exit_code": 0}, "a\nb\n"),
    ({"stdout": "out\n", "stderr": "err\n", "exit_code": 1}, "out\nerr\n"),
    ({"aggregated_output": "both\n"}, "both\n"),
    ("plain text", "plain text"),
    ({"exit_code": 3}, '{"exit_code": 3}'),  # another shape: shown as it came
])
def test_a_calls_output_sent_only_as_raw_output_is_kept(raw: object, text: str) -> None:
    ended = _convert(update_tool_call("t1", status="completed", raw_output=raw))
    assert ended is not None and ended.text == text


def test_content_wins_over_raw_output_and_raw_input_names_the_command() -> None:
    ended = _convert(update_tool_call("t1", status="completed", raw_output={"stdout": "raw"},
                                      content=[tool_content(text_block("shown"))]))
    assert ended is not None and ended.text == "shown"
    started = _convert(start_tool_call("t2", "ls", kind="execute",
                                       raw_input={"command": ["ls", "-la"], "cwd": "."}))
    assert started is not None and started.command == ["ls", "-la"]
    one = _convert(start_tool_call("t3", "make", kind="execute", raw_input={"command": "make"}))
    assert one is not None and one.command == ["make"]
    odd = _convert(start_tool_call("t4", "x", raw_input={"command": [1, 2]}))
    assert odd is not None and odd.command is None


def test_agents_are_configured_like_mcp_servers() -> None:
    config = WorkerConfig.from_dict({"acp_agents": {
        "claude": {"command": "claude-code-acp", "env": {"ANTHROPIC_API_KEY": "k"}},
        "gemini": {"command": "gemini", "args": ["--experimental-acp"]}}})
    assert sorted(config.acp_agents) == ["claude", "gemini"]
    assert config.acp_agents["gemini"].args == ["--experimental-acp"]
    assert config.acp_agents["claude"].env == {"ANTHROPIC_API_KEY": "k"}
    with pytest.raises(ConfigError, match=r"acp_agents\.x\.command"):
        WorkerConfig.from_dict({"acp_agents": {"x": {"command": ""}}})
