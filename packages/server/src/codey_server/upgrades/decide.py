"""The upgrades' decisions: an upgrade of the data told to the user once, and its notice
dismissed.

Pure. :func:`upgraded` runs through :meth:`~codey_server.core.engine.Engine.submit` once the
server runs after an upgrade (:func:`codey_server.upgrades.startup.announce`); the browser's
dismissal comes through :data:`COMMANDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.rules import CommandRejected, Context, Decided, Decider

__all__ = ["COMMANDS", "upgraded"]


def upgraded(state: State, upgrade: ev.DataUpgraded, ctx: Context) -> Decided:
    """The upgrade's notice, unless the log has it already (a start that stopped between
    recording it and forgetting it records it once)."""
    if any(n.upgrade_id == upgrade.upgrade_id for n in state.upgrades):
        return []
    return [(None, upgrade)]


def _dismiss(state: State, c: cl.DismissUpgradeNotice, ctx: Context) -> Decided:
    notice = next((n for n in state.upgrades if n.upgrade_id == c.upgrade_id), None)
    if notice is None:
        raise CommandRejected("not_found", f"no upgrade {c.upgrade_id!r}")
    if notice.dismissed:
        return []
    return [(None, ev.UpgradeNoticeDismissed(upgrade_id=c.upgrade_id))]


COMMANDS: Mapping[type[Any], Decider] = {
    cl.DismissUpgradeNotice: _dismiss,
}
