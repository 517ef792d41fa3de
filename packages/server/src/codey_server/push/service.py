"""``PushService``: Web Push to the user's devices (RFC 8030 / 8291 / 8292, via pywebpush).

Order of calls: ``PushService(settings, engine, store)`` (no I/O) → ``await start()`` (listens to
the engine) → ``subscribe`` / ``change`` / ``remove`` / ``test`` / ``decide`` from the HTTP layer
→ ``await stop()`` (waits for pushes under way, at most a few seconds).

What is pushed comes from :func:`codey_server.core.notices.notices`, the one function that
also gives the Telegram channel its messages: each notice goes to every device whose kinds
include the notice's kind, encrypted to that device (aes128gcm) and signed with the server's
VAPID key. A session's notices carry one ``tag`` (the browser replaces the previous one) and
one ``Topic`` (a push service holding messages for an offline device keeps only the newest).

Among replicas each event is pushed by the replica that appended it (an event another replica
appended is folded here with :attr:`Engine.applying_foreign` set, and skipped), so one push
goes out per event whichever replica the browser is on. A push is not retried after a crash
between the append and the send: a notification is a nudge, the app shows the truth.

A push service answering 404 or 410 says the subscription is gone (the browser unsubscribed,
the app was uninstalled): the device is removed (``push_device_removed``, reason ``gone``).

Approving from a notification: :meth:`decide` takes the approval id, the hash of the action the
notification showed, and the decision; it applies it through the browser's own
``DecideApproval`` only when :func:`~codey_server.core.notices.stale_reason` finds nothing
wrong, and otherwise answers what happened instead.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import time
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from codey_protocol import client as cl
from codey_protocol.events import Envelope
from codey_server.core import notices
from codey_server.core.engine import Engine
from codey_server.core.rules import CommandRejected
from codey_server.errors import ServerError
from codey_server.push import decide
from codey_server.push.store import PushStore, Subscription
from codey_server.settings import Settings

__all__ = ["Decided", "PushError", "PushResult", "PushService", "device_id_for", "payload"]

log = logging.getLogger("codey.push")

#: a push body is at most 4 KiB once encrypted; the text is cut well below
_BODY_MAX = 1000
#: seconds one push may take (connect, send, answer)
_SEND_TIMEOUT_S = 15.0
#: how long stop() waits for pushes under way
_STOP_WAIT_S = 5.0
#: times of the last pushes (approval requested → the push service's answer), for the bench
_TIMINGS_KEPT = 1000


class PushError(ServerError):
    """A subscription that cannot be used, or a device that is not there."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PushResult(msgspec.Struct, kw_only=True):
    """What one push to one device came to."""

    device_id: str
    ok: bool
    #: the push service's HTTP status (0: not reached)
    status: int = 0
    error: str = ""


class Decided(msgspec.Struct, kw_only=True):
    """``POST /api/push/decide``: ``decided`` when the decision was applied; otherwise
    ``message`` says what happened instead (already decided, changed, gone, app only)."""

    decided: bool
    message: str
    session_id: str = ""


def device_id_for(endpoint: str) -> str:
    """A device's id: the same subscription endpoint is the same device."""
    return "dev_" + hashlib.sha256(endpoint.encode()).hexdigest()[:16]


def _topic(tag: str) -> str:
    """RFC 8030's ``Topic`` (at most 32 base64url characters) of a tag."""
    return base64.urlsafe_b64encode(hashlib.sha256(tag.encode()).digest()).decode()[:32]


def payload(notice: notices.Notice, *, ts: float) -> dict[str, Any]:
    """What the service worker receives (decrypted) for a notice. Only Approve and Reject go to
    a notification (two buttons fit everywhere; "for the session" is the app's)."""
    actions = [{"action": a.decision, "title": a.label} for a in notice.actions
               if a.decision in ("approve", "reject")]
    body = notice.body if len(notice.body) <= _BODY_MAX else notice.body[:_BODY_MAX] + "…"
    return {"kind": notice.kind, "session_id": notice.session_id, "title": notice.title,
            "body": body, "tag": notice.tag, "url": notice.path, "actions": actions,
            "risky": notice.risky, "approval_id": notice.approval_id,
            "action_hash": notice.action_hash, "ts": ts}


