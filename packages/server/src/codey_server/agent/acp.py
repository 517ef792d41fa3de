"""``AcpTurn``: a turn of a session run by an external agent over ACP, on its worker, as a
state machine without I/O (:mod:`~codey_server.agent.machine`), run by the same driver as
Codey's own turn.

The :class:`~codey_server.agent.service.AgentService` starts it instead of a
:class:`~codey_server.agent.turn.CodeyTurn` when the session has an ``agent``. The turn is
one ``acp_prompt`` action (logged like any action: ``action_requested`` …
``action_finished``, so an interrupt cancels it on the worker, which cancels the agent's turn).
What the agent does streams back as :class:`~codey_protocol.worker.AcpUpdate` and becomes
Codey items, so the session view shows it like Codey's own turns:

* ``text`` / ``thought`` chunks → an ``assistant_message`` / ``reasoning`` item, streamed
  (coalesced like a model's deltas);
* ``tool`` → a ``tool_call`` item per ACP tool call (its title as the name, its content as
  output and result, its status mapped);
* ``plan`` → ``plan_updated``;
* ``permission`` → an ``approval_requested`` (kind ``acp``) on that tool call; the decision
  (browser, REST or Telegram: the same ``approval_resolved``) goes back to the worker as an
  ``acp_permission`` action with the agent's matching option.

A prompt sent while the agent works is queued and becomes the agent's next prompt. After a
restart the resumed turn follows the same ``acp_prompt`` action (its id finds it on the
worker).

Its effects: run the ``acp_prompt`` action (its progress is the agent's updates), send an
``acp_permission`` action, wait for an approval.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    ActionProgressed,
    RunAction,
    Start,
    Streamed,
    TurnMachine,
)
from codey_server.agent.ports import Limits

log = logging.getLogger("codey.agent.acp")

__all__ = ["AcpTurn", "pick_option"]

#: how long an ``acp_permission`` action may take to reach the agent's request
PERMISSION_TIMEOUT_S = 60.0

_UPDATE = msgspec.json.Decoder(wk.AcpUpdate)
_TOOL_STATUS: dict[str, ev.ToolStatus] = {
    "pending": "pending", "in_progress": "running", "completed": "done", "failed": "failed"}
_PLAN_STATUS: dict[str, ev.PlanStatus] = {
    "pending": "pending", "in_progress": "in_progress", "completed": "done"}


def pick_option(options: list[wk.AcpOption], decision: str) -> str | None:
    """The agent's option for a Codey decision; None (the request is refused) when the agent
    offered none that fits. An approval is always ``allow_once`` when the agent offers it,
    "for session" too: an agent's ``allow_always`` outlives the session (codex-acp writes it
    as a permanent rule in the user's ``~/.codex``), so Codey remembers the session's
    approvals itself (``approved_prefixes``) and answers each request once."""
    if decision == "approved":
        wanted = ["allow_once", "allow_always"]
    else:
        wanted = ["reject_once", "reject_always"]
    for kind in wanted:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


@dataclass(frozen=True, slots=True)
class _Ask:
    """A permission request waiting for the user's decision."""

    prompt: wk.AcpPrompt
    update: wk.AcpUpdate
    item_id: str


