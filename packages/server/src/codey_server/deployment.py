"""The deployment: one server alone, or one replica of a cluster on PostgreSQL — chosen once,
at start, as one object that provides what differs between the two.

    deployment = deployment_for(settings)   # SingleServer, or Replica with --database-url

What it provides (the rest of the server is the same code either way):

=====================  ===========================================  ===========================
                       :class:`SingleServer`                        :class:`Replica`
=====================  ===========================================  ===========================
``event_log``          SQLite in the data dir                       PostgreSQL (rows name the
                                                                    replica)
``stores``             the data dir's files, this process's memory  rows every replica reads
``leases``             None (nothing to share)                      ``codey_leases``
``delivery()``         actions straight to the worker sockets here  routed through the database
``terminal_link()``    the worker sockets here                      the terminal relay
``gate(name)``         None: the job runs here                      runs where the lease is held
``refresh_guard``      None                                         a database lock per provider
=====================  ===========================================  ===========================

Order of calls: ``deployment_for(settings)`` (no I/O) → the services take its parts →
``await open()`` before anything reads a store (among replicas: the tables, and what an older
version kept in files imported once) → the engine replays the log → ``await join(engine,
pairing)`` (among replicas: the heartbeat and leases begin, then routed actions, the terminal
relay and the janitor) → … → ``await leave()`` once the agent has stopped (leases handed over
at once, the loops stopped) → the delivery stops → ``await close()`` (the pools).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from codey_server.blobs.store import BlobStore
from codey_server.channels.telegram_store import FileTelegramStore, TelegramStore
from codey_server.core.actions import WorkerLink
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.hosting import Gate, Hosting, RefreshGuard
from codey_server.core.leases import Leases
from codey_server.core.presence import Presence
from codey_server.eventlog import EventLog, SqliteEventLog
from codey_server.http.access_store import AccessStore, FileAccessStore
from codey_server.mcp.tokens import FileMcpTokenStore, McpTokenStore
from codey_server.providers.store import (
    CredentialStore,
    FileCredentialStore,
    LoginStore,
    MemoryLoginStore,
)
from codey_server.push.store import FilePushStore, PushStore
from codey_server.settings import Settings
from codey_server.workers import decide as workers_decide
from codey_server.workers.keys import FileWorkerKeys, WorkerKeys
from codey_server.workers.pair_store import MemoryPairStore, PairStore

if TYPE_CHECKING:
    from codey_server.cluster.crypto import SecretKey
    from codey_server.cluster.db import SharedDb
    from codey_server.cluster.replicas import Cluster, ClusterRoutes, Janitor
    from codey_server.cluster.replicas import Leases as ClusterLeases
    from codey_server.cluster.terminals import TerminalRelay
    from codey_server.cluster.upgrade import Importer
    from codey_server.workers.pairing import Pairing

__all__ = ["Deployment", "Replica", "SingleServer", "Stores", "deployment_for", "file_stores",
           "row_stores"]

@dataclass(frozen=True)
class Stores:
    """The side stores: what the server keeps beside the event log (secrets, and state that
    must not be in it). Each has a port and two backends next to its feature, and one
    contract suite (:mod:`codey_server.testing.stores`) both backends pass."""

    #: the access token and browser sessions (``http/access_store.py``)
    access: AccessStore
    #: worker keys and credential hashes (``workers/keys.py``)
    worker_keys: WorkerKeys
    #: pair requests (``workers/pair_store.py``)
    pair_requests: PairStore
    #: MCP tokens (``mcp/tokens.py``)
    mcp_tokens: McpTokenStore
    #: provider credentials (``providers/store.py``)
    credentials: CredentialStore
    #: OAuth logins begun and not called back (``providers/store.py``)
    logins: LoginStore
    #: files sent with prompts (``blobs/store.py``)
    blobs: BlobStore
    #: a pasted Telegram bot token, the pairing code (``channels/telegram_store.py``)
    telegram: TelegramStore
    #: the VAPID key pair and the devices' push subscriptions (``push/store.py``)
    push: PushStore


def file_stores(data: Path) -> Stores:
    """One server's stores: the files in its data dir ``data``, and this process's memory for
    what a restart may forget (pair requests, OAuth logins begun)."""
    return Stores(access=FileAccessStore(data), worker_keys=FileWorkerKeys(data / "workers.json"),
                  pair_requests=MemoryPairStore(),
                  mcp_tokens=FileMcpTokenStore(data / "mcp_tokens.json"),
                  credentials=FileCredentialStore(data / "auth.json"),
                  logins=MemoryLoginStore(), blobs=BlobStore(data / "blobs"),
                  telegram=FileTelegramStore(data / "telegram.json"),
                  push=FilePushStore(data / "push.json"))


class Deployment(Hosting, abc.ABC):
    """What differs between one server and a replica of a cluster (see the module). The
    features' parts see it through :class:`~codey_server.core.hosting.Hosting`."""

    #: this server's name among replicas ("" alone): put on the events of its sockets
    replica: str
    #: whether other servers share the log and the stores (pair requests in the log may be
    #: theirs; a worker may be connected to another server)
    replicated: bool
    event_log: EventLog
    stores: Stores
    #: named leases among replicas (None alone: everything runs here)
    leases: Leases | None
    #: held around a provider's token refresh (None alone)
    refresh_guard: RefreshGuard | None

    @abc.abstractmethod
    def delivery(self, engine: Engine, presence: Presence) -> Delivery:
        """The actions on workers (called once)."""

    @abc.abstractmethod
    def terminal_link(self, sockets: WorkerLink, presence: Presence) -> WorkerLink:
        """What the web terminals reach the workers through (called once): ``sockets``, the
        worker sockets here, or something that reaches the other replicas' too."""

    @abc.abstractmethod
    def gate(self, lease: str, engine: Engine) -> Gate | None:
        """For a job that must run on one server at a time: what it asks before each run
        (None: it always runs here)."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Before anything reads a store."""

    @abc.abstractmethod
    async def join(self, engine: Engine, pairing: Pairing) -> None:
        """Once the engine has replayed the log (``pairing``: for the janitor)."""

    @abc.abstractmethod
    async def leave(self) -> None:
        """Once the agent has stopped (the delivery stops after this)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Last, before the engine stops."""


