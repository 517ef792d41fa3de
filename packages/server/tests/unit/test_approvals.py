"""MCP danger levels in the approval gate (agent/approvals.py, the MCP tool's rule)."""

from __future__ import annotations

import pytest

from codey_protocol import worker as wk
from codey_server.agent.approvals import mcp_danger, mcp_tool_of
from codey_server.agent.tools import Gate
from codey_server.agent.tools.mcp import MCP, McpArgs
from codey_server.agent.tools.shell import SHELL, ShellArgs


def needs_approval(policy: str, tool: str, *, mcp: wk.McpTool | None = None,
                   command: list[str] | None = None) -> bool:
    """Whether the tool's approval rule asks: ``shell`` with ``command``, or an MCP tool
    listed as ``mcp`` (None: the worker does not list it)."""
    gate = Gate(policy)
    if tool == "shell":
        return SHELL.ask(ShellArgs(command or []), gate) is not None
    return MCP.ask(McpArgs("kit", "t", {}, mcp), gate) is not None  # type: ignore[arg-type]


def _tool(read_only: bool | None = None, destructive: bool | None = None) -> wk.McpTool:
    return wk.McpTool(name="t", read_only_hint=read_only, destructive_hint=destructive)


@pytest.mark.parametrize(("read_only", "destructive", "level"), [
    (None, None, "destructive"),      # MCP's defaults: not read-only, destructive
    (False, None, "destructive"),
    (False, True, "destructive"),
    (None, True, "destructive"),
    (False, False, "additive"),
    (None, False, "additive"),
    (True, None, "read_only"),
    (True, True, "read_only"),        # destructiveHint means nothing for a read-only tool
    (True, False, "read_only"),
])
def test_danger_level_follows_the_hints(read_only: bool | None, destructive: bool | None,
                                        level: str) -> None:
    assert mcp_danger(_tool(read_only, destructive)) == level


def test_an_unknown_tool_is_destructive() -> None:
    assert mcp_danger(None) == "destructive"
    assert needs_approval("suggest", "mcp", mcp=None)
    assert needs_approval("auto-edit", "mcp", mcp=None)


@pytest.mark.parametrize(("policy", "read_only", "additive", "destructive"), [
    ("suggest", False, True, True),
    ("auto-edit", False, False, True),
    ("full-auto", False, False, False),
])
def test_who_asks_under_each_policy(policy: str, read_only: bool, additive: bool,
                                    destructive: bool) -> None:
    assert needs_approval(policy, "mcp", mcp=_tool(read_only=True)) is read_only
    assert needs_approval(policy, "mcp", mcp=_tool(False, False)) is additive
    assert needs_approval(policy, "mcp", mcp=_tool(False, True)) is destructive
    assert needs_approval(policy, "mcp", mcp=_tool()) is destructive


def test_hints_only_matter_for_mcp_calls() -> None:
    # a shell command is judged by its argv, whatever tool object comes along
    assert needs_approval("suggest", "shell", command=["make"], mcp=_tool(read_only=True))


def test_the_tool_is_found_in_the_worker_capabilities() -> None:
    where = wk.McpTool(name="where", read_only_hint=True)
    caps = wk.Capabilities(mcp_servers=[
        wk.McpServerInfo(name="kit", tools=[where, wk.McpTool(name="wipe")]),
        wk.McpServerInfo(name="other", tools=[wk.McpTool(name="where")]),
    ])
    assert mcp_tool_of(caps, "kit", "where") is where
    assert mcp_tool_of(caps, "other", "where") is not where
    assert mcp_tool_of(caps, "kit", "nope") is None
    assert mcp_tool_of(caps, "missing", "where") is None
    assert mcp_tool_of(None, "kit", "where") is None
