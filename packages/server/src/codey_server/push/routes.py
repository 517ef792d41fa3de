"""``/api/push``: Web Push's devices (subscribe, rename, choose what is pushed, test, remove)
and the decision a service worker posts from a notification's Approve or Reject.

Every route needs the browser's login: the service worker posts with the browser's cookie and
its own origin, so a decision from a notification is checked like one from the app."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar import delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from codey_protocol.state import PushDevice
from codey_server.core.notices import KINDS
from codey_server.http.errors import errors
from codey_server.http.fields import pattern
from codey_server.http.resource import Resource
from codey_server.push.service import Decided, PushResult, PushService
from codey_server.push.store import Subscription

__all__ = ["PushController"]


class KindInfo(msgspec.Struct, kw_only=True):
    name: str
    label: str
    default: bool


class PushStatus(msgspec.Struct, kw_only=True):
    """``GET /api/push``: the key browsers subscribe with, what can be pushed, the devices."""

    public_key: str
    kinds: list[KindInfo]
    devices: list[PushDevice]


class SubscriptionKeys(msgspec.Struct, kw_only=True):
    #: the browser's P-256 public key (65 bytes), base64url
    p256dh: Annotated[str, msgspec.Meta(pattern=pattern(
        "^[A-Za-z0-9_-]{87}=?$", "p256dh is a P-256 public key (65 bytes, base64url)"))]
    #: the auth secret (16 bytes), base64url
    auth: Annotated[str, msgspec.Meta(pattern=pattern(
        "^[A-Za-z0-9_-]{22}(==)?$", "auth is 16 bytes, base64url"))]


class NewDevice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/push/devices``: the browser's ``PushSubscription.toJSON()`` and a name."""

    #: the push service's URL for this browser (https; http only where the server allows it)
    endpoint: Annotated[str, msgspec.Meta(max_length=2000, pattern=pattern(
        r"^https?://[^\s/?#@]+(/\S*)?$", "a push endpoint is an https:// URL"))]
    keys: SubscriptionKeys
    name: Annotated[str, msgspec.Meta(max_length=200)] = ""
    #: what to push (None: the defaults for a new device, the same for a known one)
    kinds: list[str] | None = None


class DeviceChange(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    kinds: list[str] | None = None


class DeviceAdded(msgspec.Struct, kw_only=True):
    device_id: str


class NotificationDecision(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/push/decide``: what a notification showed, and the button pressed."""

    approval_id: Annotated[str, msgspec.Meta(max_length=100)]
    action_hash: Annotated[str, msgspec.Meta(max_length=100)]
    decision: Literal["approve", "reject"]


class Preview(msgspec.Struct, kw_only=True):
    payload: dict[str, Any] | None


class Ok(msgspec.Struct, kw_only=True):
    ok: bool = True


class PushController(Resource):
    path = "/api/push"
    tags = ["push"]

    @get("", responses=errors(409))
    async def status(self, push: NamedDependency[PushService]) -> PushStatus:
        """The VAPID public key (made on first use), the kinds of notices, the devices."""
        return PushStatus(
            public_key=await push.public_key(),
            kinds=[KindInfo(name=k.name, label=k.label, default=k.default)
                   for k in KINDS.values()],
            devices=list(push.engine.state.push_devices.values()))

    @get("/preview", responses=errors())
    async def preview(self, push: NamedDependency[PushService]) -> Preview:
        """The notification a device would show now for the newest pending approval or
        question, exactly as pushed (``payload`` null: nothing waits)."""
        return Preview(payload=push.preview())

    @post("/devices", status_code=201, responses=errors(400, 404, 409))
    async def add(self, data: JSONBody[NewDevice],
                  push: NamedDependency[PushService]) -> DeviceAdded:
        """Keep a subscription (its endpoint and keys stay on the server) and list the device;
        the same endpoint again is the same device (its subscription replaced). 409: an
        ``http://`` endpoint on a server that does not take them; 404: an unknown kind."""
        device_id = await push.subscribe(data.name, Subscription(
            endpoint=data.endpoint, p256dh=data.keys.p256dh, auth=data.keys.auth), data.kinds)
        return DeviceAdded(device_id=device_id)

    @put("/devices/{device_id:str}", responses=errors(400, 404))
    async def change(self, device_id: FromPath[str], data: JSONBody[DeviceChange],
                     push: NamedDependency[PushService]) -> Ok:
        """Rename a device, or choose what is pushed to it."""
        await push.change(device_id, data.name, data.kinds)
        return Ok()

    @delete("/devices/{device_id:str}", status_code=200, responses=errors(404))
    async def remove(self, device_id: FromPath[str], push: NamedDependency[PushService]) -> Ok:
        """Forget a device and its subscription: nothing is pushed to it any more."""
        await push.remove(device_id)
        return Ok()

    @post("/devices/{device_id:str}/test", status_code=200, responses=errors(404))
    async def test(self, device_id: FromPath[str],
                   push: NamedDependency[PushService]) -> PushResult:
        """Push a test notification; how the device's push service answered."""
        return await push.test(device_id)

    @post("/decide", status_code=200, responses=errors(400))
    async def decide(self, data: JSONBody[NotificationDecision],
                     push: NamedDependency[PushService]) -> Decided:
        """A notification's Approve or Reject: applied only while the approval is pending,
        shows the same action (``action_hash``) and may be decided outside the app; else
        ``decided: false`` and what happened."""
        return await push.decide(data.approval_id, data.action_hash, data.decision)