def deployment_for(settings: Settings) -> Deployment:
    """A :class:`Replica` when ``database_url`` is set, else a :class:`SingleServer`. The one
    place that tells them apart."""
    if settings.database_url:
        return Replica(settings)
    return SingleServer(settings)


class SingleServer(Deployment):
    """One server: SQLite and the data dir's files; no leases, nothing routed."""

    replica = ""
    replicated = False
    leases = None
    refresh_guard = None

    def __init__(self, settings: Settings) -> None:
        self.event_log = SqliteEventLog(settings.db_path)
        self.stores = file_stores(settings.data_dir)

    def delivery(self, engine: Engine, presence: Presence) -> Delivery:
        return Delivery(engine, presence)

    def terminal_link(self, sockets: WorkerLink, presence: Presence) -> WorkerLink:
        return sockets

    def gate(self, lease: str, engine: Engine) -> Gate | None:
        return None

    # each store reads its own files; nothing to open, join, leave or close
    async def open(self) -> None:
        pass

    async def join(self, engine: Engine, pairing: Pairing) -> None:
        pass

    async def leave(self) -> None:
        pass

    async def close(self) -> None:
        pass


class Replica(Deployment):
    """One of several servers on one PostgreSQL database (``--database-url``): the log, the
    stores and the leases in it, actions and terminal frames routed through it, and a janitor
    for dead replicas. psycopg is imported only here."""

    replicated = True

    def __init__(self, settings: Settings) -> None:
        from codey_server.cluster.crypto import SecretKey
        from codey_server.cluster.db import SharedDb
        from codey_server.cluster.replicas import Cluster, ClusterRoutes, new_replica_id
        from codey_server.cluster.replicas import Leases as ClusterLeases
        from codey_server.eventlog.postgres import PostgresEventLog

        assert settings.database_url is not None
        self.settings = settings
        self.replica = settings.replica_id or new_replica_id()
        self.event_log = PostgresEventLog(settings.database_url, name=self.replica)
        #: the shared state as rows (tokens, sessions, keys, pair requests, logins, files),
        #: read on every check, so a delete holds everywhere at once
        self.db: SharedDb = SharedDb(settings.database_url)
        self.stores, self._importers = _row_stores(
            self.db, settings.data_dir, SecretKey.load(settings.secret_key_file))
        #: leases, heartbeats and routed actions
        self.cluster: Cluster = Cluster(settings.database_url, self.replica)
        self._leases: ClusterLeases = ClusterLeases(self.cluster)
        self.leases = self._leases
        self.routes: ClusterRoutes = ClusterRoutes(self.cluster)
        db = self.db
        # one replica at a time refreshes a provider's token; the next one to take the lock
        # reads the row it wrote and finds nothing due
        self.refresh_guard = lambda provider: db.locked(f"refresh:{provider}")
        self._delivery: Delivery | None = None
        self._relay: TerminalRelay | None = None
        self._janitor: Janitor | None = None

    def delivery(self, engine: Engine, presence: Presence) -> Delivery:
        self._delivery = Delivery(engine, presence, routes=self.routes)
        return self._delivery

    def terminal_link(self, sockets: WorkerLink, presence: Presence) -> WorkerLink:
        from codey_server.cluster.terminals import TerminalRelay

        self._relay = TerminalRelay(self.cluster, sockets, presence)
        return self._relay

    def gate(self, lease: str, engine: Engine) -> Gate | None:
        """The job runs where its lease is held, once the state has folded everything
        committed."""
        leases = self._leases

        async def gate() -> bool:
            if not await leases.acquire(lease):
                return False
            await engine.catch_up()
            return True

        return gate

    async def open(self) -> None:
        """Open the rows' database; bring in once what an older version kept in files."""
        from codey_server.cluster.upgrade import import_once

        await self.db.open()
        await import_once(self.db, self.settings.data_dir, self._importers)

    async def join(self, engine: Engine, pairing: Pairing) -> None:
        """Join the cluster: the heartbeat and leases, then routed actions, the terminal
        relay and the janitor."""
        from codey_server.cluster.replicas import Janitor

        await self.cluster.open()
        await self._leases.beat()
        self._leases.start()
        if self._delivery is not None:
            self.routes.start(self._delivery)
        if self._relay is not None:
            await self._relay.start()

        async def expire_pair_requests(grace_s: float) -> None:
            # the rows past their expiry (whoever asked), then the log's requests a dead
            # replica left listed
            await pairing.expire_old()
            await pairing.expire_lapsed(grace_s=grace_s)

        self._janitor = Janitor(
            self._leases, engine, expire_pair_requests=expire_pair_requests,
            disconnect_orphans=lambda live: engine.submit(workers_decide.orphans_disconnected,
                                                          live))
        self._janitor.start()

    async def leave(self) -> None:
        if self._janitor is not None:
            await self._janitor.stop()
        await self._leases.stop()  # another replica takes the sessions over at once
        await self.routes.stop()
        if self._relay is not None:
            await self._relay.stop()

    async def close(self) -> None:
        await self.cluster.close()
        await self.db.close()


