"""Web terminals: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import State, TerminalInfo
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _terminal_created(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TerminalCreated)
    state.terminals[e.terminal_id] = TerminalInfo(
        terminal_id=e.terminal_id, worker_id=e.worker_id, workdir=e.workdir,
        session_id=env.session_id, created_at=env.ts, created_by=e.by, updated_at=env.ts)


def _terminal_viewers(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, (ev.TerminalAttached, ev.TerminalDetached))
    t = state.terminals.get(e.terminal_id)
    if t is not None:
        t.viewers = max(0, t.viewers + (1 if isinstance(e, ev.TerminalAttached) else -1))
        t.updated_at = env.ts


def _terminal_closed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TerminalClosed)
    t = state.terminals.get(e.terminal_id)
    if t is not None:
        t.closed, t.closed_reason, t.viewers, t.updated_at = True, e.reason, 0, env.ts


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.TerminalCreated: _terminal_created,
    ev.TerminalAttached: _terminal_viewers,
    ev.TerminalDetached: _terminal_viewers,
    ev.TerminalClosed: _terminal_closed,
}