def _b64(value: str, size: int) -> bool:
    try:
        return len(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))) == size
    except ValueError:
        return False


class PushService:
    def __init__(self, settings: Settings, engine: Engine, store: PushStore) -> None:
        self.settings = settings
        self.config = settings.push
        self.engine = engine
        self.store = store
        self._vapid: Any = None
        self._vapid_lock = asyncio.Lock()
        self._session: Any = None
        self._sending: set[asyncio.Task[None]] = set()
        #: seconds from an event's time to its push answered by the push service, newest last
        self.timings: list[float] = []

    # lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self.engine.listeners.append(self._on_event)

    async def stop(self) -> None:
        if self._on_event in self.engine.listeners:
            self.engine.listeners.remove(self._on_event)
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=_STOP_WAIT_S)
        for task in set(self._sending):
            task.cancel()
        if self._session is not None:
            with contextlib.suppress(Exception):
                await self._session.close()
            self._session = None

    # keys ------------------------------------------------------------------------------------

    async def _key(self) -> Any:
        async with self._vapid_lock:
            if self._vapid is None:
                from py_vapid import Vapid

                self._vapid = Vapid.from_pem(await self.store.vapid_pem())
            return self._vapid

    async def public_key(self) -> str:
        """The VAPID public key as the browser's ``applicationServerKey`` (base64url of the
        uncompressed P-256 point)."""
        from cryptography.hazmat.primitives import serialization

        raw = (await self._key()).public_key.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _subject(self) -> str:
        if self.config.subject:
            return self.config.subject
        public = self.settings.public_url or ""
        return public.rstrip("/") if public.startswith("https://") else "mailto:codey@localhost"

    # devices ---------------------------------------------------------------------------------

    async def subscribe(self, name: str, subscription: Subscription,
                        kinds: list[str] | None) -> str:
        """Keep a browser's subscription and record its device; its id."""
        parts = urlsplit(subscription.endpoint)
        allowed = ("https", "http") if self.config.allow_http_endpoints else ("https",)
        if not parts.hostname:
            raise PushError("bad_request", "a push endpoint is an https:// URL")
        if parts.scheme not in allowed:
            raise PushError("not_configured", "a push endpoint is an https:// URL (this server "
                            "takes http:// ones only with push.allow_http_endpoints)")
        if not _b64(subscription.p256dh, 65) or not _b64(subscription.auth, 16):
            raise PushError("bad_request", "the subscription's keys are not P-256 / 16 bytes")
        device_id = device_id_for(subscription.endpoint)
        await self.store.put(device_id, subscription)
        known = device_id in self.engine.state.push_devices
        chosen = kinds if kinds is not None else (
            [] if known else [k.name for k in notices.KINDS.values() if k.default])
        await self.engine.submit(decide.device_added, decide.Added(
            device_id=device_id, name=name, endpoint_host=parts.hostname, kinds=chosen))
        return device_id

    async def change(self, device_id: str, name: str | None, kinds: list[str] | None) -> None:
        await self.engine.submit(decide.device_changed, decide.Changed(device_id, name, kinds))

    async def remove(self, device_id: str, reason: str = "") -> None:
        await self.store.remove(device_id)
        await self.engine.submit(decide.device_removed, decide.Removed(device_id, reason))

    async def test(self, device_id: str) -> PushResult:
        """Send a test notification to one device, and say how its push service answered."""
        if device_id not in self.engine.state.push_devices:
            raise PushError("not_found", f"no device {device_id}")
        body = {"kind": "test", "session_id": "", "title": "Codey", "tag": "codey-test",
                "body": "Notifications reach this device.", "url": "/#/settings",
                "actions": [], "risky": False, "approval_id": "", "action_hash": "",
                "ts": time.time()}
        return await self._send(device_id, body)

    def preview(self) -> dict[str, Any] | None:
        """What a device would show now: the payload of the newest pending approval or
        question (None: nothing waits)."""
        newest: tuple[float, notices.Notice] | None = None
        for s in self.engine.state.sessions.values():
            for a in s.approvals.values():
                if a.status == "pending" and (newest is None or a.requested_at > newest[0]):
                    newest = (a.requested_at, notices.approval_notice(s, a))
            for q in s.questions.values():
                if q.status == "pending" and (newest is None or q.asked_at > newest[0]):
                    newest = (q.asked_at, notices.question_notice(s, q))
        return payload(newest[1], ts=newest[0]) if newest is not None else None

    # approving from a notification -----------------------------------------------------------

    async def decide(self, approval_id: str, shown_hash: str,
                     decision: Literal["approve", "reject"]) -> Decided:
        """Apply a decision made on a notification, if it still is about the pending action."""
        state = self.engine.state
        session = next((s for s in state.sessions.values() if approval_id in s.approvals), None)
        session_id = session.session_id if session is not None else ""
        stale = notices.stale_reason(state, approval_id, shown_hash)
        if stale is not None or session is None:
            return Decided(decided=False, message=stale or "That approval is gone",
                           session_id=session_id)
        try:
            await self.engine.execute(cl.DecideApproval(
                session_id=session_id, approval_id=approval_id, decision=decision),
                origin="push")
        except CommandRejected:  # decided elsewhere between the check and the command
            approval = self.engine.state.sessions[session_id].approvals.get(approval_id)
            word = notices.decided_text(session, approval) if approval else "gone"
            return Decided(decided=False, message=f"Already decided: {word}",
                           session_id=session_id)
        word = "Approved" if decision == "approve" else "Rejected"
        return Decided(decided=True, message=word, session_id=session_id)

    # sending ---------------------------------------------------------------------------------

    def _on_event(self, env: Envelope) -> None:
        if self.engine.applying_foreign:  # the replica that appended it pushes it
            return
        state = self.engine.state
        if not state.push_devices:
            return
        for notice in notices.notices(state, env):
            body = payload(notice, ts=env.ts)
            for device in state.push_devices.values():
                if notice.kind in device.kinds:
                    self._spawn(device.device_id, body, env.ts)

    def _spawn(self, device_id: str, body: dict[str, Any], since: float) -> None:
        async def send() -> None:
            result = await self._send(device_id, body)
            if result.ok:
                self.timings.append(time.time() - since)
                del self.timings[:-_TIMINGS_KEPT]

        task = asyncio.get_running_loop().create_task(send(), name=f"push-{device_id}")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, device_id: str, body: dict[str, Any]) -> PushResult:
        from pywebpush import WebPushException, webpush_async

        subscription = await self.store.get(device_id)
        if subscription is None:
            return PushResult(device_id=device_id, ok=False, error="no subscription kept")
        try:
            vapid = await self._key()
            if self._session is None:
                import aiohttp

                self._session = aiohttp.ClientSession()
            response = await webpush_async(
                subscription.info(), msgspec.json.encode(body).decode(),
                vapid_private_key=vapid, vapid_claims={"sub": self._subject()},
                ttl=self.config.ttl_s, timeout=_SEND_TIMEOUT_S,
                headers={"Urgency": "high", "Topic": _topic(str(body.get("tag", "")))},
                aiohttp_session=self._session)
            return PushResult(device_id=device_id, ok=True, status=int(response.status))
        except WebPushException as err:
            status = int(getattr(err.response, "status", 0) or 0)
            if status in (404, 410):
                log.info("push: device %s is gone (%d); removed", device_id, status)
                with contextlib.suppress(Exception):
                    await self.remove(device_id, reason="gone")
            else:
                log.warning("push to %s failed: %s", device_id, str(err).splitlines()[0])
            return PushResult(device_id=device_id, ok=False, status=status,
                              error=str(err).splitlines()[0])
        except Exception as err:  # unreachable, timed out: the next notice tries again
            log.warning("push to %s failed: %s", device_id, err)
            return PushResult(device_id=device_id, ok=False, error=f"{type(err).__name__}: "
                              f"{err}")
