"""What a tool is: one object holds everything the agent loop needs to know about it.

A :class:`Tool` has

- its **schema** (:attr:`~Tool.name`, :attr:`~Tool.description`, :attr:`~Tool.parameters`):
  what the model is told;
- its **typed arguments**: :meth:`~Tool.parse` turns the model's JSON object into the tool's
  own dataclass, or raises :class:`BadToolCall`, whose message goes back to the model as the
  call's result;
- its **properties**: whether a call only looks (:meth:`~Tool.looks_only`: the only calls a
  plan-mode or read-only session may make), and where it is offered (:attr:`~Tool.in_plan_mode`,
  :attr:`~Tool.for_readers`, the read-only sub-agents);
- its **approval rule**: :meth:`~Tool.ask` says, under the session's policy and approved
  prefixes, whether the call waits for the user, and with which kind of approval;
- **what it does**: a :class:`WorkerTool` sends one action to the session's worker
  (:meth:`~WorkerTool.action`) and reads its outcome (:meth:`~WorkerTool.settle`: the call's
  status, the text the model gets, the item's fields); a :class:`ServerTool` is carried out by
  the server itself (:meth:`~ServerTool.start`, then :meth:`~ServerTool.resume` after what it
  waited for);
- how the call **shows** on its item (:meth:`~Tool.shows`: the command, patch, path, …), and
  in the browser (:attr:`~Tool.display`: its card's title, icon and body, generated into
  ``web/tool_display.js`` by :mod:`codey_server.agent.tools.display`);
- when the model should use it (:attr:`~Tool.guide`, a line of the instructions).

The turn (:mod:`codey_server.agent.turn`) reads these and never a tool's name. Every tool is
registered once in :mod:`codey_server.agent.tools.registry`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo, State, WorkerInfo
from codey_server.core.rules import Decided
from codey_server.errors import ServerError
from codey_server.settings import RoleConfig

__all__ = [
    "RESULT_CAP",
    "SANDBOXED",
    "ApprovalKind",
    "Ask",
    "BadToolCall",
    "Display",
    "Finish",
    "ForAnswer",
    "ForChild",
    "ForWeb",
    "Gate",
    "Sandboxing",
    "ServerCall",
    "ServerTool",
    "Settled",
    "Tool",
    "ToolSpec",
    "Waiting",
    "WorkerTool",
    "cap",
    "obj",
]

#: characters of a tool result given back to the model (head and tail kept)
RESULT_CAP = 24_000

A = TypeVar("A")

ApprovalKind = Literal["command", "patch", "write", "mcp", "escalate", "delegate", "web"]


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    #: one line of the instructions: when to use it (the description says how)
    guide: str = ""

    def brief(self) -> ToolSpec:
        """The same tool told in short, for a model with a small window: the description's
        first sentence, the parameters without their descriptions."""
        first = self.description.split(". ", 1)[0].rstrip(".") + "."
        return ToolSpec(self.name, first, _without_descriptions(self.parameters), self.guide)


def _without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_without_descriptions(v) for v in schema]
    return schema


class BadToolCall(ServerError):
    """The model's call cannot be carried out; the message goes back to it as the result."""


