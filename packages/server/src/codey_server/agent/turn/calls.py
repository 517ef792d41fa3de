"""Codey's turn: the model's tool calls — parsed, gated, asked about, carried out on the
server, or handed to the worker (:mod:`.worker`) — settled one at a time (the parallel ones,
``delegate``, together first).

A call for the worker is judged (parsed against its tools, routed through the gate) only by
capabilities its machine reported to this server: after a restart, until the machine says
hello again, the state holds those of the machine as it was (a worker older than the sandbox
reported none, and every command would be refused). Such a call waits for the hello, the
session ``waiting_worker`` ("waiting for the machine"); its approval, if one is pending, can
be decided meanwhile, and an approved call runs once the machine is back. A call settled
while its approval is pending (refused, bad) cancels the approval, saying why."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import Approval
from codey_server.agent.machine import (
    ACT_TIMER,
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    Answered,
    ChildDone,
    Review,
    Reviewed,
    RunAction,
    SessionAttached,
    Stepper,
    WaitAnswer,
    WaitChild,
    WaitHello,
    WebCall,
    WebDone,
    WorkerHello,
    evolve,
)
from codey_server.agent.reviewer import APPROVAL_RUBRIC, approval_data
from codey_server.agent.slash import allows
from codey_server.agent.tools import (
    Ask,
    BadToolCall,
    Finish,
    ForAnswer,
    ForWeb,
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
from codey_server.agent.turn import hooks, loop, worker
from codey_server.agent.turn.state import CONTEXT_TIMEOUT_S, CodeyTurn, Previewing, Then

__all__ = ["MACHINE_AWAY", "capabilities", "hello", "parse", "requested", "route_call",
           "settle", "waits_for_hello"]

K = Stepper[CodeyTurn]

#: the session's status reason while a call waits for its machine's hello
MACHINE_AWAY = "waiting for the machine"
#: the most of a call's result an approval it cancels quotes
_CANCEL_MESSAGE_CAP = 1000


class _Greets(Protocol):
    """What the machine holds: whether a worker said hello to this server."""

    greeted: Callable[[str], bool]


def finish(k: K, item_id: str, status: ev.ToolStatus, result: str, *before: ev.Event,
           **fields: Any) -> None:
    """Settle a tool call: ``before`` (an action's end, a plan), then the item's update.
    Every result the model reads is capped here, whichever tool made it (head and tail
    kept, the cut said in the middle). An approval of the call still pending is cancelled
    with the result (a refusal, a bad call): the card says why, and offers no decision that
    nothing would carry out."""
    item = find(k, item_id)
    approval = k.session.approvals.get(item.approval_id or "") if item is not None else None
    cancel = [ev.ApprovalResolved(approval_id=approval.approval_id, decision="cancelled",
                                  message=result[:_CANCEL_MESSAGE_CAP])] \
        if approval is not None and approval.status == "pending" \
        and not _resolved_in_this_step(k, approval.approval_id) else []
    k.emit(*before, *cancel, ev.SessionItemUpdated(
        item_id=item_id, status=status, result=cap(hooks.with_context(k, item_id, result)),
        **fields))


def _resolved_in_this_step(k: K, approval_id: str) -> bool:
    return any(isinstance(e, ev.ApprovalResolved) and e.approval_id == approval_id
               for _, e in k.out.events)


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
            or t.asking or t.previewing is not None or t.hello is not None \
            or t.fetching is not None or t.hooking is not None:
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
    return Gate.of(k.session, capabilities(k), k.state.workers,
                   getattr(k.machine, "fetch_allow", ()), getattr(k.machine, "fetch_domains", ()))


def route_call(k: K, parsed: ParsedCall[Any], g: Gate | None = None) -> str | Ask | None:
    """What a call needs before it runs: a refusal, the user's approval, or nothing
    (:meth:`Gate.route`)."""
    only = k.turn.only_tools
    if only is not None and not allows(only, parsed.tool.name):
        # not offered this turn, but a model may call it by name
        return (f"refused: the slash command that started this turn allows only "
                f"{', '.join(sorted(only)) or 'no tools'}")
    return (g or gate(k)).route(parsed.tool, parsed.args)


def settle_call(k: K, item: ev.ToolCall) -> bool:
    """Settle one open call as far as it goes now. True: it finished, or its action was
    requested (settle again once that is folded); False: it waits for an input."""
    if waits_for_hello(k, item):
        return _await_hello(k, item)
    parsed = parse(k, item)
    s = k.session
    # an action requested before (a restart) that is not run after all is over
    dropped = [ev.ActionFinished(action_id=item.action_id, outcome="cancelled")] \
        if item.action_id is not None and item.action_id in s.pending_actions else []
    if isinstance(parsed, BadToolCall):
        finish(k, item.id, "failed", f"error: {parsed}", *dropped, error=str(parsed))
        return True
    if hooks.wants_pre_tool(k, item, parsed):
        hooks.run_pre_tool(k, item, parsed)
        return False
    tool = parsed.tool
    g = gate(k)
    fate = route_call(k, parsed, g)
    if fate is None and item.id in k.turn.hook_asks and isinstance(tool, WorkerTool):
        # a PreToolUse hook said ``ask``: the user decides, whatever the policy says
        fate = hooks.hook_ask(tool, parsed.args, g, k.turn.hook_asks[item.id])
    if isinstance(fate, str):
        finish(k, item.id, "rejected", fate, *dropped)
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
        review = _reviewed_by_model(k, approval.kind) and approval.review is None
        k.await_approval(approval.approval_id, approval.requested_at, show=not review)
        if review:
            _review(k, item, approval)  # (a restart cut the review short: it is asked again)
        else:
            k.attend(approval.approval_id, "approval")
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


def waits_for_hello(k: K, item: ev.ToolCall) -> bool:
    """Whether the call is for the worker and its machine has not said hello to this server
    yet (see the module's docstring). A revoked or removed machine is not waited for:
    nothing would come, and the call fails as it would have."""
    if not isinstance(tool_named(item.name), WorkerTool):
        return False
    worker_id = k.session.worker_id
    info = k.state.workers.get(worker_id)
    return info is not None and not info.revoked \
        and not cast(_Greets, k.machine).greeted(worker_id)


def _await_hello(k: K, item: ev.ToolCall) -> bool:
    """Wait for the machine's hello before judging the call. A rejected, expired or
    cancelled approval needs no machine: the call is settled as rejected now. A pending
    one is waited for too: the user may decide it meanwhile."""
    approval = k.session.approvals.get(item.approval_id) if item.approval_id else None
    if approval is not None and approval.status not in ("pending", "approved"):
        return _approved_or_not(k, item, approval.status, approval.message)
    # parsed again once the machine says what it has (its MCP tools may differ)
    k.turn = evolve(k.turn, hello=item.id,
                    parsed={i: p for i, p in k.turn.parsed.items() if i != item.id})
    k.status("waiting_worker", MACHINE_AWAY)
    k.effect(WaitHello(k.session_id, k.session.worker_id))
    if approval is not None and approval.status == "pending":
        k.turn = evolve(k.turn, approving=item.id)
        k.await_approval(approval.approval_id, approval.requested_at, show=False)
        k.attend(approval.approval_id, "approval")
    return False


def hello(k: K, i: WorkerHello) -> None:
    """The machine said hello: judge the waiting call by what it has now. Its approval, if
    still pending, goes on being waited for — unless the call is refused now (a machine
    still without the sandbox the session runs in): then the approval is cancelled with
    the reason, and the turn goes on."""
    item_id = k.turn.hello
    if item_id is None or i.worker_id != k.session.worker_id:
        return  # (a wait this turn no longer has)
    k.turn = evolve(k.turn, hello=None)
    item = find(k, item_id)
    if k.turn.approving is not None and item is not None and item.result is None:
        parsed = parse(k, item)
        fate = route_call(k, parsed) if isinstance(parsed, ParsedCall) else None
        if isinstance(parsed, BadToolCall) or isinstance(fate, str):
            k.turn = evolve(k.turn, approving=None)
            k.status("running")
            settle_call(k, item)  # refused, or bad: settled now, its approval cancelled
            loop.go(k, Then.SETTLE)
            return
        k.status("waiting_approval", "waiting for your approval")
        return
    k.turn = evolve(k.turn, approving=None)
    k.status("running")
    loop.go(k, Then.SETTLE)


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
    approval = Approval(approval_id=approval_id, item_id=item.id, kind=fate.kind,
                        command=fate.command, patch=fate.patch, path=fate.path,
                        reason=fate.reason, requested_at=k.now)
    if hooks.wants(k, "PermissionRequest"):
        k.status("waiting_approval", "a PermissionRequest hook is deciding")
        hooks.run_permission(k, item, fate)  # it may answer it as the user would
        return
    wait_for_decision(k, item, approval)


def wait_for_decision(k: K, item: ev.ToolCall, approval: Approval) -> None:
    """Wait for the decision of ``approval``, asked just now: the reviewer's or the user's
    (its Notification hooks told)."""
    review = _reviewed_by_model(k, approval.kind)
    k.await_approval(approval.approval_id, approval.requested_at, show=not review)
    if review:
        _review(k, item, approval)
    else:
        k.attend(approval.approval_id, "approval")
        hooks.notify(k, item.id, f"{item.name} waits for your approval", "permission_prompt")


# the reviewer ------------------------------------------------------------------------------

#: approvals the reviewer never decides: leaving the sandbox, a sub-agent given another folder
#: or machine — a person always does
_PERSON_ONLY = frozenset({"escalate", "delegate"})


def _reviewed_by_model(k: K, kind: str) -> bool:
    return k.session.policy == "reviewer" and kind not in _PERSON_ONLY


def _review(k: K, item: ev.ToolCall, approval: Approval) -> None:
    """Ask the reviewer model about ``approval`` (pending: the user may decide first), with
    the action exactly as it would run."""
    s = k.session
    r = k.core.reviewer
    action = None
    parsed = parse(k, item)
    if isinstance(parsed, ParsedCall) and isinstance(parsed.tool, WorkerTool):
        # the action as it would run, in the sandbox the gate decides (its id is the review's)
        action = requested(k, item.id, parsed, "act_under_review", gate(k))[0].action
    provider = r.provider or s.provider
    model = r.model or (s.model if provider == s.provider else "")
    k.status("waiting_approval", "the reviewer is judging the action")
    k.effect(Review(approval.approval_id, provider, model, APPROVAL_RUBRIC,
                    approval_data(s, approval, action), r.timeout_s))


def reviewed(k: K, i: Reviewed) -> None:
    """The reviewer's verdict: it approves below the risk threshold; otherwise — a denial, a
    risk at or above it, a failure (fail closed) — the user is asked, and the ladder runs.
    Denials in a row park the session. At T2 (the ladder handed it over) an answer that does
    not approve rejects and tells the model."""
    s = k.session
    approval = s.approvals.get(i.approval_id)
    if k.core.done or approval is None or approval.status != "pending":
        return  # the user decided first
    r = k.core.reviewer
    a = s.attention
    at_t2 = a is not None and a.target_id == i.approval_id and a.acted
    verdict = i.verdict
    if verdict is None:
        k.emit(ev.ApprovalReviewed(approval_id=i.approval_id, verdict="error", risk=100,
                                   reason=cap(i.error, 300), reviewer=i.reviewer,
                                   latency_s=i.latency_s))
        why = f"the reviewer failed ({cap(i.error, 120)})"
    else:
        approved = verdict.decision == "approve" and verdict.risk < r.risk_threshold
        k.emit(ev.ApprovalReviewed(approval_id=i.approval_id, verdict=verdict.decision,
                                   risk=verdict.risk, reason=verdict.reason,
                                   reviewer=i.reviewer, approved=approved,
                                   latency_s=i.latency_s))
        if approved:
            k.emit(ev.ApprovalResolved(approval_id=i.approval_id, decision="approved",
                                       message=f"approved by the reviewer: {verdict.reason}"))
            return  # (its waiter wakes the turn)
        said = "denied it" if verdict.decision == "deny" else "did not approve it"
        why = f"the reviewer {said} (risk {verdict.risk}): {verdict.reason}"
        denials = s.reviewer_denials + (verdict.decision == "deny")
        if verdict.decision == "deny" and denials >= r.denials_to_park and not at_t2:
            k.park(i.approval_id, "approval", "denials",
                   f"parked: the reviewer denied {denials} actions in a row")
            return
    if at_t2:
        assert a is not None
        k.emit(ev.ApprovalResolved(
            approval_id=i.approval_id, decision="rejected",
            message=f"nobody answered, and {why}; choose another way or stop"))
        return
    k.status("waiting_approval", "waiting for your approval")
    k.attend(i.approval_id, "approval")


def review_at_t2(k: K, key: str) -> None:
    """T2 handed the approval to the reviewer (the ladder's ``reviewer``): it judges it now,
    unless it already did (and asked the user): then it is rejected and the model told."""
    approval_id = key[len(ACT_TIMER):]
    approval = k.session.approvals.get(approval_id)
    item = find(k, approval.item_id) if approval is not None else None
    if approval is None or approval.status != "pending" or item is None:
        return
    if approval.review is None:
        _review(k, item, approval)
        return
    k.emit(ev.ApprovalResolved(
        approval_id=approval_id, decision="rejected",
        message=f"nobody answered, and the reviewer did not approve it: "
                f"{approval.review.reason}; choose another way or stop"))


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
    if item_id is None:
        return  # (its call was settled otherwise: refused once its machine said hello)
    k.turn = evolve(k.turn, approving=None)
    item = find(k, item_id)
    approval = k.session.approvals.get(approval_id)
    if k.turn.hello is not None:
        # the machine has not said hello yet: an approved call waits for it; a rejected
        # one needs no machine, and the turn goes on without it
        if item is not None and approval is not None and item.result is None \
                and approval.status != "approved":
            k.turn = evolve(k.turn, hello=None)
            k.status("running")
            _approved_or_not(k, item, approval.status, approval.message)
            loop.go(k, Then.SETTLE)
        return
    k.status("running")
    if item is not None and approval is not None and item.result is None:
        _approved_or_not(k, item, approval.status, approval.message)
    loop.go(k, Then.SETTLE)


def _approved_or_not(k: K, item: ev.ToolCall, decision: str, message: str) -> bool:
    if decision == "approved":
        parsed = parse(k, item)
        assert not isinstance(parsed, BadToolCall)
        return _go(k, item, parsed, gate(k))
    a = k.session.attention
    if a is not None and a.target_id == item.approval_id and a.acted and a.then != "park":
        finish(k, item.id, "rejected", f"rejected: {message}")  # (by the ladder, not a person)
        return True
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
        k.attend(step.on.question_id, "question")
        hooks.notify(k, item.id, "a question waits for your answer", "question")
    elif isinstance(step.on, ForWeb):
        k.turn = evolve(k.turn, fetching=item.id)
        k.effect(WebCall(item.id, step.on.kind, step.on.target, step.on.prompt))
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


def web_done(k: K, i: WebDone) -> None:
    """A web tool's request is over: its call finishes with what came back."""
    if k.turn.fetching != i.item_id:
        return
    k.turn = evolve(k.turn, fetching=None)
    item = find(k, i.item_id)
    if item is not None and item.result is None:
        finish(k, i.item_id, i.status, i.result)
    loop.go(k, Then.SETTLE)
