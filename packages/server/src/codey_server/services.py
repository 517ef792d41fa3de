"""``Services``: the server's long-lived parts, built from settings, started and stopped once.

Order of calls: ``Services(settings)`` (no I/O beyond creating the data dir) → ``await
start()`` in the app's lifespan → handlers use the parts → ``await stop()``. Each part starts
itself: the engine replays the log, the worker registry marks the sockets that did not survive
a restart, pairing expires requests from before it, the auth service publishes login states,
the agent resumes the sessions that were running, retention starts trimming the log.
Handlers get this object by dependency injection (``services: Services``), never from a
global.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from codey_server.agent.service import AgentService
from codey_server.blobs.store import BlobStore
from codey_server.browsers.sockets import ClientHub
from codey_server.channels.telegram import TelegramChannel
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.presence import Presence
from codey_server.core.retention import Retention
from codey_server.core.rules import Context
from codey_server.core.tails import ProcessTails
from codey_server.eventlog import EventLog, SqliteEventLog
from codey_server.features import RULES
from codey_server.http.access import BrowserAccess
from codey_server.mcp.server import CodeyMcp
from codey_server.mcp.tokens import McpTokens
from codey_server.metrics.collector import ServerMetrics
from codey_server.providers.service import AuthService
from codey_server.schedules.scheduler import Scheduler, file_clock
from codey_server.secretfile import ensure_private_dir
from codey_server.settings import Settings
from codey_server.terminals.service import TerminalService
from codey_server.workers import decide as workers_decide
from codey_server.workers.keys import FileWorkerKeys, WorkerKeys
from codey_server.workers.pairing import Pairing
from codey_server.workers.sockets import WorkerRegistry
from codey_server.workspaces.service import Workspaces

if TYPE_CHECKING:
    from codey_server.cluster.db import SharedDb
    from codey_server.cluster.replicas import Cluster, ClusterRoutes, Janitor, Leases
    from codey_server.cluster.terminals import TerminalRelay

__all__ = ["Services"]


def event_log_for(settings: Settings, replica_id: str = "") -> EventLog:
    """PostgreSQL when ``database_url`` is set (its rows name ``replica_id``), else SQLite in
    the data dir."""
    if settings.database_url:
        from codey_server.eventlog.postgres import PostgresEventLog  # psycopg only when used

        return PostgresEventLog(settings.database_url, name=replica_id)
    return SqliteEventLog(settings.db_path)


def _context(settings: Settings, blobs: BlobStore) -> Context:
    """The defaults ``decide`` fills in: the default provider and each provider's model; and
    whether a prompt's file is stored."""
    # none: "" (a session started now names no provider, rather than one called "default"
    # that nobody made; it takes the first one added in Settings → Models)
    default = settings.default_provider or (
        settings.providers[0].name if settings.providers else "")
    return Context(
        blob_exists=blobs.exists,
        default_provider=default,
        default_models={p.name: (p.default_model or (p.models[0] if p.models else ""))
                        for p in settings.providers},
        file_providers=frozenset(p.name for p in settings.providers),
    )


