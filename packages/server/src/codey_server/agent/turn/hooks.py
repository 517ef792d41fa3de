"""Codey's turn: the hooks (Claude Code's format, issue 39) the turn runs on the worker, at
Claude Code's moments, and what their answers do.

A hook event runs only when the session has a hook for it that may run: in a file of the
worker's home, or in a project file the user trusted in its exact content
(``hooks_trusted``) — a session without hooks pays no round trip. Which hooks match a tool
is the worker's to say (it reads the files again and knows Claude Code's tool names).

* ``PreToolUse`` (a call for the worker, before the gate judges it): ``deny`` (the JSON's
  ``permissionDecision``, ``decision: block``, or exit code 2 with its stderr) rejects the
  call, the model reading the reason as its result; ``continue: false`` the same, with the
  ``stopReason``; ``updatedInput`` lays those arguments over the model's (parsed again: a
  bad one fails the call); ``ask`` sends the call to the approval gate even where the
  policy would run it; ``allow`` is recorded and changes nothing: the gate decides as it
  would have (a hook never widens what the policy lets run without asking). Hooks that
  cannot be run (the worker refused the action, did not answer in time) reject the call: a
  guard that did not run must not be taken for one that allowed.
* ``PostToolUse`` (after a worker call's result; not after a refused or failed action):
  ``decision: block`` or exit code 2 appends the reason to the result the model reads.
* ``additionalContext`` of either is appended to the call's result.
* ``PermissionRequest`` (an approval is about to be asked): ``allow``/``deny`` decides it
  as the user would, recorded as the hook's decision; otherwise the user is asked.
* ``UserPromptSubmit`` (before the first model call for a user's prompt): ``decision:
  block`` or exit code 2 keeps the prompt from the model (it is marked ``blocked``) and the
  turn ends with a notice saying why; hooks that could not run block it too (fail closed);
  ``additionalContext`` or plain stdout is added for the model, as a message after the
  prompt (``origin: hook``).
* ``SessionStart`` (before the first model call of a session, source ``startup``): its
  context as ``UserPromptSubmit``'s.
* ``Stop`` (the model answered without calls, and the turn would end): ``decision: block``
  makes the turn go on, the reason a message to the model; at most
  :data:`STOP_BLOCKS_CAP` times a turn (``stop_hook_active`` is true after the first), then
  the turn ends anyway and a notice says why.
* ``SubagentStop``: a sub-agent's (``delegate``'s) turn is a session of its own, and its
  end works as ``Stop``.
* ``SessionEnd`` (the session archived, or deleted while not closed): run by the agent
  service, not the turn (:func:`session_end`), best effort: not recorded.
* ``Notification`` (the session starts waiting for an approval or an answer) and
  ``PreCompact`` (a compaction starts: trigger ``manual`` or ``auto``): run and recorded,
  nothing waits for them.

Each run is a ``hook_ran`` event, shown on an item: the call's card (PreToolUse,
PostToolUse, PermissionRequest, Notification of an approval), the prompt (SessionStart,
UserPromptSubmit), the answer a Stop hook judged; "" (none: PreCompact, Notification of a
question) for the turn."""

from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo, State
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    RunAction,
    Stepper,
    evolve,
)
from codey_server.agent.tools import Ask, BadToolCall, Gate, ParsedCall, WorkerTool, parse_call
from codey_server.agent.tools.base import cap
from codey_server.agent.turn import loop
from codey_server.agent.turn.state import CodeyTurn, Hooking, Then

__all__ = ["HOOKS_TIMEOUT_S", "STOP_BLOCKS_CAP", "before_model", "before_stop", "fire",
           "hook_ask", "hooks_over", "noted", "notify", "run_permission", "run_post_tool",
           "run_pre_tool", "session_end", "session_wants", "wants", "wants_post_tool",
           "wants_pre_tool", "with_context"]

K = Stepper[CodeyTurn]

