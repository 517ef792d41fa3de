"""Compaction: what to summarize, and the summarizing call's input. Pure; the turn
(:class:`~codey_server.agent.turn.CodeyTurn`, carried out by :mod:`~codey_server.agent.driver`)
makes the call and appends the :class:`~codey_protocol.events.Summary` item.

When a call's context nears the model's window (``compact_at``, 85% by default), when the
provider answers ``context_length_exceeded``, or when the user asks, the older items are
summarized by the model into one summary item. The conversation sent from then on is the
summary, then the items after the cut. The cut is always at a clean point (:func:`choose_cut`):
never between a tool call and its result, nor inside one answer's group of parallel calls,
nor before an item that is still changing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple

from codey_protocol import events as ev
from codey_server.agent.context import estimate_tokens
from codey_server.agent.conversation import (
    Entry,
    SummaryEntry,
    ToolCallEntry,
    ToolResultEntry,
    UserText,
    Walker,
    is_final,
)

__all__ = [
    "COMPACT_INSTRUCTIONS",
    "COMPACT_PROMPT",
    "KEEP_SHARE",
    "choose_cut",
    "item_tokens",
    "summary_input",
]

#: share of the window kept verbatim after the cut (the most recent items)
KEEP_SHARE = 0.25
#: share of the window the summarizing call's input may fill
INPUT_SHARE = 0.8

COMPACT_INSTRUCTIONS = """You compact the conversation of a coding agent so that it can go on
working without the earlier messages. Write a summary with: the user's requests and
constraints (quote short ones exactly); what was done and found (files, commands, results,
errors); decisions and their reasons; the current state; and what remains to do next. Be
complete and concise, in bullet points. Do not call tools; answer with the summary only."""

COMPACT_PROMPT = "Summarize the conversation above as instructed, to continue the task from it."


def item_tokens(item: ev.Item) -> int:
    """A rough size of what ``item`` adds to the conversation."""
    if isinstance(item, ev.ToolCall):
        return estimate_tokens(len(item.arguments) + len(item.result or "") + 40)
    if isinstance(item, (ev.UserMessage, ev.AssistantMessage)):
        return estimate_tokens(len(item.text) + 20)
    if isinstance(item, ev.Reasoning):
        return estimate_tokens(len(item.text) + len(item.encrypted_content or ""))
    return 0


def choose_cut(items: Sequence[ev.Item], start: int, keep_tokens: int) -> int | None:
    """Index of the last item the summary replaces, or None when nothing can be replaced.

    Items before ``start`` are already summarized. The cut keeps the most recent items that
    fit in ``keep_tokens`` and replaces everything before them, at a clean point; where no
    clean point leaves that little, the latest clean point is taken.
    """
    n = len(items)
    suffix = [0] * (n + 1)
    for i in range(n - 1, start - 1, -1):
        suffix[i] = suffix[i + 1] + item_tokens(items[i])
    walker = Walker()
    valid: list[int] = []  # i: replacing items[start:i] is clean
    spoken = False  # something the model saw is in items[start:i]
    for i in range(start, n + 1):
        if i < n:
            walker.begin(items[i])
        if i > start and spoken and (i == n or walker.clean):
            valid.append(i)
        if i == n:
            break
        item = items[i]
        if not is_final(item):
            break
        walker.own(item)
        if isinstance(item, (ev.UserMessage, ev.AssistantMessage, ev.ToolCall)):
            spoken = True
    if not valid:
        return None
    for i in valid:
        if suffix[i] <= keep_tokens:
            return i - 1
    return valid[-1] - 1


def summary_input(items: Sequence[ev.Item], start: int, cut: int,
                  previous: ev.Summary | None, budget_tokens: int) -> tuple[list[Entry], int]:
    """The entries the summarizing call reads, and how many leading entries were dropped to
    fit ``budget_tokens`` (the oldest go first; a result never loses its call)."""
    body: list[Entry] = []
    walker = Walker()
    for i in range(start, cut + 1):
        body.extend(walker.begin(items[i]))
        body.extend(walker.own(items[i]))
    body.extend(walker.end())
    units = _units(body)  # an answer's calls with their results are dropped together
    sizes = [sum(_entry_tokens(e) for e in unit) for unit in units]
    lead: list[Entry] = [SummaryEntry(previous.text)] if previous is not None else []
    total = sum(sizes) + sum(_entry_tokens(e) for e in lead)
    gone = 0
    while total > budget_tokens and gone < len(units):
        total -= sizes[gone]
        gone += 1
    dropped = sum(len(unit) for unit in units[:gone])
    kept = body[dropped:]
    if dropped:
        lead.append(UserText(f"[{dropped} earlier messages were left out to fit the model's "
                             "context window]"))
    return [*lead, *kept, UserText(COMPACT_PROMPT)], dropped


def _units(entries: list[Entry]) -> list[list[Entry]]:
    """Entries in the pieces that can be left out: a run of calls with their results, or one
    other entry."""
    units: list[list[Entry]] = []
    i, n = 0, len(entries)
    while i < n:
        j = i + 1
        if isinstance(entries[i], ToolCallEntry):
            while j < n and isinstance(entries[j], ToolCallEntry):
                j += 1
            while j < n and isinstance(entries[j], ToolResultEntry):
                j += 1
        units.append(entries[i:j])
        i = j
    return units


def _entry_tokens(entry: Entry) -> int:
    return estimate_tokens(sum(len(v) for v in astuple(entry) if isinstance(v, str)) + 20)
