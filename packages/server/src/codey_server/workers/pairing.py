"""Pairing a worker through the browser, and the workers' keys.

Order: an unpaired worker calls :meth:`Pairing.request` (it gets a code and a poll secret and
long-polls :meth:`Pairing.wait`); the browser lists requests and calls :meth:`Pairing.approve`
with the code the user confirms (or :meth:`Pairing.deny`); the worker's wait returns its
credential. Codes: 8 characters from :data:`CODE_ALPHABET`, shown ``XXXX-XXXX``, single use,
valid :data:`CODE_TTL_S`, locked after :data:`MAX_WRONG_ATTEMPTS` wrong tries.

Keys and credential hashes live in ``workers.json`` in the data dir (0600), never in the log.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from codey_protocol import events as ev
from codey_protocol.worker import PairRequest, PairStatus, PairTicket
from codey_server.core.engine import Engine
from codey_server.errors import ServerError
from codey_server.workers import decide

__all__ = [
    "CODE_ALPHABET",
    "CODE_TTL_S",
    "MAX_WRONG_ATTEMPTS",
    "KeyStore",
    "Pairing",
    "PairingError",
    "PendingPairRequest",
    "normalise_code",
    "verify_signature",
]

CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
CODE_TTL_S = 600.0
MAX_WRONG_ATTEMPTS = 5
MAX_PENDING = 50
MAX_PENDING_PER_SOURCE = 5


class PairingError(ServerError):
    """``code``: not_found | wrong_code | locked | expired | bad_request | too_many."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PendingPairRequest(msgspec.Struct, kw_only=True):
    """A pending pair request as the browser sees it (no key, no poll secret)."""

    request_id: str
    code: str  # "XXXX-XXXX", for the user to compare with the worker's terminal
    hostname: str
    os: str
    python_version: str
    worker_version: str
    roots: list[str]
    fingerprint: str  # "SHA256:xxxx-xxxx-xxxx" of the worker's public key
    requested_at: float
    expires_at: float
    attempts_left: int


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def normalise_code(code: str) -> str:
    return "".join(ch for ch in code.upper() if ch.isalnum())


def _new_code() -> str:
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
    return f"{raw[:4]}-{raw[4:]}"


def verify_signature(public_key_b64: str, message: bytes, signature_b64: str) -> bool:
    # cryptography loads with the first worker, not with the server
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = Ed25519PublicKey.from_public_bytes(_b64d(public_key_b64))
        key.verify(_b64d(signature_b64), message)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


#: bounds on what an unauthenticated pair request may put into the event log (forever)
MAX_ROOTS = 32
MAX_ROOT_CHARS = 4096
MAX_NAME_CHARS = 255
MAX_VERSION_CHARS = 64
#: a raw 32-byte Ed25519 key in base64url: 43 characters, 44 with its padding
_PUBLIC_KEY_CHARS = (43, 44)


def _check_bounds(req: PairRequest) -> None:
    """Raise ``PairingError("bad_request")`` unless every field of ``req`` is within bounds."""
    # length first: base64 decoding skips characters outside its alphabet, so a megabyte of
    # junk around a real key would otherwise decode to 32 bytes and be kept in workers.json
    if len(req.public_key) not in _PUBLIC_KEY_CHARS:
        raise PairingError("bad_request", "public_key must be a raw Ed25519 key, base64url")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        raw = _b64d(req.public_key)
        if len(raw) != 32:
            raise ValueError
        Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, TypeError):
        raise PairingError(
            "bad_request", "public_key must be a raw Ed25519 key, base64url") from None
    for name, value in (("hostname", req.hostname), ("os", req.os)):
        if not value.strip() or len(value) > MAX_NAME_CHARS:
            raise PairingError("bad_request", f"{name} must be 1-{MAX_NAME_CHARS} characters")
    for name, value in (("python_version", req.python_version),
                        ("worker_version", req.worker_version)):
        if len(value) > MAX_VERSION_CHARS:
            raise PairingError("bad_request",
                               f"{name} must be at most {MAX_VERSION_CHARS} characters")
    if len(req.roots) > MAX_ROOTS:
        raise PairingError("bad_request", f"at most {MAX_ROOTS} roots")
    if any(not root or len(root) > MAX_ROOT_CHARS for root in req.roots):
        raise PairingError("bad_request", f"each root must be 1-{MAX_ROOT_CHARS} characters")


