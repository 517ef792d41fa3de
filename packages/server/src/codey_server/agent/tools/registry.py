"""Every tool the model can call, registered once: :data:`BUILTIN` (in the order the model
sees them), ``delegate`` where roles are configured, and the worker's MCP tools.

Adding a built-in tool: a module in this package with its :class:`~.base.Tool`, and one line
in :data:`BUILTIN`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from codey_protocol import worker as wk
from codey_server.agent.tools.apply_patch import APPLY_PATCH
from codey_server.agent.tools.ask_user import ASK_USER
from codey_server.agent.tools.base import BadToolCall, Tool, ToolSpec
from codey_server.agent.tools.delegate import DELEGATE
from codey_server.agent.tools.edit import EDIT
from codey_server.agent.tools.exec import EXEC
from codey_server.agent.tools.glob import GLOB
from codey_server.agent.tools.goal_met import GOAL_MET
from codey_server.agent.tools.grep import GREP
from codey_server.agent.tools.kill import KILL
from codey_server.agent.tools.list_dir import LIST_DIR
from codey_server.agent.tools.mcp import MCP, PREFIX
from codey_server.agent.tools.read_file import READ_FILE
from codey_server.agent.tools.remember import REMEMBER
from codey_server.agent.tools.shell import SHELL
from codey_server.agent.tools.update_plan import UPDATE_PLAN
from codey_server.agent.tools.view_image import VIEW_IMAGE
from codey_server.agent.tools.web import WEB_FETCH, WEB_SEARCH
from codey_server.agent.tools.write_file import WRITE_FILE
from codey_server.agent.tools.write_stdin import WRITE_STDIN

__all__ = ["BUILTIN", "BUILTIN_TOOLS", "ParsedCall", "parse_call", "tool_named", "tools_for"]

A = TypeVar("A")

#: the built-in tools, in the order they are offered
BUILTIN: tuple[Tool[Any], ...] = (
    SHELL,
    EXEC,
    WRITE_STDIN,
    KILL,
    APPLY_PATCH,
    EDIT,
    READ_FILE,
    GREP,
    GLOB,
    LIST_DIR,
    VIEW_IMAGE,
    WRITE_FILE,
    UPDATE_PLAN,
    ASK_USER,
    REMEMBER,
    WEB_FETCH,
    WEB_SEARCH,
)

#: what the model is told about the built-in tools
BUILTIN_TOOLS: list[ToolSpec] = [tool.spec() for tool in BUILTIN]

_BY_NAME: dict[str, Tool[Any]] = {tool.name: tool for tool in (*BUILTIN, DELEGATE, GOAL_MET)}


def tool_named(name: str) -> Tool[Any] | None:
    """The tool a call of ``name`` goes to (every ``mcp__…`` name goes to :data:`MCP`)."""
    tool = _BY_NAME.get(name)
    if tool is None and name.startswith(PREFIX):
        return MCP
    return tool


def tools_for(capabilities: wk.Capabilities | None, *, plan_mode: bool = False,
              read_only: bool = False, roles: Mapping[str, str] | None = None,
              edit_tools: str = "both", goal: bool = False) -> list[ToolSpec]:
    """The tools a session offers: those for read-only sub-agents (``read_only``), those of
    plan mode, or all of them — with ``delegate`` when ``roles`` are given (never to
    sub-agents) and the worker's MCP tools. ``edit_tools`` (the provider's setting): which
    of the two ways to change a file is offered, ``apply_patch``, ``edit`` or ``both``.
    ``goal``: the session has a goal the model proves (``goal_met`` is offered)."""
    if read_only:
        return [spec for tool, spec in zip(BUILTIN, BUILTIN_TOOLS, strict=True)
                if tool.for_readers]
    if plan_mode:
        return [spec for tool, spec in zip(BUILTIN, BUILTIN_TOOLS, strict=True)
                if tool.in_plan_mode]
    tools = [spec for tool, spec in zip(BUILTIN, BUILTIN_TOOLS, strict=True)
             if edit_tools == "both" or tool.editor in (None, edit_tools)]
    if roles:
        tools.append(DELEGATE.spec_for(roles))
    if goal:
        tools.append(GOAL_MET.spec())
    tools += MCP.specs(capabilities)
    return tools


@dataclass(frozen=True, slots=True)
class ParsedCall(Generic[A]):
    """A tool call, checked: the tool and its typed arguments."""

    tool: Tool[A]
    args: A


def parse_call(name: str, arguments: str,
               capabilities: wk.Capabilities | None) -> ParsedCall[Any]:
    """Check a call of ``name`` against its tool's schema; raises :class:`BadToolCall` with a
    reason the model can act on."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as err:
        raise BadToolCall(f"the arguments are not valid JSON: {err}") from None
    if not isinstance(args, dict):
        raise BadToolCall("the arguments must be a JSON object")
    tool = tool_named(name)
    if tool is None:
        raise BadToolCall(f"unknown tool {name!r}")
    return ParsedCall(tool, tool.parse(args, name=name, capabilities=capabilities))
