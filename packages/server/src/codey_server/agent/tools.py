"""The tools offered to the model, and how a tool call becomes an action and a result.

Built-in tools: ``shell``, ``apply_patch``, ``read_file``, ``list_dir``, ``write_file``,
``update_plan``, ``ask_user``, ``remember``, ``delegate`` (not in sub-agents); plus each MCP
tool the session's worker reports, as ``mcp__<server>__<tool>``.
Everything the model gets back is text; failures are results too ("error: …"), never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.errors import ServerError

__all__ = [
    "BUILTIN_TOOLS",
    "BadToolCall",
    "ParsedCall",
    "ToolSpec",
    "format_outcome",
    "mcp_tool_name",
    "parse_call",
    "tools_for",
]

#: characters of a tool result given back to the model (head and tail kept)
RESULT_CAP = 24_000


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


BUILTIN_TOOLS: list[ToolSpec] = [
    ToolSpec("shell", "Run a command in the session's workdir. `command` is an argv list "
             "(no shell string); use [\"bash\", \"-lc\", \"...\"] when you need a shell.",
             _obj({"command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                   "workdir": {"type": "string", "description": "relative to the session workdir"},
                   "timeout_ms": {"type": "integer", "minimum": 1}}, ["command"])),
    ToolSpec("apply_patch", "Edit files with a patch in the apply_patch format: "
             "*** Begin Patch / *** Add File: p / *** Update File: p (optionally *** Move "
             "to: q) / *** Delete File: p / @@ context / ' ', '-', '+' lines / *** End Patch. "
             "Unlike Codex's apply_patch: (1) all or nothing: if any part fails, no file is "
             "changed, so fix the patch and send all of it again; (2) *** Add File refuses a "
             "path that already exists: use *** Update File, or *** Delete File then *** Add "
             "File in one patch; (3) *** Move to refuses a destination that already exists.",
             _obj({"input": {"type": "string", "description": "the whole patch"}}, ["input"])),
    ToolSpec("read_file", "Read a text file of the workdir, optionally a range of lines.",
             _obj({"path": {"type": "string"}, "offset": {"type": "integer", "minimum": 0},
                   "limit": {"type": "integer", "minimum": 1}}, ["path"])),
    ToolSpec("list_dir", "List a directory of the workdir (skips .git).",
             _obj({"path": {"type": "string"}, "depth": {"type": "integer", "minimum": 1,
                                                         "maximum": 5}}, [])),
    ToolSpec("write_file", "Write a whole file of the workdir (creates parent directories).",
             _obj({"path": {"type": "string"}, "content": {"type": "string"}},
                  ["path", "content"])),
    ToolSpec("update_plan", "Share your plan: steps with status pending, in_progress or done.",
             _obj({"explanation": {"type": "string"},
                   "plan": {"type": "array", "items": _obj(
                       {"step": {"type": "string"},
                        "status": {"type": "string",
                                   "enum": ["pending", "in_progress", "done"]}},
                       ["step", "status"])}}, ["plan"])),
    ToolSpec("ask_user", "Ask the user a question and wait for the answer. Use it when you "
             "cannot go on without a decision only they can make; offer `choices` when the "
             "answer is one of a few.",
             _obj({"question": {"type": "string"},
                   "choices": {"type": "array", "items": {"type": "string"},
                               "maxItems": 10}}, ["question"])),
    ToolSpec("remember", "Add a short note to this project's memory: it is part of the "
             "instructions of every later session in this workdir. Keep notes durable and "
             "brief (conventions, commands, pitfalls), one fact per call.",
             _obj({"note": {"type": "string"}}, ["note"])),
]

_MCP_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def mcp_tool_name(server: str, tool: str) -> str:
    return f"mcp__{_MCP_NAME.sub('_', server)}__{_MCP_NAME.sub('_', tool)}"[:64]


#: what the model may use in plan mode: looking, planning, asking (``shell`` only runs
#: known-safe read-only commands there)
PLAN_MODE_TOOLS = frozenset({"shell", "read_file", "list_dir", "update_plan", "ask_user",
                             "remember"})


#: what a read-only sub-agent (the explorer) may use
READ_ONLY_TOOLS = frozenset({"shell", "read_file", "list_dir"})


def delegate_tool(roles: dict[str, str]) -> ToolSpec:
    """The ``delegate`` tool for these roles (name → description)."""
    listing = "; ".join(f"`{name}`: {text}" for name, text in roles.items())
    return ToolSpec(
        "delegate", "Hand a task to a sub-agent that works in its own session and answers "
        "with its result. Several delegate calls in one answer run in parallel. Roles: "
        + listing,
        _obj({"role": {"type": "string", "enum": list(roles)},
              "task": {"type": "string", "description": "everything it needs to know: it "
                       "does not see this conversation"},
              "workdir": {"type": "string", "description": "another workdir on the same "
                          "machine (default: this session's)"},
              "worker_id": {"type": "string", "description": "another machine's worker id "
                            "(default: this session's)"}}, ["role", "task"]))


def tools_for(capabilities: wk.Capabilities | None, *, plan_mode: bool = False,
              read_only: bool = False,
              roles: dict[str, str] | None = None) -> list[ToolSpec]:
    """The tools a session offers: all of them, or the reading ones (``read_only``), or
    those of plan mode; ``delegate`` when ``roles`` are given (not to sub-agents)."""
    if read_only:
        return [t for t in BUILTIN_TOOLS if t.name in READ_ONLY_TOOLS]
    if plan_mode:
        return [t for t in BUILTIN_TOOLS if t.name in PLAN_MODE_TOOLS]
    tools = list(BUILTIN_TOOLS)
    if roles:
        tools.append(delegate_tool(roles))
    for server in (capabilities.mcp_servers if capabilities else []):
        for tool in server.tools:
            schema = tool.input_schema or {"type": "object", "properties": {}}
            tools.append(ToolSpec(mcp_tool_name(server.name, tool.name),
                                  (tool.description or f"{tool.name} ({server.name})")[:1024],
                                  schema))
    return tools


class BadToolCall(ServerError):
    """The model's call cannot be carried out; the message goes back to it as the result."""


