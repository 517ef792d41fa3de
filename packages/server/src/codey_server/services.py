"""``Services``: the server's long-lived parts, built from settings, started and stopped once.

Order of calls: ``Services(settings)`` (no I/O beyond creating the data dir) → ``await
start()`` in the app's lifespan → handlers use the parts → ``await stop()``. Each part starts
itself: the engine replays the log, the worker registry marks the sockets that did not survive
a restart, pairing expires requests from before it, the auth service publishes login states,
the agent resumes the sessions that were running, retention starts trimming the log.

What differs between one server and a replica of a cluster (the log, the side stores, the
leases, how actions and terminal frames reach the workers) is the :class:`~codey_server.
deployment.Deployment`'s, chosen once here; this module has no branch on it.
Handlers get this object by dependency injection (``services: Services``), never from a
global.
"""

from __future__ import annotations

import time

from codey_server.agent.service import AgentService
from codey_server.blobs.store import BlobStore
from codey_server.browsers.sockets import ClientHub
from codey_server.channels.telegram import TelegramChannel
from codey_server.core.engine import Engine
from codey_server.core.presence import Presence
from codey_server.core.retention import Retention
from codey_server.core.rules import Context
from codey_server.core.tails import ProcessTails
from codey_server.deployment import deployment_for
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
from codey_server.workers.pairing import Pairing
from codey_server.workers.sockets import WorkerRegistry
from codey_server.workspaces.service import Workspaces

__all__ = ["Services"]


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
        # one server alone, or one replica of a cluster: the log, the side stores, the
        # leases and how actions and terminal frames reach the workers (deployment.py)
        self.deployment = deployment = deployment_for(settings)
        stores = deployment.stores
        # files sent with prompts, once each by content hash
        self.blobs = stores.blobs
        self.engine = Engine(deployment.event_log, RULES, snapshot_every=settings.snapshot_every,
                             context=_context(settings, self.blobs))
        # processes' live output for the browsers: in memory, not in the log (core/tails.py)
        self.tails = ProcessTails()
        self.engine.listeners.append(self.tails.on_event)
        self.clients = ClientHub(self.tails)
        self.keys = stores.worker_keys
        self.pairing = Pairing(self.engine, self.keys, store=stores.pair_requests)
        # is a worker connected: the fold's answer, for runners, routes and terminals
        self.presence = Presence(self.engine, deployment.replica)
        # actions on workers, exactly once (core/router.py); among replicas routed through
        # the database
        self.actions = deployment.delivery(self.engine, self.presence)
        self.workers = WorkerRegistry(self.engine, self.keys, self.actions,
                                      replica=deployment.replica, tails=self.tails)
        self.access = BrowserAccess(settings, stores.access)
        # one replica at a time refreshes a provider's token (deployment.refresh_guard)
        self.auth = AuthService(settings, self.engine, store=stores.credentials,
                                logins=stores.logins, refresh_guard=deployment.refresh_guard)
        # the model's bearer: a stored login or API key, else the provider's api_key_env; a
        # token the provider rejects is refreshed once
        self.agent = AgentService(self.engine, self.actions, settings, self.auth.token_for,
                                  self.auth.refresh_rejected, self.blobs.get,
                                  leases=deployment.leases, store_blob=self.blobs.put)
        # a session's git worktree: made before its first turn, shipped on the user's word
        self.workspaces = Workspaces(self.engine, self.actions)
        self.retention = Retention(self.engine, settings.retention,
                                   gate=deployment.gate("retention", self.engine))
        # among replicas a browser's terminal reaches the worker's replica through the database
        self.terminals = TerminalService(
            self.engine, deployment.terminal_link(self.workers, self.presence), self.presence,
            routed=deployment.replicated)
        # a logout closes every socket that browser login opened
        self.access.on_logout += [self.clients.close_session, self.terminals.close_views_of]
        # Codey as an MCP server, with tokens of its own (shown once, kept as hashes)
        self.mcp_tokens = McpTokens(settings.data_dir / "mcp_tokens.json", stores.mcp_tokens)
        self.mcp = CodeyMcp(self.engine, self.mcp_tokens)
        self.scheduler = Scheduler(
            self.engine, grace_s=settings.schedule_grace_s,
            clock=file_clock(settings.clock_file) if settings.clock_file else time.time,
            gate=deployment.gate("scheduler", self.engine))
        # last: it hooks into the parts above
        self.metrics = ServerMetrics(self.engine, lambda: len(self.clients),
                                     self.agent.providers.values())
        self.telegram = TelegramChannel(settings, self.engine, deployment.leases,
                                        store=stores.telegram)

    async def start(self) -> None:
        await self.deployment.open()  # among replicas: the rows, older files imported once
        await self.access.start()
        await self.engine.start()
        # among replicas: heartbeat and leases, routed actions, the terminal relay, the janitor
        await self.deployment.join(self.engine, self.pairing)
        await self.workers.start()
        await self.pairing.start(shared=self.deployment.replicated)
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
        await self.deployment.leave()  # among replicas the sessions are taken over at once
        await self.actions.stop()
        await self.auth.stop()
        await self.access.stop()
        await self.deployment.close()
        await self.engine.stop()
