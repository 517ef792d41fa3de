"""One session's turn: model call → tool calls → approval gate → worker → back to the model.

A :class:`TurnRunner` runs as one asyncio task per running session (started by
:class:`~codey_server.agent.service.AgentService`). Everything it knows comes from the
session's state, which is folded from the log: after a restart a new runner picks up exactly
where the old one stopped — unfinished tool calls are settled first (a pending action is re-sent
with its action id, a pending approval is waited for), then the model is called again.

Failures are results: a bad tool call, a refused or failed action, a rejection, a worker
timeout all go back to the model as text. A model API error (after retries) becomes an error
item and the session stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.approvals import needs_approval
from codey_server.agent.models import (
    AssistantText,
    Entry,
    ModelError,
    RateLimits,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallEntry,
    ToolCallRequested,
    ToolResultEntry,
    Usage,
    UserText,
)
from codey_server.agent.tools import BadToolCall, format_outcome, parse_call, tools_for
from codey_server.workers import ActionFailed

if TYPE_CHECKING:
    from codey_server.agent.service import AgentService

log = logging.getLogger("codey.agent")

__all__ = ["INSTRUCTIONS", "TurnRunner", "conversation_of", "needs_turn"]

INSTRUCTIONS = """You are Codey, a coding agent working in a developer's project on their machine.
Use the tools to inspect and change the project: `shell` runs an argv list in the session's
workdir, `apply_patch` edits files, `read_file`/`list_dir`/`write_file` work on files, and
`update_plan` shares your plan. Paths are relative to the workdir. Some calls wait for the
user's approval; a rejection comes back as a result, with the user's reason when given.
Keep going until the task is done, then answer briefly with what you did."""

#: streamed text/output is sent as one event per this many seconds (or STREAM_CHUNK chars)
COALESCE_S = 0.05
STREAM_CHUNK = 16 * 1024
#: streamed command output kept in one item; the final result replaces it with head + tail
ITEM_OUTPUT_CAP = 256 * 1024


def conversation_of(session: SessionInfo) -> list[Entry]:
    """The model's input, rebuilt from the session's items (never a second store)."""
    out: list[Entry] = []
    results: list[Entry] = []  # the results of the current answer's calls, after all its calls
    answer: str | None = None
    for item in session.items:
        if isinstance(item, ev.ToolCall):
            if item.response_id is None or item.response_id != answer:
                out.extend(results)
                results = []
            answer = item.response_id
            if item.result is not None:
                out.append(ToolCallEntry(item.call_id, item.name, item.arguments))
                results.append(ToolResultEntry(item.call_id, item.result))
            continue
        if isinstance(item, (ev.Reasoning, ev.ErrorItem, ev.PlanItem)):
            continue
        out.extend(results)
        results = []
        answer = None
        if isinstance(item, ev.UserMessage):
            if not item.queued:
                out.append(UserText(item.text))
        elif isinstance(item, ev.AssistantMessage) and item.text:
            out.append(AssistantText(item.text))
    out.extend(results)
    return out


def needs_turn(session: SessionInfo) -> bool:
    """True when a prompt is waiting for a turn: queued, or unanswered at the end."""
    queued = any(isinstance(i, ev.UserMessage) and i.queued for i in session.items)
    return queued or _model_call_needed(session)


def _model_call_needed(session: SessionInfo) -> bool:
    """True when the conversation ends with something the model has not answered yet."""
    for item in reversed(session.items):
        if isinstance(item, ev.UserMessage):
            return True
        if isinstance(item, ev.ToolCall):
            return item.result is not None
        if isinstance(item, ev.AssistantMessage):
            return False
    return False


class _Coalescer:
    """Collects deltas for one item and appends them as few events as possible."""

    def __init__(self, flush: Callable[[str], Awaitable[None]]) -> None:
        self._flush = flush
        self._buf: list[str] = []
        self._size = 0
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def add(self, text: str) -> None:
        self._buf.append(text)
        self._size += len(text)
        if self._size >= STREAM_CHUNK:
            await self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(self._later())

    async def _later(self) -> None:
        await asyncio.sleep(COALESCE_S)
        self._timer = None
        await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            if not self._buf:
                return
            text = "".join(self._buf)
            self._buf.clear()
            self._size = 0
            await self._flush(text)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None
        await self.flush()


class TurnRunner:
    def __init__(self, service: AgentService, session_id: str, *, resume: bool = False) -> None:
        self.service = service
        self.engine = service.engine
        self.session_id = session_id
        self.resume = resume

    @property
    def session(self) -> SessionInfo:
        return self.engine.state.sessions[self.session_id]

    async def _emit(self, *events: ev.Event) -> None:
        await self.engine.append([(self.session_id, e) for e in events])

    async def _status(self, status: ev.SessionStatus, reason: str = "") -> None:
        s = self.session
        if s.status != status or s.status_reason != reason:
            await self._emit(ev.SessionStatusChanged(status=status, reason=reason))

    async def _update(self, item_id: str, **fields: Any) -> None:
        await self._emit(ev.SessionItemUpdated(item_id=item_id, **fields))

    def _new_id(self, prefix: str) -> str:
        return self.engine.context.new_id(prefix)

    # the turn -------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._turn()
        except asyncio.CancelledError:
            if not self.service.stopping:
                await asyncio.shield(self._cleanup_after_interrupt())
            raise
        except ModelError as err:
            await self._emit(ev.SessionItemAppended(item=ev.ErrorItem(
                id=self._new_id("itm"), ts=time.time(), message=err.message, code="model")))
            await self._status("error", err.message[:200])
        except Exception as err:  # a bug here must not take the server down
            log.exception("session %s failed", self.session_id)
            await self._emit(ev.SessionItemAppended(item=ev.ErrorItem(
                id=self._new_id("itm"), ts=time.time(), message=f"internal error: {err}",
                code="internal")))
            await self._status("error", "internal error")

    async def _turn(self) -> None:
        if self.resume:
            await self._close_interrupted_streams()
        force_call = self.resume and self._had_partial
        iterations = 0
        cap = self.service.settings.turn_iteration_cap
        while True:
            await self._status("running")
            while True:
                await self._settle_tool_calls()
                await self._inject_queued()
                if not (force_call or _model_call_needed(self.session)):
                    break
                force_call = False
                if iterations >= cap:
                    await self._emit(ev.SessionItemAppended(item=ev.AssistantMessage(
                        id=self._new_id("itm"), ts=time.time(),
                        text=f"I have taken {cap} steps in this turn without finishing. "
                             "Should I go on? Send a message to continue, or tell me what "
                             "to change.")))
                    await self._status("waiting_user", "iteration cap reached")
                    return
                iterations += 1
                await self._model_call()
            await self._status("idle")
            # a prompt that arrived while the turn was ending starts the next one here
            if not (_model_call_needed(self.session) or self._queued()):
                return

    _had_partial = False

    async def _close_interrupted_streams(self) -> None:
        for item in self.session.items:
            if isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
                self._had_partial = True
                await self._update(item.id, streaming=False)

    def _queued(self) -> list[ev.UserMessage]:
        return [i for i in self.session.items if isinstance(i, ev.UserMessage) and i.queued]

    async def _inject_queued(self) -> None:
        queued = self._queued()
        if queued:
            await self._emit(*[ev.SessionItemUpdated(item_id=i.id, queued=False) for i in queued])

    # the model -------------------------------------------------------------------------------

    async def _model_call(self) -> None:
        s = self.session
        provider = self.service.providers.get(s.provider)
        if provider is None:
            raise ModelError(f"the provider {s.provider!r} is not configured on this server")
        model = s.model or provider.default_model
        worker = self.engine.state.workers.get(s.worker_id)
        tools = tools_for(worker.capabilities if worker else None)
        text_item: str | None = None
        reasoning_item: str | None = None
        response_id = self._new_id("rsp")

        async def flush_text(text: str) -> None:
            if text_item is not None:
                await self._update(text_item, text_delta=text)

        async def flush_reasoning(text: str) -> None:
            if reasoning_item is not None:
                await self._update(reasoning_item, text_delta=text)

        texts = _Coalescer(flush_text)
        reasonings = _Coalescer(flush_reasoning)
        try:
            async for event in provider.stream(model=model, instructions=INSTRUCTIONS,
                                               conversation=conversation_of(s), tools=tools):
                if isinstance(event, TextDelta):
                    if text_item is None:
                        text_item = self._new_id("itm")
                        await self._emit(ev.SessionItemAppended(item=ev.AssistantMessage(
                            id=text_item, ts=time.time(), text=event.text, streaming=True)))
                    else:
                        await texts.add(event.text)
                elif isinstance(event, ReasoningDelta):
                    if reasoning_item is None:
                        reasoning_item = self._new_id("itm")
                        await self._emit(ev.SessionItemAppended(item=ev.Reasoning(
                            id=reasoning_item, ts=time.time(), text=event.text,
                            streaming=True)))
                    else:
                        await reasonings.add(event.text)
                elif isinstance(event, ToolCallRequested):
                    await texts.close()
                    await reasonings.close()
                    await self._append_tool_call(event, response_id)
                elif isinstance(event, Usage):
                    await self._emit(ev.TokenUsageRecorded(
                        input_tokens=event.input_tokens, output_tokens=event.output_tokens,
                        reasoning_tokens=event.reasoning_tokens,
                        total_tokens=event.total_tokens))
                elif isinstance(event, RateLimits):
                    await self._emit(_rate_event(provider.name, event.headers))
                elif isinstance(event, Retrying):
                    await self._status("running", f"model busy ({event.reason}); retrying in "
                                                  f"{event.delay_s:.1f} s")
        finally:
            with contextlib.suppress(Exception):
                await texts.close()
                await reasonings.close()
                for item_id in (text_item, reasoning_item):
                    if item_id is not None:
                        await self._update(item_id, streaming=False)
        if self.session.status_reason.startswith("model busy"):
            await self._status("running")

    async def _append_tool_call(self, call: ToolCallRequested, response_id: str) -> None:
        worker = self.engine.state.workers.get(self.session.worker_id)
        item = ev.ToolCall(id=self._new_id("itm"), ts=time.time(), call_id=call.call_id,
                           name=call.name, arguments=call.arguments, response_id=response_id)
        try:
            parsed = parse_call(call.name, call.arguments, worker.capabilities if worker else None)
            item.command = parsed.command
            item.patch = parsed.patch
            item.path = parsed.path
            item.mcp_server = parsed.mcp_server
            item.mcp_tool = parsed.mcp_tool
        except BadToolCall:
            pass  # reported when the call is settled
        await self._emit(ev.SessionItemAppended(item=item))

    # tool calls ------------------------------------------------------------------------------

    async def _settle_tool_calls(self) -> None:
        for item in list(self.session.items):
            if isinstance(item, ev.ToolCall) and item.result is None:
                await self._settle(item)

    async def _finish(self, item: ev.ToolCall, status: ev.ToolStatus, result: str,
                      **fields: Any) -> None:
        await self._update(item.id, status=status, result=result, **fields)

    async def _settle(self, item: ev.ToolCall) -> None:
        s = self.session
        worker = self.engine.state.workers.get(s.worker_id)
        try:
            parsed = parse_call(item.name, item.arguments, worker.capabilities if worker else None)
        except BadToolCall as err:
            await self._finish(item, "failed", f"error: {err}", error=str(err))
            return
        if parsed.tool == "update_plan":
            await self._emit(ev.PlanUpdated(steps=parsed.plan or [],
                                            explanation=parsed.explanation))
            await self._finish(item, "done", "plan updated")
            return

        # the approval gate
        if item.approval_id is None and needs_approval(
                s.policy, parsed.tool if parsed.tool != "mcp" else "mcp",
                command=parsed.command, patch=parsed.patch, path=parsed.path,
                approved_prefixes=s.approved_prefixes):
            approval_id = self._new_id("apr")
            kind = _APPROVAL_KIND.get(parsed.tool, "mcp")
            await self._emit(
                ev.ApprovalRequested(approval_id=approval_id, item_id=item.id, kind=kind,
                                     command=parsed.command, patch=parsed.patch,
                                     path=parsed.path, reason=f"{item.name} wants to run"),
                ev.SessionItemUpdated(item_id=item.id, status="waiting_approval",
                                      approval_id=approval_id),
            )
            item = self._item(item.id)
        if item.approval_id is not None:
            decision, message = await self._await_approval(item.approval_id)
            if decision != "approved":
                result = "rejected by the user" + (f": {message}" if message else "")
                await self._finish(item, "rejected", result)
                return

        # the worker
        action_id = item.action_id or self._new_id("act")
        pending = s.pending_actions.get(action_id)
        if pending is None:
            action = parsed.action(action_id, s.session_id, s.workdir)
            await self._emit(
                ev.ActionRequested(action_id=action_id, item_id=item.id, worker_id=s.worker_id,
                                   action=action),
                ev.SessionItemUpdated(item_id=item.id, status="running", action_id=action_id),
            )
        else:
            action = pending.action
        await self._run_action(self._item(item.id), action)

    def _item(self, item_id: str) -> ev.ToolCall:
        for item in reversed(self.session.items):
            if item.id == item_id and isinstance(item, ev.ToolCall):
                return item
        raise LookupError(item_id)

    async def _await_approval(self, approval_id: str) -> tuple[str, str]:
        approval = self.session.approvals.get(approval_id)
        if approval is None:
            return "rejected", "the approval record is missing"
        if approval.status == "pending":
            # the waiter first: a decision folded while the status is written still wakes us
            waiter = self.service.approval_waiter(approval_id)
            await self._status("waiting_approval", "waiting for your approval")
            if self.session.approvals[approval_id].status == "pending":
                await waiter
            approval = self.session.approvals[approval_id]
            await self._status("running")
        return approval.status, approval.message

    async def _run_action(self, item: ev.ToolCall, action: wk.ActionMessage) -> None:
        s = self.session
        registry = self.service.workers
        streamed = 0
        truncated = False

        async def flush_output(text: str) -> None:
            await self._update(item.id, output_delta=text)

        output = _Coalescer(flush_output)

        async def on_progress(p: wk.ActionProgress) -> None:
            nonlocal streamed, truncated
            if streamed >= ITEM_OUTPUT_CAP:
                truncated = True
                return
            chunk = p.data[: ITEM_OUTPUT_CAP - streamed]
            streamed += len(chunk)
            await output.add(chunk)

        watcher = asyncio.get_running_loop().create_task(self._watch_worker(s.worker_id))
        try:
            await registry.ensure_attached(s.worker_id, s.session_id, s.workdir,
                                           timeout=self.service.settings.action_timeout_s)
            outcome = await registry.run(s.worker_id, action, on_progress=on_progress,
                                         timeout=self.service.settings.action_timeout_s)
        except ActionFailed as err:
            await output.close()
            await self._emit(ev.ActionFinished(action_id=action.action_id, outcome="errored"))
            await self._finish(item, "failed", f"error ({err.code}): {err.message}",
                               error=err.message)
            return
        except TimeoutError:
            await output.close()
            await registry.cancel(s.worker_id, action.action_id, s.session_id)
            await self._emit(ev.ActionFinished(action_id=action.action_id, outcome="lost"))
            limit = self.service.settings.action_timeout_s
            await self._finish(item, "failed", f"error: the worker did not finish within "
                                               f"{limit:.0f} s", error="worker timeout")
            return
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await output.close()
        await self._emit(ev.ActionFinished(action_id=action.action_id, outcome="result"))
        fields: dict[str, object] = {}
        status: ev.ToolStatus = "done"
        if isinstance(outcome, wk.CommandResult):
            fields["exit_code"] = outcome.exit_code
            fields["truncated"] = outcome.truncated or truncated
            if truncated or outcome.truncated:
                fields["output"] = (outcome.stdout + outcome.stderr)[:2 * ITEM_OUTPUT_CAP]
            if outcome.exit_code != 0:
                status = "failed"
        elif isinstance(outcome, wk.PatchResult):
            fields["diff"] = outcome.diff
            fields["files"] = outcome.files
        elif isinstance(outcome, wk.McpCallResult) and outcome.is_error:
            status = "failed"
        if self.session.status == "waiting_worker":
            await self._status("running")
        await self._finish(item, status, format_outcome(outcome), **fields)

    async def _watch_worker(self, worker_id: str) -> None:
        presence = self.service.workers.presence(worker_id)
        absence = self.service.workers.absence(worker_id)
        while True:
            if not presence.is_set():
                await self._status("waiting_worker", "the worker is disconnected")
                await presence.wait()
                await self._status("running")
            await absence.wait()

    async def _cleanup_after_interrupt(self) -> None:
        """After an interrupt: stop the worker's actions, close open calls and approvals."""
        try:
            s = self.session
            events: list[ev.Event] = []
            for action_id, pending in list(s.pending_actions.items()):
                await self.service.workers.cancel(pending.worker_id, action_id, self.session_id)
                events.append(ev.ActionFinished(action_id=action_id, outcome="cancelled"))
            for approval in s.approvals.values():
                if approval.status == "pending":
                    events.append(ev.ApprovalResolved(approval_id=approval.approval_id,
                                                      decision="cancelled"))
            for item in s.items:
                if isinstance(item, ev.ToolCall) and item.result is None:
                    events.append(ev.SessionItemUpdated(
                        item_id=item.id, status="cancelled", result="interrupted by the user"))
                elif isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
                    events.append(ev.SessionItemUpdated(item_id=item.id, streaming=False))
            if events:
                await self._emit(*events)
            if self.session.status != "interrupted":
                await self._status("interrupted", "interrupted by the user")
        except Exception:
            log.exception("cleanup after interrupt failed for %s", self.session_id)


_APPROVAL_KIND: dict[str, Literal["command", "patch", "write", "mcp"]] = {
    "shell": "command", "apply_patch": "patch", "write_file": "write"}


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _rate_event(provider: str, headers: dict[str, str]) -> ev.RateLimitUpdated:
    return ev.RateLimitUpdated(
        provider=provider,
        limit_requests=_int(headers.get("x-ratelimit-limit-requests")),
        remaining_requests=_int(headers.get("x-ratelimit-remaining-requests")),
        reset_requests=headers.get("x-ratelimit-reset-requests"),
        limit_tokens=_int(headers.get("x-ratelimit-limit-tokens")),
        remaining_tokens=_int(headers.get("x-ratelimit-remaining-tokens")),
        reset_tokens=headers.get("x-ratelimit-reset-tokens"),
    )
