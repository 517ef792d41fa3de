"""Triggers, pure: saving one, and what one delivery starts (no clock, no I/O).

A trigger is a schedule started by an event: a delivery's payload fills its prompt template
(:mod:`.template`), and it starts a session as a schedule's run does (``session_created``, its
budget, the prompt), in one append with ``trigger_delivered``, or a board task. The
signature is checked before (:mod:`.webhook`, with the secret the server keeps); what it found
comes in as :attr:`Delivery.refused`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.decide import default_model, default_provider
from codey_server.core.rules import CommandRejected, Context, Decided
from codey_server.triggers import template
from codey_server.triggers.webhook import event_label, passes

__all__ = ["EVENT_FILTER", "MAX_PER_MINUTE", "ROOTS", "Delivery", "Save", "check_fields",
           "deliver", "save"]

#: the names a prompt template may read: the payload, the event's name, the payload's action
ROOTS = frozenset({"payload", "event", "action"})
#: an ``events`` entry: a GitHub event name, optionally with an action ("(?!\\n)": Python's $
#: also matches before a last newline)
EVENT_FILTER = "^[a-z_]{1,60}(?:\\.[a-z_]{1,60})?(?!\\n)$"
MAX_PER_MINUTE = 600


@dataclass(frozen=True)
class Save:
    """Create (``new``) or change a trigger; a new one's id and URL part (``hook_id``) are
    drawn by the caller, which keeps its secret under that id before the trigger exists."""

    fields: ev.TriggerFields
    trigger_id: str
    has_secret: bool
    new: bool = False
    hook_id: str = ""


@dataclass(frozen=True)
class Delivery:
    """One delivery to ``trigger_id``: the ``X-GitHub-Event`` name, the decoded payload and
    its sha256 in the blob store; ``refused`` says why it was refused before (a signature),
    ``replay_of`` the delivery it runs again."""

    trigger_id: str
    event: str
    payload: Any
    payload_hash: str = ""
    refused: str = ""
    replay_of: str = ""


def check_fields(f: ev.TriggerFields) -> str | None:
    """What is wrong with a trigger's fields, in words; None when nothing is."""
    if not f.name.strip():
        return "the name is empty"
    if not f.workdir.strip():
        return "workdir must not be empty"
    if not f.prompt.strip():
        return "the prompt is empty"
    wrong = template.problems(f.prompt, ROOTS)
    if wrong:
        return "the prompt's template: " + "; ".join(wrong[:3])
    for name in f.events:
        if not re.match(EVENT_FILTER, name):
            return f"{name!r} is not an event filter (e.g. issue_comment, pull_request.opened)"
    if not 1 <= f.per_minute <= MAX_PER_MINUTE:
        return f"per_minute must be 1 to {MAX_PER_MINUTE}"
    if f.budget_tokens is not None and f.budget_tokens < 1:
        return "budget_tokens must be at least 1"
    if f.budget_usd is not None and not 0 < f.budget_usd <= 1_000_000:
        return "budget_usd must be above 0 (and at most a million)"
    return None


def save(state: State, s: Save, ctx: Context) -> Decided:
    """``trigger_set`` for a new or changed trigger (its URL stays when it changes)."""
    f = s.fields
    old = state.triggers.get(s.trigger_id)
    if s.new and old is not None:
        raise CommandRejected("conflict", f"trigger {s.trigger_id!r} exists")
    if not s.new and old is None:
        raise CommandRejected("not_found", f"no trigger {s.trigger_id!r}")
    problem = check_fields(f)
    if problem is not None:
        raise CommandRejected("bad_request", problem)
    worker = state.workers.get(f.worker_id)
    if worker is None or worker.revoked:
        raise CommandRejected("not_found", f"no worker {f.worker_id!r}")
    spec = ev.TriggerSpec(
        **{**{k: getattr(f, k) for k in f.__struct_fields__},
           "name": f.name.strip()[:80], "workdir": f.workdir.strip(),
           "events": sorted(set(f.events))},
        trigger_id=s.trigger_id,
        hook_id=old.spec.hook_id if old is not None else s.hook_id,
        has_secret=s.has_secret)
    return [(None, ev.TriggerSet(spec=spec))]


def remove(state: State, trigger_id: str, ctx: Context) -> Decided:
    if trigger_id not in state.triggers:
        raise CommandRejected("not_found", f"no trigger {trigger_id!r}")
    return [(None, ev.TriggerRemoved(trigger_id=trigger_id))]


def _task_order(state: State) -> float:
    return max((t.order for t in state.tasks.values() if t.status == "todo"), default=0.0) + 1


def deliver(state: State, d: Delivery, ctx: Context) -> Decided:
    """``trigger_delivered`` with what the delivery came to, and the start of what it
    started, in one list to append as one group."""
    info = state.triggers.get(d.trigger_id)
    if info is None:
        raise CommandRejected("not_found", "no such trigger")
    spec = info.spec
    action = d.payload.get("action") if isinstance(d.payload, dict) else None
    label = event_label(d.event, action)

    def said(outcome: ev.TriggerOutcome, reason: str = "", **more: Any) -> ev.TriggerDelivered:
        return ev.TriggerDelivered(trigger_id=d.trigger_id, delivery_id=ctx.new_id("dlv"),
                                   outcome=outcome, event=label, reason=reason,
                                   payload=d.payload_hash, replay_of=d.replay_of, **more)

    if d.refused:
        return [(None, said("refused", d.refused))]
    if not spec.enabled:
        return [(None, said("refused", "the trigger is turned off"))]
    if d.event == "ping":  # GitHub's first delivery to a new webhook: it works, nothing to do
        return [(None, said("filtered", "GitHub's ping: the webhook reaches this server"))]
    if not passes(spec.events, d.event, action):
        return [(None, said("filtered", f"{label or 'an event without a name'} is not one of "
                                        f"{', '.join(spec.events)}"))]
    worker = state.workers.get(spec.worker_id)
    if worker is None or worker.revoked:
        return [(None, said("refused", f"worker {spec.worker_id!r} is gone (revoked or "
                                       "unknown)"))]
    rendered = template.render(spec.prompt, {"payload": d.payload, "event": d.event,
                                             "action": action if action is not None else ""})
    missing = list(rendered.missing)
    if not rendered.text.strip():
        return [(None, said("refused", "the prompt rendered empty", missing=missing))]
    title = f"{spec.name} · {label}" if label else spec.name
    if spec.target == "task":
        task_id = ctx.new_id("tsk")
        return [(None, said("started", task_id=task_id, missing=missing)),
                (None, ev.TaskCreated(task_id=task_id, title=title[:200],
                                      description=rendered.text, order=_task_order(state)))]
    session_id = ctx.new_id("ses")
    provider = default_provider(state, ctx)
    out: list[tuple[str | None, ev.Event]] = [
        (None, said("started", session_id=session_id, missing=missing)),
        (session_id, ev.SessionCreated(
            title=title[:200], worker_id=spec.worker_id, workdir=spec.workdir,
            provider=provider, model=default_model(state, ctx, provider), policy=spec.policy,
            origin=f"trigger:{spec.trigger_id}"))]
    if spec.budget_tokens is not None or spec.budget_usd is not None:
        out.append((session_id, ev.BudgetSet(
            scope="session", max_tokens=spec.budget_tokens,
            max_micros=None if spec.budget_usd is None else round(spec.budget_usd * 1e6))))
    out.append((session_id, ev.SessionItemAppended(
        item=ev.UserMessage(id=ctx.new_id("itm"), ts=ctx.now(), text=rendered.text,
                            origin=f"trigger:{spec.trigger_id}"))))
    return out
