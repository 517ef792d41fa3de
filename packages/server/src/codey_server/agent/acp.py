"""``AcpRunner``: a turn of a session run by an external agent over ACP, on its worker.

The :class:`~codey_server.agent.service.AgentService` starts it instead of a
:class:`~codey_server.agent.runner.TurnRunner` when the session has an ``agent``. The turn is
one ``acp_prompt`` action (logged like any action: ``action_requested`` …
``action_finished``, so an interrupt cancels it on the worker, which cancels the agent's turn).
What the agent does streams back as :class:`~codey_protocol.worker.AcpUpdate` and becomes
Codey items, so the session view shows it like Codey's own turns:

* ``text`` / ``thought`` chunks → an ``assistant_message`` / ``reasoning`` item, streamed;
* ``tool`` → a ``tool_call`` item per ACP tool call (its title as the name, its content as
  output and result, its status mapped);
* ``plan`` → ``plan_updated``;
* ``permission`` → an ``approval_requested`` (kind ``acp``) on that tool call; the decision
  (browser, REST or Telegram: the same ``approval_resolved``) goes back to the worker as an
  ``acp_permission`` action with the agent's matching option.

A prompt sent while the agent works is queued and becomes the agent's next prompt.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.conversation import interrupt_events
from codey_server.agent.ports import TurnDeps
from codey_server.core.actions import ActionFailed
from codey_server.errors import ServerError

log = logging.getLogger("codey.agent.acp")

__all__ = ["AcpRunner", "pick_option"]

_UPDATE = msgspec.json.Decoder(wk.AcpUpdate)
_TOOL_STATUS: dict[str, ev.ToolStatus] = {
    "pending": "pending", "in_progress": "running", "completed": "done", "failed": "failed"}
_PLAN_STATUS: dict[str, ev.PlanStatus] = {
    "pending": "pending", "in_progress": "in_progress", "completed": "done"}


def pick_option(options: list[wk.AcpOption], decision: str, for_session: bool) -> str | None:
    """The agent's option for a Codey decision; None (the request is refused) when the agent
    offered none that fits."""
    if decision == "approved":
        wanted = ["allow_always", "allow_once"] if for_session else ["allow_once",
                                                                     "allow_always"]
    else:
        wanted = ["reject_once", "reject_always"]
    for kind in wanted:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


class AcpRunner:
    def __init__(self, deps: TurnDeps, session_id: str, *, resume: bool = False) -> None:
        self.deps = deps
        self.store = deps.store
        self.session_id = session_id
        self.resume = resume
        self._tools: dict[str, str] = {}  # ACP tool call id → item id
        self._kinds: dict[str, str] = {}  # ACP tool call id → its kind (read, edit, …)
        self._message: str | None = None  # the streaming item of the current text run
        self._message_kind: str = ""
        self._asks: set[asyncio.Task[None]] = set()
        self._sent: set[str] = set()  # user messages given to the agent by this runner

    @property
    def session(self) -> SessionInfo:
        return self.store.state.sessions[self.session_id]

    async def _emit(self, *events: ev.Event) -> None:
        await self.store.append([(self.session_id, e) for e in events])

    async def _status(self, status: ev.SessionStatus, reason: str = "") -> None:
        s = self.session
        if s.status != status or s.status_reason != reason:
            await self._emit(ev.SessionStatusChanged(status=status, reason=reason))

    def _new_id(self, prefix: str) -> str:
        return self.store.new_id(prefix)

    # the turn -------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._turns()
        except _Stop:
            pass
        except asyncio.CancelledError:
            if not self.deps.stopping():
                await asyncio.shield(self._cleanup())
            raise
        except Exception as err:  # a bug here must not take the server down
            log.exception("session %s failed", self.session_id)
            await self._emit(ev.SessionItemAppended(item=ev.ErrorItem(
                id=self._new_id("itm"), ts=time.time(), message=f"internal error: {err}",
                code="internal")))
            await self._status("error", "internal error")
        finally:
            for task in self._asks:
                task.cancel()

    async def _turns(self) -> None:
        resumed = self._in_flight() if self.resume else None
        if resumed is not None:
            await self._pick_up()
            await self._status("running")
            await self._prompt(resumed)
        while True:
            prompt = await self._take_prompt()
            if prompt is None:
                break
            await self._status("running")
            s = self.session
            action = wk.AcpPrompt(action_id=self._new_id("act"), session_id=s.session_id,
                                  agent=s.agent or "", workdir=s.workdir, prompt=prompt[1])
            await self._emit(ev.ActionRequested(action_id=action.action_id, item_id=prompt[0],
                                                worker_id=s.worker_id, action=action))
            await self._prompt(action)
        if self.session.status in ("running", "waiting_approval", "waiting_worker"):
            await self._status("idle")

    async def _pick_up(self) -> None:
        """After a restart, before following the agent's turn again: text cut by the restart
        is marked partial (what the agent said meanwhile was not seen), and its open tool
        calls are found again by their ACP ids."""
        for item in self.session.items:
            if isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
                await self._emit(ev.SessionItemUpdated(item_id=item.id, streaming=False,
                                                       partial=True))
            elif isinstance(item, ev.ToolCall) and item.result is None:
                self._tools[item.call_id] = item.id

    def _in_flight(self) -> wk.AcpPrompt | None:
        """After a restart: the agent's turn that was running (the worker still runs it or
        kept its answer; the action id finds it)."""
        for pending in self.session.pending_actions.values():
            if isinstance(pending.action, wk.AcpPrompt):
                return pending.action
        return None

    async def _take_prompt(self) -> tuple[str, str] | None:
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
        if queued:
            await self._emit(*[ev.SessionItemUpdated(item_id=m.id, queued=False)
                               for m in queued])
        self._sent.update(m.id for m in fresh)
        return fresh[-1].id, "\n\n".join(m.text for m in fresh if m.text.strip())

    async def _prompt(self, action: wk.AcpPrompt) -> None:
        s = self.session
        actions = self.deps.actions
        self._message = None
        try:
            await actions.ensure_attached(s.worker_id, s.session_id, s.workdir,
                                          timeout=self.deps.limits.action_timeout_s)
            outcome = await actions.run(s.worker_id, action,
                                        on_progress=lambda p: self._progress(action, p),
                                        timeout=self.deps.limits.action_timeout_s)
        except (ActionFailed, TimeoutError) as err:
            message = err.message if isinstance(err, ActionFailed) else "the worker timed out"
            await self._end_items("failed")
            await self._emit(
                ev.ActionFinished(action_id=action.action_id, outcome="errored"),
                ev.SessionItemAppended(item=ev.ErrorItem(
                    id=self._new_id("itm"), ts=time.time(), message=message, code="acp")))
            await self._status("error", message[:200])
            raise _Stop from None
        await self._end_items("done")
        await self._emit(ev.ActionFinished(action_id=action.action_id, outcome="result"))
        if isinstance(outcome, wk.AcpTurnEnded) and outcome.stop_reason not in ("end_turn",
                                                                                 "cancelled"):
            await self._emit(ev.SessionItemAppended(item=ev.Notice(
                id=self._new_id("itm"), ts=time.time(), code="acp_stop",
                text=f"the agent stopped: {outcome.stop_reason}")))

    async def _progress(self, action: wk.AcpPrompt, p: wk.ActionProgress) -> None:
        if p.stream != "acp":
            return
        try:
            update = _UPDATE.decode(p.data)
        except msgspec.DecodeError:
            log.warning("session %s: an ACP update that does not decode", self.session_id)
            return
        if update.kind in ("text", "thought"):
            await self._chunk(update.kind, update.text)
            return
        await self._close_message()
        if update.kind == "tool":
            await self._tool(update)
        elif update.kind == "plan":
            await self._emit(ev.PlanUpdated(steps=[
                ev.PlanStep(step=text, status=_PLAN_STATUS.get(status, "pending"))
                for text, status in update.entries]))
        elif update.kind == "permission":
            item_id = await self._tool(update)
            # what "approve for session" remembers: this kind of request (a request names
            # the call; its kind came with the call's start)
            kind = update.tool_kind or self._kinds.get(update.tool_call_id or "")
            what = ["acp", kind or update.title or "tool"]
            s = self.session
            remembered = what in s.approved_prefixes
            if s.policy == "full-auto" or remembered:
                option = pick_option(update.options, "approved", remembered)
                task = asyncio.get_running_loop().create_task(
                    self._send_answer(action, update, option))
            else:
                approval_id = self._new_id("apr")
                await self._emit(
                    ev.ApprovalRequested(approval_id=approval_id, item_id=item_id, kind="acp",
                                         command=what, reason=update.title
                                         or "the agent asks for permission"),
                    ev.SessionItemUpdated(item_id=item_id, status="waiting_approval",
                                          approval_id=approval_id))
                task = asyncio.get_running_loop().create_task(
                    self._answer(action, update, approval_id, item_id))
            self._asks.add(task)
            task.add_done_callback(self._asks.discard)

    async def _chunk(self, kind: str, text: str) -> None:
        if self._message is None or self._message_kind != kind:
            await self._close_message()
            item_id = self._new_id("itm")
            item: ev.Item = (ev.AssistantMessage(id=item_id, ts=time.time(), streaming=True)
                             if kind == "text" else
                             ev.Reasoning(id=item_id, ts=time.time(), streaming=True))
            await self._emit(ev.SessionItemAppended(item=item))
            self._message, self._message_kind = item_id, kind
        await self._emit(ev.SessionItemUpdated(item_id=self._message, text_delta=text))

    async def _close_message(self) -> None:
        if self._message is not None:
            await self._emit(ev.SessionItemUpdated(item_id=self._message, streaming=False))
            self._message = None

    async def _tool(self, update: wk.AcpUpdate) -> str:
        """The tool call item of ``update``, created or changed; returns its id."""
        call_id = update.tool_call_id or self._new_id("call")
        if update.tool_kind:
            self._kinds[call_id] = update.tool_kind
        item_id = self._tools.get(call_id)
        status = _TOOL_STATUS.get(update.status or "")
        if item_id is None:
            item_id = self._tools[call_id] = self._new_id("itm")
            await self._emit(ev.SessionItemAppended(item=ev.ToolCall(
                id=item_id, ts=time.time(), call_id=call_id,
                name=update.title or update.tool_kind or "tool",
                arguments=json.dumps({"kind": update.tool_kind, "title": update.title}),
                status=status or "pending", output=update.text)))
            return item_id
        fields: dict[str, Any] = {}
        if status is not None and update.kind == "tool":
            fields["status"] = status
            if status in ("done", "failed"):
                fields["result"] = update.text
        if update.text:
            fields["output"] = update.text
        if fields:
            await self._emit(ev.SessionItemUpdated(item_id=item_id, **fields))
        return item_id

    async def _end_items(self, status: ev.ToolStatus) -> None:
        """At the end of the agent's turn: close the text run and settle every call left
        open (an agent may not report each one's end)."""
        await self._close_message()
        events: list[ev.Event] = []
        for item_id in self._tools.values():
            item = next((i for i in reversed(self.session.items) if i.id == item_id), None)
            if isinstance(item, ev.ToolCall) and item.result is None:
                events.append(ev.SessionItemUpdated(
                    item_id=item_id, status=status if item.status != "failed" else "failed",
                    result=item.output))
        if events:
            await self._emit(*events)
        self._tools.clear()

    async def _answer(self, action: wk.AcpPrompt, update: wk.AcpUpdate, approval_id: str,
                      item_id: str) -> None:
        waiter = self.deps.approvals.approval_waiter(approval_id)
        if self.session.approvals[approval_id].status == "pending":
            await self._status("waiting_approval", "waiting for your approval")
            await waiter
        approval = self.session.approvals[approval_id]
        await self._status("running")
        option = pick_option(update.options, approval.status,
                             approval.command in self.session.approved_prefixes)
        await self._emit(ev.SessionItemUpdated(
            item_id=item_id, status="running" if approval.status == "approved" else "rejected"))
        await self._send_answer(action, update, option)

    async def _send_answer(self, action: wk.AcpPrompt, update: wk.AcpUpdate,
                           option: str | None) -> None:
        s = self.session
        answer = wk.AcpPermission(action_id=self._new_id("act"), session_id=s.session_id,
                                  target_action_id=action.action_id,
                                  request_id=update.request_id or "", option_id=option)
        try:
            await self.deps.actions.run(s.worker_id, answer, timeout=60.0)
        except (ActionFailed, TimeoutError) as err:
            log.warning("session %s: the permission answer did not arrive (%s)",
                        self.session_id, err)

    async def _cleanup(self) -> None:
        """After an interrupt: cancel the agent's turn, close what is open."""
        if self.session_id not in self.store.state.sessions:
            return
        try:
            s = self.session
            for action_id, pending in list(s.pending_actions.items()):
                await self.deps.actions.cancel(pending.worker_id, action_id, self.session_id)
            events = interrupt_events(self.session)
            if events:
                await self._emit(*events)
            if self.session.status not in ("interrupted", "closed"):
                await self._status("interrupted", "interrupted by the user")
        except Exception:
            log.exception("cleanup after interrupt failed for %s", self.session_id)


class _Stop(ServerError):
    """The turn ended in an error already recorded."""

