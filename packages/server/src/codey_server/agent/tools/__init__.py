"""The tools the model can call: one module per tool, each a :class:`~.base.Tool` (its schema,
typed arguments, approval rule, where it is offered, what it does and how its result reads),
all registered in :mod:`.registry`.

Built-in tools: ``shell``, ``apply_patch``, ``read_file``, ``list_dir``, ``write_file``,
``update_plan``, ``ask_user``, ``remember``, ``delegate`` (with roles, not in sub-agents); plus
each MCP tool the session's worker reports, as ``mcp__<server>__<tool>`` (:mod:`.mcp`).
Everything the model gets back is text; failures are results too ("error: …"), never raises.
"""

from codey_server.agent.tools.base import (
    Ask,
    BadToolCall,
    Finish,
    ForAnswer,
    ForChild,
    ForWeb,
    Gate,
    Sandboxing,
    ServerCall,
    ServerTool,
    Tool,
    ToolSpec,
    Waiting,
    WorkerTool,
)
from codey_server.agent.tools.mcp import mcp_tool_name
from codey_server.agent.tools.registry import (
    BUILTIN,
    BUILTIN_TOOLS,
    ParsedCall,
    parse_call,
    tool_named,
    tools_for,
)

__all__ = [
    "BUILTIN",
    "BUILTIN_TOOLS",
    "Ask",
    "BadToolCall",
    "Finish",
    "ForAnswer",
    "ForChild",
    "ForWeb",
    "Gate",
    "ParsedCall",
    "Sandboxing",
    "ServerCall",
    "ServerTool",
    "Tool",
    "ToolSpec",
    "Waiting",
    "WorkerTool",
    "mcp_tool_name",
    "parse_call",
    "tool_named",
    "tools_for",
]
