"""Rewinding a conversation without I/O (``core/rewind.py``): the fold moves a turn and what
follows to a rewound branch, the model's input (and its cache) is the live branch only,
compaction summaries of rewound turns go with them, and the refusals."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.agent.conversation import (
    AssistantText,
    SummaryEntry,
    UserText,
    conversation_of,
    model_call_needed,
    needs_turn,
)
from codey_server.agent.history import History
from codey_server.agent.wire import chat, responses
from codey_server.core import goals, rewind
from codey_server.core.fold import copy_state
from codey_server.core.rules import CommandRejected, Context
from codey_server.features import apply, decide

W, S = "wrk_1", "ses_main"


def context() -> Context:
    counter = itertools.count(1)
    return Context(new_id=lambda prefix: f"{prefix}_{next(counter)}", now=lambda: 100.0,
                   default_provider="openai", default_models={"openai": "gpt-x"})


class Run:
    def __init__(self) -> None:
        self.state = State()
        self.ctx = context()
        self.envelopes: list[ev.Envelope] = []
        self.add(None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="linux",
                                       python_version="3.11", worker_version="0.1",
                                       roots=["/src"], public_key="pk"))
        self.add(S, ev.SessionCreated(title="t", worker_id=W, workdir="/src",
                                      provider="openai", model="gpt-x"))

    def add(self, sid: str | None, e: ev.Event) -> None:
        env = ev.Envelope(seq=self.state.seq + 1, ts=float(self.state.seq), session_id=sid,
                          event=e)
        self.envelopes.append(env)
        apply(self.state, env)

    def turn(self, n: int, answer: str | None = None) -> None:
        self.add(S, ev.SessionStatusChanged(status="running"))
        self.add(S, ev.SessionItemAppended(item=ev.UserMessage(id=f"u{n}", ts=0.0, text=f"p{n}")))
        self.add(S, ev.SessionItemAppended(item=ev.AssistantMessage(
            id=f"a{n}", ts=0.0, text=answer or f"answer {n}")))
        self.add(S, ev.SessionStatusChanged(status="idle"))

    def rewind(self, turn: str) -> list[ev.Event]:
        decided = decide(self.state, cl.RewindConversation(session_id=S, turn=turn), self.ctx)
        for sid, e in decided:
            self.add(sid, e)
        return [e for _, e in decided]

    @property
    def session(self) -> Any:
        return self.state.sessions[S]


def _texts(run: Run) -> list[str]:
    out = []
    for entry in conversation_of(run.session):
        if isinstance(entry, (UserText, AssistantText, SummaryEntry)):
            out.append(entry.text)
    return out


def test_rewind_moves_the_turn_and_what_follows_to_a_branch() -> None:
    run = Run()
    for n in (1, 2, 3):
        run.turn(n)
    assert run.rewind("u2") == [ev.ConversationRewound(turn="u2")]
    s = run.session
    assert [i.id for i in s.items] == ["u1", "a1"]
    assert len(s.rewound) == 1
    branch = s.rewound[0]
    assert (branch.turn, branch.after, branch.mode) == ("u2", "a1", "conversation")
    assert [i.id for i in branch.items] == ["u2", "a2", "u3", "a3"]
    assert _texts(run) == ["p1", "answer 1"]
    assert not model_call_needed(s)  # nothing to answer: the turn before was answered


def test_the_next_prompt_follows_the_live_branch_and_a_second_rewind_makes_a_second_branch(
) -> None:
    run = Run()
    for n in (1, 2, 3):
        run.turn(n)
    run.rewind("u2")
    run.turn(4)
    assert _texts(run) == ["p1", "answer 1", "p4", "answer 4"]
    run.rewind("u4")
    assert [i.id for i in run.session.items] == ["u1", "a1"]
    assert [b.turn for b in run.session.rewound] == ["u2", "u4"]
    run.rewind("u1")  # the very first turn: nothing is left before it
    assert run.session.items == []
    assert run.session.rewound[-1].after == ""


def test_a_rewind_to_the_first_turn_sends_nothing_of_the_old_conversation() -> None:
    run = Run()
    run.turn(1)
    run.rewind("u1")
    run.turn(2)
    assert _texts(run) == ["p2", "answer 2"]


def test_summaries_of_rewound_turns_go_with_them() -> None:
    """A summary made after turn 3 replaces items up to turn 3; rewinding to turn 2 must not
    keep it (it speaks of turns 2 and 3); rewinding to turn 4 keeps it."""
    run = Run()
    for n in (1, 2, 3):
        run.turn(n)
    summary = ev.Summary(id="sum", ts=0, text="turns 1-3 in short", replaces_until="a3")
    run.add(S, ev.SessionItemAppended(item=summary))
    run.turn(4)
    keep = copy_state(run.state)
    run.rewind("u4")
    assert _texts(run) == ["turns 1-3 in short"]
    run.state = keep
    run.rewind("u2")
    assert _texts(run) == ["p1", "answer 1"]
    assert all(not isinstance(i, ev.Summary) for i in run.session.items)
    run.turn(5)
    assert _texts(run) == ["p1", "answer 1", "p5", "answer 5"]


@pytest.mark.parametrize("wire", [responses.WIRE, chat.WIRE], ids=["responses", "chat"])
def test_the_cached_history_starts_again_after_a_rewind(wire: Any) -> None:
    """The cache keeps an encoded prefix; a rewind takes items back and new ones come after:
    the cache must see it (same length or longer than before, other items)."""
    run = Run()
    history = History(wire)
    for n in (1, 2, 3):
        run.turn(n)
        history.messages(run.session.items)
    run.rewind("u3")
    run.turn(4, answer="x" * 10)  # as many items as before: only the ids tell
    got = history.messages(run.session.items)
    fresh = History(wire).messages(run.session.items)
    assert got == fresh
    assert b"p3" not in b"".join(got) and b"p4" in b"".join(got)


def test_refusals() -> None:
    run = Run()
    for n in (1, 2, 3):
        run.turn(n)

    def refused(turn: str) -> CommandRejected:
        with pytest.raises(CommandRejected) as info:
            decide(run.state, cl.RewindConversation(session_id=S, turn=turn), run.ctx)
        return info.value

    assert refused("a2").code == "not_found"  # an answer, not a prompt
    assert refused("garbage").code == "not_found"
    with pytest.raises(CommandRejected) as other:
        decide(run.state, cl.RewindConversation(session_id="ses_other", turn="u1"), run.ctx)
    assert other.value.code == "not_found"
    run.rewind("u2")
    abandoned = refused("u3")
    assert abandoned.code == "conflict" and "took back" in abandoned.message
    run.add(S, ev.SessionStatusChanged(status="running"))
    running = refused("u1")
    assert running.code == "conflict" and "a turn is running" in running.message
    run.add(S, ev.SessionStatusChanged(status="waiting_approval"))
    assert refused("u1").code == "conflict"
    run.add(S, ev.SessionStatusChanged(status="interrupted"))
    assert rewind.refusal(run.state, S, "u1", "conversation") is None


def test_an_acp_session_rewinds_its_files_only() -> None:
    run = Run()
    run.add("ses_acp", ev.SessionCreated(title="t", worker_id=W, workdir="/src",
                                         provider="openai", model="gpt-x", agent="claude"))
    run.add("ses_acp", ev.SessionItemAppended(item=ev.UserMessage(id="u1", ts=0, text="p")))
    refused = rewind.refusal(run.state, "ses_acp", "u1", "conversation")
    assert refused is not None and "external agent" in refused.message
    assert rewind.refusal(run.state, "ses_acp", "u1", "files") is None


def test_the_fold_ignores_a_rewind_it_cannot_place() -> None:
    run = Run()
    run.turn(1)
    before = msgspec.json.encode(run.session)
    run.add(S, ev.ConversationRewound(turn="a1"))
    run.add(S, ev.ConversationRewound(turn="nope"))
    assert msgspec.json.encode(run.session) == before  # not even its time moved


def test_a_goal_does_not_check_the_rewound_turns() -> None:
    run = Run()
    run.add(S, ev.GoalSet(goal_id="g", condition="tests pass", command=["true"]))
    run.turn(1)
    run.turn(2)
    run.rewind("u2")
    assert goals.due(run.session) is None


def test_a_replay_of_the_log_gives_the_same_state() -> None:
    run = Run()
    for n in (1, 2, 3):
        run.turn(n)
    run.rewind("u2")
    run.turn(4)
    replayed = State()
    for env in run.envelopes:
        apply(replayed, msgspec.json.decode(msgspec.json.encode(env), type=ev.Envelope))
    assert msgspec.json.encode(replayed) == msgspec.json.encode(run.state)


def test_no_turn_runs_by_itself_at_the_point_a_rewind_chose() -> None:
    """Rewound to just after a turn that failed (its prompt unanswered): no turn runs for it
    (the supervisor starts one for an idle session that needs one, on a restart say) until
    the user speaks."""
    run = Run()
    run.add(S, ev.SessionStatusChanged(status="running"))
    run.add(S, ev.SessionItemAppended(item=ev.UserMessage(id="u1", ts=0.0, text="p1")))
    run.add(S, ev.SessionItemAppended(item=ev.ErrorItem(id="e1", ts=0.0, message="boom")))
    run.add(S, ev.SessionStatusChanged(status="error"))
    run.turn(2)
    assert not needs_turn(run.session)
    run.rewind("u2")
    assert [i.id for i in run.session.items] == ["u1", "e1"]
    assert run.session.status == "idle" and not needs_turn(run.session)
    run.add(S, ev.SessionItemAppended(item=ev.UserMessage(id="u3", ts=0.0, text="p3")))
    assert needs_turn(run.session)
