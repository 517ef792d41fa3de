"""Codey's own turn, as a state machine without I/O: model call → tool calls → approval gate →
worker → back to the model, until the model answers without tools.

:class:`CodeyTurn` is a :class:`~codey_server.agent.machine.TurnMachine`: the driver
(:mod:`~codey_server.agent.driver`) feeds it inputs and carries out its effects. Everything it
knows comes from the folded session, so after a restart a new turn (``resume=True``) picks up
exactly where the old one stopped: streams left open are closed as partial, unfinished tool
calls are settled first (a pending action is run again with its action id, a pending approval
or question is waited for, a sub-agent is found again by its call), then the model is called.

One pass of the loop, each arrow a step (or several, when a step waits for an input):

``Start`` → [load the workdir's context] → status running → **settle** the open tool calls
(the parallel ones — ``delegate`` — started together first; the others in order, one at a
time: refused, asked, carried out on the server, or run on the worker) → stop if a plan
waits for approval → inject queued prompts → stop (idle) if the model has nothing to answer,
or (``waiting_user``) at the iteration cap → write prompts' attachments into the workdir →
[reload the context if it changed; compact (asked for, near the window)] → **call the model**
(its deltas streamed into items, coalesced; its tool calls appended with the first one's
action when nothing asks) → settle again.

Failures are results: a bad tool call, a refused or failed action, a rejection, a worker
timeout all go back to the model as text. A model API error — after the retries of a cut
stream, a compaction (``context_length``) and the fallback provider where they apply —
becomes an error item, and the session stays usable.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.events import IMAGE_MIMES, ActionRequested
from codey_protocol.ratelimits import rate_limit_event
from codey_protocol.state import SessionContext
from codey_server.agent.compaction import (
    COMPACT_INSTRUCTIONS,
    INPUT_SHARE,
    KEEP_SHARE,
    choose_cut,
    summary_input,
)
from codey_server.agent.context import estimate_tokens
from codey_server.agent.conversation import attachment_path, base_of, model_call_needed
from codey_server.agent.errors import RETRYABLE_BY_FALLBACK, ModelError, backoff
from codey_server.agent.history import History
from codey_server.agent.instructions import build_instructions, memory_of
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    ActionProgressed,
    Answered,
    BlobLoaded,
    BlobStored,
    CallModel,
    CancelAction,
    ChildDone,
    Coalesced,
    ContextChanged,
    LoadBlob,
    ModelDone,
    ModelFailed,
    ModelParts,
    RunAction,
    SessionAttached,
    SetTimer,
    Start,
    StoreBlob,
    Streamed,
    TurnMachine,
    WaitAnswer,
    WaitChild,
    WorkerPresence,
)
from codey_server.agent.models import ModelProvider
from codey_server.agent.ports import Limits, Models
from codey_server.agent.stream import (
    Finished,
    ModelEvent,
    RateLimits,
    ReasoningDelta,
    ReasoningDone,
    RefusalDelta,
    Retrying,
    TextDelta,
    ToolCallRequested,
    Usage,
)
from codey_server.agent.tools import (
    Ask,
    BadToolCall,
    Finish,
    ForAnswer,
    Gate,
    ParsedCall,
    Sandboxing,
    ServerCall,
    ServerTool,
    ToolSpec,
    Waiting,
    WorkerTool,
    parse_call,
    tool_named,
    tools_for,
)
from codey_server.agent.tools.base import cap
from codey_server.agent.tools.shell import ITEM_OUTPUT_CAP
from codey_server.agent.wire import CallOptions
from codey_server.core.decide import known_providers
from codey_server.settings import RoleConfig

__all__ = ["CONTEXT_TIMEOUT_S", "CodeyTurn"]

#: how long a turn waits for the worker to read the workdir's context
CONTEXT_TIMEOUT_S = 30.0
#: the timer of a retry after a cut stream
_RETRY = "retry"
_BUSY_REASONS = ("model busy", "the answer was cut")

Reason = Literal["threshold", "context_exceeded", "manual"]


@dataclass
class _Call:
    """The model call being prepared or made: where it goes, what it sends, what it tried."""

    provider: ModelProvider
    model: str
    body: bytes = b""
    compacted: bool = False
    cuts: int = 0


@dataclass
class _Answer:
    """What the model said so far in this call."""

    text: Streamed
    refusal: Streamed
    reasoning: Streamed
    calls: list[ToolCallRequested] = field(default_factory=list)
    tail: list[ev.Event] = field(default_factory=list)  # usage and rate limits
    finished: Finished | None = None


@dataclass
class _Compaction:
    reason: Reason
    then: Callable[[bool], None]
    restore: tuple[ev.SessionStatus, str]
    start: int
    cut: int
    previous: ev.Summary | None
    budget: int
    tokens_before: int
    attempt: int = 0
    parts: list[str] = field(default_factory=list)
    tail: list[ev.Event] = field(default_factory=list)


@dataclass
class _Running:
    """The tool call whose action runs on the worker."""

    item_id: str
    action_id: str
    tool: WorkerTool[Any]
    output: Coalesced
    streamed: int = 0
    truncated: bool = False


@dataclass
class _Previewing:
    """A call whose approval waits for what the worker reads first (the file a write
    replaces)."""

    item_id: str
    parsed: ParsedCall[Any]
    ask: Ask
    action_id: str


@dataclass
class _Attaching:
    """Files sent with prompts, being written into the workdir: per message, its files."""

    messages: list[tuple[str, list[ev.Attachment]]]
    index: int = 0  # the file of the first message being written
    action_id: str | None = None


class CodeyTurn(TurnMachine):
    """One turn of a Codey session (see the module's docstring)."""

    def __init__(self, session_id: str, *, models: Models, limits: Limits,
                 roles: Mapping[str, RoleConfig] | None = None, resume: bool = False,
                 compact_only: bool = False) -> None:
        super().__init__(session_id, approval_timeout_s=limits.approval_timeout_s)
        self.models = models
        self.limits = limits
        self.roles: Mapping[str, RoleConfig] = roles or {}
        self.resume = resume
        self.compact_only = compact_only
        self.iterations = 0
        self.force_call = False  # a resumed turn whose answer was cut calls the model again
        self.context_stale = False
        self._route: tuple[ModelProvider, str] | None = None
        self._on_fallback = False
        self._parsed: dict[str, ParsedCall[Any] | BadToolCall] = {}
        self._context_action: tuple[str, Callable[[], None]] | None = None
        #: the worker said the session's folder, a worktree, is gone (``worktree_gone``): the
        #: turn stops before the model is called again
        self._gone: str | None = None
        self._call: _Call | None = None
        self._answer: _Answer | None = None
        self._compaction: _Compaction | None = None
        self._running: _Running | None = None
        #: a call whose outcome's bytes are being kept in the blob store before it settles
        self._storing: tuple[_Running, wk.ActionOutcome] | None = None
        self._attaching: _Attaching | None = None
        self._asking: tuple[str, str] | None = None  # (question id, item id)
        self._children: dict[str, str] = {}  # sub-agent session id → the call's item id
        self._approving: str | None = None  # the item whose approval is waited for
        self._previewing: _Previewing | None = None  # read before asking
        self._encoded_tools: tuple[Any, wk.Capabilities | None, list[ToolSpec], bytes] \
            | None = None
        #: the MCP servers as the worker listed them in the session's workdir (its attach)
        self._mcp_servers: list[wk.McpServerInfo] = []
        #: (the hello's capabilities, the attach's list, the two laid together)
        self._laid: tuple[wk.Capabilities, list[wk.McpServerInfo], wk.Capabilities] | None = None

    def finish(self, item_id: str, status: ev.ToolStatus, result: str, *before: ev.Event,
               **fields: Any) -> None:
        # every result the model reads is capped here, whichever tool made it (head and
        # tail kept, the cut said in the middle)
        super().finish(item_id, status, cap(result), *before, **fields)

    # the loop ------------------------------------------------------------------------------

    def _on_start(self, _: Start) -> None:
        if self.compact_only:
            restore = (self.current_status, self.status_reason)
            if self._begin_call():
                self._compact("manual", lambda _ok: self._compacted_alone(restore))
            return
        if self.resume:
            for item in self.session.items:
                if isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
                    self.force_call = True
                    self.emit(ev.SessionItemUpdated(item_id=item.id, streaming=False,
                                                    partial=True))
        self.next(lambda: self._load_context(self._loop))

    def _compacted_alone(self, restore: tuple[ev.SessionStatus, str]) -> None:
        self.status(*restore)
        self.done = True

    def _loop(self) -> None:
        self.status("running")
        self._settle()

    def _after_settle(self) -> None:
        s = self.session
        if s.plan_mode and s.plan_status == "proposed":
            self.status("waiting_user", "the plan waits for your approval")
            self.done = True
            return
        queued = [i for i in s.items if isinstance(i, ev.UserMessage) and i.queued]
        self.emit(*[ev.SessionItemUpdated(item_id=i.id, queued=False) for i in queued])
        self.next(self._before_call)

    def _before_call(self) -> None:
        if self._gone is not None:
            self._stop_gone(self._gone)
            return
        if not (self.force_call or model_call_needed(self.session)):
            self.status("idle")
            self.next(self._after_idle)
            return
        self.force_call = False
        cap = self.session.turn_cap or self.limits.turn_iteration_cap
        if self.iterations >= cap:
            self.emit(ev.SessionItemAppended(item=ev.AssistantMessage(
                id=self.new_id("itm"), ts=self.now,
                text=f"I have taken {cap} steps in this turn without finishing. Should I go "
                     "on? Send a message to continue, or tell me what to change.")))
            self.status("waiting_user", "iteration cap reached")
            self.done = True
            return
        self.iterations += 1
        self._write_attachments()

    def _after_idle(self) -> None:
        # a prompt that arrived while the turn was ending starts the next one here
        s = self.session
        if model_call_needed(s) or any(isinstance(i, ev.UserMessage) and i.queued
                                       for i in s.items):
            self._loop()
        else:
            self.done = True

    # the workdir's context -----------------------------------------------------------------

    def _load_context(self, then: Callable[[], None]) -> None:
        """Load what applies to the workdir (AGENTS.md, skills, environment) from the
        worker, then ``then``. A worker that is away or cannot do it leaves the last known
        context in place: the turn does not wait for it."""
        s = self.session
        self.context_stale = False
        worker = self.state.workers.get(s.worker_id)
        if worker is None or "load_context" not in worker.capabilities.executors:
            then()
            return
        action = wk.LoadContext(action_id=self.new_id("act"), session_id=s.session_id,
                                workdir=s.workdir)
        self._context_action = (action.action_id, then)
        self.effect(RunAction(s.worker_id, action, CONTEXT_TIMEOUT_S, workdir=s.workdir,
                              attach_timeout=CONTEXT_TIMEOUT_S, if_present=True))

    def _context_loaded(self, i: ActionOutcomeInput) -> None:
        assert self._context_action is not None
        then = self._context_action[1]
        self._context_action = None
        if isinstance(i, ActionErrored) and i.code == "worktree_gone":
            self._stop_gone(i.message)  # nothing runs in a folder that is not there
            return
        if isinstance(i, ActionDone) and isinstance(i.outcome, wk.ProjectContext):
            found = i.outcome
            event = ev.SessionContextUpdated(instructions=found.instructions,
                                             skills=found.skills,
                                             environment=found.environment,
                                             warnings=found.warnings)
            if not _same_context(self.session.context, event):
                self.emit(event)
        self.next(then)

    def _stop_gone(self, message: str) -> None:
        """End the turn: the session's folder, a worktree, was removed (the worker said so,
        ``worktree_gone``). Its worktree is recorded as removed, so no turn starts there
        again until it is made again from its branch or the session is forked into a new
        one; a prompt not answered yet waits for that."""
        s = self.session
        if s.worktree is not None and s.worktree.status != "removed":
            self.emit(ev.WorktreeUpdated(status="removed", error=message))
        self.status("error", message)
        self.done = True

    def _on_context_changed(self, _: ContextChanged) -> None:
        self.context_stale = True

    # the worker's capabilities, as the session sees them ----------------------------------

    def _on_session_attached(self, i: SessionAttached) -> None:
        self._mcp_servers = i.mcp_servers

    def _capabilities(self) -> wk.Capabilities | None:
        """The session's worker's capabilities (None: the worker is not known), with the MCP
        servers as the worker listed them in the session's workdir when it attached it laid
        over those of its ``hello``, by server name: a server confined to its cwd cannot start
        in the scratch directory ``hello``'s list came from, and has tools only there. The
        same object while neither changes (the encoded tools are kept by identity)."""
        worker = self.state.workers.get(self.session.worker_id)
        if worker is None:
            return None
        caps = worker.capabilities
        if not self._mcp_servers:
            return caps
        laid = self._laid
        if laid is not None and laid[0] is caps and laid[1] is self._mcp_servers:
            return laid[2]
        own = {server.name: server for server in self._mcp_servers}
        servers = [own.pop(server.name, server) for server in caps.mcp_servers]
        merged = msgspec.structs.replace(caps, mcp_servers=servers + list(own.values()))
        self._laid = (caps, self._mcp_servers, merged)
        return merged

    # tool calls ----------------------------------------------------------------------------

    def _parse(self, item: ev.ToolCall) -> ParsedCall[Any] | BadToolCall:
        parsed = self._parsed.get(item.id)
        if parsed is None:
            try:
                parsed = parse_call(item.name, item.arguments, self._capabilities())
            except BadToolCall as err:
                parsed = err
            self._parsed[item.id] = parsed
        return parsed

    def _settle(self) -> None:
        """Settle the open tool calls: the parallel ones started together, then the others in
        order, one at a time; then go on with the loop."""
        if self._running is not None or self._storing is not None \
                or self._approving is not None or self._asking or self._previewing is not None:
            return  # a call is under way: its end settles the next
        open_calls = [i for i in self.session.items
                      if isinstance(i, ev.ToolCall) and i.result is None]
        waiting = set(self._children.values())
        serial: list[ev.ToolCall] = []
        settled = False
        for item in open_calls:
            tool = tool_named(item.name)
            if tool is None or not tool.parallel:
                serial.append(item)
            elif item.id not in waiting:
                settled = self._settle_call(item) or settled
                if self._approval_pending():
                    return  # one approval at a time: its end settles the rest
        if self._children:
            return  # the rest waits for the sub-agents
        if settled:
            self.next(self._settle)
        elif serial:
            if self._settle_call(serial[0]):
                self.next(self._settle)
        else:
            self._after_settle()

    def _approval_pending(self) -> bool:
        # a method, not the attribute: a call settled just now may have asked for one
        return self._approving is not None or self._previewing is not None

    def _route_call(self, parsed: ParsedCall[Any]) -> str | Ask | None:
        """What a call needs before it runs: a refusal (its reason: plan mode, a read-only
        session, a machine without the sandbox the session runs in), the user's approval, or
        nothing. The one place that decides."""
        s = self.session
        tool, args = parsed.tool, parsed.args
        worker = self.state.workers.get(s.worker_id)
        caps = self._capabilities()
        can_sandbox = caps is not None and caps.sandbox.kind != "none"
        sandboxed = s.sandbox != "full-access" and can_sandbox
        if isinstance(tool, WorkerTool):
            # a "read-only" command is read-only only inside the sandbox
            looks_only = tool.looks_only(args) and (sandboxed or not tool.runs_commands)
            if (s.plan_mode or s.read_only) and not looks_only:
                return ("refused in plan mode: nothing changes before the user approves your "
                        "plan (propose it with update_plan)") if s.plan_mode else (
                    "refused: this session only reads (read_file, grep, glob, list_dir, "
                    "read-only commands)")
            if tool.runs_commands and s.sandbox != "full-access" and not can_sandbox \
                    and not tool.escalates(args):
                why = caps.sandbox.reason if caps is not None else "it is not connected"
                host = worker.hostname if worker else s.worker_id
                return (f"refused: {host} has no OS sandbox ({why or 'none reported'}), and "
                        f"this session's commands run in one ({s.sandbox}): no command runs "
                        "there until the user chooses full access for this session")
        elif s.plan_mode and not tool.in_plan_mode:
            # not offered in plan mode, but a model may call it by name: a sub-agent started
            # now would do the work before the user approved the plan
            return ("refused in plan mode: nothing changes before the user approves your "
                    "plan (propose it with update_plan)")
        gate = Gate(s.policy, s.approved_prefixes, caps, sandboxed=sandboxed,
                    sandbox_mode=s.sandbox, escalated_prefixes=s.escalated_prefixes,
                    worker_id=s.worker_id, workdir=s.workdir,
                    workers=self.state.workers,
                    processes={p.process_id: p.status for p in s.processes})
        return tool.refuses(args, gate) or tool.ask(args, gate)

    def _settle_call(self, item: ev.ToolCall) -> bool:
        """Settle one open call as far as it goes now. True: it finished, or its action was
        requested (settle again once that is folded); False: it waits for an input."""
        parsed = self._parse(item)
        if isinstance(parsed, BadToolCall):
            self.finish(item.id, "failed", f"error: {parsed}", error=str(parsed))
            return True
        tool = parsed.tool
        s = self.session
        fate = self._route_call(parsed)
        if isinstance(fate, str):
            self.finish(item.id, "rejected", fate)
            return True
        if isinstance(tool, WorkerTool) and item.action_id is not None:
            pending = s.pending_actions.get(item.action_id)
            if pending is None:
                return self._request(item, parsed, item.action_id)
            self._run(item, tool, pending.action)
            return False
        if item.approval_id is not None:
            approval = s.approvals.get(item.approval_id)
            if approval is None:
                self.finish(item.id, "rejected",
                            "rejected by the user: the approval record is missing")
                return True
            if approval.status != "pending":
                return self._approved_or_not(item, approval.status, approval.message)
            self._approving = item.id
            self.await_approval(approval.approval_id, approval.requested_at)
            return False
        if isinstance(fate, Ask):
            if isinstance(tool, WorkerTool):
                # what the approval shows may need the worker first (a write: the file now)
                read = tool.preview(parsed.args, self.new_id("act"), s.session_id, s.workdir)
                if read is not None:
                    self._previewing = _Previewing(item.id, parsed, fate, read.action_id)
                    self.effect(RunAction(s.worker_id, read, CONTEXT_TIMEOUT_S,
                                          workdir=s.workdir, attach_timeout=CONTEXT_TIMEOUT_S))
                    return False
            self._ask(item, fate)
            return False
        return self._go(item, parsed)

    def _ask(self, item: ev.ToolCall, fate: Ask, fields: dict[str, Any] | None = None) -> None:
        """Ask the user about ``item`` (with ``fields`` of the item that show what is asked)
        and wait for the decision."""
        approval_id = self.new_id("apr")
        self.emit(ev.ApprovalRequested(approval_id=approval_id, item_id=item.id,
                                       kind=fate.kind, command=fate.command,
                                       patch=fate.patch, path=fate.path,
                                       reason=fate.reason or f"{item.name} wants to run"),
                  ev.SessionItemUpdated(item_id=item.id, status="waiting_approval",
                                        approval_id=approval_id, **(fields or {})))
        self._approving = item.id
        self.await_approval(approval_id, self.now)

    def _previewed(self, i: ActionOutcomeInput) -> None:
        """What the approval shows has been read (or could not be): ask now."""
        p = self._previewing
        assert p is not None
        self._previewing = None
        item = self._item(p.item_id)
        if item is None or item.result is not None:
            self.next(self._settle)
            return
        tool = p.parsed.tool
        assert isinstance(tool, WorkerTool)
        if isinstance(i, ActionDone):
            found, failure = i.outcome, ("", "")
        elif isinstance(i, ActionErrored):
            found, failure = None, (i.code, i.message)
        else:
            found, failure = None, ("timeout", "the worker did not answer in time")
        ask, fields = tool.previewed(p.parsed.args, p.ask, found, failure)
        self._ask(item, ask, fields)

    def _go(self, item: ev.ToolCall, parsed: ParsedCall[Any]) -> bool:
        """Carry out a call that needs nothing more: its action, or the server's own work."""
        if isinstance(parsed.tool, ServerTool):
            return self._on_server(item, parsed.tool.start(parsed.args,
                                                           self._server_call(item)))
        return self._request(item, parsed, self.new_id("act"))

    def _request(self, item: ev.ToolCall, parsed: ParsedCall[Any], action_id: str) -> bool:
        """Record the call's action; it runs at the next settle, once that is folded."""
        self.emit(*self._requested(item.id, parsed, action_id),
                  ev.SessionItemUpdated(item_id=item.id, status="running", action_id=action_id))
        return True

    def _requested(self, item_id: str, parsed: ParsedCall[Any],
                   action_id: str) -> list[ev.ActionRequested]:
        s = self.session
        tool = parsed.tool
        assert isinstance(tool, WorkerTool)
        return [ev.ActionRequested(action_id=action_id, item_id=item_id, worker_id=s.worker_id,
                                   action=tool.action(parsed.args, action_id, s.session_id,
                                                      s.workdir,
                                                      sandbox=Sandboxing(s.sandbox, s.network)))]

    def approval_over(self, approval_id: str) -> None:
        item_id, self._approving = self._approving, None
        item = self._item(item_id) if item_id is not None else None
        approval = self.session.approvals.get(approval_id)
        self.status("running")
        if item is not None and approval is not None and item.result is None:
            self._approved_or_not(item, approval.status, approval.message)
        self.next(self._settle)

    def _approved_or_not(self, item: ev.ToolCall, decision: str, message: str) -> bool:
        if decision == "approved":
            parsed = self._parse(item)
            assert not isinstance(parsed, BadToolCall)
            return self._go(item, parsed)
        self.finish(item.id, "rejected",
                    "rejected by the user" + (f": {message}" if message else ""))
        return True

    def _item(self, item_id: str) -> ev.ToolCall | None:
        for item in reversed(self.session.items):
            if item.id == item_id and isinstance(item, ev.ToolCall):
                return item
        return None

    # calls the server carries out ----------------------------------------------------------

    def _server_call(self, item: ev.ToolCall) -> ServerCall:
        s = self.session
        return ServerCall(self.state, s, item, self.new_id, self.now, roles=self.roles,
                          can_delegate=s.parent_id is None)

    def _on_server(self, item: ev.ToolCall, step: Finish | Waiting) -> bool:
        if isinstance(step, Finish):
            self._finish_server(item.id, step)
            return True
        self.emit_all(step.events)
        if isinstance(step.on, ForAnswer):
            self._asking = (step.on.question_id, item.id)
            self.status("waiting_user", "a question for you")
            self.effect(WaitAnswer(self.session_id, step.on.question_id))
        else:
            self._children[step.on.session_id] = item.id
            self.effect(WaitChild(step.on.session_id))
        return False

    def _finish_server(self, item_id: str, step: Finish) -> None:
        self.emit_all(step.events)
        self.finish(item_id, step.status, step.result, **step.fields)

    def _resume_server(self, item_id: str) -> None:
        item = self._item(item_id)
        if item is None or item.result is not None:
            return
        parsed = self._parse(item)
        assert not isinstance(parsed, BadToolCall) and isinstance(parsed.tool, ServerTool)
        self._finish_server(item_id, parsed.tool.resume(parsed.args, self._server_call(item)))

    def _on_answered(self, i: Answered) -> None:
        if self._asking is None or self._asking[0] != i.question_id:
            return
        item_id = self._asking[1]
        self._asking = None
        self.status("running")
        self._resume_server(item_id)
        self.next(self._settle)

    def _on_child_done(self, i: ChildDone) -> None:
        item_id = self._children.pop(i.session_id, None)
        if item_id is None:
            return
        self._resume_server(item_id)
        if not self._children:
            self.next(self._settle)

    # the worker ----------------------------------------------------------------------------

    def _run(self, item: ev.ToolCall, tool: WorkerTool[Any], action: wk.ActionMessage) -> None:
        s = self.session
        timeout = self.limits.action_timeout_s
        # a resumed call's item already shows output: it counts towards the cap, and is
        # not streamed again when the output comes again from its start (a take-over)
        shown = len(item.output)
        self._running = _Running(item.id, action.action_id, tool,
                                 Coalesced("output_delta", item.id), streamed=shown)
        self.effect(RunAction(s.worker_id, action, timeout, workdir=s.workdir,
                              attach_timeout=timeout, progress=True, watch=True, skip=shown))

    def _on_action_progressed(self, i: ActionProgressed) -> None:
        r = self._running
        if r is None or r.action_id != i.action_id:
            return
        if r.streamed >= ITEM_OUTPUT_CAP:
            r.truncated = True
            return
        chunk = i.progress.data[: ITEM_OUTPUT_CAP - r.streamed]
        r.streamed += len(chunk)
        self.add_delta(r.output, chunk)

    def _on_worker_presence(self, i: WorkerPresence) -> None:
        if self._running is not None and self._running.action_id == i.action_id:
            if i.present:
                self.status("running")
            else:
                self.status("waiting_worker", "the worker is disconnected")

    def action_over(self, i: ActionOutcomeInput) -> None:
        if self._context_action is not None and self._context_action[0] == i.action_id:
            self._context_loaded(i)
        elif self._attaching is not None and self._attaching.action_id == i.action_id:
            self._attachment_written(i)
        elif self._running is not None and self._running.action_id == i.action_id:
            self._tool_action_over(i)
        elif self._previewing is not None and self._previewing.action_id == i.action_id:
            self._previewed(i)

    def _tool_action_over(self, i: ActionOutcomeInput) -> None:
        r = self._running
        assert r is not None
        self._running = None
        self.flush(r.output)
        lost = _lost_with_its_worker(i, r.tool)
        if lost is not None:
            self._lost(r, i, lost)
            return
        if self.current_status == "waiting_worker":
            self.status("running")
        if isinstance(i, ActionDone):
            data = r.tool.stores(i.outcome)
            if data is not None:  # kept before the call settles (an image): BlobStored
                self._storing = (r, i.outcome)
                self.effect(StoreBlob(data))
                return
            status, result, fields = r.tool.settle(i.outcome, r.truncated)
            self.finish(r.item_id, status, result,
                        ev.ActionFinished(action_id=r.action_id, outcome="result"),
                        *self._tool_events(r, i.outcome), **fields)
        elif isinstance(i, ActionErrored):  # refused or failed on the worker
            self.finish(r.item_id, "failed", f"error ({i.code}): {i.message}",
                        ev.ActionFinished(action_id=r.action_id, outcome="errored"),
                        *self._tool_events(r, i.code), error=i.message)
            if i.code == "worktree_gone":  # removed under the turn: it ends, not the model
                self._gone = i.message
        else:
            self.effect(CancelAction(self.session.worker_id, r.action_id, self.session_id))
            self.finish(r.item_id, "failed", f"error: the worker did not finish within "
                                             f"{self.limits.action_timeout_s:.0f} s",
                        ev.ActionFinished(action_id=r.action_id, outcome="lost"),
                        error="worker timeout")
        self.next(self._settle)

    def _tool_events(self, r: _Running, outcome: wk.ActionOutcome | str) -> list[ev.Event]:
        """What the call's end means besides its item (a process it started, read or found
        gone): the tool's :meth:`~WorkerTool.events`, or its ``error_events`` for a code."""
        item = self._item(r.item_id)
        parsed = self._parse(item) if item is not None else None
        if item is None or not isinstance(parsed, ParsedCall):
            return []
        if isinstance(outcome, str):
            return r.tool.error_events(parsed.args, outcome, item, self.session)
        return r.tool.events(parsed.args, outcome, item, self.session)

    def _on_blob_stored(self, i: BlobStored) -> None:
        if self._storing is None:
            return
        (r, outcome), self._storing = self._storing, None
        done = ev.ActionFinished(action_id=r.action_id, outcome="result")
        if i.stored:
            status, result, fields = r.tool.settle(outcome, r.truncated)
            self.finish(r.item_id, status, result, done, *self._tool_events(r, outcome),
                        **fields)
        else:
            why = "the server could not keep it (see its log)"
            self.finish(r.item_id, "failed", f"error: {why}", done, error=why)
        self.next(self._settle)

    def _lost(self, r: _Running, i: ActionOutcomeInput, lost: _Lost) -> None:
        """The call's action did not finish because its worker went away (stopped, or died
        and came back): the call fails with the reason, and the answer's other open calls
        are not run. What next is the session's policy's to say:

        * under ``full-auto`` nothing waits for a person: the model reads what happened in
          the call's result (not run again and whether it finished unknown, or stopped with
          its worker) and the turn goes on, with a notice (code ``worker_lost``) saying so.
          The worker is back by then: a dead one answers the re-sent action ``interrupted``
          from its new process, and a stopping one records its commands' results after its
          connection closed and answers them on its next one (should one arrive before, the
          next action waits for the worker as any action does);
        * otherwise the turn ends in ``error`` with the reason and an error item (code
          ``worker_lost``): whether to run the command again (it may still be running, or
          have done half its work) is for the user to say, and the model is not called
          behind their back. The next prompt goes on, and the model reads the call's result.

        The error item, the notice and the status reason are what a notifier keys on."""
        if isinstance(i, ActionDone):
            _, result, fields = r.tool.settle(i.outcome, r.truncated)
            finished = ev.ActionFinished(action_id=r.action_id, outcome="result")
        else:
            result, fields = lost.result, {}
            finished = ev.ActionFinished(action_id=r.action_id, outcome="errored")
        fields["error"] = lost.card
        self.finish(r.item_id, "failed", result, finished, **fields)
        for item in self.session.items:
            if isinstance(item, ev.ToolCall) and item.result is None and item.id != r.item_id:
                self.finish(item.id, "cancelled", "not run: the worker went away while an "
                                                  "earlier call of this answer ran")
        if self.session.policy != "full-auto":
            self.error(lost.session, "worker_lost", lost.reason)
            return
        self.notice("worker_lost", f"{lost.said} Full auto: the model was told, and the "
                                   "session goes on.")
        self.status("running")
        self.next(self._settle)

    # attachments ---------------------------------------------------------------------------

    def _write_attachments(self) -> None:
        """Put the files sent with prompts (not images: the model sees those) into the workdir
        before the model reads the message that names them; then call the model."""
        messages = [(i.id, files) for i in self.session.items
                    if isinstance(i, ev.UserMessage) and not i.queued
                    and not i.attachments_written
                    and (files := [a for a in i.attachments if a.mime not in IMAGE_MIMES])]
        if not messages:
            self._model_step()
            return
        self._attaching = _Attaching(messages)
        self._next_attachment()

    def _next_attachment(self) -> None:
        job = self._attaching
        assert job is not None
        while job.messages:
            item_id, files = job.messages[0]
            if job.index < len(files):
                self.effect(LoadBlob(files[job.index].hash))
                return
            self.emit(ev.SessionItemUpdated(item_id=item_id, attachments_written=True))
            job.messages.pop(0)
            job.index = 0
        self._attaching = None
        self.next(self._model_step)

    def _attachment(self) -> ev.Attachment:
        job = self._attaching
        assert job is not None
        return job.messages[0][1][job.index]

    def _on_blob_loaded(self, i: BlobLoaded) -> None:
        job = self._attaching
        if job is None:
            return
        a = self._attachment()
        if i.data is None:
            self.notice("attachment_missing", f"{a.name} is no longer stored on the server; "
                                              "it was not written.")
            job.index += 1
            self._next_attachment()
            return
        try:
            content, encoding = i.data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            content, encoding = base64.b64encode(i.data).decode(), "base64"
        s = self.session
        action = wk.WriteFile(action_id=self.new_id("act"), session_id=s.session_id,
                              workdir=s.workdir, path=attachment_path(a), content=content,
                              encoding=encoding)  # type: ignore[arg-type]
        job.action_id = action.action_id
        self.effect(RunAction(s.worker_id, action, self.limits.action_timeout_s,
                              workdir=s.workdir, attach_timeout=CONTEXT_TIMEOUT_S))

    def _attachment_written(self, i: ActionOutcomeInput) -> None:
        job = self._attaching
        assert job is not None
        job.action_id = None
        if not isinstance(i, ActionDone):
            err = f"{i.code}: {i.message}" if isinstance(i, ActionErrored) else ""
            self.notice("attachment_failed", f"{self._attachment().name} could not be written "
                                             f"into the workdir: {err}")
        job.index += 1
        self._next_attachment()

    # the model -----------------------------------------------------------------------------

    def _begin_call(self) -> bool:
        """Set up this turn's provider and model (the fallback once it took over); False
        (and the turn ends in an error) when the provider is not configured."""
        if self._route is None:
            s = self.session
            provider = self.models.provider(s.provider)
            if provider is None:
                # what to do about it, in the words of the screen the user will open; with
                # none at all, no name: the session's ("default", from before there was
                # one) is none the user made
                if s.provider and known_providers(self.state, self.ctx):
                    why = (f"the provider {s.provider!r} is not configured on this server: add "
                           "a model provider in Settings → Models, then Retry (the session "
                           "takes the server's default), or pick another model in the "
                           "session header")
                else:
                    why = ("no model provider is set up on this server: add a model provider "
                           "in Settings → Models, then Retry (the session takes it)")
                self._fail(ModelError(why, code="not_configured"))
                return False
            self._route = (provider, s.model or provider.default_model)
        self._call = _Call(*self._route)
        return True

    def _model_step(self) -> None:
        if self.context_stale:
            self._load_context(self._model_step)
            return
        if not self._begin_call():
            return
        assert self._call is not None
        if self.session.compaction_requested:
            self._call.compacted = True
            self._compact("manual", lambda _ok: self._prepare_body())
            return
        self._prepare_body()

    def _history(self, provider: ModelProvider) -> History:
        return self.models.history(self.session_id, provider.wire.name)

    def _body(self) -> bytes:
        call = self._call
        assert call is not None
        s = self.session
        provider = call.provider
        caps = self._capabilities()
        specs, tools = self._tools(provider, caps)
        messages = self._history(provider).messages(s.items)
        instructions = build_instructions(
            s, memory_of(self.state, s), tools=specs, kind=provider.config.kind,
            can_sandbox=caps is None or caps.sandbox.kind != "none")
        return provider.wire.body(model=call.model, instructions=instructions,
                                  messages=messages, tools=tools, session_id=s.session_id,
                                  options=self._options(provider))

    def _options(self, provider: ModelProvider) -> CallOptions:
        config = provider.config
        return CallOptions(reasoning_summary=config.reasoning_summary,
                           effort=self.session.effort,
                           max_output_tokens=config.max_output_tokens,
                           thinking_budget=config.thinking_budget)

    def _tools(self, provider: ModelProvider,
               capabilities: wk.Capabilities | None) -> tuple[list[ToolSpec], bytes]:
        """The tools this call offers, and their encoding for the provider's wire (kept while
        neither the session's mode nor its worker's capabilities change)."""
        s = self.session
        edit_tools = provider.config.edit_tools
        # Ollama's models are usually served with a small window: its tools are told in short
        brief = provider.config.kind == "ollama"
        key = (provider.wire.name, s.plan_mode, s.read_only, s.parent_id is None, edit_tools,
               brief)
        cached = self._encoded_tools
        if cached is not None and cached[0] == key and cached[1] is capabilities:
            return cached[2], cached[3]
        roles = {name: role.description for name, role in self.roles.items()} \
            if s.parent_id is None else None
        specs = tools_for(capabilities, plan_mode=s.plan_mode, read_only=s.read_only,
                          roles=roles, edit_tools=edit_tools)
        tools = provider.wire.encode_tools([t.brief() for t in specs] if brief else specs)
        self._encoded_tools = (key, capabilities, specs, tools)
        return specs, tools

    def _near_window(self, body: bytes) -> bool:
        call = self._call
        assert call is not None
        used = self.session.usage.context_tokens
        last = self._history(call.provider).last_body_len
        if used and last:
            projected = used + estimate_tokens(max(0, text_size(body) - last))
        else:
            projected = estimate_tokens(text_size(body))
        window = call.provider.context_window(call.model)
        return bool(projected >= call.provider.config.compact_at * window)

    def _prepare_body(self) -> None:
        call = self._call
        assert call is not None
        body = self._body()
        if not call.compacted and self._near_window(body):
            call.compacted = True
            self._compact("threshold", lambda ok: self._send(self._body() if ok else body))
            return
        self._send(body)

    def _send(self, body: bytes) -> None:
        call = self._call
        assert call is not None
        call.body = body
        self._history(call.provider).last_body_len = text_size(body)

        def item(make: Callable[[str, float, str], ev.Item]) -> Streamed:
            return Streamed(make)

        self._answer = _Answer(
            text=item(lambda i, ts, t: ev.AssistantMessage(id=i, ts=ts, text=t,
                                                           streaming=True)),
            refusal=item(lambda i, ts, t: ev.AssistantMessage(id=i, ts=ts, text=t,
                                                              streaming=True, refusal=True)),
            reasoning=item(lambda i, ts, t: ev.Reasoning(id=i, ts=ts, text=t, streaming=True)))
        self.effect(CallModel(call.provider, call.model, body))

    def _on_model_parts(self, i: ModelParts) -> None:
        if self._compaction is not None:
            for part in i.parts:
                self._summary_part(part)
            return
        for part in i.parts:
            self._answer_part(part)

    def _answer_part(self, part: ModelEvent) -> None:
        a = self._answer
        call = self._call
        if a is None or call is None:
            return
        if isinstance(part, TextDelta):
            self.stream(a.text, part.text)
        elif isinstance(part, ReasoningDelta):
            self.stream(a.reasoning, part.text)
        elif isinstance(part, ReasoningDone):
            if a.reasoning.item_id is None and part.encrypted_content:
                self.stream(a.reasoning, "")
            self.close(a.reasoning, partial=False, reasoning_id=part.reasoning_id,
                       encrypted_content=part.encrypted_content)
        elif isinstance(part, RefusalDelta):
            self.stream(a.refusal, part.text)
        elif isinstance(part, ToolCallRequested):
            a.calls.append(part)
        elif isinstance(part, Usage):
            a.tail.append(_usage(part, call, part.total_tokens
                                 or part.input_tokens + part.output_tokens))
        elif isinstance(part, RateLimits):
            limits = rate_limit_event(call.provider.name, part.headers)
            if limits is not None:
                a.tail.append(limits)
        elif isinstance(part, Retrying):
            self.status("running", f"model busy ({part.reason}); retrying in "
                                   f"{part.delay_s:.1f} s")
        elif isinstance(part, Finished):
            a.finished = part

    def _on_model_done(self, _: ModelDone) -> None:
        if self._compaction is not None:
            self._summary_done()
            return
        a, self._answer = self._answer, None
        if a is None:
            return
        for streamed in (a.text, a.refusal, a.reasoning):
            self.close(streamed, partial=False)
        events: list[ev.Event] = list(a.tail)
        finished = a.finished
        if finished is not None and finished.incomplete is not None:
            why = {"max_output_tokens": "it reached the output token limit",
                   "content_filter": "the provider's content filter stopped it"}.get(
                finished.incomplete, f"the provider stopped it ({finished.detail})")
            events.append(ev.SessionItemAppended(item=ev.Notice(
                id=self.new_id("itm"), ts=self.now, code="incomplete",
                text=f"The answer is incomplete: {why}.")))
        elif not (a.text.said or a.refusal.said or a.calls):
            events.append(ev.SessionItemAppended(item=ev.Notice(
                id=self.new_id("itm"), ts=self.now, code="empty_answer",
                text="The model gave an empty answer, so the turn ended here. Send a "
                     "message to go on.")))
        response_id = self.new_id("rsp")
        items = [self._call_item(requested, response_id) for requested in a.calls]
        events += [ev.SessionItemAppended(item=item) for item in items]
        first = self._parse(items[0]) if items else None
        run: ActionRequested | None = None
        if first is not None and not isinstance(first, BadToolCall) \
                and isinstance(first.tool, WorkerTool) and self._route_call(first) is None:
            # the first call goes to its worker in the same append when nothing asks: one
            # commit less per step (later calls still show "pending" until their turn, so
            # the view never says two run at once)
            item = items[0]
            item.status = "running"
            item.action_id = self.new_id("act")
            [run] = self._requested(item.id, first, item.action_id)
            events.append(run)
        self.emit(*events)
        if self.status_reason.startswith(_BUSY_REASONS):
            self.status("running")
        if run is not None and not any(getattr(tool_named(i.name), "parallel", False)
                                       for i in items):
            # it runs at once (its record is folded before the driver starts it)
            assert isinstance(first, ParsedCall) and isinstance(first.tool, WorkerTool)
            self._run(items[0], first.tool, run.action)
        else:
            self.next(self._settle)

    def _call_item(self, call: ToolCallRequested, response_id: str) -> ev.ToolCall:
        item = ev.ToolCall(id=self.new_id("itm"), ts=self.now, call_id=call.call_id,
                           name=call.name, arguments=call.arguments, response_id=response_id)
        parsed = self._parse(item)  # a bad call is reported when it is settled
        if not isinstance(parsed, BadToolCall):
            for name, value in parsed.tool.shows(parsed.args).items():
                setattr(item, name, value)
        return item

    def _on_model_failed(self, i: ModelFailed) -> None:
        if self._compaction is not None:
            self._summary_failed(i.error)
            return
        a, self._answer = self._answer, None
        call = self._call
        if a is None or call is None:
            return
        for streamed in (a.text, a.refusal, a.reasoning):
            self.close(streamed, partial=True)
        self.emit(*a.tail)
        err = i.error
        if err.code == "context_length" and not call.compacted:
            call.compacted = True
            self.next(lambda: self._compact(
                "context_exceeded",
                lambda ok: self._send(self._body()) if ok else self._fail(err)))
        elif err.code == "stream_cut" and call.cuts < call.provider.config.max_retries:
            call.cuts += 1
            delay = backoff(call.cuts)
            self.status("running", f"the answer was cut off; retrying in {delay:.1f} s")
            self.effect(SetTimer(_RETRY, delay))
        elif self._fall_back(err):
            self.next(lambda: self._send(self._body()))
        else:
            self._fail(err)

    def on_timer(self, key: str) -> None:
        if key == _RETRY and self._call is not None:
            self._send(self._call.body)

    def _fall_back(self, err: ModelError) -> bool:
        """Go on with the provider's fallback, for the rest of the turn (once)."""
        call = self._call
        assert call is not None
        fallback = call.provider.config.fallback
        if fallback is None or self._on_fallback or err.code not in RETRYABLE_BY_FALLBACK:
            return False
        other = self.models.provider(fallback.provider)
        if other is None:
            return False
        other_model = fallback.model or other.default_model
        self._on_fallback = True
        self.notice("fallback", f"{call.provider.name}/{call.model} failed: {err.message}. "
                                f"This turn goes on with {other.name}/{other_model}.")
        self._route = (other, other_model)
        call.provider, call.model = other, other_model
        return True

    def _fail(self, err: ModelError) -> None:
        self.error(err.message, "model", err.message[:200])

    # compaction ----------------------------------------------------------------------------

    def _compact(self, reason: Reason, then: Callable[[bool], None]) -> None:
        """Summarize the older items into one summary item, then ``then(compacted)`` (False
        when there was nothing to compact or the summary came back empty)."""
        call = self._call
        assert call is not None
        s = self.session
        previous, start = base_of(s.items)
        window = call.provider.context_window(call.model)
        keep = 0 if reason == "manual" else int(window * KEEP_SHARE)
        cut = choose_cut(s.items, start, keep)
        if cut is None:
            self.notice("compaction_skipped", "There is nothing to compact yet: the "
                                              "conversation has no finished part.")
            self.next(lambda: then(False))
            return
        self._compaction = _Compaction(
            reason, then, (self.current_status, self.status_reason), start, cut, previous,
            int(window * INPUT_SHARE) - estimate_tokens(len(COMPACT_INSTRUCTIONS)),
            s.usage.context_tokens)
        self.status("running", "compacting the conversation")
        self._summarize()

    def _summarize(self) -> None:
        c, call = self._compaction, self._call
        assert c is not None and call is not None
        s = self.session
        entries, _ = summary_input(s.items, c.start, c.cut, c.previous, c.budget)
        assembler = call.provider.wire.assembler()
        for entry in entries:
            assembler.add(entry)
        body = call.provider.wire.body(model=call.model, instructions=COMPACT_INSTRUCTIONS,
                                       messages=assembler.finish(), tools=b"[]",
                                       session_id=s.session_id,
                                       options=self._options(call.provider))
        c.parts.clear()
        c.tail.clear()
        self.effect(CallModel(call.provider, call.model, body))

    def _summary_part(self, part: ModelEvent) -> None:
        c, call = self._compaction, self._call
        assert c is not None and call is not None
        if isinstance(part, TextDelta):
            c.parts.append(part.text)
        elif isinstance(part, Usage):
            c.tail.append(_usage(part, call, part.total_tokens))
        elif isinstance(part, Retrying):
            self.status("running", f"compacting: model busy ({part.reason}); retrying in "
                                   f"{part.delay_s:.1f} s")

    def _summary_done(self) -> None:
        c, self._compaction = self._compaction, None
        call = self._call
        assert c is not None and call is not None
        self.emit(*c.tail)
        text = "".join(c.parts).strip()
        if not text:
            self.notice("compaction_failed", "Compacting the conversation failed: the model "
                                             "gave an empty summary.")
            self.status(*c.restore)
            self.next(lambda: c.then(False))
            return
        s = self.session
        self.emit(ev.SessionItemAppended(item=ev.Summary(
            id=self.new_id("itm"), ts=self.now, text=text, replaces_until=s.items[c.cut].id,
            items_replaced=c.cut - c.start + 1, tokens_before=c.tokens_before,
            reason=c.reason)))
        self._history(call.provider).last_body_len = 0
        self.status(*c.restore)
        self.next(lambda: c.then(True))

    def _summary_failed(self, err: ModelError) -> None:
        c = self._compaction
        assert c is not None
        if err.code == "context_length" and c.attempt < 2:
            c.attempt += 1
            c.budget //= 2
            self._summarize()
            return
        self._compaction = None
        err.message = f"compacting the conversation failed: {err.message}"
        self._fail(err)


#: what an image in a request counts as, in bytes of text, for the context estimate (a model
#: reads an image as a fixed-ish number of tokens, not as its base64)
IMAGE_AS_TEXT = 4 * 1500
_DATA_URL = b'"data:image/'


def text_size(body: bytes) -> int:
    """The size of a request body for the context estimate: each image's data URL counted as
    :data:`IMAGE_AS_TEXT` bytes instead of its length (a 500 KiB screenshot is not 130k
    tokens)."""
    size = len(body)
    at = body.find(_DATA_URL)
    while at >= 0:
        end = body.find(b'"', at + 1)
        if end < 0:
            break
        size -= end + 1 - at - IMAGE_AS_TEXT
        at = body.find(_DATA_URL, end + 1)
    return size

@dataclass(frozen=True, slots=True)
class _Lost:
    """How a call lost with its worker reads: on its card, to the model, what happened in
    one sentence (the session's error item, or its notice when it goes on), and why the
    session waits (its status reason)."""

    card: str
    result: str
    said: str
    reason: str

    @property
    def session(self) -> str:
        """The error item of a session that waits for its user."""
        return f"{self.said} Send a message to go on: the model will see what happened."


def _lost_with_its_worker(i: ActionOutcomeInput, tool: WorkerTool[Any]) -> _Lost | None:
    """Why the action did not finish because its worker went away, or None (it finished, or
    failed for a reason of its own).

    Two ways: the worker was stopped (a signal) and stopped its commands on the way out (the
    result says ``worker_stopped``); or it died (kill -9, a crash, a reboot) and, started
    again, answers the re-sent action ``interrupted`` — it never runs an action twice. Then
    the outcome is unknown: a command runs in its own session and may outlive its worker."""
    what = "command" if tool.runs_commands else "action"
    if isinstance(i, ActionDone) and isinstance(i.outcome, wk.CommandResult) \
            and i.outcome.worker_stopped:
        why = i.outcome.worker_stopped
        return _Lost(
            card=f"the worker stopped ({why}) while this command ran, and stopped the command "
                 "with it: it did not finish",
            result="",  # the tool's own reading (it says so, with the output so far)
            said=f"The worker stopped ({why}) while a command ran, and stopped the command: "
                 "it did not finish.",
            reason="the worker stopped during a command")
    if isinstance(i, ActionErrored) and i.code == "interrupted":
        return _Lost(
            card=f"the worker restarted while this {what} ran: it was not run again, and "
                 "whether it finished is unknown",
            result=f"error: the worker restarted while this {what} ran. It was not run again, "
                   "and whether it finished is unknown: it may have been cut short"
                   + (", or still be running on the machine" if tool.runs_commands else "")
                   + ". Check its effects before running it again.",
            said=f"The worker restarted while a {what} ran: it was not run again, and "
                 "whether it finished is unknown.",
            reason=f"the worker restarted during a {what}")
    return None


def _usage(part: Usage, call: _Call, total: int) -> ev.TokenUsageRecorded:
    return ev.TokenUsageRecorded(
        input_tokens=part.input_tokens, output_tokens=part.output_tokens,
        reasoning_tokens=part.reasoning_tokens, total_tokens=total,
        cached_tokens=part.cached_tokens, cache_write_tokens=part.cache_write_tokens,
        context_window=call.provider.context_window(call.model), model=call.model)


def _same_context(old: SessionContext | None, new: ev.SessionContextUpdated) -> bool:
    """Equal for the instructions: the time of day may move, the date may not."""
    if old is None:
        return False
    same_env: bool = msgspec.structs.replace(old.environment, date=old.environment.date[:10]) \
        == msgspec.structs.replace(new.environment, date=new.environment.date[:10])
    return same_env and (old.instructions, old.skills, old.warnings) == (
        new.instructions, new.skills, new.warnings)
