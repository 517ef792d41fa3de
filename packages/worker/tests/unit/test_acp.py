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

from codey_protocol.worker import AcpUpdate
from codey_worker.acp import _convert
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
    assert _convert(update_current_mode("code")) is None  # not shown


def test_agents_are_configured_like_mcp_servers() -> None:
    config = WorkerConfig.from_dict({"acp_agents": {
        "claude": {"command": "claude-code-acp", "env": {"ANTHROPIC_API_KEY": "k"}},
        "gemini": {"command": "gemini", "args": ["--experimental-acp"]}}})
    assert sorted(config.acp_agents) == ["claude", "gemini"]
    assert config.acp_agents["gemini"].args == ["--experimental-acp"]
    assert config.acp_agents["claude"].env == {"ANTHROPIC_API_KEY": "k"}
    with pytest.raises(ConfigError, match=r"acp_agents\.x\.command"):
        WorkerConfig.from_dict({"acp_agents": {"x": {"command": ""}}})