#: how long the turn waits for a moment's hooks (each has its own timeout, 60 s by default)
HOOKS_TIMEOUT_S = 660.0
#: the most of a hook's output a ``hook_ran`` event carries
_OUTPUT_CAP = 4000
#: how many times Stop hooks may keep one turn going
STOP_BLOCKS_CAP = 3
#: the origin of the messages hooks add for the model (context, a Stop hook's reason)
HOOK_ORIGIN = "hook"


def session_wants(state: State, s: SessionInfo, event: str) -> bool:
    """Whether session ``s`` has a hook for ``event`` that may run (in a file of the
    worker's home, or a project file trusted in its content), on a worker that runs hooks
    (else nothing is asked of the worker: no round trip)."""
    info = state.workers.get(s.worker_id)
    if info is None or "run_hooks" not in info.capabilities.executors:
        return False
    return any(h.event == event for f in s.hook_files
               if f.scope == "user" or f.sha256 in s.trusted_hooks for h in f.hooks)


def wants(k: K, event: str) -> bool:
    """:func:`session_wants`, for the turn's session."""
    return session_wants(k.state, k.session, event)


def session_end(s: SessionInfo, action_id: str, reason: str) -> wk.RunHooks:
    """The ``SessionEnd`` hooks of ``s`` (archived or deleted: ``reason``), for the agent
    service to run without waiting (no turn is there to)."""
    return wk.RunHooks(action_id=action_id, session_id=s.session_id, workdir=s.workdir,
                       event="SessionEnd", match=reason,
                       payload=json.dumps({"reason": reason, "permission_mode": s.policy}),
                       trusted=list(s.trusted_hooks), sandbox=s.sandbox, network=s.network)


def wants_pre_tool(k: K, item: ev.ToolCall, parsed: ParsedCall[Any]) -> bool:
    """Whether the call waits for ``PreToolUse`` hooks first: a call for the worker, not run
    or asked about yet, not held for them already this turn, on a worker that runs hooks,
    in a session with such a hook that may run."""
    if not isinstance(parsed.tool, WorkerTool) or item.id in k.turn.hooked \
            or item.action_id is not None or item.approval_id is not None:
        return False
    return wants(k, "PreToolUse")


def _run(k: K, event: str, payload: dict[str, Any], *, item_id: str = "", match: str = "",
         wait: bool = True) -> None:
    """Ask the worker to run the hooks of ``event`` (matching ``match``); ``wait``: the turn
    waits for them (:func:`hooks_over` goes on), else their runs are only recorded."""
    s = k.session
    action = wk.RunHooks(
        action_id=k.new_id("act"), session_id=s.session_id, workdir=s.workdir,
        event=event, match=match, payload=json.dumps({**payload, "permission_mode": s.policy}),
        trusted=list(s.trusted_hooks), sandbox=s.sandbox, network=s.network)
    if wait:
        k.turn = evolve(k.turn, hooking=Hooking(item_id, action.action_id, event))
    else:
        k.turn = evolve(k.turn, fired={**k.turn.fired, action.action_id: (event, item_id)})
    k.effect(RunAction(s.worker_id, action, HOOKS_TIMEOUT_S, workdir=s.workdir,
                       attach_timeout=HOOKS_TIMEOUT_S))


def _tool_input(item: ev.ToolCall) -> Any:
    try:
        tool_input = json.loads(item.arguments or "{}")
    except json.JSONDecodeError:
        tool_input = {}
    if isinstance(tool_input, dict) and isinstance(tool_input.get("command"), list):
        # Claude Code's Bash hooks read tool_input.command as one line: the argv goes in
        # ``argv``, the line in ``command`` (a shell's script, or the words joined)
        argv = [str(a) for a in tool_input["command"]]
        tool_input["argv"] = argv
        tool_input["command"] = argv[2] if len(argv) == 3 and argv[:2] in (
            ["bash", "-lc"], ["bash", "-c"], ["sh", "-c"]) else shlex.join(argv)
    if isinstance(tool_input, dict) and "path" in tool_input:
        tool_input.setdefault("file_path", tool_input["path"])
    return tool_input


