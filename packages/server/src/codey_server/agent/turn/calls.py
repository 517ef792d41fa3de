"""Codey's turn: the model's tool calls — parsed, gated, asked about, carried out on the
server, or handed to the worker (:mod:`.worker`) — settled one at a time (the parallel ones,
``delegate``, together first)."""

from __future__ import annotations

from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    Answered,
    ChildDone,
    RunAction,
    SessionAttached,
    Stepper,
    WaitAnswer,
    WaitChild,
    evolve,
)
from codey_server.agent.tools import (
    Ask,
    BadToolCall,
    Finish,
    ForAnswer,
    Gate,
    ParsedCall,
    ServerCall,
    ServerTool,
    Waiting,
    WorkerTool,
    parse_call,
    tool_named,
)
from codey_server.agent.tools.base import cap
from codey_server.agent.turn import loop, worker
from codey_server.agent.turn.state import CONTEXT_TIMEOUT_S, CodeyTurn, Previewing, Then

__all__ = ["capabilities", "parse", "requested", "route_call", "settle"]

K = Stepper[CodeyTurn]


def finish(k: K, item_id: str, status: ev.ToolStatus, result: str, *before: ev.Event,
           **fields: Any) -> None:
    """Settle a tool call: ``before`` (an action's end, a plan), then the item's update.
    Every result the model reads is capped here, whichever tool made it (head and tail
    kept, the cut said in the middle)."""
    k.emit(*before, ev.SessionItemUpdated(item_id=item_id, status=status, result=cap(result),
                                          **fields))


# the worker's capabilities, as the session sees them -------------------------------------

def attached(k: K, i: SessionAttached) -> None:
    k.turn = evolve(k.turn, mcp_servers=i.mcp_servers)


def capabilities(k: K) -> wk.Capabilities | None:
    """The session's worker's capabilities (None: the worker is not known), with the MCP
    servers as the worker listed them in the session's workdir when it attached it laid
    over those of its ``hello``, by server name: a server confined to its cwd cannot start
    in the scratch directory ``hello``'s list came from, and has tools only there. The
    same object while neither changes (the encoded tools are kept by identity)."""
    worker_info = k.state.workers.get(k.session.worker_id)
    if worker_info is None:
        return None
    caps = worker_info.capabilities
    mine = k.turn.mcp_servers
    if not mine:
        return caps
    laid = k.turn.laid
    if laid is not None and laid[0] is caps and laid[1] is mine:
        return laid[2]
    own = {server.name: server for server in mine}
    servers = [own.pop(server.name, server) for server in caps.mcp_servers]
    merged = msgspec.structs.replace(caps, mcp_servers=servers + list(own.values()))
    k.turn = evolve(k.turn, laid=(caps, mine, merged))
    return merged


# tool calls --------------------------------------------------------------------------------

def parse(k: K, item: ev.ToolCall) -> ParsedCall[Any] | BadToolCall:
    parsed = k.turn.parsed.get(item.id)
    if parsed is None:
        try:
            parsed = parse_call(item.name, item.arguments, capabilities(k))
        except BadToolCall as err:
            parsed = err
        k.turn = evolve(k.turn, parsed={**k.turn.parsed, item.id: parsed})
    return parsed


def settle(k: K) -> None:
    """Settle the open tool calls: the parallel ones started together, then the others in
    order, one at a time; then go on with the loop."""
    t = k.turn
    if t.running is not None or t.storing is not None or t.approving is not None \
            or t.asking or t.previewing is not None:
        return  # a call is under way: its end settles the next
    open_calls = [i for i in k.session.items if isinstance(i, ev.ToolCall) and i.result is None]
    waiting = set(t.children.values())
    serial: list[ev.ToolCall] = []
    settled = False
    for item in open_calls:
        tool = tool_named(item.name)
        if tool is None or not tool.parallel:
            serial.append(item)
        elif item.id not in waiting:
            settled = settle_call(k, item) or settled
            if _approval_pending(k):
                return  # one approval at a time: its end settles the rest
    if k.turn.children:
        return  # the rest waits for the sub-agents
    if settled:
        loop.go(k, Then.SETTLE)
    elif serial:
        if settle_call(k, serial[0]):
            loop.go(k, Then.SETTLE)
    else:
        loop.after_settle(k)


