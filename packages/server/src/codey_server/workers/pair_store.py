"""Where :class:`~codey_server.workers.pairing.Pairing` keeps pair requests: in this server's
memory (one server: a restart forgets them, and the worker asks again) or in
``codey_pair_requests`` rows (replicas: any replica answers a worker's poll, lists a request,
approves or denies it, and the limits count every replica's requests).

A request's life: ``pending`` → ``approving`` (the approval's id and key are being written) →
``approved``; or ``pending`` → ``denied`` | ``expired`` | ``locked``. Each answer is
delivered to the worker's poll once (→ ``delivered``); an answered request is forgotten
:data:`~codey_server.workers.pairing.CODE_TTL_S` after its expiry. Every change of state is a
compare-and-set (:meth:`PairStore.move`), so of two replicas approving, denying or locking one
request at the same moment exactly one wins, and wrong codes are counted by the row
(:meth:`PairStore.wrong_code`), so five wrong tries lock it whichever replicas they reached.
Only the SHA-256 of the poll secret is kept; the worker's credential is never stored (it is
made when the approved worker collects it, see :mod:`.keys`).

Among replicas expiries are judged by the database's clock.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import msgspec

from codey_protocol.worker import PairRequest
from codey_server.cluster.db import SharedDb, lock_key
from codey_server.errors import ServerError

__all__ = ["MemoryPairStore", "PairRecord", "PairStatusName", "PairStore", "PairingError",
           "PgPairStore"]

PairStatusName = Literal["pending", "approving", "approved", "denied", "expired", "locked",
                         "delivered"]


class PairingError(ServerError):
    """``code``: not_found | wrong_code | locked | expired | bad_request | too_many."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class PairRecord:
    """A pair request as stored (a copy: change it through the store)."""

    request: PairRequest
    request_id: str
    code: str  # "XXXX-XXXX"
    poll_hash: str  # sha256 of the poll secret, which only the worker holds
    source: str  # the client address that asked
    requested_at: float = 0.0
    expires_at: float = 0.0
    attempts: int = 0
    status: PairStatusName = "pending"
    worker_id: str | None = None
    #: its expiry has passed (by the store's clock), whatever its status says
    lapsed: bool = False


def _too_many(total: int, here: int, max_pending: int, max_per_source: int) -> None:
    if total >= max_pending:
        raise PairingError("too_many", "too many pending pair requests; try again later")
    if here >= max_per_source:
        raise PairingError("too_many", "too many pending pair requests from this address")


class PairStore(Protocol):
    async def add(self, record: PairRecord, *, ttl_s: float, max_pending: int,
                  max_per_source: int) -> PairRecord:
        """Store a new pending request, valid ``ttl_s`` from now; the stored record (with
        its times). PairingError ``too_many`` when ``max_pending`` requests are pending, or
        ``max_per_source`` from its source (counted and added as one step)."""
        ...

    async def get(self, request_id: str) -> PairRecord | None: ...

    async def pending(self) -> list[PairRecord]:
        """The pending requests not past their expiry, oldest first."""
        ...

    async def wrong_code(self, request_id: str) -> int | None:
        """Count a wrong code against a pending request: the wrong tries so far, or None
        when it is not pending."""
        ...

    async def move(self, request_id: str, from_: tuple[PairStatusName, ...],
                   to: PairStatusName, worker_id: str | None = None) -> bool:
        """Change its status from one of ``from_`` to ``to`` (and set ``worker_id``); False,
        changing nothing, when it is in none of them (another change won)."""
        ...

    async def expire(self, forget_after_s: float) -> list[str]:
        """Mark expired the pending requests past their expiry (their ids: the caller tells
        the log), and forget those answered more than ``forget_after_s`` after it."""
        ...

    def watch(self, request_id: str) -> asyncio.Event:
        """An event set at the request's next change: take it *before* reading the request,
        then wait on it (the stores also get polled: a missed change costs a poll)."""
        ...


class MemoryPairStore:
    """Pair requests in this server's memory."""

    def __init__(self) -> None:
        self._requests: dict[str, PairRecord] = {}
        self._events: dict[str, asyncio.Event] = {}

    def _now(self) -> float:
        return time.time()

    def _out(self, p: PairRecord) -> PairRecord:
        return replace(p, lapsed=p.expires_at <= self._now())

    def _changed(self, request_id: str) -> None:
        event = self._events.pop(request_id, None)
        if event is not None:
            event.set()

    async def add(self, record: PairRecord, *, ttl_s: float, max_pending: int,
                  max_per_source: int) -> PairRecord:
        now = self._now()
        live = [p for p in self._requests.values() if p.status == "pending"
                and p.expires_at > now]
        _too_many(len(live), sum(p.source == record.source for p in live), max_pending,
                  max_per_source)
        stored = replace(record, requested_at=now, expires_at=now + ttl_s, status="pending",
                         attempts=0)
        self._requests[record.request_id] = stored
        return self._out(stored)

    async def get(self, request_id: str) -> PairRecord | None:
        p = self._requests.get(request_id)
        return self._out(p) if p is not None else None

    async def pending(self) -> list[PairRecord]:
        return [self._out(p) for p in self._requests.values()
                if p.status == "pending" and p.expires_at > self._now()]

    async def wrong_code(self, request_id: str) -> int | None:
        p = self._requests.get(request_id)
        if p is None or p.status != "pending":
            return None
        self._requests[request_id] = p = replace(p, attempts=p.attempts + 1)
        return p.attempts

    async def move(self, request_id: str, from_: tuple[PairStatusName, ...],
                   to: PairStatusName, worker_id: str | None = None) -> bool:
        p = self._requests.get(request_id)
        if p is None or p.status not in from_:
            return False
        self._requests[request_id] = replace(p, status=to, worker_id=worker_id or p.worker_id)
        self._changed(request_id)
        return True

    async def expire(self, forget_after_s: float) -> list[str]:
        now = self._now()
        expired = []
        for p in list(self._requests.values()):
            if p.status == "pending" and p.expires_at <= now:
                self._requests[p.request_id] = replace(p, status="expired")
                self._changed(p.request_id)
                expired.append(p.request_id)
            elif p.status != "pending" and p.expires_at + forget_after_s <= now:
                del self._requests[p.request_id]  # answered long ago and never polled again
        return expired

    def watch(self, request_id: str) -> asyncio.Event:
        return self._events.setdefault(request_id, asyncio.Event())


