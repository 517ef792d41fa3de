"""Web Push's decisions: devices added (subscribed), changed (name, what is pushed) and
removed. Pure, ``(state, input, ctx) -> [(session_id, event)]``, run by :mod:`.service`
through :meth:`~codey_server.core.engine.Engine.submit`."""

from __future__ import annotations

from dataclasses import dataclass

from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.notices import KINDS
from codey_server.core.rules import CommandRejected, Context, Decided

__all__ = ["Added", "Changed", "Removed", "device_added", "device_changed", "device_removed"]

#: a device's name as the list shows it
NAME_MAX = 80


def _kinds(kinds: list[str]) -> list[str]:
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise CommandRejected("not_found", f"no notification kind {', '.join(unknown)}")
    return [k for k in KINDS if k in kinds]  # the table's order, once each


@dataclass(frozen=True)
class Added:
    device_id: str
    name: str
    endpoint_host: str
    kinds: list[str]


def device_added(state: State, a: Added, ctx: Context) -> Decided:
    """A new subscription (or a new one for a device known already: its name and kinds are
    kept unless given)."""
    known = state.push_devices.get(a.device_id)
    name = a.name.strip()[:NAME_MAX] or (known.name if known else "") or "This device"
    kinds = _kinds(a.kinds) if a.kinds or known is None else list(known.kinds)
    return [(None, ev.PushDeviceAdded(device_id=a.device_id, name=name,
                                      endpoint_host=a.endpoint_host, kinds=kinds))]


@dataclass(frozen=True)
class Changed:
    device_id: str
    name: str | None
    kinds: list[str] | None


def device_changed(state: State, c: Changed, ctx: Context) -> Decided:
    device = state.push_devices.get(c.device_id)
    if device is None:
        raise CommandRejected("not_found", f"no device {c.device_id}")
    name = device.name if c.name is None else (c.name.strip()[:NAME_MAX] or device.name)
    kinds = list(device.kinds) if c.kinds is None else _kinds(c.kinds)
    if name == device.name and kinds == device.kinds:
        return []
    return [(None, ev.PushDeviceChanged(device_id=c.device_id, name=name, kinds=kinds))]


@dataclass(frozen=True)
class Removed:
    device_id: str
    #: "" the user removed it; "gone": its push service no longer knows the subscription
    reason: str = ""


def device_removed(state: State, r: Removed, ctx: Context) -> Decided:
    if r.device_id not in state.push_devices:
        if r.reason:
            return []  # removed already (by the user, or by another replica's failed push)
        raise CommandRejected("not_found", f"no device {r.device_id}")
    return [(None, ev.PushDeviceRemoved(device_id=r.device_id, reason=r.reason))]