def _approval_pending(k: K) -> bool:
    # read now: a call settled just now may have asked for one
    return k.turn.approving is not None or k.turn.previewing is not None


def gate(k: K) -> Gate:
    """The session's gate as of this step: its policy and approvals, and its sandbox —
    decided there, once, from the session and its machine (:meth:`Gate.of`)."""
    return Gate.of(k.session, capabilities(k), k.state.workers)


def route_call(k: K, parsed: ParsedCall[Any], g: Gate | None = None) -> str | Ask | None:
    """What a call needs before it runs: a refusal, the user's approval, or nothing
    (:meth:`Gate.route`)."""
    return (g or gate(k)).route(parsed.tool, parsed.args)


def settle_call(k: K, item: ev.ToolCall) -> bool:
    """Settle one open call as far as it goes now. True: it finished, or its action was
    requested (settle again once that is folded); False: it waits for an input."""
    parsed = parse(k, item)
    if isinstance(parsed, BadToolCall):
        finish(k, item.id, "failed", f"error: {parsed}", error=str(parsed))
        return True
    tool = parsed.tool
    s = k.session
    g = gate(k)
    fate = route_call(k, parsed, g)
    if isinstance(fate, str):
        finish(k, item.id, "rejected", fate)
        return True
    if isinstance(tool, WorkerTool) and item.action_id is not None:
        pending = s.pending_actions.get(item.action_id)
        if pending is None:
            return _request(k, item, parsed, item.action_id, g)
        worker.run(k, item, tool, pending.action)
        return False
    if item.approval_id is not None:
        approval = s.approvals.get(item.approval_id)
        if approval is None:
            finish(k, item.id, "rejected", "rejected by the user: the approval record is missing")
            return True
        if approval.status != "pending":
            return _approved_or_not(k, item, approval.status, approval.message)
        k.turn = evolve(k.turn, approving=item.id)
        k.await_approval(approval.approval_id, approval.requested_at)
        return False
    if isinstance(fate, Ask):
        if isinstance(tool, WorkerTool):
            # what the approval shows may need the worker first (a write: the file now)
            read = tool.preview(parsed.args, k.new_id("act"), s.session_id, s.workdir)
            if read is not None:
                k.turn = evolve(k.turn, previewing=Previewing(item.id, parsed, fate,
                                                               read.action_id))
                k.effect(RunAction(s.worker_id, read, CONTEXT_TIMEOUT_S, workdir=s.workdir,
                                   attach_timeout=CONTEXT_TIMEOUT_S))
                return False
        _ask(k, item, fate)
        return False
    return _go(k, item, parsed, g)


def _ask(k: K, item: ev.ToolCall, fate: Ask, fields: dict[str, Any] | None = None) -> None:
    """Ask the user about ``item`` (with ``fields`` of the item that show what is asked)
    and wait for the decision."""
    approval_id = k.new_id("apr")
    k.emit(ev.ApprovalRequested(approval_id=approval_id, item_id=item.id, kind=fate.kind,
                                command=fate.command, patch=fate.patch, path=fate.path,
                                reason=fate.reason or f"{item.name} wants to run"),
           ev.SessionItemUpdated(item_id=item.id, status="waiting_approval",
                                 approval_id=approval_id, **(fields or {})))
    k.turn = evolve(k.turn, approving=item.id)
    k.await_approval(approval_id, k.now)


def previewed(k: K, i: ActionOutcomeInput) -> None:
    """What the approval shows has been read (or could not be): ask now."""
    p = k.turn.previewing
    assert p is not None
    k.turn = evolve(k.turn, previewing=None)
    item = find(k, p.item_id)
    if item is None or item.result is not None:
        loop.go(k, Then.SETTLE)
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
    _ask(k, item, ask, fields)


def _go(k: K, item: ev.ToolCall, parsed: ParsedCall[Any], g: Gate) -> bool:
    """Carry out a call that needs nothing more: its action, or the server's own work."""
    if isinstance(parsed.tool, ServerTool):
        return _on_server(k, item, parsed.tool.start(parsed.args, _server_call(k, item)))
    return _request(k, item, parsed, k.new_id("act"), g)