@dataclass(frozen=True, slots=True)
class Gate:
    """What an approval rule may look at besides the call's arguments, and where the
    session's calls run: the one place a call's sandbox is decided (:meth:`of` builds it
    from the session and its machine; :meth:`route` judges a call; :attr:`sandbox` is what
    its action runs in, unless the tool's own arguments escalate out of it)."""

    #: the session's approval policy: suggest | auto-edit | full-auto
    policy: str
    #: commands the user approved "for this session" (a later command starting with one goes)
    approved_prefixes: Sequence[Sequence[str]] = ()
    #: the session's worker's capabilities (None: the worker is not known)
    capabilities: wk.Capabilities | None = None
    #: the session's commands run in the worker's OS sandbox (its mode is not full-access and
    #: the machine has one): only then is a "known-safe" command safe
    sandboxed: bool = True
    #: the session's sandbox mode (``full-access``: it chose none, so nothing escalates)
    sandbox_mode: wk.SandboxMode = "workspace-write"
    #: commands the user let run outside the sandbox "for this session"
    escalated_prefixes: Sequence[Sequence[str]] = ()
    #: the session's own worker (a call that reaches another machine asks)
    worker_id: str = ""
    #: the session's workdir (a sub-agent given a folder outside it asks)
    workdir: str = ""
    #: the paired machines (an approval names a machine by its host name)
    workers: Mapping[str, WorkerInfo] = field(default_factory=dict)
    #: the session's processes (``exec``): id → status (running, stopping, ended, gone)
    processes: Mapping[str, str] = field(default_factory=dict)
    #: the session's network toggle: with ``sandbox_mode``, where its actions run
    network: bool = False
    #: the session changes nothing until its plan is approved (plan mode), or ever
    plan_mode: bool = False
    read_only: bool = False
    #: the networks ``web_fetch`` may reach although they are private (``web.fetch_allow``)
    fetch_allow: tuple[str, ...] = ()
    #: the hosts ``web_fetch`` reaches without asking (Settings → Tools), and under them
    fetch_domains: tuple[str, ...] = ()

    @classmethod
    def of(cls, session: SessionInfo, capabilities: wk.Capabilities | None,
           workers: Mapping[str, WorkerInfo], fetch_allow: tuple[str, ...] = (),
           fetch_domains: tuple[str, ...] = ()) -> Gate:
        """The gate of ``session`` on its worker with ``capabilities`` (None: not known)."""
        s = session
        can_sandbox = capabilities is not None and capabilities.sandbox.kind != "none"
        return cls(s.policy, s.approved_prefixes, capabilities,
                   sandboxed=s.sandbox != "full-access" and can_sandbox,
                   sandbox_mode=s.sandbox, escalated_prefixes=s.escalated_prefixes,
                   worker_id=s.worker_id, workdir=s.workdir, workers=workers,
                   processes={p.process_id: p.status for p in s.processes},
                   network=s.network, plan_mode=s.plan_mode, read_only=s.read_only,
                   fetch_allow=fetch_allow, fetch_domains=fetch_domains)

    @property
    def can_sandbox(self) -> bool:
        """The session's machine has an OS sandbox (False while it is not known)."""
        caps = self.capabilities
        return caps is not None and caps.sandbox.kind != "none"

    @property
    def sandbox(self) -> Sandboxing:
        """Where the session's actions run (a command may escalate out of it: its tool's
        :meth:`~WorkerTool.action` says)."""
        return Sandboxing(self.sandbox_mode, self.network)

    def route(self, tool: Tool[A], args: A) -> str | Ask | None:
        """What a call needs before it runs: a refusal (its reason: plan mode, a read-only
        session, a machine without the sandbox the session runs in, the tool's own
        :meth:`~Tool.refuses`), the user's approval (the tool's :meth:`~Tool.ask`), or
        nothing."""
        if isinstance(tool, WorkerTool):
            # a "read-only" command is read-only only inside the sandbox
            looks_only = tool.looks_only(args) and (self.sandboxed or not tool.runs_commands)
            if (self.plan_mode or self.read_only) and not looks_only:
                return _PLAN_REFUSAL if self.plan_mode else (
                    "refused: this session only reads (read_file, grep, glob, list_dir, "
                    "read-only commands)")
            if tool.runs_commands and self.sandbox_mode != "full-access" \
                    and not self.can_sandbox and not tool.escalates(args):
                caps, worker = self.capabilities, self.workers.get(self.worker_id)
                why = caps.sandbox.reason if caps is not None else "it is not connected"
                host = worker.hostname if worker else self.worker_id
                return (f"refused: {host} has no OS sandbox ({why or 'none reported'}), and "
                        f"this session's commands run in one ({self.sandbox_mode}): no "
                        "command runs there until the user chooses full access for this "
                        "session")
        elif self.plan_mode and not tool.in_plan_mode:
            # not offered in plan mode, but a model may call it by name: a sub-agent started
            # now would do the work before the user approved the plan
            return _PLAN_REFUSAL
        return tool.refuses(args, self) or tool.ask(args, self)


_PLAN_REFUSAL = ("refused in plan mode: nothing changes before the user approves your plan "
                 "(propose it with update_plan)")


@dataclass(frozen=True, slots=True)
class Ask:
    """The call waits for the user: the approval's kind and what it shows them."""

    kind: ApprovalKind
    command: list[str] | None = None
    patch: str | None = None
    path: str | None = None
    #: why, in the model's words (an escalation's justification) or the tool's
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Sandboxing:
    """Where a worker action runs: the session's sandbox mode and network toggle."""

    mode: wk.SandboxMode = "workspace-write"
    network: bool = False