@dataclass
class ParsedCall:
    """A tool call, checked: what to ask approval for and which action to send."""

    #: shell | apply_patch | read_file | list_dir | write_file | update_plan | ask_user |
    #: remember | delegate | mcp
    tool: str
    command: list[str] | None = None
    cwd: str | None = None
    timeout_s: float = 600.0
    patch: str | None = None
    path: str | None = None
    offset: int = 0
    limit: int | None = None
    depth: int = 1
    content: str | None = None
    plan: list[ev.PlanStep] | None = None
    explanation: str = ""
    mcp_server: str | None = None
    mcp_tool: str | None = None
    mcp_arguments: dict[str, Any] | None = None
    question: str = ""
    choices: list[str] | None = None
    note: str = ""
    role: str = ""
    task: str = ""
    worker_id: str | None = None
    workdir: str | None = None

    def action(self, action_id: str, session_id: str, workdir: str) -> wk.ActionMessage:
        if self.tool == "shell":
            return wk.RunCommand(action_id=action_id, session_id=session_id,
                                 argv=self.command or [], workdir=workdir, cwd=self.cwd,
                                 timeout_s=self.timeout_s)
        if self.tool == "apply_patch":
            return wk.ApplyPatch(action_id=action_id, session_id=session_id,
                               workdir=workdir, patch=self.patch or "")
        if self.tool == "read_file":
            return wk.ReadFile(action_id=action_id, session_id=session_id,
                               workdir=workdir, path=self.path or "", offset=self.offset,
                               limit=self.limit)
        if self.tool == "list_dir":
            return wk.ListDir(action_id=action_id, session_id=session_id,
                               workdir=workdir, path=self.path or ".", depth=self.depth)
        if self.tool == "write_file":
            return wk.WriteFile(action_id=action_id, session_id=session_id, workdir=workdir,
                                path=self.path or "", content=self.content or "")
        if self.tool == "mcp":
            return wk.McpCall(action_id=action_id, session_id=session_id,
                               server=self.mcp_server or "", tool=self.mcp_tool or "",
                              arguments=self.mcp_arguments or {}, workdir=workdir)
        raise BadToolCall(f"{self.tool} is not run on the worker")