def _request(k: K, item: ev.ToolCall, parsed: ParsedCall[Any], action_id: str,
             g: Gate) -> bool:
    """Record the call's action; it runs at the next settle, once that is folded."""
    k.emit(*requested(k, item.id, parsed, action_id, g),
           ev.SessionItemUpdated(item_id=item.id, status="running", action_id=action_id))
    return True


def requested(k: K, item_id: str, parsed: ParsedCall[Any], action_id: str,
              g: Gate) -> list[ev.ActionRequested]:
    """The call's action, in the sandbox the gate ``g`` that let it through decided (the
    tool moves an escalated command out of it)."""
    s = k.session
    tool = parsed.tool
    assert isinstance(tool, WorkerTool)
    return [ev.ActionRequested(action_id=action_id, item_id=item_id, worker_id=s.worker_id,
                               action=tool.action(parsed.args, action_id, s.session_id,
                                                  s.workdir, sandbox=g.sandbox))]


def approval_over(k: K, approval_id: str) -> None:
    item_id = k.turn.approving
    k.turn = evolve(k.turn, approving=None)
    item = find(k, item_id) if item_id is not None else None
    approval = k.session.approvals.get(approval_id)
    k.status("running")
    if item is not None and approval is not None and item.result is None:
        _approved_or_not(k, item, approval.status, approval.message)
    loop.go(k, Then.SETTLE)


def _approved_or_not(k: K, item: ev.ToolCall, decision: str, message: str) -> bool:
    if decision == "approved":
        parsed = parse(k, item)
        assert not isinstance(parsed, BadToolCall)
        return _go(k, item, parsed, gate(k))
    finish(k, item.id, "rejected", "rejected by the user" + (f": {message}" if message else ""))
    return True


def find(k: K, item_id: str) -> ev.ToolCall | None:
    for item in reversed(k.session.items):
        if item.id == item_id and isinstance(item, ev.ToolCall):
            return item
    return None


# calls the server carries out --------------------------------------------------------------

def _server_call(k: K, item: ev.ToolCall) -> ServerCall:
    s = k.session
    return ServerCall(k.state, s, item, k.new_id, k.now, roles=k.turn.config.roles,
                      can_delegate=s.parent_id is None)


def _on_server(k: K, item: ev.ToolCall, step: Finish | Waiting) -> bool:
    if isinstance(step, Finish):
        _finish_server(k, item.id, step)
        return True
    k.emit_all(step.events)
    if isinstance(step.on, ForAnswer):
        k.turn = evolve(k.turn, asking=(step.on.question_id, item.id))
        k.status("waiting_user", "a question for you")
        k.effect(WaitAnswer(k.session_id, step.on.question_id))
    else:
        k.turn = evolve(k.turn, children={**k.turn.children, step.on.session_id: item.id})
        k.effect(WaitChild(step.on.session_id))
    return False


def _finish_server(k: K, item_id: str, step: Finish) -> None:
    k.emit_all(step.events)
    finish(k, item_id, step.status, step.result, **step.fields)


def _resume_server(k: K, item_id: str) -> None:
    item = find(k, item_id)
    if item is None or item.result is not None:
        return
    parsed = parse(k, item)
    assert not isinstance(parsed, BadToolCall) and isinstance(parsed.tool, ServerTool)
    _finish_server(k, item_id, parsed.tool.resume(parsed.args, _server_call(k, item)))


def answered(k: K, i: Answered) -> None:
    asking = k.turn.asking
    if asking is None or asking[0] != i.question_id:
        return
    k.turn = evolve(k.turn, asking=None)
    k.status("running")
    _resume_server(k, asking[1])
    loop.go(k, Then.SETTLE)


def child_done(k: K, i: ChildDone) -> None:
    item_id = k.turn.children.get(i.session_id)
    if item_id is None:
        return
    k.turn = evolve(k.turn, children={sid: item for sid, item in k.turn.children.items()
                                       if sid != i.session_id})
    _resume_server(k, item_id)
    if not k.turn.children:
        loop.go(k, Then.SETTLE)
