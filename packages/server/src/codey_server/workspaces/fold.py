"""Git workspaces: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]

_FIELDS = ev.WorktreeUpdated.__struct_fields__


def _updated(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorktreeUpdated)
    s = state.sessions.get(env.session_id or "")
    if s is None or s.worktree is None:
        return
    for name in _FIELDS:
        value = getattr(e, name)
        if value is not None:
            setattr(s.worktree, name, value)
    if e.path:  # the worktree is the session's workdir from now on
        s.workdir = e.path
    s.updated_at = env.ts


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.WorktreeUpdated: _updated,
}