_encode_request = msgspec.json.Encoder().encode
_decode_request = msgspec.json.Decoder(PairRequest).decode
_NOW = "extract(epoch FROM now())"
_COLUMNS = ("request, request_id, code, poll_hash, source, requested_at, expires_at, attempts, "
            f"status, worker_id, expires_at <= {_NOW}")


def _record(row: Any) -> PairRecord:
    (request, request_id, code, poll_hash, source, requested_at, expires_at, attempts, status,
     worker_id, lapsed) = row
    return PairRecord(request=_decode_request(bytes(request)), request_id=str(request_id),
                      code=str(code), poll_hash=str(poll_hash), source=str(source),
                      requested_at=float(requested_at), expires_at=float(expires_at),
                      attempts=int(attempts), status=status,
                      worker_id=str(worker_id) if worker_id is not None else None,
                      lapsed=bool(lapsed))


class PgPairStore:
    """``codey_pair_requests``; a change notifies ``pair:<request id>`` with its commit, which
    wakes the polls waiting on that request on every replica."""

    def __init__(self, db: SharedDb) -> None:
        self.db = db
        self._events: dict[str, asyncio.Event] = {}
        db.subscribe("pair", self._changed)

    def _changed(self, request_id: str) -> None:
        if not request_id:  # the listener reconnected: whatever changed, look again
            events, self._events = list(self._events.values()), {}
            for event in events:
                event.set()
            return
        changed = self._events.pop(request_id, None)
        if changed is not None:
            changed.set()

    async def add(self, record: PairRecord, *, ttl_s: float, max_pending: int,
                  max_per_source: int) -> PairRecord:
        async with self.db.transaction() as conn:
            # counting and adding as one step among replicas: two requests at once must not
            # both get the last free place
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("pairing"),))
            cur = await conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE source = %s) FROM codey_pair_requests "
                f"WHERE status = 'pending' AND expires_at > {_NOW}", (record.source,))
            total, here = await cur.fetchone()
            _too_many(int(total), int(here), max_pending, max_per_source)
            cur = await conn.execute(
                "INSERT INTO codey_pair_requests (request_id, code, poll_hash, request, source, "
                f"requested_at, expires_at) VALUES (%s, %s, %s, %s, %s, {_NOW}, {_NOW} + %s) "
                f"RETURNING {_COLUMNS}",
                (record.request_id, record.code, record.poll_hash,
                 _encode_request(record.request), record.source, ttl_s))
            row = await cur.fetchone()
        return _record(row)

    async def get(self, request_id: str) -> PairRecord | None:
        rows = await self.db.execute(
            f"SELECT {_COLUMNS} FROM codey_pair_requests WHERE request_id = %s", (request_id,))
        return _record(rows[0]) if rows else None

    async def pending(self) -> list[PairRecord]:
        rows = await self.db.execute(
            f"SELECT {_COLUMNS} FROM codey_pair_requests WHERE status = 'pending' "
            f"AND expires_at > {_NOW} ORDER BY requested_at")
        return [_record(r) for r in rows]

    async def wrong_code(self, request_id: str) -> int | None:
        rows = await self.db.execute(
            "UPDATE codey_pair_requests SET attempts = attempts + 1 WHERE request_id = %s "
            "AND status = 'pending' RETURNING attempts", (request_id,))
        return int(rows[0][0]) if rows else None

    async def move(self, request_id: str, from_: tuple[PairStatusName, ...],
                   to: PairStatusName, worker_id: str | None = None) -> bool:
        rows = await self.db.execute(
            "UPDATE codey_pair_requests SET status = %s, worker_id = coalesce(%s, worker_id) "
            "WHERE request_id = %s AND status = ANY(%s) "
            f"RETURNING {self.db.notify_sql('pair', 'request_id')}",
            (to, worker_id, request_id, list(from_)))
        return bool(rows)

    async def expire(self, forget_after_s: float) -> list[str]:
        rows = await self.db.execute(
            "UPDATE codey_pair_requests SET status = 'expired' WHERE status = 'pending' "
            f"AND expires_at <= {_NOW} "
            f"RETURNING request_id, {self.db.notify_sql('pair', 'request_id')}")
        await self.db.execute(
            "DELETE FROM codey_pair_requests WHERE status <> 'pending' "
            f"AND expires_at + %s <= {_NOW}", (forget_after_s,))
        return [str(r[0]) for r in rows]

    def watch(self, request_id: str) -> asyncio.Event:
        return self._events.setdefault(request_id, asyncio.Event())
