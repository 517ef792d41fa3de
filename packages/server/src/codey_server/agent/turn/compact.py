"""Codey's turn: compaction — the older items summarized by the model into one summary item,
asked for by the user, or done when the input nears (or is over) the model's window."""

from __future__ import annotations

from codey_protocol import events as ev
from codey_server.agent.compaction import (
    COMPACT_INSTRUCTIONS,
    INPUT_SHARE,
    KEEP_SHARE,
    choose_cut,
    summary_input,
)
from codey_server.agent.context import estimate_tokens
from codey_server.agent.conversation import base_of
from codey_server.agent.errors import ModelError
from codey_server.agent.machine import CallModel, NoteBody, Stepper, evolve
from codey_server.agent.stream import ModelEvent, Retrying, TextDelta, Usage
from codey_server.agent.turn import hooks, loop, model
from codey_server.agent.turn.state import (
    After,
    Call,
    CodeyTurn,
    Compacted,
    Compaction,
    Reason,
    Then,
)

__all__ = ["compact", "compacted"]

K = Stepper[CodeyTurn]


def _call(k: K) -> Call:
    call = k.turn.call
    assert call is not None
    return call


def _compaction(k: K) -> Compaction:
    c = k.turn.compaction
    assert c is not None
    return c


def compact(k: K, reason: Reason, after: After, *, error: ModelError | None = None,
            body: bytes = b"") -> None:
    """Summarize the older items into one summary item, then go on as ``after`` says (not
    compacted when there was nothing to compact or the summary came back empty)."""
    route = _call(k).route
    s = k.session
    previous, start = base_of(s.items)
    window = route.info.context_window(route.model)
    keep = 0 if reason == "manual" else int(window * KEEP_SHARE)
    cut = choose_cut(s.items, start, keep)
    restore = (k.current_status, k.status_reason)
    if cut is None:
        k.notice("compaction_skipped", "There is nothing to compact yet: the "
                                       "conversation has no finished part.")
        _over(k, Compacted(after, False, restore, error, body))
        return
    k.turn = evolve(k.turn, compaction=Compaction(
        reason, after, restore, start, cut, previous,
        int(window * INPUT_SHARE) - estimate_tokens(len(COMPACT_INSTRUCTIONS)),
        s.usage.context_tokens, error=error, body=body))
    k.status("running", "compacting the conversation")
    trigger = "manual" if reason == "manual" else "auto"
    hooks.fire(k, "PreCompact", {"trigger": trigger, "custom_instructions": ""}, trigger)
    _summarize(k)


def _summarize(k: K) -> None:
    c, route = _compaction(k), _call(k).route
    s = k.session
    entries, _ = summary_input(s.items, c.start, c.cut, c.previous, c.budget)
    wire = route.info.wire
    assembler = wire.assembler()
    for entry in entries:
        assembler.add(entry)
    body = wire.body(model=route.model, instructions=COMPACT_INSTRUCTIONS,
                     messages=assembler.finish(), tools=b"[]", session_id=s.session_id,
                     options=model.options(k, route.info))
    k.turn = evolve(k.turn, compaction=evolve(c, parts=(), tail=()))
    k.effect(CallModel(route.info.name, route.model, body))


def part(k: K, part: ModelEvent) -> None:
    c = _compaction(k)
    if isinstance(part, TextDelta):
        k.turn = evolve(k.turn, compaction=evolve(c, parts=(*c.parts, part.text)))
    elif isinstance(part, Usage):
        tail = (*c.tail, model.usage(part, _call(k), part.total_tokens, k.state.prices))
        k.turn = evolve(k.turn, compaction=evolve(c, tail=tail))
    elif isinstance(part, Retrying):
        k.status("running", f"compacting: model busy ({part.reason}); retrying in "
                            f"{part.delay_s:.1f} s")


def summary_done(k: K) -> None:
    c = _compaction(k)
    k.turn = evolve(k.turn, compaction=None)
    route = _call(k).route
    k.emit(*c.tail)
    text = "".join(c.parts).strip()
    if not text:
        k.notice("compaction_failed", "Compacting the conversation failed: the model "
                                      "gave an empty summary.")
        k.status(*c.restore)
        _over(k, Compacted(c.after, False, c.restore, c.error, c.body))
        return
    s = k.session
    k.emit(ev.SessionItemAppended(item=ev.Summary(
        id=k.new_id("itm"), ts=k.now, text=text, replaces_until=s.items[c.cut].id,
        items_replaced=c.cut - c.start + 1, tokens_before=c.tokens_before,
        reason=c.reason)))
    k.effect(NoteBody(k.session_id, route.info.wire.name, 0))
    k.status(*c.restore)
    _over(k, Compacted(c.after, True, c.restore, c.error, c.body))


def summary_failed(k: K, err: ModelError) -> None:
    c = _compaction(k)
    if err.code == "context_length" and c.attempt < 2:
        k.turn = evolve(k.turn, compaction=evolve(c, attempt=c.attempt + 1,
                                                    budget=c.budget // 2))
        _summarize(k)
        return
    k.turn = evolve(k.turn, compaction=None)
    model.fail(k, ModelError(f"compacting the conversation failed: {err.message}",
                             err.status, err.code))


def _over(k: K, done: Compacted) -> None:
    k.turn = evolve(k.turn, compacted=done)
    loop.go(k, Then.COMPACTED)


def compacted(k: K) -> None:
    """Go on after a compaction, as it was asked to."""
    done = k.turn.compacted
    assert done is not None
    k.turn = evolve(k.turn, compacted=None)
    if done.after is After.ALONE:
        k.status(*done.restore)
        k.end()
    elif done.after is After.PREPARE:
        model.build(k, "check")
    elif done.ok:
        model.build(k, "send")
    elif done.after is After.SEND_OR_FAIL:
        assert done.error is not None
        model.fail(k, done.error)
    else:  # THRESHOLD, not compacted: the body built before
        model.send(k, done.body)