class AcpTurn(TurnMachine):
    """One turn of a session an ACP agent runs (see the module's docstring)."""

    def __init__(self, session_id: str, *, limits: Limits, resume: bool = False) -> None:
        super().__init__(session_id, approval_timeout_s=limits.approval_timeout_s)
        self.limits = limits
        self.resume = resume
        self._tools: dict[str, str] = {}  # ACP tool call id → item id
        self._kinds: dict[str, str] = {}  # ACP tool call id → its kind (read, edit, …)
        self._message: Streamed | None = None  # the item of the current text run
        self._message_kind = ""
        self._prompt: wk.AcpPrompt | None = None  # the agent's turn under way
        self._asks: dict[str, _Ask] = {}  # approval id → the request it answers
        self._sent: set[str] = set()  # user messages given to the agent by this turn

    # the turn ------------------------------------------------------------------------------

    def _on_start(self, _: Start) -> None:
        resumed = self._in_flight() if self.resume else None
        if resumed is None:
            self._next_prompt()
            return
        self._pick_up()
        self.status("running")
        self._run_prompt(resumed)

    def _pick_up(self) -> None:
        """After a restart, before following the agent's turn again: text cut by the restart
        is marked partial (what the agent said meanwhile was not seen), and its open tool
        calls are found again by their ACP ids."""
        for item in self.session.items:
            if isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
                self.emit(ev.SessionItemUpdated(item_id=item.id, streaming=False, partial=True))
            elif isinstance(item, ev.ToolCall) and item.result is None:
                self._tools[item.call_id] = item.id

    def _in_flight(self) -> wk.AcpPrompt | None:
        """After a restart: the agent's turn that was running (the worker still runs it or
        kept its answer; the action id finds it)."""
        for pending in self.session.pending_actions.values():
            if isinstance(pending.action, wk.AcpPrompt):
                return pending.action
        return None

    def _next_prompt(self) -> None:
        """Give the agent the user's messages it has not had, or end the turn."""
        prompt = self._take_prompt()
        if prompt is None:
            if self.current_status in ("running", "waiting_approval", "waiting_worker"):
                self.status("idle")
            self.done = True
            return
        self.status("running")
        s = self.session
        action = wk.AcpPrompt(action_id=self.new_id("act"), session_id=s.session_id,
                              agent=s.agent or "", workdir=s.workdir, prompt=prompt[1])
        self.emit(ev.ActionRequested(action_id=action.action_id, item_id=prompt[0],
                                     worker_id=s.worker_id, action=action))
        self._run_prompt(action)

    def _take_prompt(self) -> tuple[str, str] | None:
        """The user's messages the agent has not had: those queued during its turn, or the
        ones that end the session (a new prompt). Returns (the last one's id, their text)."""
        items = self.session.items
        trailing: list[ev.UserMessage] = []
        for item in reversed(items):
            if not isinstance(item, ev.UserMessage):
                break
            trailing.insert(0, item)
        if trailing and trailing[-1].id in self._sent:
            trailing = []
        queued = [i for i in items if isinstance(i, ev.UserMessage) and i.queued]
        fresh = [m for m in items if isinstance(m, ev.UserMessage)
                 and (m in queued or m in trailing) and m.id not in self._sent]
        if not fresh:
            return None
        self.emit(*[ev.SessionItemUpdated(item_id=m.id, queued=False) for m in queued])
        self._sent.update(m.id for m in fresh)
        return fresh[-1].id, "\n\n".join(m.text for m in fresh if m.text.strip())

    def _run_prompt(self, action: wk.AcpPrompt) -> None:
        s = self.session
        self._prompt = action
        self._message = None
        timeout = self.limits.action_timeout_s
        self.effect(RunAction(s.worker_id, action, timeout, workdir=s.workdir,
                              attach_timeout=timeout, progress=True))

    def action_over(self, i: ActionOutcomeInput) -> None:
        if self._prompt is None or self._prompt.action_id != i.action_id:
            return
        self._prompt = None
        if isinstance(i, ActionDone):
            self._end_items("done")
            self.emit(ev.ActionFinished(action_id=i.action_id, outcome="result"))
            outcome = i.outcome
            if isinstance(outcome, wk.AcpTurnEnded) \
                    and outcome.stop_reason not in ("end_turn", "cancelled"):
                self.notice("acp_stop", f"the agent stopped: {outcome.stop_reason}")
            self.next(self._next_prompt)
            return
        message = i.message if isinstance(i, ActionErrored) else "the worker timed out"
        self._end_items("failed")
        self.emit(ev.ActionFinished(action_id=i.action_id, outcome="errored"))
        self.error(message, "acp", message[:200])

    # the agent's updates -------------------------------------------------------------------

    def _on_action_progressed(self, i: ActionProgressed) -> None:
        prompt = self._prompt
        if prompt is None or prompt.action_id != i.action_id or i.progress.stream != "acp":
            return
        try:
            update = _UPDATE.decode(i.progress.data)
        except msgspec.DecodeError:
            log.warning("session %s: an ACP update that does not decode", self.session_id)
            return
        if update.kind in ("text", "thought"):
            self._chunk(update.kind, update.text)
            return
        self._close_message()
        if update.kind == "tool":
            self._tool(update)
        elif update.kind == "plan":
            self.emit(ev.PlanUpdated(steps=[
                ev.PlanStep(step=text, status=_PLAN_STATUS.get(status, "pending"))
                for text, status in update.entries]))
        elif update.kind == "permission":
            self._permission(prompt, update)

    def _chunk(self, kind: str, text: str) -> None:
        if self._message is None or self._message_kind != kind:
            self._close_message()
            self._message = Streamed(
                (lambda i, ts, t: ev.AssistantMessage(id=i, ts=ts, text=t, streaming=True))
                if kind == "text" else
                (lambda i, ts, t: ev.Reasoning(id=i, ts=ts, text=t, streaming=True)))
            self._message_kind = kind
        self.stream(self._message, text)

    def _close_message(self) -> None:
        if self._message is not None:
            self.close(self._message, partial=False)
            self._message = None

    def _tool(self, update: wk.AcpUpdate) -> str:
        """The tool call item of ``update``, created or changed; returns its id."""
        call_id = update.tool_call_id or self.new_id("call")
        if update.tool_kind:
            self._kinds[call_id] = update.tool_kind
        item_id = self._tools.get(call_id)
        status = _TOOL_STATUS.get(update.status or "")
        if item_id is None:
            item_id = self._tools[call_id] = self.new_id("itm")
            arguments: dict[str, Any] = {"kind": update.tool_kind, "title": update.title}
            if update.command:
                arguments["command"] = update.command
            self.emit(ev.SessionItemAppended(item=ev.ToolCall(
                id=item_id, ts=self.now, call_id=call_id,
                name=update.title or update.tool_kind or "tool",
                arguments=json.dumps(arguments), command=update.command,
                status=status or "pending", output=update.text)))
            return item_id
        fields: dict[str, Any] = {}
        item = self._item(item_id)
        if item is not None and item.status == "rejected":
            # the user said no: the agent's later "failed" or "completed" for the call (or
            # the end of its turn) does not make it look run
            status = None
        if status is not None and update.kind == "tool":
            fields["status"] = status
            if status in ("done", "failed"):
                fields["result"] = update.text
        if update.text:
            fields["output"] = update.text
        if fields:
            self.emit(ev.SessionItemUpdated(item_id=item_id, **fields))
        return item_id

    def _end_items(self, status: ev.ToolStatus) -> None:
        """At the end of the agent's turn: close the text run and settle every call left
        open (an agent may not report each one's end)."""
        self._close_message()
        for item_id in self._tools.values():
            item = self._item(item_id)
            if item is not None and item.result is None:
                kept = item.status in ("failed", "rejected")
                self.emit(ev.SessionItemUpdated(
                    item_id=item_id, status=item.status if kept else status,
                    result=item.output or ("rejected by the user"
                                           if item.status == "rejected" else "")))
        self._tools.clear()

    def _item(self, item_id: str) -> ev.ToolCall | None:
        item = next((i for i in reversed(self.session.items) if i.id == item_id), None)
        return item if isinstance(item, ev.ToolCall) else None

    # permission requests -------------------------------------------------------------------

    def _permission(self, prompt: wk.AcpPrompt, update: wk.AcpUpdate) -> None:
        item_id = self._tool(update)
        # what "approve for session" remembers: this kind of request (a request names the
        # call; its kind came with the call's start)
        kind = update.tool_kind or self._kinds.get(update.tool_call_id or "")
        what = ["acp", kind or update.title or "tool"]
        s = self.session
        remembered = what in s.approved_prefixes
        if s.policy == "full-auto" or remembered:
            self._answer(prompt, update, pick_option(update.options, "approved"))
            return
        approval_id = self.new_id("apr")
        reason = " — ".join(p for p in (update.title, update.reason) if p)
        self.emit(ev.ApprovalRequested(approval_id=approval_id, item_id=item_id, kind="acp",
                                       command=what,
                                       reason=reason or "the agent asks for permission"),
                  ev.SessionItemUpdated(item_id=item_id, status="waiting_approval",
                                        approval_id=approval_id))
        self._asks[approval_id] = _Ask(prompt, update, item_id)
        self.await_approval(approval_id, self.now)

    def approval_over(self, approval_id: str) -> None:
        ask = self._asks.pop(approval_id, None)
        approval = self.session.approvals.get(approval_id)
        if ask is None or approval is None:
            return
        if approval.status == "cancelled":
            return  # the turn was interrupted: the worker refuses the agent's request itself
        self.status("running")
        option = pick_option(ask.update.options, approval.status)
        self.emit(ev.SessionItemUpdated(
            item_id=ask.item_id,
            status="running" if approval.status == "approved" else "rejected"))
        self._answer(ask.prompt, ask.update, option)

    def _answer(self, prompt: wk.AcpPrompt, update: wk.AcpUpdate, option: str | None) -> None:
        """Send the decision to the agent's waiting request (an ``acp_permission`` action;
        if it does not arrive, the agent's turn goes on without it)."""
        s = self.session
        answer = wk.AcpPermission(action_id=self.new_id("act"), session_id=s.session_id,
                                  target_action_id=prompt.action_id,
                                  request_id=update.request_id or "", option_id=option)
        self.effect(RunAction(s.worker_id, answer, PERMISSION_TIMEOUT_S, report=False))
