"""The upgrades' events folded into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import State, UpgradeNotice
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _upgraded(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.DataUpgraded)
    if any(n.upgrade_id == e.upgrade_id for n in state.upgrades):
        return
    state.upgrades.append(UpgradeNotice(
        upgrade_id=e.upgrade_id, from_format=e.from_format, to_format=e.to_format,
        version=e.version, changes=list(e.changes), backup=e.backup, upgraded_at=env.ts))


def _dismissed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.UpgradeNoticeDismissed)
    for notice in state.upgrades:
        if notice.upgrade_id == e.upgrade_id:
            notice.dismissed = True


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.DataUpgraded: _upgraded,
    ev.UpgradeNoticeDismissed: _dismissed,
}
