"""Rewinding a session's conversation, without I/O (issue 38 §2).

A *turn* is named by the item id of the prompt (``UserMessage``) that opened it. Rewinding the
conversation to turn T takes it back to just before T's prompt: T's prompt and every item after
it leave ``SessionInfo.items`` (the live branch, the only one the model's input is built from)
for a :class:`~codey_protocol.state.RewoundBranch`, kept to be shown folded where it stood.

Why move the items out instead of flagging them: every reader of ``items`` (the model's input
and its cache, "does the model owe an answer", interrupts, goals) then stays right as it is.
A compaction summary made after T stands after T's prompt, so it leaves with the branch: no
summary of rewound turns is ever sent again.

:func:`refusal` is the one check (the REST route asks it before restoring any file, so nothing
changes when the conversation step would be refused); :func:`rewind_conversation` decides the
``rewind_conversation`` command; :data:`FOLD` folds ``conversation_rewound`` (``web/store.js``
folds it the same way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import WORKING_STATUSES, RewoundBranch, SessionInfo, State
from codey_server.core.rules import CommandRejected, Context, Decided, Decider, FoldHandler

__all__ = ["COMMANDS", "FOLD", "Refusal", "refusal", "rewind_conversation", "turn_index"]


class Refusal(CommandRejected):
    """A rewind that cannot be (``code``: ``not_found`` or ``conflict``)."""


def turn_index(s: SessionInfo, turn: str) -> int | None:
    """The index in the live items of the prompt ``turn`` (None: no such live prompt)."""
    for i in range(len(s.items) - 1, -1, -1):
        item = s.items[i]
        if item.id == turn:
            if isinstance(item, ev.UserMessage) and not item.queued:
                return i
            return None
    return None


def refusal(state: State, session_id: str, turn: str, mode: ev.RewindMode) -> Refusal | None:
    """Why rewinding ``session_id`` to ``turn`` cannot be done now (None: it can)."""
    s = state.sessions.get(session_id)
    if s is None:
        return Refusal("not_found", f"no session {session_id!r}")
    if s.status == "closed":
        return Refusal("conflict", "the session is closed")
    if s.status in WORKING_STATUSES:
        return Refusal("conflict", "a turn is running: interrupt it or wait for it to end, "
                                   "then rewind")
    if any(isinstance(i, ev.UserMessage) and i.queued for i in s.items):
        return Refusal("conflict", "a prompt is queued for the next turn: wait for it")
    if s.compaction_requested:
        return Refusal("conflict", "a compaction is under way: wait for it")
    if any(b.items and any(i.id == turn for i in b.items) for b in s.rewound):
        return Refusal("conflict", "that turn is on a branch a rewind already took back; "
                                   "rewind to a turn of the live conversation")
    if turn_index(s, turn) is None:
        return Refusal("not_found", f"no prompt {turn!r} in this session's conversation")
    if mode != "files" and s.agent:
        return Refusal("conflict", "an external agent keeps its own conversation: only its "
                                   "files can be rewound")
    return None


def rewind_conversation(state: State, c: cl.RewindConversation, ctx: Context,
                        mode: ev.RewindMode = "conversation") -> Decided:
    """``rewind_conversation``: the ``conversation_rewound`` event, or a refusal."""
    refused = refusal(state, c.session_id, c.turn, mode)
    if refused is not None:
        raise refused
    return [(c.session_id, ev.ConversationRewound(turn=c.turn, mode=mode))]


def _rewound(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ConversationRewound)
    s = state.sessions.get(env.session_id) if env.session_id is not None else None
    if s is None:
        return
    i = turn_index(s, e.turn)
    if i is None:
        return  # not a live prompt (the decision refuses it; a fold ignores what it cannot)
    s.updated_at = env.ts
    s.rewound.append(RewoundBranch(turn=e.turn, after=s.items[i - 1].id if i else "",
                                   at=env.ts, mode=e.mode, items=s.items[i:]))
    del s.items[i:]
    # the context now holds the live branch only; the next call measures it again
    s.usage.context_tokens = 0
    s.plan_status = "none"
    if s.goal is not None and s.goal.status == "active":
        # the rewound turns were checked or not; what is live now is not a turn to check
        s.goal.checked_item = s.items[-1].id if s.items else ""


COMMANDS: Mapping[type[Any], Decider] = {
    cl.RewindConversation: rewind_conversation,
}

FOLD: Mapping[type[Any], FoldHandler] = {
    ev.ConversationRewound: _rewound,
}
