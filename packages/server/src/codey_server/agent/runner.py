"""One session's turn: model call → tool calls → approval gate → worker → back to the model.

A :class:`TurnRunner` runs as one asyncio task per running session (started by
:class:`~codey_server.agent.service.AgentService`). It depends only on the narrow interfaces
of :mod:`~codey_server.agent.ports`. Everything it knows comes from the session's state, which
is folded from the log: after a restart a new runner picks up exactly where the old one
stopped — unfinished tool calls are settled first (a pending action is re-sent with its action
id, a pending approval is waited for), then the model is called again.

Failures are results: a bad tool call, a refused or failed action, a rejection, a worker
timeout all go back to the model as text. A model API error (after retries, a compaction and
the fallback provider where they apply) becomes an error item and the session stays usable.

The session object (``self.session``) is the folded state itself, updated in place by every
append: read it again after an ``await`` rather than keeping values from before.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.events import IMAGE_MIMES
from codey_protocol.ratelimits import rate_limit_event
from codey_protocol.state import SessionContext, SessionInfo
from codey_server.agent.compaction import (
    COMPACT_INSTRUCTIONS,
    INPUT_SHARE,
    KEEP_SHARE,
    choose_cut,
    summary_input,
)
from codey_server.agent.context import estimate_tokens
from codey_server.agent.conversation import (
    attachment_path,
    base_of,
    interrupt_events,
    model_call_needed,
)
from codey_server.agent.errors import RETRYABLE_BY_FALLBACK, ModelError
from codey_server.agent.history import History
from codey_server.agent.instructions import INSTRUCTIONS, build_instructions
from codey_server.agent.models import ModelProvider, backoff
from codey_server.agent.ports import TurnDeps
from codey_server.agent.stream import (
    Finished,
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
    ServerCall,
    ServerTool,
    WorkerTool,
    parse_call,
    tool_named,
    tools_for,
)
from codey_server.agent.tools.shell import ITEM_OUTPUT_CAP
from codey_server.core.actions import ActionFailed

log = logging.getLogger("codey.agent")

__all__ = ["COALESCE_S", "INSTRUCTIONS", "STREAM_CHUNK", "TurnRunner"]

#: streamed text/output is sent as one event per this many seconds (or STREAM_CHUNK chars)
COALESCE_S = 0.05
STREAM_CHUNK = 16 * 1024


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


class _Streamed:
    """One streamed item of an answer (text, refusal or reasoning): created on its first
    delta, its later deltas coalesced, closed at the end of the answer."""

    def __init__(self, runner: TurnRunner, make: Callable[[str, str], ev.Item]) -> None:
        self.runner = runner
        self.make = make
        self.item_id: str | None = None
        self.text = False  # anything was said
        self.coalescer = _Coalescer(self._flush)

    async def _flush(self, text: str) -> None:
        if self.item_id is not None:
            await self.runner._update(self.item_id, text_delta=text)

    async def add(self, text: str) -> None:
        self.text = True
        if self.item_id is None:
            self.item_id = self.runner._new_id("itm")
            await self.runner._emit(ev.SessionItemAppended(item=self.make(self.item_id, text)))
        else:
            await self.coalescer.add(text)

    async def close(self, *, partial: bool, **fields: Any) -> None:
        await self.coalescer.close()
        if self.item_id is not None:
            await self.runner._update(self.item_id, streaming=False,
                                      partial=True if partial else None, **fields)
        self.item_id = None


class TurnRunner:
    def __init__(self, deps: TurnDeps, session_id: str, *, resume: bool = False,
                 compact_only: bool = False) -> None:
        self.deps = deps
        self.store = deps.store
        self.session_id = session_id
        self.resume = resume
        self.compact_only = compact_only
        self._route: tuple[ModelProvider, str] | None = None
        self._on_fallback = False
        self._had_partial = False

    @property
    def session(self) -> SessionInfo:
        return self.store.state.sessions[self.session_id]

    async def _emit(self, *events: ev.Event) -> None:
        await self.store.append([(self.session_id, e) for e in events])

    async def _status(self, status: ev.SessionStatus, reason: str = "") -> None:
        s = self.session
        if s.status != status or s.status_reason != reason:
            await self._emit(ev.SessionStatusChanged(status=status, reason=reason))

    async def _update(self, item_id: str, **fields: Any) -> None:
        await self._emit(ev.SessionItemUpdated(item_id=item_id, **fields))

    async def _notice(self, code: str, text: str) -> None:
        await self._emit(ev.SessionItemAppended(item=ev.Notice(
            id=self._new_id("itm"), ts=time.time(), code=code, text=text)))

    def _new_id(self, prefix: str) -> str:
        return self.store.new_id(prefix)

    # the turn -------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            if self.compact_only:
                await self._compact_now()
            else:
                await self._turn()
        except asyncio.CancelledError:
            if not self.deps.stopping():
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
        await self._refresh_context()
        force_call = self.resume and self._had_partial
        iterations = 0
        cap = self.session.turn_cap or self.deps.limits.turn_iteration_cap
        while True:
            await self._status("running")
            while True:
                await self._settle_tool_calls()
                if self.session.plan_mode and self.session.plan_status == "proposed":
                    await self._status("waiting_user", "the plan waits for your approval")
                    return
                await self._inject_queued()
                if not (force_call or model_call_needed(self.session)):
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
                await self._write_attachments()
                await self._model_call()
            await self._status("idle")
            # a prompt that arrived while the turn was ending starts the next one here
            if not (model_call_needed(self.session) or self._queued()):
                return

    async def _close_interrupted_streams(self) -> None:
        for item in self.session.items:
            if isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
                self._had_partial = True
                await self._update(item.id, streaming=False, partial=True)

    def _queued(self) -> list[ev.UserMessage]:
        return [i for i in self.session.items if isinstance(i, ev.UserMessage) and i.queued]

    async def _inject_queued(self) -> None:
        queued = self._queued()
        if queued:
            await self._emit(*[ev.SessionItemUpdated(item_id=i.id, queued=False) for i in queued])

    # the model -------------------------------------------------------------------------------

    def route(self) -> tuple[ModelProvider, str]:
        """The provider and model this turn calls (the fallback once it took over)."""
        if self._route is None:
            s = self.session
            provider = self.deps.models.provider(s.provider)
            if provider is None:
                raise ModelError(f"the provider {s.provider!r} is not configured on this "
                                 "server", code="not_configured")
            self._route = (provider, s.model or provider.default_model)
        return self._route

    def _history(self, provider: ModelProvider) -> History:
        return self.deps.models.history(self.session_id, provider.wire.name)

    def _body(self, provider: ModelProvider, model: str) -> bytes:
        s = self.session
        worker = self.store.state.workers.get(s.worker_id)
        roles = {name: role.description for name, role in self.deps.roles.items()} \
            if s.parent_id is None and self.deps.children is not None else None
        tools = provider.wire.encode_tools(tools_for(
            worker.capabilities if worker else None, plan_mode=s.plan_mode,
            read_only=s.read_only, roles=roles))
        messages = self._history(provider).messages(s.items)
        instructions = build_instructions(s, self.deps.memory_of(s))
        return provider.wire.body(model=model, instructions=instructions, messages=messages,
                                  tools=tools, session_id=s.session_id,
                                  options=provider.config)

    def _near_window(self, provider: ModelProvider, model: str, body: bytes) -> bool:
        used = self.session.usage.context_tokens
        last = self._history(provider).last_body_len
        if used and last:
            projected = used + estimate_tokens(max(0, len(body) - last))
        else:
            projected = estimate_tokens(len(body))
        return bool(projected >= provider.config.compact_at * provider.context_window(model))

    async def _write_attachments(self) -> None:
        """Put the files sent with prompts (not images: the model sees those) into the workdir
        before the model reads the message that names them."""
        s = self.session
        for item in s.items:
            if not isinstance(item, ev.UserMessage) or item.queued or item.attachments_written:
                continue
            files = [a for a in item.attachments if a.mime not in IMAGE_MIMES]
            if not files:
                continue
            for a in files:
                data = self.deps.load_blob(a.hash) if self.deps.load_blob else None
                if data is None:
                    await self._notice("attachment_missing", f"{a.name} is no longer stored on "
                                                             "the server; it was not written.")
                    continue
                try:
                    content, encoding = data.decode("utf-8"), "utf-8"
                except UnicodeDecodeError:
                    content, encoding = base64.b64encode(data).decode(), "base64"
                action = wk.WriteFile(action_id=self._new_id("act"), session_id=s.session_id,
                                      workdir=s.workdir, path=attachment_path(a),
                                      content=content, encoding=encoding)  # type: ignore[arg-type]
                try:
                    await self.deps.actions.ensure_attached(s.worker_id, s.session_id,
                                                            s.workdir, timeout=CONTEXT_TIMEOUT_S)
                    await self.deps.actions.run(s.worker_id, action,
                                                timeout=self.deps.limits.action_timeout_s)
                except (ActionFailed, TimeoutError) as err:
                    await self._notice("attachment_failed", f"{a.name} could not be written "
                                                            f"into the workdir: {err}")
            await self._update(item.id, attachments_written=True)

    async def _refresh_context(self) -> None:
        """Load what applies to the workdir (AGENTS.md, skills, environment) from the worker,
        and record it when it changed. A worker that is away or cannot do it leaves the last
        known context in place: the turn does not wait for it."""
        s = self.session
        self.deps.stale_context.discard(s.session_id)
        worker = self.store.state.workers.get(s.worker_id)
        if worker is None or "load_context" not in worker.capabilities.executors \
                or not self.deps.actions.presence(s.worker_id).is_set():
            return
        action = wk.LoadContext(action_id=self._new_id("act"), session_id=s.session_id,
                                workdir=s.workdir)
        try:
            await self.deps.actions.ensure_attached(s.worker_id, s.session_id, s.workdir,
                                                    timeout=CONTEXT_TIMEOUT_S)
            found = await self.deps.actions.run(s.worker_id, action, timeout=CONTEXT_TIMEOUT_S)
        except (ActionFailed, TimeoutError) as err:
            log.info("session %s: context not loaded (%s)", s.session_id, err)
            return
        if not isinstance(found, wk.ProjectContext):
            return
        event = ev.SessionContextUpdated(instructions=found.instructions, skills=found.skills,
                                         environment=found.environment,
                                         warnings=found.warnings)
        if not _same_context(self.session.context, event):
            await self._emit(event)

    async def _model_call(self) -> None:
        if self.session.session_id in self.deps.stale_context:
            await self._refresh_context()
        provider, model = self.route()
        compacted = False
        if self.session.compaction_requested:
            await self._compact(provider, model, "manual")
            compacted = True
        body = self._body(provider, model)
        if not compacted and self._near_window(provider, model, body):
            compacted = True
            if await self._compact(provider, model, "threshold"):
                body = self._body(provider, model)
        cuts = 0
        while True:
            self._history(provider).last_body_len = len(body)
            try:
                await self._answer(provider, model, body)
                return
            except ModelError as err:
                if err.code == "context_length" and not compacted:
                    compacted = True
                    if await self._compact(provider, model, "context_exceeded"):
                        body = self._body(provider, model)
                        continue
                    raise
                if err.code == "stream_cut" and cuts < provider.config.max_retries:
                    cuts += 1
                    delay = backoff(cuts)
                    await self._status("running", f"the answer was cut off; retrying in "
                                                  f"{delay:.1f} s")
                    await asyncio.sleep(delay)
                    continue
                switched = await self._fall_back(provider, model, err)
                if switched is None:
                    raise
                provider, model = switched
                body = self._body(provider, model)

    async def _fall_back(self, provider: ModelProvider, model: str,
                         err: ModelError) -> tuple[ModelProvider, str] | None:
        fallback = provider.config.fallback
        if fallback is None or self._on_fallback or err.code not in RETRYABLE_BY_FALLBACK:
            return None
        other = self.deps.models.provider(fallback.provider)
        if other is None:
            return None
        other_model = fallback.model or other.default_model
        self._on_fallback = True
        self._route = (other, other_model)
        await self._notice("fallback", f"{provider.name}/{model} failed: {err.message}. This "
                                       f"turn goes on with {other.name}/{other_model}.")
        return self._route

    async def _answer(self, provider: ModelProvider, model: str, body: bytes) -> None:
        """One model call: stream its answer into items, then append its tool calls."""
        now = time.time
        text = _Streamed(self, lambda i, t: ev.AssistantMessage(
            id=i, ts=now(), text=t, streaming=True))
        refusal = _Streamed(self, lambda i, t: ev.AssistantMessage(
            id=i, ts=now(), text=t, streaming=True, refusal=True))
        reasoning = _Streamed(self, lambda i, t: ev.Reasoning(
            id=i, ts=now(), text=t, streaming=True))
        calls: list[ToolCallRequested] = []
        tail: list[ev.Event] = []  # usage and rate limits, appended with the calls
        finished: Finished | None = None
        complete = False
        try:
            async for event in provider.stream(model=model, body=body):
                if isinstance(event, TextDelta):
                    await text.add(event.text)
                elif isinstance(event, ReasoningDelta):
                    await reasoning.add(event.text)
                elif isinstance(event, ReasoningDone):
                    if reasoning.item_id is None and event.encrypted_content:
                        await reasoning.add("")
                    await reasoning.close(partial=False, reasoning_id=event.reasoning_id,
                                          encrypted_content=event.encrypted_content)
                elif isinstance(event, RefusalDelta):
                    await refusal.add(event.text)
                elif isinstance(event, ToolCallRequested):
                    calls.append(event)
                elif isinstance(event, Usage):
                    tail.append(ev.TokenUsageRecorded(
                        input_tokens=event.input_tokens, output_tokens=event.output_tokens,
                        reasoning_tokens=event.reasoning_tokens,
                        total_tokens=event.total_tokens or event.input_tokens
                        + event.output_tokens, cached_tokens=event.cached_tokens,
                        context_window=provider.context_window(model), model=model))
                elif isinstance(event, RateLimits):
                    limits = rate_limit_event(provider.name, event.headers)
                    if limits is not None:
                        tail.append(limits)
                elif isinstance(event, Retrying):
                    await self._status("running", f"model busy ({event.reason}); retrying "
                                                  f"in {event.delay_s:.1f} s")
                elif isinstance(event, Finished):
                    finished = event
            complete = True
        finally:
            with contextlib.suppress(Exception):
                for streamed in (text, refusal, reasoning):
                    await streamed.close(partial=not complete)
                if tail and not complete:
                    await self._emit(*tail)
        events: list[ev.Event] = list(tail)
        if finished is not None and finished.incomplete is not None:
            why = {"max_output_tokens": "it reached the output token limit",
                   "content_filter": "the provider's content filter stopped it"}.get(
                finished.incomplete, f"the provider stopped it ({finished.detail})")
            events.append(ev.SessionItemAppended(item=ev.Notice(
                id=self._new_id("itm"), ts=now(), code="incomplete",
                text=f"The answer is incomplete: {why}.")))
        elif not (text.text or refusal.text or calls):
            events.append(ev.SessionItemAppended(item=ev.Notice(
                id=self._new_id("itm"), ts=now(), code="empty_answer",
                text="The model gave an empty answer, so the turn ended here. Send a "
                     "message to go on.")))
        response_id = self._new_id("rsp")
        for n, call in enumerate(calls):
            item, parsed = self._tool_call_item(call, response_id)
            events.append(ev.SessionItemAppended(item=item))
            if n == 0 and parsed is not None:
                # the first call goes to its worker in the same append when nothing asks:
                # one commit less per step (later calls still show "pending" until their
                # turn, so the view never says two run at once)
                events += self._request_now(item, parsed)
        if events:
            await self._emit(*events)
        if self.session.status_reason.startswith(("model busy", "the answer was cut")):
            await self._status("running")

    def _tool_call_item(self, call: ToolCallRequested,
                        response_id: str) -> tuple[ev.ToolCall, ParsedCall[Any] | None]:
        worker = self.store.state.workers.get(self.session.worker_id)
        fields: dict[str, Any] = {}
        parsed: ParsedCall[Any] | None = None
        try:
            parsed = parse_call(call.name, call.arguments, worker.capabilities if worker else None)
            fields = parsed.tool.shows(parsed.args)
        except BadToolCall:
            pass  # reported when the call is settled
        item = ev.ToolCall(id=self._new_id("itm"), ts=time.time(), call_id=call.call_id,
                           name=call.name, arguments=call.arguments, response_id=response_id,
                           **fields)
        return item, parsed

    def _gate(self, parsed: ParsedCall[Any]) -> Ask | None:
        s = self.session
        worker = self.store.state.workers.get(s.worker_id)
        return parsed.tool.ask(parsed.args, Gate(s.policy, s.approved_prefixes,
                                                 worker.capabilities if worker else None))

    def _request_now(self, item: ev.ToolCall, parsed: ParsedCall[Any]) -> list[ev.Event]:
        """Mark ``item`` running and record its action, when it goes to the worker unasked."""
        tool = parsed.tool
        if not isinstance(tool, WorkerTool) or self._gate(parsed) is not None \
                or self.session.plan_mode or self.session.read_only:
            return []  # (plan mode checks the call when it is settled)
        s = self.session
        action_id = self._new_id("act")
        item.status = "running"
        item.action_id = action_id
        return [ev.ActionRequested(action_id=action_id, item_id=item.id, worker_id=s.worker_id,
                                   action=tool.action(parsed.args, action_id, s.session_id,
                                                      s.workdir))]

    # compaction ------------------------------------------------------------------------------

    async def _compact_now(self) -> None:
        """A compaction the user asked for while no turn runs."""
        before = self.session.status
        reason = self.session.status_reason
        provider, model = self.route()
        await self._compact(provider, model, "manual")
        await self._status(before, reason)

    async def _compact(self, provider: ModelProvider, model: str,
                       reason: Literal["threshold", "context_exceeded", "manual"]) -> bool:
        """Summarize the older items into one summary item; False when nothing could be."""
        s = self.session
        previous, start = base_of(s.items)
        window = provider.context_window(model)
        keep = 0 if reason == "manual" else int(window * KEEP_SHARE)
        cut = choose_cut(s.items, start, keep)
        if cut is None:
            await self._notice("compaction_skipped", "There is nothing to compact yet: the "
                                                     "conversation has no finished part.")
            return False
        status, status_reason = s.status, s.status_reason
        await self._status("running", "compacting the conversation")
        tokens_before = s.usage.context_tokens
        until = s.items[cut].id
        replaced = cut - start + 1
        budget = int(window * INPUT_SHARE) - estimate_tokens(len(COMPACT_INSTRUCTIONS))
        text = ""
        for attempt in range(3):
            entries, _ = summary_input(s.items, start, cut, previous, budget)
            assembler = provider.wire.assembler()
            for entry in entries:
                assembler.add(entry)
            body = provider.wire.body(model=model, instructions=COMPACT_INSTRUCTIONS,
                                      messages=assembler.finish(), tools=b"[]",
                                      session_id=s.session_id, options=provider.config)
            try:
                text = await self._summarize(provider, model, body)
                break
            except ModelError as err:
                if err.code == "context_length" and attempt < 2:
                    budget //= 2
                    continue
                err.message = f"compacting the conversation failed: {err.message}"
                raise
        if not text.strip():
            await self._notice("compaction_failed", "Compacting the conversation failed: the "
                                                    "model gave an empty summary.")
            await self._status(status, status_reason)
            return False
        await self._emit(ev.SessionItemAppended(item=ev.Summary(
            id=self._new_id("itm"), ts=time.time(), text=text.strip(), replaces_until=until,
            items_replaced=replaced, tokens_before=tokens_before, reason=reason)))
        self._history(provider).last_body_len = 0
        await self._status(status, status_reason)
        return True

    async def _summarize(self, provider: ModelProvider, model: str, body: bytes) -> str:
        parts: list[str] = []
        tail: list[ev.Event] = []
        async for event in provider.stream(model=model, body=body):
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif isinstance(event, Usage):
                tail.append(ev.TokenUsageRecorded(
                    input_tokens=event.input_tokens, output_tokens=event.output_tokens,
                    reasoning_tokens=event.reasoning_tokens, total_tokens=event.total_tokens,
                    cached_tokens=event.cached_tokens,
                    context_window=provider.context_window(model), model=model))
            elif isinstance(event, Retrying):
                await self._status("running", f"compacting: model busy ({event.reason}); "
                                              f"retrying in {event.delay_s:.1f} s")
        if tail:
            await self._emit(*tail)
        return "".join(parts)

    # tool calls ------------------------------------------------------------------------------

    async def _settle_tool_calls(self) -> None:
        open_calls = [i for i in self.session.items
                      if isinstance(i, ev.ToolCall) and i.result is None]
        # sub-agents work in parallel; the rest is settled in order, one at a time
        parallel = {i.id for i in open_calls if (t := tool_named(i.name)) and t.parallel}
        if parallel:
            await asyncio.gather(*(self._settle(i) for i in open_calls if i.id in parallel))
        for item in open_calls:
            if item.id not in parallel:
                await self._settle(item)

    async def _finish(self, item: ev.ToolCall, status: ev.ToolStatus, result: str,
                      *before: ev.Event, **fields: Any) -> None:
        await self._emit(*before, ev.SessionItemUpdated(item_id=item.id, status=status,
                                                        result=result, **fields))

    async def _settle(self, item: ev.ToolCall) -> None:
        s = self.session
        worker = self.store.state.workers.get(s.worker_id)
        try:
            parsed = parse_call(item.name, item.arguments, worker.capabilities if worker else None)
        except BadToolCall as err:
            await self._finish(item, "failed", f"error: {err}", error=str(err))
            return
        tool, args = parsed.tool, parsed.args
        if isinstance(tool, ServerTool):
            await self._on_server(item, tool, args)
            return
        assert isinstance(tool, WorkerTool)
        if (s.plan_mode or s.read_only) and not tool.looks_only(args):
            why = ("refused in plan mode: nothing changes before the user approves your plan "
                   "(propose it with update_plan)") if s.plan_mode else (
                "refused: this session only reads (read_file, list_dir, read-only commands)")
            await self._finish(item, "rejected", why)
            return

        # the approval gate (an action already requested went through it)
        ask = self._gate(parsed) if item.approval_id is None and item.action_id is None \
            else None
        if ask is not None:
            approval_id = self._new_id("apr")
            await self._emit(
                ev.ApprovalRequested(approval_id=approval_id, item_id=item.id, kind=ask.kind,
                                     command=ask.command, patch=ask.patch,
                                     path=ask.path, reason=f"{item.name} wants to run"),
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
            action = tool.action(args, action_id, s.session_id, s.workdir)
            await self._emit(
                ev.ActionRequested(action_id=action_id, item_id=item.id, worker_id=s.worker_id,
                                   action=action),
                ev.SessionItemUpdated(item_id=item.id, status="running", action_id=action_id),
            )
        else:
            action = pending.action
        await self._run_action(self._item(item.id), action, tool)

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
            waiter = self.deps.approvals.approval_waiter(approval_id)
            await self._status("waiting_approval", "waiting for your approval")
            if self.session.approvals[approval_id].status == "pending":
                limit = self.deps.limits.approval_timeout_s
                if limit is None:
                    await waiter
                else:
                    # measured from the request, so a restart does not start the clock again
                    left = approval.requested_at + limit - time.time()
                    try:
                        await asyncio.wait_for(asyncio.shield(waiter), max(0.0, left))
                    except TimeoutError:
                        await self._emit(ev.ApprovalResolved(
                            approval_id=approval_id, decision="expired",
                            message=f"no decision within {_duration(limit)}"))
            approval = self.session.approvals[approval_id]
            await self._status("running")
        return approval.status, approval.message

    def _server_call(self, item: ev.ToolCall) -> ServerCall:
        s = self.session
        return ServerCall(self.store.state, s, item, self._new_id, time.time(),
                          roles=self.deps.roles,
                          can_delegate=self.deps.children is not None and s.parent_id is None)

    async def _on_server(self, item: ev.ToolCall, tool: ServerTool[Any], args: Any) -> None:
        """A call the server carries out: at once, or after a question or a sub-agent."""
        step = tool.start(args, self._server_call(item))
        if not isinstance(step, Finish):
            if step.events:
                await self.store.append(step.events)
            if isinstance(step.on, ForAnswer):
                question_id = step.on.question_id
                waiter = self.deps.approvals.approval_waiter(question_id)
                if self.session.questions[question_id].status == "pending":
                    await self._status("waiting_user", "a question for you")
                    if self.session.questions[question_id].status == "pending":
                        await waiter
                await self._status("running")
            else:
                assert self.deps.children is not None
                await self.deps.children.wait_done(step.on.session_id)
            step = tool.resume(args, self._server_call(item))
        await self.store.append([*step.events, (self.session_id, ev.SessionItemUpdated(
            item_id=item.id, status=step.status, result=step.result, **step.fields))])

    async def _run_action(self, item: ev.ToolCall, action: wk.ActionMessage,
                          tool: WorkerTool[Any]) -> None:
        s = self.session
        actions = self.deps.actions
        limits = self.deps.limits
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
            await actions.ensure_attached(s.worker_id, s.session_id, s.workdir,
                                          timeout=limits.action_timeout_s)
            outcome = await actions.run(s.worker_id, action, on_progress=on_progress,
                                        timeout=limits.action_timeout_s)
        except TimeoutError:
            await output.close()
            await actions.cancel(s.worker_id, action.action_id, s.session_id)
            await self._finish(item, "failed", f"error: the worker did not finish within "
                                               f"{limits.action_timeout_s:.0f} s",
                               ev.ActionFinished(action_id=action.action_id, outcome="lost"),
                               error="worker timeout")
            return
        except ActionFailed as err:  # refused or failed on the worker
            await output.close()
            await self._finish(item, "failed", f"error ({err.code}): {err.message}",
                               ev.ActionFinished(action_id=action.action_id, outcome="errored"),
                               error=err.message)
            return
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await output.close()
        status, result, fields = tool.settle(outcome, truncated)
        if self.session.status == "waiting_worker":
            await self._status("running")
        await self._finish(item, status, result,
                           ev.ActionFinished(action_id=action.action_id, outcome="result"),
                           **fields)

    async def _watch_worker(self, worker_id: str) -> None:
        presence = self.deps.actions.presence(worker_id)
        absence = self.deps.actions.absence(worker_id)
        while True:
            if not presence.is_set():
                await self._status("waiting_worker", "the worker is disconnected")
                await presence.wait()
                await self._status("running")
            await absence.wait()

    async def _cleanup_after_interrupt(self) -> None:
        """After an interrupt: stop the worker's actions, close open calls and approvals."""
        if self.session_id not in self.store.state.sessions:
            return  # deleted: nothing left to tidy
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


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


#: how long a turn waits for the worker to read the workdir's context
CONTEXT_TIMEOUT_S = 30.0


def _same_context(old: SessionContext | None, new: ev.SessionContextUpdated) -> bool:
    """Equal for the instructions: the time of day may move, the date may not."""
    if old is None:
        return False
    same_env: bool = msgspec.structs.replace(old.environment, date=old.environment.date[:10]) \
        == msgspec.structs.replace(new.environment, date=new.environment.date[:10])
    return same_env and (old.instructions, old.skills, old.warnings) == (
        new.instructions, new.skills, new.warnings)

