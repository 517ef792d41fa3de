"""Pairing a worker through the browser, and the workers' keys.

Order: an unpaired worker calls :meth:`Pairing.request` (it gets a code and a poll secret and
long-polls :meth:`Pairing.wait`); the browser lists requests and calls :meth:`Pairing.approve`
with the code the user confirms (or :meth:`Pairing.deny`); the worker's wait returns its
credential. Codes: 8 characters from :data:`CODE_ALPHABET`, shown ``XXXX-XXXX``, single use,
valid :data:`CODE_TTL_S`, locked after :data:`MAX_WRONG_ATTEMPTS` wrong tries.

Where the requests live is :mod:`.pair_store`'s (this server's memory, or rows every replica
reads); the keys and credential hashes :mod:`.keys`' (``workers.json`` in the data dir, 0600, or
rows), never the log. The worker's credential is made when its poll collects the approval and
only its hash is kept.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import secrets
import time
from typing import Literal

import msgspec

from codey_protocol import events as ev
from codey_protocol.worker import PairRequest, PairStatus, PairTicket
from codey_server.core.engine import Engine
from codey_server.workers import decide
from codey_server.workers.keys import KeyStore, WorkerKeys
from codey_server.workers.pair_store import MemoryPairStore, PairingError, PairRecord, PairStore

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
#: a worker's poll looks at its request at least this often (a missed notification from
#: another replica costs this much)
POLL_S = 1.0


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


class Pairing:
    """Pair requests, from the worker's request to its credential (see the module)."""

    def __init__(self, engine: Engine, keys: WorkerKeys, *, store: PairStore | None = None,
                 ttl_s: float = CODE_TTL_S) -> None:
        self.engine = engine
        self.keys = keys
        self.store: PairStore = store or MemoryPairStore()
        self.ttl_s = ttl_s

    async def start(self, *, shared: bool = False) -> None:
        """Requests from before a restart have lost their secrets: the worker asks again. On a
        log ``shared`` with other replicas, the pending ones may be theirs: only those past
        their expiry go (:meth:`expire_lapsed`)."""
        if shared:
            await self.expire_old()
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
        """A new request from the worker at ``source`` (the client's address, behind a trusted
        proxy the one it forwarded): at most :data:`MAX_PENDING` pending in all and
        :data:`MAX_PENDING_PER_SOURCE` per address, among all replicas."""
        await self.expire_old()
        _check_bounds(req)
        poll_secret = secrets.token_urlsafe(24)
        p = await self.store.add(
            PairRecord(request=req, request_id=f"pr_{secrets.token_hex(8)}", code=_new_code(),
                       poll_hash=_hash(poll_secret), source=source),
            ttl_s=self.ttl_s, max_pending=MAX_PENDING, max_per_source=MAX_PENDING_PER_SOURCE)
        await self.engine.submit(decide.pair_requested, ev.WorkerPairRequested(
            request_id=p.request_id, hostname=req.hostname, os=req.os,
            python_version=req.python_version, worker_version=req.worker_version,
            roots=list(req.roots), fingerprint=fingerprint(req.public_key),
            expires_at=p.expires_at))
        return PairTicket(request_id=p.request_id, code=p.code, expires_at=p.expires_at,
                          poll_secret=poll_secret)

    async def wait(self, request_id: str, poll_secret: str, timeout: float) -> PairStatus:
        """The worker's long poll: ``pending`` until the user decided (or ``timeout``); an
        answer is delivered once (a later poll gets ``not_found``), an approval with the
        worker's new credential."""
        p = await self._polled(request_id, poll_secret)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, min(timeout, p.expires_at - time.time()))
        while p.status in ("pending", "approving") and not p.lapsed:
            changed = self.store.watch(request_id)  # before the read: no change is missed
            p = await self._polled(request_id, poll_secret)
            left = deadline - loop.time()
            if p.status not in ("pending", "approving") or p.lapsed or left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, POLL_S))
        if p.status == "pending" and p.lapsed:
            await self.expire_old()
            p = await self._polled(request_id, poll_secret)
        if p.status in ("pending", "approving"):
            return PairStatus(status="pending")
        # the answer is delivered once: of two polls (on two replicas) one gets it
        if not await self.store.move(request_id, (p.status,), "delivered"):
            raise PairingError("not_found", "no such pair request")
        if p.status in ("denied", "expired", "locked"):
            return PairStatus(status=p.status)
        if p.status != "approved" or p.worker_id is None:
            raise PairingError("not_found", "no such pair request")
        credential = secrets.token_urlsafe(32)
        if not await self.keys.set_credential(p.worker_id, credential):
            raise PairingError("not_found", "this worker was removed before it was linked")
        return PairStatus(status="approved", worker_id=p.worker_id, credential=credential)

    async def _polled(self, request_id: str, poll_secret: str) -> PairRecord:
        p = await self.store.get(request_id)
        # bytes: compare_digest refuses a str with non-ASCII characters (TypeError → 500)
        if p is None or p.status == "delivered" or not hmac.compare_digest(
                p.poll_hash.encode(), _hash(poll_secret).encode()):
            raise PairingError("not_found", "no such pair request")
        return p

    # browser side ---------------------------------------------------------------------------

    async def pending(self) -> list[PendingPairRequest]:
        return [self._public(p) for p in await self.store.pending()]

    async def by_code(self, code: str) -> PendingPairRequest:
        wanted = normalise_code(code)
        for p in await self.store.pending():
            if normalise_code(p.code) == wanted:
                return self._public(p)
        raise PairingError("not_found", "no pending request with that code")

    async def approve(self, request_id: str, code: str) -> str:
        """Check the code and pair; returns the new worker id."""
        p = await self._live(request_id)
        if not hmac.compare_digest(normalise_code(p.code).encode(),
                                   normalise_code(code).encode()):
            attempts = await self.store.wrong_code(request_id)
            if attempts is None:  # answered meanwhile (on another replica)
                await self._live(request_id)
                raise PairingError("not_found", "this request was answered")
            if attempts >= MAX_WRONG_ATTEMPTS:
                await self._resolve(request_id, "locked")
                raise PairingError("locked", "too many wrong codes: this request is locked; "
                                             "start the worker again for a new code")
            left = MAX_WRONG_ATTEMPTS - attempts
            raise PairingError("wrong_code", f"wrong code ({left} tries left)")
        # taken before anything is written: a second approval (double click, two tabs, two
        # replicas) is refused instead of pairing a second, ghost worker; the waiting worker
        # still sees "pending" until the pairing is in the log
        if not await self.store.move(request_id, ("pending",), "approving"):
            await self._live(request_id)
            raise PairingError("not_found", "this request is being approved")
        worker_id = f"wrk_{secrets.token_hex(6)}"
        r = p.request
        await self.keys.add(worker_id, r.public_key)  # its credential comes with the poll
        await self.engine.submit(decide.paired, ev.WorkerPaired(
            worker_id=worker_id, request_id=request_id, hostname=r.hostname, os=r.os,
            python_version=r.python_version, worker_version=r.worker_version,
            roots=list(r.roots), public_key=r.public_key,
            fingerprint=fingerprint(r.public_key)))
        await self.store.move(request_id, ("approving",), "approved", worker_id=worker_id)
        return worker_id

    async def deny(self, request_id: str) -> None:
        await self._live(request_id)
        if not await self._resolve(request_id, "denied"):
            await self._live(request_id)
            raise PairingError("not_found", "this request was answered")

    async def expire_old(self) -> None:
        for request_id in await self.store.expire(forget_after_s=self.ttl_s):
            await self.engine.submit(decide.pair_resolved,
                                     decide.PairAnswer(request_id, "expired"))

    async def _live(self, request_id: str) -> PairRecord:
        p = await self.store.get(request_id)
        if p is None or p.status == "delivered":
            raise PairingError("not_found", "no such pair request")
        if p.status == "locked":
            raise PairingError("locked", "this request is locked after too many wrong codes")
        if p.status == "approving":
            raise PairingError("not_found", "this request is being approved")
        if p.status != "pending":
            raise PairingError("not_found", f"this request was {p.status}")
        if p.lapsed:
            raise PairingError("expired", "this code expired; the worker will show a new one")
        return p

    async def _resolve(self, request_id: str,
                       outcome: Literal["denied", "expired", "locked"]) -> bool:
        """Answer a pending request; False when another answer came first."""
        if not await self.store.move(request_id, ("pending",), outcome):
            return False
        await self.engine.submit(decide.pair_resolved, decide.PairAnswer(request_id, outcome))
        return True

    def _public(self, p: PairRecord) -> PendingPairRequest:
        r = p.request
        return PendingPairRequest(
            request_id=p.request_id, code=p.code, hostname=r.hostname, os=r.os,
            python_version=r.python_version, worker_version=r.worker_version, roots=r.roots,
            fingerprint=fingerprint(r.public_key), requested_at=p.requested_at,
            expires_at=p.expires_at, attempts_left=MAX_WRONG_ATTEMPTS - p.attempts)


def fingerprint(public_key_b64: str) -> str:
    """A short, comparable form of the key: ``SHA256:xxxx-xxxx-xxxx``."""
    digest = hashlib.sha256(_b64d(public_key_b64)).hexdigest()[:12]
    return f"SHA256:{digest[:4]}-{digest[4:8]}-{digest[8:12]}"