def run_pre_tool(k: K, item: ev.ToolCall, parsed: ParsedCall[Any]) -> None:
    """Ask the worker to run the call's ``PreToolUse`` hooks; :func:`hooks_over` goes on."""
    _run(k, "PreToolUse", {"tool_input": _tool_input(item), "tool_use_id": item.call_id},
         item_id=item.id, match=item.name)


def wants_post_tool(k: K, item: ev.ToolCall | None) -> bool:
    """Whether the call, just settled with its worker's result, waits for ``PostToolUse``
    hooks."""
    return item is not None and isinstance(
        _parsed_tool(k, item), WorkerTool) and wants(k, "PostToolUse")


def _parsed_tool(k: K, item: ev.ToolCall) -> Any:
    parsed = k.turn.parsed.get(item.id)
    return parsed.tool if isinstance(parsed, ParsedCall) else None


def run_post_tool(k: K, item: ev.ToolCall, status: str, result: str,
                  exit_code: int | None = None) -> None:
    """Ask the worker to run the call's ``PostToolUse`` hooks, with what it gave back."""
    response: dict[str, Any] = {"status": status, "output": result}
    if exit_code is not None:
        response["exit_code"] = exit_code
    _run(k, "PostToolUse", {"tool_input": _tool_input(item), "tool_use_id": item.call_id,
                            "tool_response": response}, item_id=item.id, match=item.name)


def run_permission(k: K, item: ev.ToolCall, ask: Ask) -> None:
    """Ask the worker to run the ``PermissionRequest`` hooks of the approval just asked
    (the item's, once folded)."""
    _run(k, "PermissionRequest", {"tool_input": _tool_input(item), "tool_use_id": item.call_id,
                                  "permission_kind": ask.kind},
         item_id=item.id, match=item.name)


def notify(k: K, item_id: str, message: str, kind: str) -> None:
    """Run the ``Notification`` hooks (the session waits for its user, about the call
    ``item_id``: ``kind``), without waiting for them."""
    fire(k, "Notification", {"message": message, "notification_type": kind}, kind, item_id)


def fire(k: K, event: str, payload: dict[str, Any], match: str = "",
         item_id: str = "") -> None:
    """Run the hooks of ``event`` (matched against ``match``: a notification's type, a
    compaction's trigger) without waiting for them: their runs are recorded when they end
    (on ``item_id``'s card, or the turn's)."""
    if wants(k, event):
        _run(k, event, payload, match=match, wait=False, item_id=item_id)


def hook_ask(tool: WorkerTool[Any], args: Any, g: Gate, reason: str) -> Ask:
    """The approval a call asks for because a ``PreToolUse`` hook said ``ask``: the one its
    tool asks for under ``suggest`` (what it shows), the hook's reason as its reason."""
    asked = tool.ask(args, dataclasses.replace(g, policy="suggest", approved_prefixes=()))
    if asked is None:
        shown = tool.shows(args)
        asked = Ask("command" if tool.runs_commands else "write", command=shown.get("command"),
                    patch=shown.get("patch"), path=shown.get("path"))
    said = f"a PreToolUse hook asks{': ' + reason if reason else ''}"
    return dataclasses.replace(asked, reason=said)


def with_context(k: K, item_id: str, result: str) -> str:
    """A call's result with the ``additionalContext`` its PreToolUse hooks gave."""
    extra = k.turn.hook_context.get(item_id)
    return f"{result}\n\n{extra}" if extra else result


# the turn's own moments ------------------------------------------------------------------

