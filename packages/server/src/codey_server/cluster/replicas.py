"""Several servers (replicas) on one PostgreSQL database: leases, and actions routed to the
replica that holds the worker.

Only built when ``--database-url`` is set; one server on SQLite never imports this.

- **Replicas** write a heartbeat row (``codey_replicas``) every :data:`RENEW_S`; one not seen
  for :data:`LEASE_TTL_S` is dead, and its workers are marked disconnected by whichever replica
  holds the ``janitor`` lease.
- **Leases** (``codey_leases``): a named lease is held by one replica until it expires. Taking
  and renewing are one statement each, judged by the database's clock, so replicas' clocks may
  disagree. Each session's turn runs only on the replica that holds ``session:<id>``; the
  scheduler, retention and the janitor each hold one too. A replica that fails to
  renew (paused, cut off) is told, and stops what the lease guarded.
- **Routed actions** (``codey_actions``): in a cluster every action the agent sends goes
  through the table (:class:`ClusterRoutes`, the router's transport between replicas; the
  exactly-once rules are :class:`~codey_server.core.router.Router`'s). The session's replica
  inserts it and NOTIFYs ``codey_cluster``; the replica holding the worker's socket carries
  it out through its own router (the worker answers a repeat from its record) and writes the
  outcome; its output streams back through ``codey_action_progress``. When the worker is on
  the session's own replica the action goes straight to its socket, and its output and
  outcome straight to the turn (the outcome is still written, for a take-over). A replica
  that takes a session over re-sends the same action id and gets the recorded outcome, or the
  worker's answer, never a second run.
- Every wait also polls every :data:`POLL_S`, so a lost NOTIFY costs latency, not progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from codey_protocol import ProtocolError, codec
from codey_protocol import worker as wk
from codey_server.core.actions import ActionFailed
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.leases import Fence
from codey_server.core.router import Outcome
from codey_server.errors import LeaseLost, ServerError
from codey_server.eventlog.postgres import listen

log = logging.getLogger("codey.cluster")

__all__ = ["Cluster", "ClusterRoutes", "Janitor", "Leases"]

#: a lease not renewed for this long is free; a replica not seen for this long is dead
LEASE_TTL_S = 6.0
#: how often leases and the heartbeat are renewed
RENEW_S = 1.5
#: how often waits look at the tables without a notification
POLL_S = 1.0
CHANNEL = "codey_cluster"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS codey_replicas (
    replica text PRIMARY KEY, seen timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS codey_leases (
    name text PRIMARY KEY, owner text NOT NULL, expires timestamptz NOT NULL);
-- the holding's epoch (fencing): raised by every take, kept by renewals; rows are never
-- deleted, so a lease's epochs only grow
ALTER TABLE codey_leases ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS codey_actions (
    action_id text PRIMARY KEY, worker_id text NOT NULL, session_id text NOT NULL,
    action bytea NOT NULL, created timestamptz NOT NULL DEFAULT now(),
    outcome bytea, cancel boolean NOT NULL DEFAULT false);
CREATE INDEX IF NOT EXISTS codey_actions_open ON codey_actions (worker_id)
    WHERE outcome IS NULL;
-- the epoch of the session's lease its runner wrote it under (NULL: not a runner's action)
ALTER TABLE codey_actions ADD COLUMN IF NOT EXISTS epoch bigint;
CREATE TABLE IF NOT EXISTS codey_action_progress (
    id bigserial PRIMARY KEY, action_id text NOT NULL, data bytea NOT NULL);
CREATE INDEX IF NOT EXISTS codey_action_progress_action ON codey_action_progress (action_id);
"""
_SCHEMA_LOCK = 0x636F646572  # "coder": its own key, apart from the event log's


def new_replica_id() -> str:
    return f"{socket.gethostname()[:40]}-{secrets.token_hex(3)}"