#: the session's defaults: the workdir writable, the network off
SANDBOXED = Sandboxing()


#: how a worker tool's outcome settles its call: status, the model's text, item fields
Settled = tuple[ev.ToolStatus, str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ServerCall:
    """What a tool the server carries out may read: the folded state (as of this step), its
    call's item, fresh ids and the time, the sub-agent roles."""

    state: State
    session: SessionInfo
    item: ev.ToolCall
    new_id: Callable[[str], str]
    now: float
    roles: Mapping[str, RoleConfig] = field(default_factory=dict)
    #: False in a sub-agent, and where the server has no sub-agents
    can_delegate: bool = False


@dataclass(frozen=True, slots=True)
class Finish:
    """A server-side call is over: its status and result, with the events that go before the
    item's update (``events``: any session's) and the item's extra fields."""

    status: ev.ToolStatus
    result: str
    events: Decided = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ForAnswer:
    """Wait for the user's answer to this question (the session waits in ``waiting_user``)."""

    question_id: str


@dataclass(frozen=True, slots=True)
class ForChild:
    """Wait for this sub-agent session's turn to end."""

    session_id: str


@dataclass(frozen=True, slots=True)
class ForWeb:
    """Carry out a web tool's request on the server (``fetch``: ``target`` is the URL;
    ``search``: the query); the call is finished with what came back, not by
    :meth:`ServerTool.resume`."""

    kind: Literal["fetch", "search"]
    target: str
    #: what the model wants from the page (``web_fetch``'s ``prompt``)
    prompt: str = ""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A server-side call waits (``on``) after appending ``events``; then
    :meth:`ServerTool.resume` finishes it (a :class:`ForWeb` call: what came back)."""

    on: ForAnswer | ForChild | ForWeb
    events: Decided = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Display:
    """How a call of a tool shows in the browser: ``web/tool_display.js`` holds every tool's,
    generated (:mod:`codey_server.agent.tools.display`), and ``web/views/items.js`` renders
    the card from it, never from the tool's name."""

    #: the card's title ("" : the tool's name)
    label: str = ""
    #: its icon (the CSS class ``icon-<icon>``)
    icon: str = "tool"
    #: how its body renders: ``command`` (the argv and its streamed output), ``process`` (a
    #: process of ``exec``: its command or input, its state, what was read), ``patch`` (the
    #: files and the diff), ``search`` (the pattern, where, what was found), ``image``,
    #: ``memory`` (the note), ``question`` (the question, and how to answer it),
    #: ``delegate`` (the role, the task, the sub-agent's session), ``mcp`` (titled by server
    #: and tool; the arguments and the result), ``file`` (the path, or the arguments; the
    #: result). A ``file`` card with a command or a diff shows as ``command`` or ``patch``
    body: str = "file"
    #: a ``patch`` card shows its path above the diff when it has no list of files (``edit``)
    path_over_diff: bool = False
    #: a ``file`` card without a path shows the call's arguments (as JSON)
    arguments: bool = True
    #: the argument whose text the card shows: a ``file`` card shows it as a file
    #: (``write_file``'s ``content``), a ``process`` card as what was typed into the process
    #: (``write_stdin``'s ``input``)
    content: str = ""
    #: how the result shows: ``text``, ``file`` (coloured as the file at its path: what it
    #: read), ``none``
    result: str = "text"
    #: the title of the folded result
    result_label: str = "Result"
    #: what a running call is doing, for the session's status line ("": the tool's name)
    busy: str = ""


class Tool(Generic[A]):
    """One tool: see the module's docstring. Subclass :class:`WorkerTool` or
    :class:`ServerTool`, set the class attributes, and register an instance."""

    name: str
    description: str
    parameters: dict[str, Any]
    #: every call only looks (``shell`` decides per call: :meth:`looks_only`)
    read_only: bool = False
    #: offered in plan mode (looking, planning, asking)
    in_plan_mode: bool = False
    #: offered to read-only sub-agents (the explorer)
    for_readers: bool = False
    #: calls of this tool in one answer are started together, before the answer's other
    #: calls, and run in parallel (``delegate``)
    parallel: bool = False
    #: it runs programs on the worker (``shell``): refused on a machine without a sandbox
    #: unless the session chose full access, and "known-safe" only inside the sandbox
    runs_commands: bool = False
    #: one of the ways to change a file that a provider may choose between
    #: (``ProviderConfig.edit_tools``): ``apply_patch`` or ``edit``
    editor: str | None = None
    #: one line of the instructions: when to use it (the description says how)
    guide: str = ""
    #: how its calls show in the browser
    display: Display = Display()

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters, self.guide)

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> A:
        """The call's typed arguments; raises :class:`BadToolCall` with a clear reason.
        ``name`` is the name the model called (one tool may answer to several: MCP)."""
        raise NotImplementedError

    def escalates(self, args: A) -> bool:
        """True when this call asks to run outside the session's sandbox (a command tool's
        ``escalate``): the user is asked whatever the policy, and a machine without a sandbox
        does not refuse it."""
        return False

    def looks_only(self, args: A) -> bool:
        """True when this call changes nothing: plan mode and read-only sessions allow only
        these (and the server's own tools)."""
        return self.read_only

    def ask(self, args: A, gate: Gate) -> Ask | None:
        """The approval this call waits for, or None when it goes ahead."""
        return None

    def refuses(self, args: A, gate: Gate) -> str | None:
        """Why this call is refused whatever the user would say (a process of another
        session, say), or None."""
        return None

    def shows(self, args: A) -> dict[str, Any]:
        """Fields of the tool-call item that show the call (``command``, ``patch``, …)."""
        return {}


