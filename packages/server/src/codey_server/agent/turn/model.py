"""Codey's turn: the model call — its provider and body, its streamed answer made into items,
its tool calls appended (the first one's action with them when nothing asks), and what a
failed call does (retry a cut stream, compact, fall back, or end in an error).

The body is built from the session's encoded history, which the driver keeps: the turn asks
for it (``BuildBody``, with everything but the conversation) and gets it back
(``BodyBuilt``), and tells the driver the size it sent (``NoteBody``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.events import ActionRequested
from codey_protocol.ratelimits import rate_limit_event
from codey_protocol.state import SessionInfo
from codey_server.agent.context import estimate_tokens
from codey_server.agent.errors import RETRYABLE_BY_FALLBACK, ModelError, backoff
from codey_server.agent.instructions import build_instructions, memory_of
from codey_server.agent.machine import (
    BodyBuilt,
    BuildBody,
    CallModel,
    ModelFailed,
    ModelParts,
    NoteBody,
    SetTimer,
    Stepper,
    evolve,
)
from codey_server.agent.route import ProviderInfo
from codey_server.agent.slash import allows
from codey_server.agent.stream import (
    Finished,
    ModelEvent,
    Queued,
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
    BadToolCall,
    ParsedCall,
    ToolSpec,
    WorkerTool,
    tool_named,
    tools_for,
)
from codey_server.agent.turn import calls, compact, hooks, loop, worker
from codey_server.agent.turn.state import After, Answer, Call, CodeyTurn, Route, Then
from codey_server.agent.wire import CallOptions
from codey_server.core.costs import call_cost, price_for
from codey_server.core.decide import known_providers

__all__ = ["IMAGE_AS_TEXT", "RETRY", "text_size"]

#: the timer of a retry after a cut stream
RETRY = "retry"
_BUSY_REASONS = ("model busy", "the answer was cut")

K = Stepper[CodeyTurn]


class _Lookup(Protocol):
    """What the machine holds: the providers as configured now, by name."""

    providers: Callable[[str], ProviderInfo | None]


def provider(k: K, name: str) -> ProviderInfo | None:
    """The provider ``name`` as configured now, or None."""
    return cast(_Lookup, k.machine).providers(name)


def turn_settings(s: SessionInfo) -> ev.TurnSettings | None:
    """What the slash command that started the session's turn set for it (None: nothing):
    the turn's prompt is the latest one not queued into a turn."""
    for item in reversed(s.items):
        if isinstance(item, ev.UserMessage) and not item.queued:
            return item.for_turn
    return None


def begin_call(k: K) -> bool:
    """Set up this turn's provider and model (the fallback once it took over); False
    (and the turn ends in an error) when the provider is not configured."""
    route = k.turn.route
    if route is None:
        s = k.session
        info = provider(k, s.provider)
        if info is None:
            # what to do about it, in the words of the screen the user will open; with
            # none at all, no name: the session's ("default", from before there was
            # one) is none the user made
            if s.provider and known_providers(k.state, k.ctx):
                why = (f"the provider {s.provider!r} is not configured on this server: add "
                       "a model provider in Settings → Models, then Retry (the session "
                       "takes the server's default), or pick another model in the "
                       "session header")
            else:
                why = ("no model provider is set up on this server: add a model provider "
                       "in Settings → Models, then Retry (the session takes it)")
            fail(k, ModelError(why, code="not_configured"))
            return False
        route = Route(info, s.model or info.default_model)
        settings = turn_settings(s)
        if settings is not None and settings.provider:
            # a slash command's model, for this turn only (gone since: the session's)
            chosen = provider(k, settings.provider)
            if chosen is not None:
                route = Route(chosen, settings.model or chosen.default_model)
        k.turn = evolve(k.turn, route=route,
                        only_tools=frozenset(settings.tools) if settings is not None
                        and settings.tools is not None else None)
    k.turn = evolve(k.turn, call=Call(route))
    return True


def model_step(k: K) -> None:
    if k.turn.context_stale:
        loop.load_context(k, Then.MODEL_STEP)
        return
    if not begin_call(k):
        return
    if k.session.compaction_requested:
        _set_call(k, compacted=True)
        compact.compact(k, "manual", After.PREPARE)
        return
    build(k, "check")