class Cluster:
    """The database connection this replica's cluster parts share, and its notifications."""

    def __init__(self, url: str, replica_id: str | None = None) -> None:
        self.url = url
        self.replica_id = replica_id or new_replica_id()
        self.pool: Any = None
        #: called with each NOTIFY payload on :data:`CHANNEL` (sync; schedule work)
        self.on_notify: list[Callable[[str], None]] = []
        self._listener: asyncio.Task[None] | None = None

    async def open(self) -> None:
        import psycopg
        from psycopg_pool import AsyncConnectionPool

        try:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn, \
                    conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                await conn.execute(_SCHEMA)
        except psycopg.OperationalError as err:
            raise ServerError(f"cannot reach the database: {err}") from None
        self.pool = AsyncConnectionPool(self.url, min_size=1, max_size=4, open=False,
                                        kwargs={"autocommit": True})
        await self.pool.open(wait=True)
        self._listener = asyncio.get_running_loop().create_task(
            listen(self.url, CHANNEL, self._notified), name="cluster-listen")
        log.info("replica %s joined the cluster", self.replica_id)

    async def close(self) -> None:
        await _cancelled(self._listener)
        if self.pool is not None:
            await self.pool.close()

    async def execute(self, query: str, params: Any = ()) -> list[Any]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return list(await cur.fetchall()) if cur.description else []

    @contextlib.asynccontextmanager
    async def locked(self, name: str) -> AsyncIterator[None]:
        """Hold a database lock named ``name`` (across replicas) for the block."""
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        async with self.pool.connection() as conn:
            await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    async def notify(self, payload: str) -> None:
        await self.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    def _notified(self, payload: str) -> None:
        for hook in self.on_notify:
            try:
                hook(payload)
            except Exception:
                log.exception("cluster notification hook failed")

