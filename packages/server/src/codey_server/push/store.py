"""Where Web Push keeps its secrets: the VAPID key pair and each device's subscription.

- :class:`FilePushStore` (one server): ``DATA_DIR/push.json`` (0600, written atomically);
- :class:`PgPushStore` (replicas, ``--database-url``): the ``codey_push_vapid`` row, sealed with
  AES-256-GCM under the cluster's secret key (as provider logins are; without a key there is
  no push among replicas, see :func:`_require`), and one ``codey_push_subscriptions`` row per
  device. Every replica signs with the same key, so a browser subscribed through one replica
  accepts pushes sent by any.

The key pair is made once, by whoever needs it first (among replicas the first insert wins and
every replica reads the winner). A subscription is not in the event log: its endpoint is a
capability URL and its ``auth`` secret is what RFC 8291 tells the application server to keep
secret; the log (and so every browser) only has the device's name, push service host and kinds.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol

import msgspec

from codey_server.cluster.crypto import KEY_ENV, SecretKey
from codey_server.cluster.db import SharedDb
from codey_server.cluster.errors import SecretKeyError
from codey_server.secretfile import read_secret_file, write_secret_file

__all__ = ["FilePushStore", "PgPushStore", "PushStore", "Subscription", "new_vapid_pem"]

log = logging.getLogger("codey.push")

_VAPID_AAD = b"push-vapid"


class Subscription(msgspec.Struct, kw_only=True):
    """A browser's ``PushSubscription``: where to POST, and the keys to encrypt to."""

    endpoint: str
    p256dh: str
    auth: str

    def info(self) -> dict[str, object]:
        """As pywebpush takes it."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}


class _File(msgspec.Struct, kw_only=True):
    vapid: str = ""
    subscriptions: dict[str, Subscription] = msgspec.field(default_factory=dict)


def new_vapid_pem() -> bytes:
    """A new VAPID key pair (P-256), its private key as PEM."""
    from py_vapid import Vapid

    vapid = Vapid()
    vapid.generate_keys()
    pem: bytes = vapid.private_pem()
    return pem


class PushStore(Protocol):
    async def vapid_pem(self) -> bytes:
        """The VAPID private key (PEM), made the first time it is asked for."""
        ...

    async def put(self, device_id: str, subscription: Subscription) -> None: ...

    async def get(self, device_id: str) -> Subscription | None: ...

    async def remove(self, device_id: str) -> None: ...


class FilePushStore:
    """One server: everything in one 0600 file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    def _read(self) -> _File:
        raw = read_secret_file(self.path)
        if raw:
            try:
                return msgspec.json.decode(raw, type=_File)
            except msgspec.MsgspecError:
                log.warning("%s is not a push file; starting a new one", self.path)
        return _File()

    def _write(self, data: _File) -> None:
        write_secret_file(self.path, msgspec.json.encode(data))

    async def vapid_pem(self) -> bytes:
        async with self._lock:
            data = self._read()
            if not data.vapid:
                data.vapid = new_vapid_pem().decode()
                self._write(data)
            return data.vapid.encode()

    async def put(self, device_id: str, subscription: Subscription) -> None:
        async with self._lock:
            data = self._read()
            data.subscriptions[device_id] = subscription
            self._write(data)

    async def get(self, device_id: str) -> Subscription | None:
        return self._read().subscriptions.get(device_id)

    async def remove(self, device_id: str) -> None:
        async with self._lock:
            data = self._read()
            if data.subscriptions.pop(device_id, None) is not None:
                self._write(data)


def _require(key: SecretKey | None) -> SecretKey:
    if key is None:
        raise SecretKeyError(
            f"Web Push among replicas keeps its VAPID key encrypted, and this server has no "
            f"secret key: set ${KEY_ENV} (the same on every replica) or secret_key_file in "
            "config.json (see docs/security.md)")
    return key


class PgPushStore:
    """``codey_push_vapid`` and ``codey_push_subscriptions``, read when asked."""

    def __init__(self, db: SharedDb, key: SecretKey | None) -> None:
        self.db = db
        self.key = key

    async def vapid_pem(self) -> bytes:
        key = _require(self.key)
        rows = await self.db.execute("SELECT sealed FROM codey_push_vapid")
        if not rows:  # the first replica to insert wins; everyone reads the winner
            await self.db.execute(
                "INSERT INTO codey_push_vapid (id, sealed) VALUES (1, %s) "
                "ON CONFLICT (id) DO NOTHING", (key.seal(new_vapid_pem(), aad=_VAPID_AAD),))
            rows = await self.db.execute("SELECT sealed FROM codey_push_vapid")
        return key.open(bytes(rows[0][0]), aad=_VAPID_AAD, what="the stored VAPID key")

    async def put(self, device_id: str, subscription: Subscription) -> None:
        await self.db.execute(
            "INSERT INTO codey_push_subscriptions (device_id, record) VALUES (%s, %s) "
            "ON CONFLICT (device_id) DO UPDATE SET record = excluded.record",
            (device_id, msgspec.json.encode(subscription)))

    async def get(self, device_id: str) -> Subscription | None:
        rows = await self.db.execute(
            "SELECT record FROM codey_push_subscriptions WHERE device_id = %s", (device_id,))
        return msgspec.json.decode(bytes(rows[0][0]), type=Subscription) if rows else None

    async def remove(self, device_id: str) -> None:
        await self.db.execute("DELETE FROM codey_push_subscriptions WHERE device_id = %s",
                              (device_id,))