def _new_prompts(k: K) -> list[ev.UserMessage]:
    """The user's prompts the model has not seen (the last items), whose UserPromptSubmit
    hooks have not run this turn."""
    out: list[ev.UserMessage] = []
    for item in reversed(k.session.items):
        if not isinstance(item, ev.UserMessage):
            break
        if item.origin != HOOK_ORIGIN and not item.queued and not item.blocked \
                and item.id not in k.turn.prompted:
            out.append(item)
    return out[::-1]


def _first_of_session(k: K) -> bool:
    return not any(isinstance(i, (ev.AssistantMessage, ev.ToolCall)) for i in k.session.items)


def before_model(k: K) -> bool:
    """Run the hooks due before the model is called for what the user said: SessionStart
    (its first call), then UserPromptSubmit. True: the turn waits for them."""
    t = k.turn
    prompts = _new_prompts(k)
    if t.iterations == 0 and "" not in t.prompted and _first_of_session(k):
        k.turn = evolve(t, prompted=t.prompted | {""})
        if wants(k, "SessionStart"):
            # shown on the session's first prompt
            _run(k, "SessionStart", {"source": "startup"}, match="startup",
                 item_id=prompts[-1].id if prompts else "")
            return True
    if not prompts:
        return False
    k.turn = evolve(k.turn, prompted=k.turn.prompted | {p.id for p in prompts})
    if not wants(k, "UserPromptSubmit"):
        return False
    _run(k, "UserPromptSubmit", {"prompt": "\n\n".join(p.text for p in prompts)},
         item_id=prompts[-1].id)
    return True


def before_stop(k: K) -> bool:
    """The model answered without calls and the turn would end: run the Stop hooks (True:
    the turn waits for them), or say the turn ends although they asked it to go on."""
    t = k.turn
    last = k.session.items[-1] if k.session.items else None
    # a sub-agent's (delegate's) turn is its own session's: its end is Claude Code's
    # SubagentStop, and works as Stop
    event = "SubagentStop" if k.session.parent_id is not None else "Stop"
    if t.iterations == 0 or not isinstance(last, ev.AssistantMessage) or last.partial \
            or f"stop:{last.id}" in t.prompted or not wants(k, event):
        return False
    k.turn = evolve(t, prompted=t.prompted | {f"stop:{last.id}"})
    if t.stop_blocks >= STOP_BLOCKS_CAP:
        k.notice("hook_stop_cap", f"{event} hooks kept this turn going {t.stop_blocks} "
                                  "times; it ends now anyway.")
        return False
    _run(k, event, {"stop_hook_active": t.stop_blocks > 0,
                    "last_assistant_message": last.text}, item_id=last.id)
    return True


# their answers ---------------------------------------------------------------------------

def _ran(item_id: str, event: str, run: wk.HookRun) -> ev.HookRan:
    output = run.stdout + (("\n" if run.stdout and run.stderr else "") + run.stderr)
    return ev.HookRan(item_id=item_id, event=event, path=run.path,
                      command_line=run.command, exit_code=run.exit_code,
                      duration_ms=run.duration_ms, output=output[:_OUTPUT_CAP],
                      timed_out=run.timed_out, decision=run.decision, reason=run.reason,
                      problem=run.problem)


def _failed(i: ActionOutcomeInput) -> str | None:
    """Why the hooks could not run, or None (they ran: ``i.outcome`` is ``HooksRan``)."""
    if isinstance(i, ActionDone) and isinstance(i.outcome, wk.HooksRan):
        return None
    return f"{i.code}: {i.message}" if isinstance(i, ActionErrored) \
        else "the worker did not answer in time"


def noted(k: K, i: ActionOutcomeInput) -> None:
    """Hooks nothing waited for (:func:`fire`) ran: their runs are recorded."""
    fired = k.turn.fired.get(i.action_id)
    if fired is None:
        return
    k.turn = evolve(k.turn, fired={a: e for a, e in k.turn.fired.items() if a != i.action_id})
    event, item_id = fired
    if isinstance(i, ActionDone) and isinstance(i.outcome, wk.HooksRan):
        k.emit(*(_ran(item_id, event, run) for run in i.outcome.runs))