def _call(k: K) -> Call:
    call = k.turn.call
    assert call is not None
    return call


def _set_call(k: K, **fields: object) -> None:
    k.turn = evolve(k.turn, call=evolve(_call(k), **fields))


# the body ----------------------------------------------------------------------------------

def build(k: K, why: str) -> None:
    """Ask for the call's body (``BodyBuilt`` comes back): ``check`` it against the window
    first, or ``send`` it."""
    call = _call(k)
    s = k.session
    info = call.route.info
    gate = calls.gate(k)
    caps = gate.capabilities
    specs, tools = _tools(k, info, caps)
    # (a worker not known yet is not said to have no sandbox)
    instructions = build_instructions(s, memory_of(k.state, s), tools=specs,
                                      kind=info.config.kind,
                                      can_sandbox=caps is None or gate.can_sandbox)
    k.turn = evolve(k.turn, building="check" if why == "check" else "send")
    k.effect(BuildBody(s.session_id, info.wire, tuple(s.items), call.route.model, instructions,
                       tools, options(k, info)))


def body_built(k: K, i: BodyBuilt) -> None:
    why = k.turn.building
    if why is None:
        return
    k.turn = evolve(k.turn, building=None)
    if why == "check" and not _call(k).compacted and _near_window(k, i.body, i.last_size):
        _set_call(k, compacted=True)
        compact.compact(k, "threshold", After.THRESHOLD, body=i.body)
        return
    send(k, i.body)


def options(k: K, info: ProviderInfo) -> CallOptions:
    config = info.config
    return CallOptions(reasoning_summary=config.reasoning_summary, effort=k.session.effort,
                       max_output_tokens=config.max_output_tokens,
                       thinking_budget=config.thinking_budget)


def _tools(k: K, info: ProviderInfo,
           capabilities: wk.Capabilities | None) -> tuple[list[ToolSpec], bytes]:
    """The tools this call offers, and their encoding for the provider's wire (kept while
    neither the session's mode nor its worker's capabilities change)."""
    s = k.session
    edit_tools = info.config.edit_tools
    # Ollama's models are usually served with a small window: its tools are told in short
    brief = info.config.kind == "ollama"
    # a goal the model proves with goal_met (not one a command checks)
    goal = s.goal is not None and s.goal.status == "active" and s.goal.command is None
    only = k.turn.only_tools
    key = (info.wire.name, s.plan_mode, s.read_only, s.parent_id is None, edit_tools, brief,
           goal, only)
    cached = k.turn.tools
    if cached is not None and cached[0] == key and cached[1] is capabilities:
        return cached[2], cached[3]
    roles = {name: role.description for name, role in k.turn.config.roles.items()} \
        if s.parent_id is None else None
    specs = tools_for(capabilities, plan_mode=s.plan_mode, read_only=s.read_only,
                      roles=roles, edit_tools=edit_tools, goal=goal)
    if only is not None:  # a slash command's allowed-tools, for this turn
        specs = [t for t in specs if allows(only, t.name)]
    encoded = info.wire.encode_tools([t.brief() for t in specs] if brief else specs)
    k.turn = evolve(k.turn, tools=(key, capabilities, specs, encoded))
    return specs, encoded


def _near_window(k: K, body: bytes, last: int) -> bool:
    route = _call(k).route
    used = k.session.usage.context_tokens
    if used and last:
        projected = used + estimate_tokens(max(0, text_size(body) - last))
    else:
        projected = estimate_tokens(text_size(body))
    window = route.info.context_window(route.model)
    return bool(projected >= route.info.config.compact_at * window)


def send(k: K, body: bytes) -> None:
    _set_call(k, body=body)
    route = _call(k).route
    k.effect(NoteBody(k.session_id, route.info.wire.name, text_size(body)))
    k.turn = evolve(k.turn, answer=Answer())
    k.effect(CallModel(route.info.name, route.model, body))


def retry(k: K) -> None:
    """The timer after a cut stream fired: the same body again."""
    if k.turn.call is not None:
        send(k, k.turn.call.body)


# the answer --------------------------------------------------------------------------------

