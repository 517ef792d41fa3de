"""Codey's turn: a tool call's action on the worker — its output streamed into the call's item,
its outcome settling the call, and what happens when the worker goes away meanwhile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    ActionProgressed,
    BlobStored,
    CancelAction,
    RunAction,
    Stepper,
    StoreBlob,
    WorkerPresence,
    evolve,
)
from codey_server.agent.tools import ParsedCall, WorkerTool
from codey_server.agent.tools.shell import ITEM_OUTPUT_CAP
from codey_server.agent.turn import calls, hooks, loop
from codey_server.agent.turn.state import CodeyTurn, Running, Then

__all__ = ["run"]

K = Stepper[CodeyTurn]


def run(k: K, item: ev.ToolCall, tool: WorkerTool[Any], action: wk.ActionMessage) -> None:
    s = k.session
    timeout = k.turn.config.limits.action_timeout_s
    # a resumed call's item already shows output: it counts towards the cap, and is
    # not streamed again when the output comes again from its start (a take-over)
    shown = len(item.output)
    k.turn = evolve(k.turn, running=Running(item.id, action.action_id, tool, streamed=shown))
    k.effect(RunAction(s.worker_id, action, timeout, workdir=s.workdir,
                       attach_timeout=timeout, progress=True, watch=True, skip=shown))


def progressed(k: K, i: ActionProgressed) -> None:
    r = k.turn.running
    if r is None or r.action_id != i.action_id:
        return
    if r.streamed >= ITEM_OUTPUT_CAP:
        if not r.truncated:
            k.turn = evolve(k.turn, running=evolve(r, truncated=True))
        return
    chunk = i.progress.data[: ITEM_OUTPUT_CAP - r.streamed]
    k.turn = evolve(k.turn, running=evolve(r, streamed=r.streamed + len(chunk)))
    k.add_delta(r.item_id, "output_delta", chunk)


def presence(k: K, i: WorkerPresence) -> None:
    r = k.turn.running
    if r is not None and r.action_id == i.action_id:
        if i.present:
            k.status("running")
        else:
            k.status("waiting_worker", "the worker is disconnected")


def action_over(k: K, i: ActionOutcomeInput) -> None:
    """The outcome of the running call's action (or its failure, or its time-out)."""
    r = k.turn.running
    assert r is not None
    k.turn = evolve(k.turn, running=None)
    k.flush(r.item_id)
    lost = _lost_with_its_worker(i, r.tool)
    if lost is not None:
        _lost(k, r, i, lost)
        return
    if k.current_status == "waiting_worker":
        k.status("running")
    if isinstance(i, ActionDone):
        data = r.tool.stores(i.outcome)
        if data is not None:  # kept before the call settles (an image): BlobStored
            k.turn = evolve(k.turn, storing=(r, i.outcome))
            k.effect(StoreBlob(data))
            return
        status, result, fields = r.tool.settle(i.outcome, r.truncated)
        calls.finish(k, r.item_id, status, result,
                     ev.ActionFinished(action_id=r.action_id, outcome="result"),
                     *_tool_events(k, r, i.outcome), **fields)
        if _post_hooks(k, r, status, result, fields.get("exit_code")):
            return
    elif isinstance(i, ActionErrored):  # refused or failed on the worker
        calls.finish(k, r.item_id, "failed", f"error ({i.code}): {i.message}",
                     ev.ActionFinished(action_id=r.action_id, outcome="errored"),
                     *_tool_events(k, r, i.code), error=i.message)
        if i.code == "worktree_gone":  # removed under the turn: it ends, not the model
            k.turn = evolve(k.turn, gone=i.message)
    else:
        k.effect(CancelAction(k.session.worker_id, r.action_id, k.session_id))
        calls.finish(k, r.item_id, "failed", f"error: the worker did not finish within "
                                             f"{k.turn.config.limits.action_timeout_s:.0f} s",
                     ev.ActionFinished(action_id=r.action_id, outcome="lost"),
                     error="worker timeout")
    loop.go(k, Then.SETTLE)


def _post_hooks(k: K, r: Running, status: str, result: str, exit_code: Any) -> bool:
    """Run the call's PostToolUse hooks, if the session has some (True: the turn waits for
    them before it settles the next call)."""
    item = calls.find(k, r.item_id)
    if item is None or not hooks.wants_post_tool(k, item):
        return False
    hooks.run_post_tool(k, item, status, result,
                        exit_code if isinstance(exit_code, int) else None)
    return True


def _tool_events(k: K, r: Running, outcome: wk.ActionOutcome | str) -> list[ev.Event]:
    """What the call's end means besides its item (a process it started, read or found
    gone): the tool's :meth:`~WorkerTool.events`, or its ``error_events`` for a code."""
    item = calls.find(k, r.item_id)
    parsed = calls.parse(k, item) if item is not None else None
    if item is None or not isinstance(parsed, ParsedCall):
        return []
    if isinstance(outcome, str):
        return r.tool.error_events(parsed.args, outcome, item, k.session)
    return r.tool.events(parsed.args, outcome, item, k.session)


def blob_stored(k: K, i: BlobStored) -> None:
    if k.turn.storing is None:
        return
    r, outcome = k.turn.storing
    k.turn = evolve(k.turn, storing=None)
    done = ev.ActionFinished(action_id=r.action_id, outcome="result")
    if i.stored:
        status, result, fields = r.tool.settle(outcome, r.truncated)
        calls.finish(k, r.item_id, status, result, done, *_tool_events(k, r, outcome),
                     **fields)
        if _post_hooks(k, r, status, result, fields.get("exit_code")):
            return
    else:
        why = "the server could not keep it (see its log)"
        calls.finish(k, r.item_id, "failed", f"error: {why}", done, error=why)
    loop.go(k, Then.SETTLE)


# a call lost with its worker ---------------------------------------------------------------

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


def _lost(k: K, r: Running, i: ActionOutcomeInput, lost: _Lost) -> None:
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
    calls.finish(k, r.item_id, "failed", result, finished, **fields)
    for item in k.session.items:
        if isinstance(item, ev.ToolCall) and item.result is None and item.id != r.item_id:
            calls.finish(k, item.id, "cancelled", "not run: the worker went away while an "
                                                  "earlier call of this answer ran")
    if k.session.policy != "full-auto":
        k.error(lost.session, "worker_lost", lost.reason)
        return
    k.notice("worker_lost", f"{lost.said} Full auto: the model was told, and the "
                            "session goes on.")
    k.status("running")
    loop.go(k, Then.SETTLE)