def hooks_over(k: K, i: ActionOutcomeInput) -> None:
    """The hooks the turn waited for ran (or could not): see the module's docstring."""
    h = k.turn.hooking
    assert h is not None
    k.turn = evolve(k.turn, hooking=None)
    why = _failed(i)
    runs = [] if why is not None else i.outcome.runs  # type: ignore[union-attr]
    k.emit(*(_ran(h.item_id, h.event, run) for run in runs))
    if h.event == "PreToolUse":
        _pre_tool_over(k, h, why, runs)
    elif h.event == "PostToolUse":
        _post_tool_over(k, h, why, runs)
    elif h.event == "PermissionRequest":
        _permission_over(k, h, runs)
    elif h.event in ("Stop", "SubagentStop"):
        _stop_over(k, h.event, why, runs)
    else:  # SessionStart, UserPromptSubmit
        _prompt_over(k, h, why, runs)


def _context(runs: list[wk.HookRun]) -> str:
    return "\n".join(r.additional_context for r in runs if r.additional_context)


def _pre_tool_over(k: K, h: Hooking, why: str | None, runs: list[wk.HookRun]) -> None:
    from codey_server.agent.turn import calls

    k.turn = evolve(k.turn, hooked=k.turn.hooked | {h.item_id})
    item = calls.find(k, h.item_id)
    if item is None or item.result is not None:
        loop.go(k, Then.SETTLE)
        return
    if why is not None:
        calls.finish(k, item.id, "rejected", f"not run: its hooks could not run ({why})")
        loop.go(k, Then.SETTLE)
        return
    context = _context(runs)
    if context:
        k.turn = evolve(k.turn, hook_context={
            **k.turn.hook_context, item.id: f"(context from a PreToolUse hook)\n{context}"})
    denied = next((r for r in runs if r.decision == "deny" or r.stop), None)
    if denied is not None:
        reason = (denied.stop_reason if denied.stop else denied.reason) or "no reason given"
        calls.finish(k, item.id, "rejected", f"blocked by a PreToolUse hook: {reason}",
                     error=f"blocked by a hook: {reason}")
        loop.go(k, Then.SETTLE)
        return
    asked = next((r for r in runs if r.decision == "ask"), None)
    if asked is not None:
        k.turn = evolve(k.turn, hook_asks={**k.turn.hook_asks, item.id: asked.reason})
    updated = next((r.updated_input for r in runs if r.updated_input), None)
    if updated is not None:
        _update_input(k, item, updated)
    loop.go(k, Then.SETTLE)


def _post_tool_over(k: K, h: Hooking, why: str | None, runs: list[wk.HookRun]) -> None:
    from codey_server.agent.turn import calls

    item = calls.find(k, h.item_id)
    said = [f"(a PostToolUse hook blocked: {r.reason or 'no reason given'})"
            for r in runs if r.decision == "block"]
    context = _context(runs)
    if context:
        said.append(f"(context from a PostToolUse hook)\n{context}")
    if why is not None:
        said.append(f"(its PostToolUse hooks could not run: {why})")
    if item is not None and item.result is not None and said:
        k.emit(ev.SessionItemUpdated(item_id=item.id, result=cap(
            "\n\n".join([item.result, *said]))))
    loop.go(k, Then.SETTLE)


def _permission_over(k: K, h: Hooking, runs: list[wk.HookRun]) -> None:
    from codey_server.agent.turn import calls

    item = calls.find(k, h.item_id)
    approval = k.session.approvals.get(item.approval_id or "") if item is not None else None
    if approval is None or item is None:
        k.turn = evolve(k.turn, approving=None)
        loop.go(k, Then.SETTLE)
        return
    said = next((r for r in runs if r.decision in ("allow", "deny")), None)
    if said is not None and approval.status == "pending":
        allowed = said.decision == "allow"
        k.emit(ev.ApprovalResolved(
            approval_id=approval.approval_id, decision="approved" if allowed else "rejected",
            message=f"{'approved' if allowed else 'rejected'} by a PermissionRequest hook"
                    + (f": {said.reason}" if said.reason else "")))
        k.await_approval(approval.approval_id, approval.requested_at, show=False)
        return
    calls.wait_for_decision(k, item, approval)