class Services:
    """Everything the handlers need. Start once, stop once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # the event log holds prompts, command output and file contents
        ensure_private_dir(settings.data_dir)
        # among replicas: the shared state as rows (tokens, sessions, keys, pair requests,
        # logins, files), read on every check, so a delete holds everywhere at once
        self.shared_db: SharedDb | None = None
        shared = _SharedStores(settings) if settings.database_url else None
        if shared is not None:
            self.shared_db = shared.db
        # files sent with prompts, once each by content hash
        self.blobs = shared.blobs if shared else BlobStore(settings.data_dir / "blobs")
        replica = ""
        if settings.database_url:
            from codey_server.cluster.replicas import new_replica_id

            replica = settings.replica_id or new_replica_id()
        self.engine = Engine(event_log_for(settings, replica), RULES,
                             snapshot_every=settings.snapshot_every,
                             context=_context(settings, self.blobs))
        # processes' live output for the browsers: in memory, not in the log (core/tails.py)
        self.tails = ProcessTails()
        self.engine.listeners.append(self.tails.on_event)
        self.clients = ClientHub(self.tails)
        self.keys: WorkerKeys = shared.keys if shared else FileWorkerKeys(
            settings.data_dir / "workers.json")
        self.pairing = Pairing(self.engine, self.keys,
                               store=shared.pair_requests if shared else None)
        # several servers on one PostgreSQL database: leases and routed actions
        self.cluster: Cluster | None = None
        self.leases: Leases | None = None
        self.janitor: Janitor | None = None
        if settings.database_url:
            from codey_server.cluster.replicas import Cluster, Janitor, Leases

            self.cluster = Cluster(settings.database_url, replica)
            self.leases = Leases(self.cluster)
            self.janitor = Janitor(
                self.leases, self.engine,
                expire_pair_requests=self._expire_pair_requests,
                disconnect_orphans=lambda live: self.engine.submit(
                    workers_decide.orphans_disconnected, live))
        # is a worker connected: the fold's answer, for runners, routes and terminals
        self.presence = Presence(self.engine, replica)
        # actions on workers, exactly once (core/router.py); among replicas routed through
        # the database
        self.routes: ClusterRoutes | None = None
        if self.cluster is not None:
            from codey_server.cluster.replicas import ClusterRoutes

            self.routes = ClusterRoutes(self.cluster)
        self.actions = Delivery(self.engine, self.presence, routes=self.routes)
        self.workers = WorkerRegistry(self.engine, self.keys, self.actions, replica=replica,
                                      tails=self.tails)
        self.access = BrowserAccess(settings, shared.access if shared else None)
        self.auth = AuthService(settings, self.engine,
                                store=shared.credentials if shared else None,
                                logins=shared.logins if shared else None)
        # the model's bearer: a stored login or API key, else the provider's api_key_env; a
        # token the provider rejects is refreshed once
        self.agent = AgentService(self.engine, self.actions, settings, self.auth.token_for,
                                  self.auth.refresh_rejected, self.blobs.get,
                                  leases=self.leases, store_blob=self.blobs.put)
        # a session's git worktree: made before its first turn, shipped on the user's word
        self.workspaces = Workspaces(self.engine, self.actions)
        self.retention = Retention(self.engine, settings.retention,
                                   gate=self._gate("retention"))
        # among replicas a browser's terminal reaches the worker's replica through the database
        self.relay: TerminalRelay | None = None
        if self.cluster is not None:
            from codey_server.cluster.terminals import TerminalRelay

            self.relay = TerminalRelay(self.cluster, self.workers, self.presence)
        self.terminals = TerminalService(self.engine, self.relay or self.workers, self.presence,
                                         routed=self.relay is not None)
        # a logout closes every socket that browser login opened
        self.access.on_logout += [self.clients.close_session, self.terminals.close_views_of]
        # Codey as an MCP server, with tokens of its own (shown once, kept as hashes)
        self.mcp_tokens = McpTokens(settings.data_dir / "mcp_tokens.json",
                                    shared.mcp_tokens if shared else None)
        self.mcp = CodeyMcp(self.engine, self.mcp_tokens)
        self.scheduler = Scheduler(
            self.engine, grace_s=settings.schedule_grace_s,
            clock=file_clock(settings.clock_file) if settings.clock_file else time.time,
            gate=self._gate("scheduler"))
        # last: it hooks into the parts above
        self.metrics = ServerMetrics(self.engine, lambda: len(self.clients),
                                     self.agent.providers.values())
        self.telegram = TelegramChannel(settings, self.engine, self.leases,
                                        store=shared.telegram if shared else None)
        self._shared = shared
        if shared is not None:
            # one replica at a time refreshes a provider's token; the next one to take the
            # lock reads the row it wrote and finds nothing due
            self.auth.refresh_guard = lambda provider: shared.db.locked(f"refresh:{provider}")

    async def _expire_pair_requests(self, grace_s: float) -> None:
        """The janitor's sweep: the rows past their expiry (whoever asked), then the log's
        requests a dead replica left listed."""
        await self.pairing.expire_old()
        await self.pairing.expire_lapsed(grace_s=grace_s)

    def _gate(self, lease: str) -> Callable[[], Awaitable[bool]] | None:
        """Among replicas, a job that must run on one of them at a time runs where its lease
        is held, once the state has folded everything committed."""
        if self.leases is None:
            return None
        leases = self.leases

        async def gate() -> bool:
            if not await leases.acquire(lease):
                return False
            await self.engine.catch_up()
            return True

        return gate

    async def start(self) -> None:
        if self._shared is not None:
            await self._shared.open()
        await self.access.start()
        await self.engine.start()
        if self.cluster is not None and self.leases is not None:
            await self.cluster.open()
            await self.leases.beat()
            self.leases.start()
        await self.workers.start()
        if self.routes is not None:
            self.routes.start(self.actions)
        if self.relay is not None:
            await self.relay.start()
        if self.janitor is not None:
            self.janitor.start()
        await self.pairing.start(shared=self.cluster is not None)
        await self.auth.start()
        await self.agent.start()
        await self.workspaces.start()
        self.retention.start()
        self.scheduler.start()  # its first tick runs what was missed while the server was down
        await self.telegram.start()

    async def stop(self) -> None:
        self.clients.begin_shutdown()
        await self.mcp.stop()
        await self.scheduler.stop()
        await self.telegram.stop()
        await self.retention.stop()
        await self.agent.stop()
        await self.workspaces.stop()
        if self.janitor is not None:
            await self.janitor.stop()
        if self.leases is not None:
            await self.leases.stop()  # another replica takes the sessions over at once
        if self.routes is not None:
            await self.routes.stop()
        if self.relay is not None:
            await self.relay.stop()
        await self.actions.stop()
        if self.cluster is not None:
            await self.cluster.close()
        await self.auth.stop()
        await self.access.stop()
        if self.shared_db is not None:
            await self.shared_db.close()
        await self.engine.stop()


class _SharedStores:
    """Every store's PostgreSQL backend, on one :class:`SharedDb` (``--database-url``)."""

    def __init__(self, settings: Settings) -> None:
        # psycopg and the stores' backends only when a database is configured
        from codey_server.blobs.store import PgBlobStore
        from codey_server.channels.telegram_store import PgTelegramStore
        from codey_server.cluster.crypto import SecretKey
        from codey_server.cluster.db import SharedDb
        from codey_server.http.access_store import PgAccessStore
        from codey_server.mcp.tokens import PgMcpTokenStore
        from codey_server.providers.store import PgCredentialStore, PgLoginStore
        from codey_server.workers.keys import PgWorkerKeys
        from codey_server.workers.pair_store import PgPairStore

        assert settings.database_url is not None
        self.data_dir = settings.data_dir
        self.db = SharedDb(settings.database_url)
        key = SecretKey.load(settings.secret_key_file)
        self.access = PgAccessStore(self.db, settings.data_dir)
        self.keys = PgWorkerKeys(self.db)
        self.pair_requests = PgPairStore(self.db)
        self.mcp_tokens = PgMcpTokenStore(self.db)
        self.credentials = PgCredentialStore(self.db, key)
        self.logins = PgLoginStore(self.db, key)
        self.blobs = PgBlobStore(settings.data_dir / "blobs", self.db)
        self.telegram = PgTelegramStore(self.db, key)

    async def open(self) -> None:
        """Open the database; bring in once what an older version kept in files."""
        from codey_server.cluster.upgrade import import_once
        from codey_server.http.access_store import SESSIONS_FILE

        await self.db.open()
        await import_once(self.db, self.data_dir, {
            "workers.json": self.keys.import_file,
            SESSIONS_FILE: self.access.import_sessions,
            "mcp_tokens.json": self.mcp_tokens.import_file,
            "auth.json": self.credentials.import_file,
        })
