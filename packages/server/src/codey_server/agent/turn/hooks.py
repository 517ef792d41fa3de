"""Codey's turn: the ``PreToolUse`` hooks of a call for the worker, run on the worker before
the call is judged by the gate (issue 39).

A call is held for its hooks only when the session has some that could run: a
``PreToolUse`` hook in a file of the worker's home, or in a project file the user trusted in
its exact content (``hooks_trusted``). Which of them match the tool is the worker's to say
(it reads the files again and knows Claude Code's tool names). What their answers do:

* ``deny`` (the JSON's ``permissionDecision``, ``decision: block``, or exit code 2 with its
  stderr) — the call is rejected, and the model reads the reason as its result;
* ``continue: false`` — the same, with the hook's ``stopReason``;
* ``updatedInput`` — the call runs with those arguments laid over the model's (parsed
  again: a bad one fails the call);
* ``allow`` and ``ask`` — recorded; the gate decides as it would have (a hook does not widen
  what the session's policy lets run without asking).

Each run is a ``hook_ran`` event on the call's card. Hooks that cannot be run (the worker
refused the action, did not answer in time) reject the call: a guard that did not run must not
be taken for one that allowed."""

from __future__ import annotations

import json
import shlex
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    RunAction,
    Stepper,
    evolve,
)
from codey_server.agent.tools import BadToolCall, ParsedCall, WorkerTool, parse_call
from codey_server.agent.turn import loop
from codey_server.agent.turn.state import CodeyTurn, Hooking, Then

__all__ = ["HOOKS_TIMEOUT_S", "hooks_over", "run_pre_tool", "wants_pre_tool"]

K = Stepper[CodeyTurn]

#: how long the turn waits for a call's hooks (each has its own timeout, 60 s by default)
HOOKS_TIMEOUT_S = 660.0
#: the most of a hook's output a ``hook_ran`` event carries
_OUTPUT_CAP = 4000


def _trusted_files(k: K) -> list[wk.HookFile]:
    s = k.session
    return [f for f in s.hook_files
            if f.scope == "user" or f.sha256 in s.trusted_hooks]


def wants_pre_tool(k: K, item: ev.ToolCall, parsed: ParsedCall[Any]) -> bool:
    """Whether the call waits for ``PreToolUse`` hooks first: a call for the worker, not run
    or asked about yet, not held for them already this turn, on a worker that runs hooks,
    in a session with such a hook that may run."""
    if not isinstance(parsed.tool, WorkerTool) or item.id in k.turn.hooked \
            or item.action_id is not None or item.approval_id is not None:
        return False
    info = k.state.workers.get(k.session.worker_id)
    if info is None or "run_hooks" not in info.capabilities.executors:
        return False
    return any(h.event == "PreToolUse" for f in _trusted_files(k) for h in f.hooks)


def run_pre_tool(k: K, item: ev.ToolCall, parsed: ParsedCall[Any]) -> None:
    """Ask the worker to run the call's ``PreToolUse`` hooks; :func:`hooks_over` goes on."""
    s = k.session
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
    action = wk.RunHooks(
        action_id=k.new_id("act"), session_id=s.session_id, workdir=s.workdir,
        event="PreToolUse", match=item.name,
        payload=json.dumps({"tool_input": tool_input, "tool_use_id": item.call_id,
                            "permission_mode": s.policy}),
        trusted=list(s.trusted_hooks), sandbox=s.sandbox, network=s.network)
    k.turn = evolve(k.turn, hooking=Hooking(item.id, action.action_id))
    k.effect(RunAction(s.worker_id, action, HOOKS_TIMEOUT_S, workdir=s.workdir,
                       attach_timeout=HOOKS_TIMEOUT_S))


def _ran(item_id: str, run: wk.HookRun) -> ev.HookRan:
    output = run.stdout + (("\n" if run.stdout and run.stderr else "") + run.stderr)
    return ev.HookRan(item_id=item_id, event="PreToolUse", path=run.path,
                      command_line=run.command, exit_code=run.exit_code,
                      duration_ms=run.duration_ms, output=output[:_OUTPUT_CAP],
                      timed_out=run.timed_out, decision=run.decision, reason=run.reason,
                      problem=run.problem)


def hooks_over(k: K, i: ActionOutcomeInput) -> None:
    """The call's hooks ran (or could not): reject it, change its input, or let the gate
    judge it (see the module's docstring)."""
    from codey_server.agent.turn import calls

    h = k.turn.hooking
    assert h is not None
    k.turn = evolve(k.turn, hooking=None, hooked=k.turn.hooked | {h.item_id})
    item = calls.find(k, h.item_id)
    if item is None or item.result is not None:
        loop.go(k, Then.SETTLE)
        return
    if not (isinstance(i, ActionDone) and isinstance(i.outcome, wk.HooksRan)):
        why = f"{i.code}: {i.message}" if isinstance(i, ActionErrored) \
            else "the worker did not answer in time"
        calls.finish(k, item.id, "rejected", f"not run: its hooks could not run ({why})")
        loop.go(k, Then.SETTLE)
        return
    runs = i.outcome.runs
    k.emit(*(_ran(item.id, run) for run in runs))
    denied = next((r for r in runs if r.decision == "deny" or r.stop), None)
    if denied is not None:
        reason = (denied.stop_reason if denied.stop else denied.reason) or "no reason given"
        calls.finish(k, item.id, "rejected", f"blocked by a PreToolUse hook: {reason}",
                     error=f"blocked by a hook: {reason}")
        loop.go(k, Then.SETTLE)
        return
    updated = next((r.updated_input for r in runs if r.updated_input), None)
    if updated is not None:
        _update_input(k, item, updated)
    loop.go(k, Then.SETTLE)


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