def _stop_over(k: K, event: str, why: str | None, runs: list[wk.HookRun]) -> None:
    blocked = next((r for r in runs if r.decision == "block" and not r.stop), None)
    if blocked is not None:
        k.turn = evolve(k.turn, stop_blocks=k.turn.stop_blocks + 1)
        _tell_model(k, f"A {event} hook asks you to go on: "
                       f"{blocked.reason or 'no reason given'}")
    elif why is not None:
        k.notice("hook_failed", f"The {event} hooks could not run ({why}).")
    loop.go(k, Then.BEFORE_CALL)


def _tell_model(k: K, text: str) -> None:
    k.emit(ev.SessionItemAppended(item=ev.UserMessage(
        id=k.new_id("itm"), ts=k.now, text=text, origin=HOOK_ORIGIN)))


def _prompt_over(k: K, h: Hooking, why: str | None, runs: list[wk.HookRun]) -> None:
    blocked = next((r for r in runs if r.decision == "block" or r.stop), None)
    if h.event == "UserPromptSubmit" and (blocked is not None or why is not None):
        if blocked is not None:
            reason = (blocked.stop_reason if blocked.stop else blocked.reason) \
                or "no reason given"
        else:
            reason = f"its hooks could not run ({why})"
        for item in k.session.items:
            if isinstance(item, ev.UserMessage) and item.id in k.turn.prompted \
                    and not item.blocked and item.origin != HOOK_ORIGIN \
                    and not _answered(k, item.id):
                k.emit(ev.SessionItemUpdated(item_id=item.id, blocked=reason))
        k.notice("hook_blocked", f"A UserPromptSubmit hook kept this prompt from the model: "
                                 f"{reason}")
        loop.go(k, Then.BEFORE_CALL)
        return
    context = _context(runs)
    if why is not None:
        k.notice("hook_failed", f"The {h.event} hooks could not run ({why}).")
    elif context:
        _tell_model(k, f"(context from a {h.event} hook)\n{context}")
    loop.go(k, Then.BEFORE_CALL)


def _answered(k: K, item_id: str) -> bool:
    """Whether something of the model's follows the item (its prompt was answered)."""
    seen = False
    for item in k.session.items:
        if item.id == item_id:
            seen = True
        elif seen and isinstance(item, (ev.AssistantMessage, ev.ToolCall)):
            return True
    return False


def _update_input(k: K, item: ev.ToolCall, updated: dict[str, Any]) -> None:
    """The call runs with ``updated`` laid over its arguments (Claude Code's
    ``updatedInput``), parsed again as the model's would be."""
    from codey_server.agent.turn import calls

    try:
        args = json.loads(item.arguments or "{}")
    except json.JSONDecodeError:
        args = {}
    args = args if isinstance(args, dict) else {}
    merged = {**args, **updated}
    # Claude Code's names for what Codey calls otherwise: a file's path, a command's line
    if "file_path" in updated and "file_path" not in args:
        merged.pop("file_path")
        if "path" in args:
            merged["path"] = updated["file_path"]
    if isinstance(updated.get("command"), str) and isinstance(args.get("command"), list):
        merged["command"] = ["bash", "-lc", updated["command"]]
    merged.pop("argv", None)
    try:
        parsed: ParsedCall[Any] | BadToolCall = parse_call(item.name, json.dumps(merged),
                                                           calls.capabilities(k))
    except BadToolCall as err:
        parsed = err
    k.turn = evolve(k.turn, parsed={**k.turn.parsed, item.id: parsed})