class Leases:
    """Named leases this replica holds, renewed every :data:`RENEW_S` with its heartbeat.

    Each holding has an epoch (``codey_leases.epoch``): a take of a lease that is free,
    expired or another replica's raises it (a new row starts at 1); the holder's renewals and
    repeated takes keep it. :meth:`fence` gives the epoch held here as a
    :class:`~codey_server.core.leases.Fence`, which appends and routed actions carry: the
    database refuses them once the epoch has moved on (``LeaseLost``). A release or a stop
    lets the row expire at once rather than deleting it, so epochs never start again.

    Row locks: a fenced append locks its lease rows ``FOR SHARE`` in name order; a take
    locks one row, a renewal its rows in name order: so none of them can deadlock another,
    and a take waits for an append under way to commit (which its new holder then reads).
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.held: set[str] = set()
        self._epochs: dict[str, int] = {}  # name → the epoch of the holding here
        #: called with the name of a lease this replica lost (it failed to renew in time)
        self.on_lost: list[Callable[[str], None]] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def me(self) -> str:
        return self.cluster.replica_id

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._renew_loop(),
                                                            name="cluster-leases")

    async def stop(self) -> None:
        await _cancelled(self._task)
        # hand everything over at once instead of after the TTL
        with contextlib.suppress(Exception):
            await self.cluster.execute(
                "UPDATE codey_leases SET expires = '-infinity' WHERE owner = %s", (self.me,))
            await self.cluster.execute("DELETE FROM codey_replicas WHERE replica = %s",
                                       (self.me,))
        self.held.clear()
        self._epochs.clear()

    def fence(self, name: str) -> Fence | None:
        """The holding of ``name`` here, for a write to carry (None when not held)."""
        epoch = self._epochs.get(name)
        if name not in self.held or epoch is None:
            return None
        return Fence(name, epoch, self.me)

    async def acquire(self, name: str) -> bool:
        """Take the lease if it is free or expired (or already ours); True when held."""
        rows = await self.cluster.execute(
            "INSERT INTO codey_leases (name, owner, expires, epoch) "
            "VALUES (%s, %s, now() + make_interval(secs => %s), 1) "
            "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
            "expires = excluded.expires, epoch = CASE WHEN codey_leases.owner = "
            "excluded.owner AND codey_leases.expires >= now() THEN codey_leases.epoch "
            "ELSE codey_leases.epoch + 1 END "
            "WHERE codey_leases.owner = excluded.owner OR codey_leases.expires < now() "
            "RETURNING epoch", (name, self.me, LEASE_TTL_S))
        if rows:
            self.held.add(name)
            self._epochs[name] = int(rows[0][0])
            return True
        self.held.discard(name)
        self._epochs.pop(name, None)
        return False

    async def release(self, name: str) -> None:
        self.held.discard(name)
        epoch = self._epochs.pop(name, None)
        if epoch is None:
            return
        await self.cluster.execute(
            "UPDATE codey_leases SET expires = '-infinity' "
            "WHERE name = %s AND owner = %s AND epoch = %s", (name, self.me, epoch))

    async def free(self, names: list[str]) -> set[str]:
        """Of ``names``, those nobody holds (no row, or expired)."""
        if not names:
            return set()
        rows = await self.cluster.execute(
            "SELECT name FROM codey_leases WHERE name = ANY(%s) AND expires >= now()",
            (names,))
        return set(names) - {r[0] for r in rows}

    async def live_replicas(self) -> set[str]:
        rows = await self.cluster.execute(
            "SELECT replica FROM codey_replicas WHERE seen >= now() - make_interval(secs => %s)",
            (LEASE_TTL_S,))
        return {r[0] for r in rows}

    async def beat(self) -> None:
        await self.cluster.execute(
            "INSERT INTO codey_replicas (replica, seen) VALUES (%s, now()) "
            "ON CONFLICT (replica) DO UPDATE SET seen = now()", (self.me,))

    async def renew(self) -> set[str]:
        """Renew every lease held here, each only while its row still has this replica's
        epoch; the names renewed. (The renewal loop calls it; so may a test.)"""
        held = sorted(name for name in self.held if name in self._epochs)
        if not held:
            return set()
        rows = await self.cluster.execute(
            "WITH mine AS (SELECT name FROM codey_leases WHERE owner = %s AND (name, epoch) "
            "IN (SELECT * FROM unnest(%s::text[], %s::bigint[])) ORDER BY name FOR UPDATE) "
            "UPDATE codey_leases SET expires = now() + make_interval(secs => %s) "
            "FROM mine WHERE codey_leases.name = mine.name RETURNING codey_leases.name",
            (self.me, held, [self._epochs[name] for name in held], LEASE_TTL_S))
        kept = {r[0] for r in rows}
        for name in held:
            if name not in kept and name in self.held:
                self.held.discard(name)
                self._epochs.pop(name, None)
                log.warning("lost the lease %s", name)
                for hook in self.on_lost:
                    hook(name)
        return kept

    async def _renew_loop(self) -> None:
        while True:
            try:
                await self.beat()
                await self.renew()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("could not renew leases (%s)", err)
            await asyncio.sleep(RENEW_S)


def _encode_outcome(action_id: str, outcome: Outcome) -> bytes:
    if isinstance(outcome, ActionFailed):
        return codec.encode(wk.ActionErrored(action_id=action_id, code=outcome.code,
                                             message=outcome.message))
    return codec.encode(wk.ActionResult(action_id=action_id, result=outcome))


def _decode_outcome(data: bytes) -> Outcome:
    msg = codec.decode_worker_to_server(bytes(data))
    if isinstance(msg, wk.ActionResult):
        return msg.result
    if isinstance(msg, wk.ActionErrored):
        return ActionFailed(msg.code, msg.message)
    raise ProtocolError("bad_outcome", f"unexpected {type(msg).__name__} in codey_actions")


class ClusterRoutes:
    """The database between replicas, as the router's :class:`~codey_server.core.actions.Routes`:
    it moves actions, output and outcomes through ``codey_actions`` and
    ``codey_action_progress``, and feeds what it reads to the
    :class:`~codey_server.core.delivery.Delivery` (whose router keeps every exactly-once rule).

    Two loops, each woken by its notifications and by a poll every :data:`POLL_S`:

    - **pick-up** (the worker's side): the rows without an outcome of the workers linked here
      are carried out (:meth:`Delivery.carry`; the router sends each once), and a row's cancel
      flag becomes a cancel on the worker's socket;
    - **read-back** (the session's side): the outcomes, and before them the output, of the
      actions in flight here whose worker is linked elsewhere. An action whose worker is
      linked here needs neither: its output and outcome come from the socket.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._fed: Delivery | None = None  # set by start()
        self._progress_after: dict[str, int] = {}  # read-back: the last output row read
        self._recording: set[str] = set()  # outcomes being written: not picked up meanwhile
        self._tasks: list[asyncio.Task[None]] = []
        self._pick = asyncio.Event()
        self._read = asyncio.Event()

    @property
    def delivery(self) -> Delivery:
        if self._fed is None:
            raise RuntimeError("ClusterRoutes.start(delivery) was not called")
        return self._fed

    def start(self, delivery: Delivery) -> None:
        """Start the loops that feed ``delivery`` (the one built with these routes) what they
        pick up and read back; its worker links and the cluster's notifications wake them."""
        self._fed = delivery
        self.cluster.on_notify.append(self._on_notify)
        delivery.on_linked.append(self._worker_linked)
        self._pick, self._read = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(kicked_loop(self._pick, self._pick_up,
                                                    "routing actions"),
                                        name="cluster-pick-up"),
                       loop.create_task(kicked_loop(self._read, self._read_back,
                                                    "routing actions"),
                                        name="cluster-read-back")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _worker_linked(self, worker_id: str) -> None:
        self._pick.set()  # the actions written for it are carried out here now

    def _on_notify(self, payload: str) -> None:
        kind, _, key = payload.partition(":")
        if kind in ("o", "p"):
            self._read.set()
        elif kind in ("a", "c") and self.delivery.link(key) is not None:
            self._pick.set()

    # Routes ----------------------------------------------------------------------------------

    async def route(self, worker_id: str, action: wk.ActionMessage, *, here: bool,
                    fence: Fence | None = None) -> tuple[Outcome | None, bool]:
        """Write the action (see :class:`~codey_server.core.actions.Routes`). With a fence,
        in one statement: the lease row must still have the fence's owner and epoch (locked
        ``FOR SHARE`` meanwhile, as an append does), and a row already there must not be of
        a later epoch; else :class:`~codey_server.errors.LeaseLost` and nothing written. A
        take-over's re-send moves the row to its own epoch."""
        params = (action.action_id, worker_id, getattr(action, "session_id", "") or "",
                  codec.encode(action))
        if fence is None:
            rows = await self.cluster.execute(
                "INSERT INTO codey_actions (action_id, worker_id, session_id, action) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (action_id) DO UPDATE "
                "SET worker_id = codey_actions.worker_id "
                "RETURNING outcome, xmax <> 0", params)
        else:
            rows = await self.cluster.execute(
                "WITH lease AS (SELECT 1 FROM codey_leases WHERE name = %s AND owner = %s "
                "AND epoch = %s FOR SHARE) "
                "INSERT INTO codey_actions (action_id, worker_id, session_id, action, epoch) "
                "SELECT %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM lease) "
                "ON CONFLICT (action_id) DO UPDATE SET epoch = excluded.epoch "
                "WHERE coalesce(codey_actions.epoch, 0) <= excluded.epoch "
                "RETURNING outcome, xmax <> 0",
                (fence.lease, fence.owner, fence.epoch, *params, fence.epoch))
            if not rows:
                raise LeaseLost(fence.lease, f"its epoch moved on from {fence.epoch}, or "
                                             f"{action.action_id} was written under a later one")
        # (xmax is set on a row an ON CONFLICT updated: the action was written before)
        existed = bool(rows and rows[0][1])
        if existed:
            self._read.set()  # a take-over: its output (and outcome) are read back now
        if rows and rows[0][0] is not None:  # carried out before (a take-over)
            return _decode_outcome(rows[0][0]), True
        if not here:
            await self.cluster.notify(f"a:{worker_id}")
        return None, existed

    async def record(self, action_id: str, outcome: Outcome) -> None:
        self._recording.add(action_id)
        try:
            # the notification (for the replica the session is on) in the same statement: one
            # round trip, and only when this was the first outcome
            await self.cluster.execute(
                "UPDATE codey_actions SET outcome = %s WHERE action_id = %s "
                "AND outcome IS NULL RETURNING pg_notify(%s, 'o:' || action_id)",
                (_encode_outcome(action_id, outcome), action_id, CHANNEL))
        finally:
            self._recording.discard(action_id)

    async def record_progress(self, progress: wk.ActionProgress) -> None:
        await self.cluster.execute(
            "INSERT INTO codey_action_progress (action_id, data) VALUES (%s, %s) "
            "RETURNING pg_notify(%s, 'p:' || action_id)",
            (progress.action_id, codec.encode(progress), CHANNEL))

    async def cancel_elsewhere(self, worker_id: str, target_action_id: str,
                               session_id: str) -> None:
        await self.cluster.execute("UPDATE codey_actions SET cancel = true WHERE action_id = %s",
                                   (target_action_id,))
        await self.cluster.notify(f"c:{worker_id}")

    # the loops -------------------------------------------------------------------------------


    async def _pick_up(self) -> None:
        """Carry out the open actions of the workers linked here; pass their cancels on."""
        workers = self.delivery.linked_workers()
        if not workers:
            return
        rows = await self.cluster.execute(
            "SELECT action_id, worker_id, session_id, action, cancel FROM codey_actions "
            "WHERE outcome IS NULL AND worker_id = ANY(%s) ORDER BY created", (workers,))
        for action_id, worker_id, session_id, data, cancel in rows:
            if action_id in self._recording:
                continue  # answered here a moment ago
            await self.delivery.carry(worker_id, codec.decode_action(bytes(data)))
            if cancel:  # the router sends it once per link
                await self.delivery.cancel(worker_id, action_id, session_id)

    async def _read_back(self) -> None:
        """The output, then the outcome, of the actions whose worker is elsewhere (an
        outcome is written after all its output: read in this order, none is missed)."""
        open_ids = self.delivery.router.awaiting_elsewhere()
        for gone in set(self._progress_after) - set(open_ids):
            del self._progress_after[gone]
        if not open_ids:
            return
        outcomes = await self.cluster.execute(
            "SELECT action_id, outcome FROM codey_actions WHERE action_id = ANY(%s) "
            "AND outcome IS NOT NULL", (open_ids,))
        listening = [a for a in open_ids if self.delivery.router.wants_progress(a)]
        if listening:
            after = {a: self._progress_after.get(a, 0) for a in listening}
            rows = await self.cluster.execute(
                "SELECT id, action_id, data FROM codey_action_progress "
                "WHERE action_id = ANY(%s) AND id > %s ORDER BY id",
                (listening, min(after.values())))
            for row_id, action_id, data in rows:
                if int(row_id) <= after.get(action_id, 0):
                    continue
                self._progress_after[action_id] = int(row_id)
                msg = codec.decode_worker_to_server(bytes(data))
                if isinstance(msg, wk.ActionProgress):
                    await self.delivery.progressed(action_id, msg)
        for action_id, data in outcomes:
            await self.delivery.answered(action_id, _decode_outcome(data))


class Janitor:
    """Cleans up after dead replicas, on one replica at a time (the ``janitor`` lease): their
    workers are marked disconnected (the workers reconnect elsewhere and come back), their
    pairing requests expired, and old routing rows go."""

    def __init__(self, leases: Leases, engine: Engine,
                 expire_pair_requests: Callable[[float], Awaitable[object]],
                 disconnect_orphans: Callable[[set[str]], Awaitable[object]], *,
                 every_s: float = 2.0) -> None:
        self.leases = leases
        self.engine = engine
        #: expires pairing requests that lapsed more than this many seconds ago
        self.expire_pair_requests = expire_pair_requests
        #: marks disconnected the workers whose socket was on a replica not in the live set
        self.disconnect_orphans = disconnect_orphans
        self.every_s = every_s
        self._task: asyncio.Task[None] | None = None
        self._last_cleanup = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="janitor")

    async def stop(self) -> None:
        await _cancelled(self._task)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                if await self.leases.acquire("janitor"):
                    await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("janitor failed (%s)", err)

    async def sweep(self) -> None:
        live = await self.leases.live_replicas()
        live.add(self.leases.me)
        await self.disconnect_orphans(live)
        # a pairing request taken by a replica that died is never answered: after its expiry
        # (and a minute, in which the live replica that took it does this itself) it goes
        await self.expire_pair_requests(60.0)
        now = asyncio.get_running_loop().time()
        if now - self._last_cleanup > 600:
            self._last_cleanup = now
            await self.leases.cluster.execute(
                "DELETE FROM codey_action_progress WHERE action_id IN (SELECT action_id FROM "
                "codey_actions WHERE created < now() - interval '1 day')")
            await self.leases.cluster.execute(
                "DELETE FROM codey_actions WHERE created < now() - interval '1 day'")
            await self.leases.cluster.execute(
                "DELETE FROM codey_replicas WHERE seen < now() - interval '1 day'")


async def kicked_loop(kick: asyncio.Event, work: Callable[[], Awaitable[None]],
                      what: str) -> None:
    """Run ``work`` whenever ``kick`` is set (a notification) and at least every
    :data:`POLL_S` (a lost notification costs latency, not progress); a failure is logged
    and the next pass tries again."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(kick.wait(), POLL_S)
        kick.clear()
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("%s failed (%s); retrying", what, err)


async def _cancelled(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
