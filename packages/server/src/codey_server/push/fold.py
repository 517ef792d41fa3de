"""Web Push: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import PushDevice, State
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _added(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.PushDeviceAdded)
    known = state.push_devices.get(e.device_id)
    state.push_devices[e.device_id] = PushDevice(
        device_id=e.device_id, name=e.name, endpoint_host=e.endpoint_host, kinds=list(e.kinds),
        added_at=known.added_at if known is not None else env.ts)


def _changed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.PushDeviceChanged)
    device = state.push_devices.get(e.device_id)
    if device is not None:
        device.name, device.kinds = e.name, list(e.kinds)


def _removed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.PushDeviceRemoved)
    state.push_devices.pop(e.device_id, None)


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.PushDeviceAdded: _added,
    ev.PushDeviceChanged: _changed,
    ev.PushDeviceRemoved: _removed,
}