def parts(k: K, i: ModelParts) -> None:
    if k.turn.compaction is not None:
        for part in i.parts:
            compact.part(k, part)
        return
    a, call = k.turn.answer, k.turn.call
    if a is None or call is None:
        return
    for part in i.parts:
        a = _answer_part(k, a, call, part)
    k.turn = evolve(k.turn, answer=a)


def _answer_part(k: K, a: Answer, call: Call, part: ModelEvent) -> Answer:
    if isinstance(part, TextDelta):
        return evolve(a, text=k.stream(a.text, part.text))
    if isinstance(part, ReasoningDelta):
        return evolve(a, reasoning=k.stream(a.reasoning, part.text))
    if isinstance(part, ReasoningDone):
        reasoning = a.reasoning
        if reasoning.item_id is None and part.encrypted_content:
            reasoning = k.stream(reasoning, "")
        return evolve(a, reasoning=k.close(reasoning, partial=False,
                                            reasoning_id=part.reasoning_id,
                                            encrypted_content=part.encrypted_content))
    if isinstance(part, RefusalDelta):
        return evolve(a, refusal=k.stream(a.refusal, part.text))
    if isinstance(part, ToolCallRequested):
        return evolve(a, calls=(*a.calls, part))
    if isinstance(part, Usage):
        return evolve(a, tail=(*a.tail, usage(part, call, part.total_tokens
                                               or part.input_tokens + part.output_tokens,
                                               k.state.prices)))
    if isinstance(part, RateLimits):
        limits = rate_limit_event(call.route.info.name, part.headers)
        return a if limits is None else evolve(a, tail=(*a.tail, limits))
    if isinstance(part, Retrying):
        k.status("running", f"model busy ({part.reason}); retrying in {part.delay_s:.1f} s")
    elif isinstance(part, Queued):
        k.status("running", part.reason)
    elif isinstance(part, Finished):
        return evolve(a, finished=part)
    return a


def usage(part: Usage, call: Call, total: int,
          prices: dict[str, ev.ModelPrice] | None = None) -> ev.TokenUsageRecorded:
    """The call's usage, priced by the price table as it stands now (``prices``: the
    user's, over the defaults)."""
    route = call.route
    cost = call_cost(price_for(prices or {}, route.model), input_tokens=part.input_tokens,
                     output_tokens=part.output_tokens, cached_tokens=part.cached_tokens,
                     cache_write_tokens=part.cache_write_tokens)
    return ev.TokenUsageRecorded(
        input_tokens=part.input_tokens, output_tokens=part.output_tokens,
        reasoning_tokens=part.reasoning_tokens, total_tokens=total,
        cached_tokens=part.cached_tokens, cache_write_tokens=part.cache_write_tokens,
        context_window=route.info.context_window(route.model), model=route.model,
        provider=route.info.name, cost_micros=cost)


def done(k: K) -> None:
    if k.turn.compaction is not None:
        compact.summary_done(k)
        return
    a = k.turn.answer
    if a is None:
        return
    k.turn = evolve(k.turn, answer=None)
    for streamed in (a.text, a.refusal, a.reasoning):
        k.close(streamed, partial=False)
    events: list[ev.Event] = list(a.tail)
    finished = a.finished
    if finished is not None and finished.incomplete is not None:
        why = {"max_output_tokens": "it reached the output token limit",
               "content_filter": "the provider's content filter stopped it"}.get(
            finished.incomplete, f"the provider stopped it ({finished.detail})")
        events.append(ev.SessionItemAppended(item=ev.Notice(
            id=k.new_id("itm"), ts=k.now, code="incomplete",
            text=f"The answer is incomplete: {why}.")))
    elif not (a.text.said or a.refusal.said or a.calls):
        events.append(ev.SessionItemAppended(item=ev.Notice(
            id=k.new_id("itm"), ts=k.now, code="empty_answer",
            text="The model gave an empty answer, so the turn ended here. Send a "
                 "message to go on.")))
    response_id = k.new_id("rsp")
    items = [_call_item(k, requested, response_id) for requested in a.calls]
    events += [ev.SessionItemAppended(item=item) for item in items]
    first = calls.parse(k, items[0]) if items else None
    run: ActionRequested | None = None
    gate = calls.gate(k) if isinstance(first, ParsedCall) else None
    if gate is not None and isinstance(first, ParsedCall) \
            and isinstance(first.tool, WorkerTool) and not calls.waits_for_hello(k, items[0]) \
            and not hooks.wants_pre_tool(k, items[0], first) \
            and calls.route_call(k, first, gate) is None:
        # the first call goes to its worker in the same append when nothing asks: one
        # commit less per step (later calls still show "pending" until their turn, so
        # the view never says two run at once)
        item = items[0]
        item.status = "running"
        item.action_id = k.new_id("act")
        [run] = calls.requested(k, item.id, first, item.action_id, gate)
        events.append(run)
    k.emit(*events)
    if k.status_reason.startswith(_BUSY_REASONS):
        k.status("running")
    if run is not None and not any(getattr(tool_named(i.name), "parallel", False)
                                   for i in items):
        # it runs at once (its record is folded before the driver starts it)
        assert isinstance(first, ParsedCall) and isinstance(first.tool, WorkerTool)
        worker.run(k, items[0], first.tool, run.action)
    else:
        loop.go(k, Then.SETTLE)