def row_stores(db: SharedDb, data: Path, key: SecretKey | None) -> Stores:
    """Every side store's PostgreSQL backend, on one opened or unopened :class:`SharedDb`
    (``data``: the data dir, for the blobs' copies; ``key``: what seals secrets)."""
    return _row_stores(db, data, key)[0]


def _row_stores(db: SharedDb, data: Path, key: SecretKey | None
                ) -> tuple[Stores, dict[str, Importer]]:
    """:func:`row_stores`, and what imports each file an older version kept (by its name in
    the data dir)."""
    from codey_server.blobs.store import PgBlobStore
    from codey_server.channels.telegram_store import PgTelegramStore
    from codey_server.http.access_store import SESSIONS_FILE, PgAccessStore
    from codey_server.mcp.tokens import PgMcpTokenStore
    from codey_server.providers.store import PgCredentialStore, PgLoginStore
    from codey_server.push.store import PgPushStore
    from codey_server.workers.keys import PgWorkerKeys
    from codey_server.workers.pair_store import PgPairStore

    access, keys = PgAccessStore(db, data), PgWorkerKeys(db)
    mcp_tokens, credentials = PgMcpTokenStore(db), PgCredentialStore(db, key)
    stores = Stores(access=access, worker_keys=keys, pair_requests=PgPairStore(db),
                    mcp_tokens=mcp_tokens, credentials=credentials,
                    logins=PgLoginStore(db, key),
                    blobs=PgBlobStore(data / "blobs", db),
                    telegram=PgTelegramStore(db, key), push=PgPushStore(db, key))
    return stores, {"workers.json": keys.import_file, SESSIONS_FILE: access.import_sessions,
                    "mcp_tokens.json": mcp_tokens.import_file,
                    "auth.json": credentials.import_file}
