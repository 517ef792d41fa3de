"""``AcpTurn``: a turn of a session run by an external agent over ACP, on its worker, as a
state machine without I/O (:mod:`~codey_server.agent.machine`), run by the same driver as
Codey's own turn. The turn is a value (:class:`AcpTurn`); :data:`ACP` steps it.

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
  ``acp_permission`` action with the agent's matching option;
* ``mode`` / ``config`` → ``agent_mode_updated`` / ``agent_config_updated`` (the header's
  selects; :mod:`.acp_routes` sets them);
* ``usage`` (how full the agent's context is) and the usage its turn's answer reports →
  one ``token_usage_recorded`` at the end of the agent's turn, as a model call's.

A prompt sent while the agent works is queued and becomes the agent's next prompt. After a
restart the resumed turn follows the same ``acp_prompt`` action (its id finds it on the
worker).

Its effects: run the ``acp_prompt`` action (its progress is the agent's updates), send an
``acp_permission`` action, wait for an approval.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionOutcomeInput,
    ActionProgressed,
    Core,
    Input,
    Limits,
    RunAction,
    Start,
    Stepper,
    Streamed,
    evolve,
)

log = logging.getLogger("codey.agent.acp")

__all__ = ["ACP", "AcpMachine", "AcpTurn", "acp_turn", "pick_option"]

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


@dataclass(frozen=True, slots=True)
class AcpTurn:
    """One turn of a session an ACP agent runs, as a value (see the module's docstring).
    Its maps are never changed in place: a step that changes one makes a new one."""

    core: Core
    action_timeout_s: float = 900.0
    resume: bool = False
    #: ACP tool call id → item id
    tools: Mapping[str, str] = field(default_factory=dict)
    #: ACP tool call id → its kind (read, edit, …)
    kinds: Mapping[str, str] = field(default_factory=dict)
    #: the item of the current text run
    message: Streamed | None = None
    #: the agent's turn under way
    prompt: wk.AcpPrompt | None = None
    #: approval id → the request it answers
    asks: Mapping[str, _Ask] = field(default_factory=dict)
    #: user messages given to the agent by this turn
    sent: frozenset[str] = frozenset()
    #: how full the agent's context is, as its last ``usage_update`` of this prompt said
    context: wk.AcpUsage | None = None


def acp_turn(session_id: str, *, limits: Limits, resume: bool = False) -> AcpTurn:
    """A new ACP turn of ``session_id`` (``resume``: after a restart, follow the agent's
    turn that was running)."""
    return AcpTurn(Core(session_id, approval_timeout_s=limits.approval_timeout_s),
                   action_timeout_s=limits.action_timeout_s, resume=resume)


class _Then(Enum):
    NEXT_PROMPT = "next_prompt"


K = Stepper[AcpTurn]


class AcpMachine:
    """The ACP turn's handlers (:class:`~codey_server.agent.machine.Machine`)."""

    def handle(self, k: K, input: Input) -> None:
        if isinstance(input, Start):
            _start(k)
        elif isinstance(input, ActionProgressed):
            _progressed(k, input)

    def proceed(self, k: K, then: Enum) -> None:
        if then is _Then.NEXT_PROMPT:
            _next_prompt(k)

    def action_over(self, k: K, i: ActionOutcomeInput) -> None:
        _action_over(k, i)

    def approval_over(self, k: K, approval_id: str) -> None:
        _approval_over(k, approval_id)

    def on_timer(self, k: K, key: str) -> None:
        pass


#: the ACP turn's machine (it holds nothing)
ACP = AcpMachine()


# the turn --------------------------------------------------------------------------------

def _start(k: K) -> None:
    resumed = _in_flight(k) if k.turn.resume else None
    if resumed is None:
        _next_prompt(k)
        return
    _pick_up(k)
    k.status("running")
    _run_prompt(k, resumed)


def _pick_up(k: K) -> None:
    """After a restart, before following the agent's turn again: text cut by the restart
    is marked partial (what the agent said meanwhile was not seen), and its open tool
    calls are found again by their ACP ids."""
    tools = dict(k.turn.tools)
    for item in k.session.items:
        if isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
            k.emit(ev.SessionItemUpdated(item_id=item.id, streaming=False, partial=True))
        elif isinstance(item, ev.ToolCall) and item.result is None:
            tools[item.call_id] = item.id
    k.turn = evolve(k.turn, tools=tools)


def _in_flight(k: K) -> wk.AcpPrompt | None:
    """After a restart: the agent's turn that was running (the worker still runs it or
    kept its answer; the action id finds it)."""
    for pending in k.session.pending_actions.values():
        if isinstance(pending.action, wk.AcpPrompt):
            return pending.action
    return None


def _next_prompt(k: K) -> None:
    """Give the agent the user's messages it has not had, or end the turn."""
    prompt = _take_prompt(k)
    if prompt is None:
        if k.current_status in ("running", "waiting_approval", "waiting_worker"):
            k.status("idle")
        k.end()
        return
    k.status("running")
    s = k.session
    action = wk.AcpPrompt(action_id=k.new_id("act"), session_id=s.session_id,
                          agent=s.agent or "", workdir=s.workdir, prompt=prompt[1])
    k.emit(ev.ActionRequested(action_id=action.action_id, item_id=prompt[0],
                              worker_id=s.worker_id, action=action))
    _run_prompt(k, action)


def _take_prompt(k: K) -> tuple[str, str] | None:
    """The user's messages the agent has not had: those queued during its turn, or the
    ones that end the session (a new prompt). Returns (the last one's id, their text)."""
    items = k.session.items
    sent = k.turn.sent
    trailing: list[ev.UserMessage] = []
    for item in reversed(items):
        if not isinstance(item, ev.UserMessage):
            break
        trailing.insert(0, item)
    if trailing and trailing[-1].id in sent:
        trailing = []
    queued = [i for i in items if isinstance(i, ev.UserMessage) and i.queued]
    fresh = [m for m in items if isinstance(m, ev.UserMessage)
             and (m in queued or m in trailing) and m.id not in sent]
    if not fresh:
        return None
    k.emit(*[ev.SessionItemUpdated(item_id=m.id, queued=False) for m in queued])
    k.turn = evolve(k.turn, sent=sent | {m.id for m in fresh})
    return fresh[-1].id, "\n\n".join(m.text for m in fresh if m.text.strip())


def _run_prompt(k: K, action: wk.AcpPrompt) -> None:
    s = k.session
    k.turn = evolve(k.turn, prompt=action, message=None)
    timeout = k.turn.action_timeout_s
    k.effect(RunAction(s.worker_id, action, timeout, workdir=s.workdir,
                       attach_timeout=timeout, progress=True))


def _action_over(k: K, i: ActionOutcomeInput) -> None:
    prompt = k.turn.prompt
    if prompt is None or prompt.action_id != i.action_id:
        return
    ended = i.outcome if isinstance(i, ActionDone) else None
    _record_usage(k, ended.usage if isinstance(ended, wk.AcpTurnEnded) else None)
    k.turn = evolve(k.turn, prompt=None, context=None)
    if isinstance(i, ActionDone):
        _end_items(k, "done")
        k.emit(ev.ActionFinished(action_id=i.action_id, outcome="result"))
        outcome = i.outcome
        if isinstance(outcome, wk.AcpTurnEnded) \
                and outcome.stop_reason not in ("end_turn", "cancelled"):
            k.notice("acp_stop", f"the agent stopped: {outcome.stop_reason}")
        if not k.wait(_Then.NEXT_PROMPT):
            _next_prompt(k)
        return
    message = i.message if isinstance(i, ActionErrored) else "the worker timed out"
    _end_items(k, "failed")
    k.emit(ev.ActionFinished(action_id=i.action_id, outcome="errored"))
    k.error(message, "acp", message[:200])


def _record_usage(k: K, turn: wk.AcpUsage | None) -> None:
    """The agent's prompt as one model call in the session's usage: the tokens its answer
    reported, the context its last ``usage_update`` said (either may be missing)."""
    context = k.turn.context
    if turn is None and context is None:
        return
    turn = turn or wk.AcpUsage()
    agent = k.session.agent or "agent"
    k.emit(ev.TokenUsageRecorded(
        input_tokens=turn.input_tokens, output_tokens=turn.output_tokens,
        reasoning_tokens=turn.reasoning_tokens, cached_tokens=turn.cached_tokens,
        cache_write_tokens=turn.cache_write_tokens,
        total_tokens=turn.total_tokens or turn.input_tokens + turn.output_tokens,
        context_tokens=context.context_tokens if context else None,
        context_window=context.context_window if context else None,
        model=agent, provider=f"acp:{agent}"))


# the agent's updates -----------------------------------------------------------------------

def _progressed(k: K, i: ActionProgressed) -> None:
    prompt = k.turn.prompt
    if prompt is None or prompt.action_id != i.action_id or i.progress.stream != "acp":
        return
    try:
        update = _UPDATE.decode(i.progress.data)
    except msgspec.DecodeError:
        log.warning("session %s: an ACP update that does not decode", k.session_id)
        return
    if update.kind in ("text", "thought"):
        _chunk(k, "text" if update.kind == "text" else "reasoning", update.text)
        return
    # the agent's state, not its answer: a text run goes on across them
    if update.kind == "mode":
        k.emit(ev.AgentModeUpdated(current_mode=update.current_mode, modes=update.modes))
        return
    if update.kind == "config":
        if update.config_options is not None:
            k.emit(ev.AgentConfigUpdated(options=update.config_options))
        return
    if update.kind == "usage":
        if update.usage is not None:
            k.turn = evolve(k.turn, context=update.usage)
        return
    _close_message(k)
    if update.kind == "tool":
        _tool(k, update)
    elif update.kind == "plan":
        k.emit(ev.PlanUpdated(steps=[
            ev.PlanStep(step=text, status=_PLAN_STATUS.get(status, "pending"))
            for text, status in update.entries]))
    elif update.kind == "permission":
        _permission(k, prompt, update)
    elif update.kind == "commands":
        k.emit(ev.AgentCommandsUpdated(commands=[
            ev.AgentCommand(name=name, description=description, hint=hint)
            for name, description, hint in update.commands]))


def _chunk(k: K, kind: Any, text: str) -> None:
    message = k.turn.message
    if message is None or message.kind != kind:
        _close_message(k)
        message = Streamed(kind)
    k.turn = evolve(k.turn, message=k.stream(message, text))


def _close_message(k: K) -> None:
    if k.turn.message is not None:
        k.close(k.turn.message, partial=False)
        k.turn = evolve(k.turn, message=None)


def _tool(k: K, update: wk.AcpUpdate) -> str:
    """The tool call item of ``update``, created or changed; returns its id."""
    call_id = update.tool_call_id or k.new_id("call")
    if update.tool_kind:
        k.turn = evolve(k.turn, kinds={**k.turn.kinds, call_id: update.tool_kind})
    item_id = k.turn.tools.get(call_id)
    status = _TOOL_STATUS.get(update.status or "")
    if item_id is None:
        item_id = k.new_id("itm")
        k.turn = evolve(k.turn, tools={**k.turn.tools, call_id: item_id})
        arguments: dict[str, Any] = {"kind": update.tool_kind, "title": update.title}
        if update.command:
            arguments["command"] = update.command
        k.emit(ev.SessionItemAppended(item=ev.ToolCall(
            id=item_id, ts=k.now, call_id=call_id,
            name=update.title or update.tool_kind or "tool",
            arguments=json.dumps(arguments), command=update.command,
            status=status or "pending", output=update.text)))
        return item_id
    fields: dict[str, Any] = {}
    item = _item(k, item_id)
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
    if item is not None and update.kind == "tool":
        fields.update(_told_late(item, update, k.turn.kinds.get(call_id)))
    if fields:
        k.emit(ev.SessionItemUpdated(item_id=item_id, **fields))
    return item_id


def _told_late(item: ev.ToolCall, update: wk.AcpUpdate, kind: str | None) -> dict[str, Any]:
    """The card's name and command from a ``tool_call_update`` that says them first or
    anew (claude-agent-acp starts a command as "Terminal" with an empty raw input)."""
    fields: dict[str, Any] = {}
    if update.title and update.title != item.name:
        fields["name"] = update.title
    if update.command and update.command != item.command:
        fields["command"] = update.command
    if fields:
        arguments: dict[str, Any] = {"kind": kind, "title": fields.get("name", item.name)}
        command = fields.get("command", item.command)
        if command:
            arguments["command"] = command
        fields["arguments"] = json.dumps(arguments)
    return fields


def _end_items(k: K, status: ev.ToolStatus) -> None:
    """At the end of the agent's turn: close the text run and settle every call left
    open (an agent may not report each one's end)."""
    _close_message(k)
    for item_id in k.turn.tools.values():
        item = _item(k, item_id)
        if item is not None and item.result is None:
            kept = item.status in ("failed", "rejected")
            k.emit(ev.SessionItemUpdated(
                item_id=item_id, status=item.status if kept else status,
                result=item.output or ("rejected by the user"
                                       if item.status == "rejected" else "")))
    k.turn = evolve(k.turn, tools={})


def _item(k: K, item_id: str) -> ev.ToolCall | None:
    item = next((i for i in reversed(k.session.items) if i.id == item_id), None)
    return item if isinstance(item, ev.ToolCall) else None


# permission requests -----------------------------------------------------------------------

def _permission(k: K, prompt: wk.AcpPrompt, update: wk.AcpUpdate) -> None:
    item_id = _tool(k, update)
    # what "approve for session" remembers: this kind of request (a request names the
    # call; its kind came with the call's start)
    kind = update.tool_kind or k.turn.kinds.get(update.tool_call_id or "")
    what = ["acp", kind or update.title or "tool"]
    s = k.session
    remembered = what in s.approved_prefixes
    if s.policy == "full-auto" or remembered:
        _answer(k, prompt, update, pick_option(update.options, "approved"))
        return
    approval_id = k.new_id("apr")
    reason = " — ".join(p for p in (update.title, update.reason) if p)
    k.emit(ev.ApprovalRequested(approval_id=approval_id, item_id=item_id, kind="acp",
                                command=what,
                                reason=reason or "the agent asks for permission"),
           ev.SessionItemUpdated(item_id=item_id, status="waiting_approval",
                                 approval_id=approval_id))
    k.turn = evolve(k.turn, asks={**k.turn.asks, approval_id: _Ask(prompt, update, item_id)})
    k.await_approval(approval_id, k.now)


def _approval_over(k: K, approval_id: str) -> None:
    ask = k.turn.asks.get(approval_id)
    if ask is not None:
        k.turn = evolve(k.turn, asks={a: v for a, v in k.turn.asks.items()
                                       if a != approval_id})
    approval = k.session.approvals.get(approval_id)
    if ask is None or approval is None:
        return
    if approval.status == "cancelled":
        return  # the turn was interrupted: the worker refuses the agent's request itself
    k.status("running")
    option = pick_option(ask.update.options, approval.status)
    k.emit(ev.SessionItemUpdated(
        item_id=ask.item_id,
        status="running" if approval.status == "approved" else "rejected"))
    _answer(k, ask.prompt, ask.update, option)


def _answer(k: K, prompt: wk.AcpPrompt, update: wk.AcpUpdate, option: str | None) -> None:
    """Send the decision to the agent's waiting request (an ``acp_permission`` action;
    if it does not arrive, the agent's turn goes on without it)."""
    s = k.session
    answer = wk.AcpPermission(action_id=k.new_id("act"), session_id=s.session_id,
                              target_action_id=prompt.action_id,
                              request_id=update.request_id or "", option_id=option)
    k.effect(RunAction(s.worker_id, answer, PERMISSION_TIMEOUT_S, report=False))