def _args(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError as err:
        raise BadToolCall(f"the arguments are not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise BadToolCall("the arguments must be a JSON object")
    return value


def _str(args: dict[str, Any], key: str, required: bool = True) -> str | None:
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise BadToolCall(f"`{key}` must be a non-empty string")
    return value


def _int(args: dict[str, Any], key: str, default: int | None, low: int) -> int | None:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadToolCall(f"`{key}` must be an integer ≥ {low}")
    return value


def parse_call(name: str, arguments: str,
               capabilities: wk.Capabilities | None) -> ParsedCall:
    """Check a tool call against the tool's schema. Raises BadToolCall with a clear reason."""
    args = _args(arguments)
    if name == "shell":
        cmd = args.get("command")
        if isinstance(cmd, str):
            raise BadToolCall("`command` must be an argv list, e.g. [\"ls\", \"-la\"], "
                              "not a string")
        if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise BadToolCall("`command` must be a non-empty list of strings")
        timeout_ms = _int(args, "timeout_ms", None, 1)
        return ParsedCall("shell", command=cmd, cwd=_str(args, "workdir", required=False),
                          timeout_s=min(timeout_ms / 1000, 3600) if timeout_ms else 600.0)
    if name == "apply_patch":
        return ParsedCall("apply_patch", patch=_str(args, "input"))
    if name == "read_file":
        return ParsedCall("read_file", path=_str(args, "path"),
                          offset=_int(args, "offset", 0, 0) or 0,
                          limit=_int(args, "limit", None, 1))
    if name == "list_dir":
        return ParsedCall("list_dir", path=_str(args, "path", required=False) or ".",
                          depth=min(_int(args, "depth", 1, 1) or 1, 5))
    if name == "write_file":
        content = args.get("content")
        if not isinstance(content, str):
            raise BadToolCall("`content` must be a string")
        return ParsedCall("write_file", path=_str(args, "path"), content=content)
    if name == "update_plan":
        plan = args.get("plan")
        if not isinstance(plan, list):
            raise BadToolCall("`plan` must be a list of {step, status}")
        steps = []
        for entry in plan:
            if (not isinstance(entry, dict) or not isinstance(entry.get("step"), str)
                    or entry.get("status") not in ("pending", "in_progress", "done")):
                raise BadToolCall("each plan entry needs `step` (string) and `status` "
                                  "(pending, in_progress or done)")
            steps.append(ev.PlanStep(step=entry["step"], status=entry["status"]))
        explanation = args.get("explanation")
        return ParsedCall("update_plan", plan=steps,
                          explanation=explanation if isinstance(explanation, str) else "")
    if name == "ask_user":
        question = _str(args, "question") or ""
        choices = args.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise BadToolCall("`choices` must be a list of strings")
        return ParsedCall("ask_user", question=question.strip(),
                          choices=[c for c in choices if c.strip()][:10])
    if name == "delegate":
        task = (_str(args, "task") or "").strip()
        return ParsedCall("delegate", role=(_str(args, "role") or "").strip(), task=task,
                          worker_id=_str(args, "worker_id", required=False),
                          workdir=_str(args, "workdir", required=False))
    if name == "remember":
        note = " ".join((_str(args, "note") or "").split())
        if len(note) > 500:
            raise BadToolCall("a note holds at most 500 characters: keep it brief")
        return ParsedCall("remember", note=note)
    if name.startswith("mcp__"):
        for server in (capabilities.mcp_servers if capabilities else []):
            for tool in server.tools:
                if mcp_tool_name(server.name, tool.name) == name:
                    return ParsedCall("mcp", mcp_server=server.name, mcp_tool=tool.name,
                                      mcp_arguments=args)
        raise BadToolCall(f"no MCP tool {name!r} on this session's worker")
    raise BadToolCall(f"unknown tool {name!r}")


def _cap(text: str, limit: int = RESULT_CAP) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


def format_outcome(outcome: wk.ActionOutcome) -> str:
    """The text the model gets back for an action's outcome."""
    if isinstance(outcome, wk.CommandResult):
        output = outcome.stdout + (("\n" if outcome.stdout and outcome.stderr else "")
                                   + outcome.stderr if outcome.stderr else "")
        if outcome.timed_out:
            head = "the command timed out and was killed"
        elif outcome.cancelled:
            head = "the command was cancelled"
        elif outcome.exit_code is None:
            head = f"the command was killed by signal {outcome.signal}"
        else:
            head = f"exit code: {outcome.exit_code}"
        note = " (output truncated)" if outcome.truncated else ""
        return _cap(f"{head}{note}\n{output}".rstrip("\n"))
    if isinstance(outcome, wk.PatchResult):
        lines = [f"{f.op} {f.path}" + (f" -> {f.moved_to}" if f.moved_to else "")
                 + f" (+{f.added} -{f.removed})" for f in outcome.files]
        return "patch applied:\n" + "\n".join(lines)
    if isinstance(outcome, wk.FileContent):
        if outcome.binary:
            return f"{outcome.path} is a binary file ({outcome.size} bytes)"
        note = "\n… (truncated)" if outcome.truncated else ""
        return _cap(outcome.content + note)
    if isinstance(outcome, wk.WriteResult):
        return f"wrote {outcome.bytes_written} bytes to {outcome.path}"
    if isinstance(outcome, wk.DirListing):
        rows = [e.path + ("/" if e.kind == "dir" else "") for e in outcome.entries]
        note = "\n… (truncated)" if outcome.truncated else ""
        return _cap("\n".join(rows) + note) if rows else "(empty directory)"
    if isinstance(outcome, wk.McpCallResult):
        text = outcome.text or json.dumps(outcome.content)[:RESULT_CAP]
        return _cap(("error: " if outcome.is_error else "") + text)
    if isinstance(outcome, wk.Attached):
        return f"attached {outcome.workdir}"
    if isinstance(outcome, wk.Cancelled):
        return "cancelled"
    return _cap(json.dumps(outcome, default=str))
