"""The cached encoded history equals the conversation encoded afresh, at every step of long
generated sessions; compaction never cuts a tool call from its result."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from codey_protocol import events as ev
from codey_protocol.state import SessionInfo
from codey_server.agent.compaction import choose_cut, summary_input
from codey_server.agent.conversation import (
    ToolCallEntry,
    ToolResultEntry,
    base_of,
    conversation_of,
)
from codey_server.agent.history import History
from codey_server.agent.wire import Wire, anthropic, chat, responses
from codey_server.agent.wire.common import REDACTED_TAG, THINKING_TAG

WIRES: dict[str, Wire] = {"responses": responses.WIRE, "chat": chat.WIRE,
                         "anthropic": anthropic.WIRE}


#: OpenAI's encrypted reasoning and Anthropic's thinking: each wire sends back only its own
_REASONING = ["enc", THINKING_TAG + "sig", REDACTED_TAG + "data"]


def _fresh(wire: Wire, items: list[ev.Item]) -> list[bytes]:
    session = SessionInfo(session_id="s", title="t", worker_id="w", workdir="/w", provider="p",
                          model="m", items=items)
    assembler = wire.assembler()
    for entry in conversation_of(session):
        assembler.add(entry)
    return assembler.finish()


class _Session:
    """A session's items as the turn loop makes them: appended, then finished later."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.items: list[ev.Item] = []
        self.open: list[ev.Item] = []  # not final yet
        self.n = 0

    def _id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if self.open and roll < 0.35:
            item = self.open.pop(rng.randrange(len(self.open)))
            if isinstance(item, ev.ToolCall):
                item.result = f"result of {item.call_id} " * rng.randint(1, 5)
            elif isinstance(item, ev.UserMessage):
                item.queued = False
            elif isinstance(item, (ev.AssistantMessage, ev.Reasoning)):
                item.streaming = False
                item.partial = rng.random() < 0.2
            return
        if roll < 0.45:
            queued = rng.random() < 0.3
            item: ev.Item = ev.UserMessage(id=self._id(), ts=0, text=f"prompt {self.n}",
                                           queued=queued)
        elif roll < 0.55:
            item = ev.Reasoning(id=self._id(), ts=0, text=f"thought {self.n}", streaming=True,
                                encrypted_content=rng.choice(_REASONING)
                                if rng.random() < 0.7 else None)
        elif roll < 0.65:
            item = ev.AssistantMessage(id=self._id(), ts=0, text=f"answer {self.n}",
                                       streaming=True)
        elif roll < 0.85:
            response = f"r{self.n // 3}"
            item = ev.ToolCall(id=self._id(), ts=0, call_id=f"c{self.n}", name="shell",
                               arguments="{}", response_id=response)
        elif roll < 0.9:
            item = ev.Notice(id=self._id(), ts=0, code="empty_answer", text="empty")
        elif roll < 0.95 and len(self.items) > 3:
            final = [i for i in self.items if not isinstance(i, ev.Summary)]
            until = self.rng.choice(final[: max(1, len(final) // 2)])
            item = ev.Summary(id=self._id(), ts=0, text=f"summary at {self.n}",
                              replaces_until=until.id)
            self.items.append(item)
            return
        else:
            item = ev.PlanItem(id=self._id(), ts=0, steps=[])
        self.items.append(item)
        if isinstance(item, (ev.ToolCall, ev.AssistantMessage, ev.Reasoning)) or (
                isinstance(item, ev.UserMessage) and item.queued):
            self.open.append(item)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("wire_name", WIRES)
def test_cached_history_equals_the_conversation_afresh(seed: int, wire_name: str) -> None:
    wire = WIRES[wire_name]
    session = _Session(random.Random(seed))
    history = History(wire)
    for _ in range(300):
        session.step()
        assert history.messages(session.items) == _fresh(wire, session.items)


def test_a_call_after_a_long_history_walks_only_the_new_items() -> None:
    items: list[ev.Item] = [ev.UserMessage(id="u", ts=0, text="go")]
    for n in range(2000):
        items.append(ev.ToolCall(id=f"t{n}", ts=0, call_id=f"c{n}", name="shell",
                                 arguments="{}", result="ok", response_id=f"r{n}"))
    history = History(responses.WIRE)
    history.messages(items)
    assert history._next >= 1999  # the prefix reaches the last answer
    items.append(ev.AssistantMessage(id="a", ts=0, text="done"))
    assert history.messages(items) == _fresh(responses.WIRE, items)


def _valid(entries: list[Any]) -> None:
    """Every result follows its call; no call is left without its result."""
    calls: set[str] = set()
    results: set[str] = set()
    for e in entries:
        if isinstance(e, ToolCallEntry):
            calls.add(e.call_id)
        elif isinstance(e, ToolResultEntry):
            assert e.call_id in calls, f"result {e.call_id} without its call"
            results.add(e.call_id)
    assert calls == results


@pytest.mark.parametrize("seed", range(40))
def test_compaction_cuts_only_at_clean_points(seed: int) -> None:
    rng = random.Random(seed)
    session = _Session(rng)
    for _ in range(rng.randint(20, 200)):
        session.step()
    for item in session.open:  # finish everything, as before a model call
        if isinstance(item, ev.ToolCall):
            item.result = "r"
        elif isinstance(item, ev.UserMessage):
            item.queued = False
        else:
            item.streaming = False  # type: ignore[union-attr]
    items = session.items
    previous, start = base_of(items)
    cut = choose_cut(items, start, keep_tokens=rng.choice([0, 20, 200]))
    if cut is None:
        return
    entries, _ = summary_input(items, start, cut, previous, budget_tokens=10_000)
    _valid(entries)
    summary = ev.Summary(id="sum", ts=0, text="s", replaces_until=items[cut].id)
    after = SessionInfo(session_id="s", title="t", worker_id="w", workdir="/w", provider="p",
                        model="m", items=[*items, summary])
    conversation = conversation_of(after)
    _valid(conversation)
    chat_messages = _fresh(chat.WIRE, after.items)
    open_calls: set[str] = set()
    for raw in chat_messages:
        message = json.loads(raw)
        if message["role"] == "assistant":
            open_calls = {c["id"] for c in message.get("tool_calls") or []}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in open_calls


def test_summary_input_drops_the_oldest_without_orphans() -> None:
    items: list[ev.Item] = [ev.UserMessage(id="u", ts=0, text="x" * 4000)]
    for n in range(20):  # ten answers of two parallel calls
        items.append(ev.ToolCall(id=f"t{n}", ts=0, call_id=f"c{n}", name="shell",
                                 arguments="{}", result="y" * 400, response_id=f"r{n // 2}"))
    entries, dropped = summary_input(items, 0, len(items) - 1, None, budget_tokens=1500)
    assert dropped > 0
    assert "left out" in entries[0].text  # type: ignore[union-attr]
    kept = entries[1:-1]
    assert 4 <= len(kept) < 40 and isinstance(kept[0], ToolCallEntry)
    _valid(kept)