def _call_item(k: K, call: ToolCallRequested, response_id: str) -> ev.ToolCall:
    item = ev.ToolCall(id=k.new_id("itm"), ts=k.now, call_id=call.call_id,
                       name=call.name, arguments=call.arguments, response_id=response_id)
    parsed = calls.parse(k, item)  # a bad call is reported when it is settled
    if not isinstance(parsed, BadToolCall):
        for name, value in parsed.tool.shows(parsed.args).items():
            setattr(item, name, value)
    return item


def failed(k: K, i: ModelFailed) -> None:
    if k.turn.compaction is not None:
        compact.summary_failed(k, i.error)
        return
    a, call = k.turn.answer, k.turn.call
    if a is None or call is None:
        return
    k.turn = evolve(k.turn, answer=None)
    for streamed in (a.text, a.refusal, a.reasoning):
        k.close(streamed, partial=True)
    k.emit(*a.tail)
    err = i.error
    if err.code == "context_length" and not call.compacted:
        _set_call(k, compacted=True)
        k.turn = evolve(k.turn, error=err)
        loop.go(k, Then.COMPACT_FOR_LENGTH)
    elif err.code == "stream_cut" and call.cuts < call.route.info.config.max_retries:
        _set_call(k, cuts=call.cuts + 1)
        delay = backoff(call.cuts + 1)
        k.status("running", f"the answer was cut off; retrying in {delay:.1f} s")
        k.effect(SetTimer(RETRY, delay))
    elif _fall_back(k, err):
        loop.go(k, Then.SEND_NEW_BODY)
    else:
        fail(k, err)


def _fall_back(k: K, err: ModelError) -> bool:
    """Go on with the provider's fallback, for the rest of the turn (once)."""
    call = _call(k)
    info = call.route.info
    fallback = info.config.fallback
    if fallback is None or k.turn.on_fallback or err.code not in RETRYABLE_BY_FALLBACK:
        return False
    other = provider(k, fallback.provider)
    if other is None:
        return False
    other_model = fallback.model or other.default_model
    k.notice("fallback", f"{info.name}/{call.route.model} failed: {err.message}. "
                         f"This turn goes on with {other.name}/{other_model}.")
    route = Route(other, other_model)
    k.turn = evolve(k.turn, on_fallback=True, route=route, call=evolve(call, route=route))
    return True


def fail(k: K, err: ModelError) -> None:
    k.error(err.message, "model", err.message[:200])


#: what an image in a request counts as, in bytes of text, for the context estimate (a model
#: reads an image as a fixed-ish number of tokens, not as its base64)
IMAGE_AS_TEXT = 4 * 1500
_DATA_URL = b'"data:image/'


def text_size(body: bytes) -> int:
    """The size of a request body for the context estimate: each image's data URL counted as
    :data:`IMAGE_AS_TEXT` bytes instead of its length (a 500 KiB screenshot is not 130k
    tokens)."""
    size = len(body)
    at = body.find(_DATA_URL)
    while at >= 0:
        end = body.find(b'"', at + 1)
        if end < 0:
            break
        size -= end + 1 - at - IMAGE_AS_TEXT
        at = body.find(_DATA_URL, end + 1)
    return size
