"""The MCP tools the session's worker reports, each offered as ``mcp__<server>__<tool>``.

One :data:`MCP` object answers to every such name: :meth:`Mcp.specs` lists them from the
worker's capabilities, and :meth:`Mcp.parse` finds the server and tool a name stands for. The
approval rule goes by the tool's danger level (:func:`~codey_server.agent.approvals.mcp_danger`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.approvals import asks_for_mcp
from codey_server.agent.tools.base import (
    RESULT_CAP,
    SANDBOXED,
    Ask,
    BadToolCall,
    Display,
    Gate,
    Sandboxing,
    Settled,
    ToolSpec,
    WorkerTool,
    cap,
)

__all__ = ["MCP", "PREFIX", "McpArgs", "mcp_tool_name"]

PREFIX = "mcp__"

_MCP_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def mcp_tool_name(server: str, tool: str) -> str:
    return f"{PREFIX}{_MCP_NAME.sub('_', server)}__{_MCP_NAME.sub('_', tool)}"[:64]


@dataclass(frozen=True, slots=True)
class McpArgs:
    server: str
    tool: str
    arguments: dict[str, Any]
    #: the tool as the worker listed it (its hints decide the approval)
    info: wk.McpTool


class Mcp(WorkerTool[McpArgs]):
    name = PREFIX
    display = Display(icon="mcp", body="mcp")
    description = "the worker's MCP tools"
    parameters: dict[str, Any] = {}

    def specs(self, capabilities: wk.Capabilities | None) -> list[ToolSpec]:
        """One tool per MCP tool the worker reports."""
        return [ToolSpec(mcp_tool_name(server.name, tool.name),
                         (tool.description or f"{tool.name} ({server.name})")[:1024],
                         tool.input_schema or {"type": "object", "properties": {}})
                for server in (capabilities.mcp_servers if capabilities else [])
                for tool in server.tools]

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> McpArgs:
        for server in (capabilities.mcp_servers if capabilities else []):
            for tool in server.tools:
                if mcp_tool_name(server.name, tool.name) == name:
                    return McpArgs(server.name, tool.name, args, tool)
        raise BadToolCall(f"no MCP tool {name!r} on this session's worker")

    def ask(self, args: McpArgs, gate: Gate) -> Ask | None:
        return Ask("mcp") if asks_for_mcp(gate.policy, args.info) else None

    def shows(self, args: McpArgs) -> dict[str, Any]:
        return {"mcp_server": args.server, "mcp_tool": args.tool}

    def action(self, args: McpArgs, action_id: str, session_id: str,
               workdir: str, *, sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        # a stdio server starts in the session's sandbox (its network is its own config's)
        return wk.McpCall(action_id=action_id, session_id=session_id, server=args.server,
                          tool=args.tool, arguments=args.arguments, workdir=workdir,
                          sandbox=sandbox.mode)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.McpCallResult):
            return super().reads(outcome)
        text = outcome.text or json.dumps(outcome.content)[:RESULT_CAP]
        return cap(("error: " if outcome.is_error else "") + text)

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if isinstance(outcome, wk.McpCallResult) and outcome.is_error:
            return "failed", self.reads(outcome), {}
        return super().settle(outcome, stream_truncated)


MCP = Mcp()