class WorkerTool(Tool[A]):
    """A tool carried out by one action on the session's worker."""

    def preview(self, args: A, action_id: str, session_id: str,
                workdir: str) -> wk.ActionMessage | None:
        """An action whose outcome the approval shows, run before asking (``write_file``:
        the file as it is now); None: ask at once. It must change nothing."""
        return None

    def previewed(self, args: A, ask: Ask, found: wk.ActionOutcome | None,
                  failure: tuple[str, str]) -> tuple[Ask, dict[str, Any]]:
        """The approval to ask once the :meth:`preview` action is over, and fields of the
        call's item that show it (they stay after the decision). ``found``: its outcome, or
        None when it failed (``failure``: its code and message)."""
        return ask, {}

    def action(self, args: A, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        """The action for this call; ``sandbox``: the session's sandbox mode and network."""
        raise NotImplementedError

    def reads(self, outcome: wk.ActionOutcome) -> str:
        """The text the model gets back for the action's outcome."""
        return reads_any(outcome)

    def stores(self, outcome: wk.ActionOutcome) -> bytes | None:
        """Bytes of the outcome the server keeps in its blob store (by their sha256) before
        the call settles — an image the model is shown — or None."""
        return None

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        """``(status, result, fields)`` of the item update that finishes the call.
        ``stream_truncated``: the item's streamed output reached its cap."""
        return "done", self.reads(outcome), {}

    def events(self, args: A, outcome: wk.ActionOutcome, item: ev.ToolCall,
               session: SessionInfo) -> list[ev.Event]:
        """Events that go with the call's end, before its item's update (a process it
        started, read or stopped)."""
        return []

    def error_events(self, args: A, code: str, item: ev.ToolCall,
                     session: SessionInfo) -> list[ev.Event]:
        """Events that go with the worker refusing the call with ``code``."""
        return []


class ServerTool(Tool[A]):
    """A tool the server carries out itself (no action on a worker)."""

    def start(self, args: A, call: ServerCall) -> Finish | Waiting:
        """Carry the call out, or say what it waits for (also after a restart: look for what
        an earlier start left in the state)."""
        raise NotImplementedError

    def resume(self, args: A, call: ServerCall) -> Finish:
        """Finish the call once what :meth:`start` waited for is over."""
        raise NotImplementedError


# helpers for the tools' modules ------------------------------------------------------------

def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A JSON-schema object of ``props`` that takes no other properties."""
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def string(args: dict[str, Any], key: str, required: bool = True) -> str | None:
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise BadToolCall(f"`{key}` must be a non-empty string")
    return value


def integer(args: dict[str, Any], key: str, default: int | None, low: int) -> int | None:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadToolCall(f"`{key}` must be an integer ≥ {low}")
    return value


def cap(text: str, limit: int = RESULT_CAP) -> str:
    """``text`` cut to ``limit`` characters, keeping its head and tail."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


def reads_any(outcome: wk.ActionOutcome) -> str:
    """The text of an outcome no tool reads its own way."""
    if isinstance(outcome, wk.Attached):
        return f"attached {outcome.workdir}"
    if isinstance(outcome, wk.Cancelled):
        return "cancelled"
    return cap(json.dumps(outcome, default=str))
