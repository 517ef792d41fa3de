"""Checkpoints: the event this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import CheckpointMark, State
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _recorded(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.CheckpointRecorded)
    s = state.sessions.get(env.session_id or "")
    if s is None:
        return
    s.updated_at = env.ts
    mark = CheckpointMark(turn=e.turn, commit=e.commit, files=e.files,
                          skipped=list(e.skipped), shadow=e.shadow, at=env.ts)
    # a turn has one checkpoint: recorded again (a take-over), the later one stands
    for n, old in enumerate(s.checkpoints):
        if old.turn == e.turn:
            s.checkpoints[n] = mark
            return
    s.checkpoints.append(mark)


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.CheckpointRecorded: _recorded,
}