class KeyStore:
    """``workers.json``: worker id → public key and credential hash (0600, atomic writes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: dict[str, dict[str, str]] = {}
        with contextlib.suppress(FileNotFoundError):
            self._data = json.loads(path.read_text())

    def reload(self) -> None:
        """The file was replaced (by another replica): read it again."""
        try:
            self._data = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            self._data = {}

    def add(self, worker_id: str, public_key: str, credential: str) -> None:
        self._data[worker_id] = {"public_key": public_key, "credential": _hash(credential)}
        self._save()

    def remove(self, worker_id: str) -> None:
        if self._data.pop(worker_id, None) is not None:
            self._save()

    def check(self, worker_id: str, credential: str) -> str | None:
        """The worker's public key when the credential matches, else None."""
        entry = self._data.get(worker_id)
        if entry is None or not hmac.compare_digest(entry["credential"].encode(),
                                                    _hash(credential).encode()):
            return None
        return entry["public_key"]

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self._data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


@dataclass
class _Pending:
    request: PairRequest
    request_id: str
    code: str
    poll_secret: str
    expires_at: float
    source: str = ""
    approving: bool = False
    attempts: int = 0
    status: Literal["pending", "approved", "denied", "expired", "locked"] = "pending"
    worker_id: str | None = None
    credential: str | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class Pairing:
    def __init__(self, engine: Engine, keys: KeyStore, *, ttl_s: float = CODE_TTL_S) -> None:
        self.engine = engine
        self.keys = keys
        self.ttl_s = ttl_s
        self._pending: dict[str, _Pending] = {}

    async def start(self, *, shared: bool = False) -> None:
        """Requests from before a restart have lost their secrets: the worker asks again. On a
        log ``shared`` with other replicas, the pending ones may be theirs: only those past
        their expiry go (:meth:`expire_lapsed`)."""
        if shared:
            await self.expire_lapsed()
            return
        await self.engine.submit(decide.pair_expired, list(self.engine.state.pair_requests))

    async def expire_lapsed(self, grace_s: float = 0.0) -> None:
        """Mark expired the requests of the log past their expiry by ``grace_s``, whoever took
        them (among replicas, a dead one's would stay listed)."""
        now = time.time()
        lapsed = [r for r, info in self.engine.state.pair_requests.items()
                  if info.expires_at + grace_s <= now]
        if lapsed:
            await self.engine.submit(decide.pair_expired, lapsed)

    # worker side ----------------------------------------------------------------------------

    async def request(self, req: PairRequest, source: str = "") -> PairTicket:
        await self.expire_old()
        pending = [p for p in self._pending.values() if p.status == "pending"]
        if len(pending) >= MAX_PENDING:
            raise PairingError("too_many", "too many pending pair requests; try again later")
        if sum(p.source == source for p in pending) >= MAX_PENDING_PER_SOURCE:
            raise PairingError("too_many", "too many pending pair requests from this address")
        _check_bounds(req)
        pending_request = _Pending(request=req, request_id=f"pr_{secrets.token_hex(8)}",
                                   code=_new_code(), poll_secret=secrets.token_urlsafe(24),
                                   expires_at=time.time() + self.ttl_s, source=source)
        self._pending[pending_request.request_id] = pending_request
        await self.engine.submit(decide.pair_requested, ev.WorkerPairRequested(
            request_id=pending_request.request_id, hostname=req.hostname, os=req.os,
            python_version=req.python_version, worker_version=req.worker_version,
            roots=list(req.roots), fingerprint=fingerprint(req.public_key),
            expires_at=pending_request.expires_at))
        return PairTicket(request_id=pending_request.request_id, code=pending_request.code,
                          expires_at=pending_request.expires_at,
                          poll_secret=pending_request.poll_secret)

    async def wait(self, request_id: str, poll_secret: str, timeout: float) -> PairStatus:
        p = self._pending.get(request_id)
        # bytes: compare_digest refuses a str with non-ASCII characters (TypeError → 500)
        if p is None or not hmac.compare_digest(p.poll_secret.encode(), poll_secret.encode()):
            raise PairingError("not_found", "no such pair request")
        if p.status == "pending":
            left = p.expires_at - time.time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(p.changed.wait(), max(0.0, min(timeout, left)))
            await self.expire_old()
        status = PairStatus(status=p.status, worker_id=p.worker_id, credential=p.credential)
        if p.status != "pending":
            # the answer is delivered once; the credential is not kept in memory after that
            self._pending.pop(request_id, None)
        return status

    # browser side ---------------------------------------------------------------------------

    def pending(self) -> list[PendingPairRequest]:
        now = time.time()
        return [self._public(p) for p in self._pending.values()
                if p.status == "pending" and p.expires_at > now]

    def by_code(self, code: str) -> PendingPairRequest:
        wanted = normalise_code(code)
        now = time.time()
        for p in self._pending.values():
            if p.status == "pending" and p.expires_at > now and normalise_code(p.code) == wanted:
                return self._public(p)
        raise PairingError("not_found", "no pending request with that code")

    async def approve(self, request_id: str, code: str) -> str:
        """Check the code and pair; returns the new worker id."""
        p = self._live(request_id)
        if not hmac.compare_digest(normalise_code(p.code).encode(),
                                   normalise_code(code).encode()):
            p.attempts += 1
            if p.attempts >= MAX_WRONG_ATTEMPTS:
                await self._resolve(p, "locked")
                raise PairingError("locked", "too many wrong codes: this request is locked; "
                                             "start the worker again for a new code")
            left = MAX_WRONG_ATTEMPTS - p.attempts
            raise PairingError("wrong_code", f"wrong code ({left} tries left)")
        worker_id = f"wrk_{secrets.token_hex(6)}"
        credential = secrets.token_urlsafe(32)
        # marked before the first await: a second approval (double click, two tabs) is refused
        # instead of pairing a second, ghost worker; the waiting worker still sees "pending"
        # until the pairing is in the log
        p.approving = True
        self.keys.add(worker_id, p.request.public_key, credential)
        r = p.request
        await self.engine.submit(decide.paired, ev.WorkerPaired(
            worker_id=worker_id, request_id=p.request_id, hostname=r.hostname, os=r.os,
            python_version=r.python_version, worker_version=r.worker_version,
            roots=list(r.roots), public_key=r.public_key,
            fingerprint=fingerprint(r.public_key)))
        p.worker_id = worker_id
        p.credential = credential
        p.status = "approved"
        p.changed.set()
        return worker_id

    async def deny(self, request_id: str) -> None:
        await self._resolve(self._live(request_id), "denied")

    async def expire_old(self) -> None:
        now = time.time()
        for p in list(self._pending.values()):
            if p.status == "pending" and p.expires_at <= now:
                await self._resolve(p, "expired")
            elif p.status != "pending" and p.expires_at + self.ttl_s <= now:
                # answered long ago and never polled again: forget it
                self._pending.pop(p.request_id, None)

    def _live(self, request_id: str) -> _Pending:
        p = self._pending.get(request_id)
        if p is None:
            raise PairingError("not_found", "no such pair request")
        if p.status == "locked":
            raise PairingError("locked", "this request is locked after too many wrong codes")
        if p.status != "pending":
            raise PairingError("not_found", f"this request was {p.status}")
        if p.approving:
            raise PairingError("not_found", "this request is being approved")
        if p.expires_at <= time.time():
            raise PairingError("expired", "this code expired; the worker will show a new one")
        return p

    async def _resolve(self, p: _Pending, outcome: Literal["denied", "expired", "locked"]) -> None:
        p.status = outcome
        p.changed.set()
        await self.engine.submit(decide.pair_resolved, decide.PairAnswer(p.request_id, outcome))

    def _public(self, p: _Pending) -> PendingPairRequest:
        r = p.request
        return PendingPairRequest(
            request_id=p.request_id, code=p.code, hostname=r.hostname, os=r.os,
            python_version=r.python_version, worker_version=r.worker_version, roots=r.roots,
            fingerprint=fingerprint(r.public_key), requested_at=p.expires_at - self.ttl_s,
            expires_at=p.expires_at, attempts_left=MAX_WRONG_ATTEMPTS - p.attempts)


def fingerprint(public_key_b64: str) -> str:
    """A short, comparable form of the key: ``SHA256:xxxx-xxxx-xxxx``."""
    digest = hashlib.sha256(_b64d(public_key_b64)).hexdigest()[:12]
    return f"SHA256:{digest[:4]}-{digest[4:8]}-{digest[8:12]}"
