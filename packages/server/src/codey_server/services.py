"""``Services``: the server's long-lived parts, built from settings and the feature plugins,
started and stopped once.

Order of calls: ``Services(settings)`` (no I/O beyond creating the data dir) → ``await
start()`` in the app's lifespan → handlers use the parts → ``await stop()``.

What it builds itself, the parts every feature is built on: the deployment (one server alone,
or one replica of a cluster: the log, the side stores, the leases, how actions and terminal
frames reach the workers — :class:`~codey_server.deployment.Deployment`, chosen once here;
this module has no branch on it), the engine, the processes' live output, presence, the
delivery of actions, retention and browser access. Then each plugin's parts
(:class:`~codey_server.http.plugin.Part`), in the order of
:data:`codey_server.features.PLUGINS`, each from the parts it names; and browser access last,
with what a logout closes. :mod:`codey_server.http.plugin` gives the order of the hooks.

Each part starts itself: the engine replays the log, the worker registry marks the sockets
that did not survive a restart, pairing expires requests from before it, the auth service
publishes login states, the agent resumes the sessions that were running, retention starts
trimming the log. Handlers get the parts by dependency injection, by name (``engine:
NamedDependency[Engine]``: :attr:`Services.provided`), never from a global.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from codey_server.blobs.store import BlobStore
from codey_server.core.engine import Engine
from codey_server.core.presence import Presence
from codey_server.core.retention import Retention
from codey_server.core.rules import Context
from codey_server.core.tails import ProcessTails
from codey_server.deployment import deployment_for
from codey_server.errors import ServerError
from codey_server.features import PLUGINS, RULES
from codey_server.http.access import BrowserAccess
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.secretfile import ensure_private_dir
from codey_server.settings import Settings
from codey_server.workers.pairing import Pairing

__all__ = ["PluginError", "Services"]

#: the server's own parts handed to handlers by name (each plugin's parts are handed too)
_PROVIDED = ("settings", "engine", "actions", "blobs", "access")


class PluginError(ServerError):
    """A plugin's part asks for a name nothing built before it provides."""


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
        goal_max_turns=settings.goal_max_turns,
    )


Step = Callable[[], Awaitable[None] | None]


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
        # is a worker connected: the fold's answer, for runners, routes and terminals
        self.presence = Presence(self.engine, deployment.replica)
        # actions on workers, exactly once (core/router.py); among replicas routed through
        # the database
        self.actions = deployment.delivery(self.engine, self.presence)
        self.retention = Retention(self.engine, settings.retention,
                                   gate=deployment.gate("retention", self.engine))
        #: every part by name: the server's own (what a plugin's part may be built from), then
        #: each plugin's
        self.parts: dict[str, Any] = {
            "settings": settings, "deployment": deployment, "stores": stores,
            "blobs": self.blobs, "engine": self.engine, "tails": self.tails,
            "presence": self.presence, "actions": self.actions}
        self._own = frozenset(self.parts)
        self._starts: list[Step] = []
        self._intake_starts: list[Step] = []
        self._intake_stops: list[Step] = []
        self._stops: list[Step] = []
        self._closes: list[Step] = []
        on_logout: list[Callable[[str], Awaitable[None]]] = []
        for plugin in PLUGINS:
            for part in plugin.parts:
                self._build(plugin, part, on_logout)
        # last: a logout closes every socket that browser login opened
        self.access = BrowserAccess(settings, stores.access, on_logout=on_logout)

    def _build(self, plugin: FeaturePlugin, part: Part,
               on_logout: list[Callable[[str], Awaitable[None]]]) -> None:
        if part.name in self.parts:
            raise PluginError(f"{plugin.name}'s part {part.name!r}: the name is taken")
        built = part.build(**self._named(plugin, part, part.build))
        self.parts[part.name] = built
        for hook, steps in ((part.start, self._intake_starts if part.intake else self._starts),
                            (part.stop, self._intake_stops if part.intake else self._stops),
                            (part.close, self._closes)):
            if hook is not None:
                steps.append(functools.partial(hook, built,
                                               **self._named(plugin, part, hook, skip=1)))
        if part.on_logout is not None:
            on_logout.append(functools.partial(part.on_logout, built))

    def _named(self, plugin: FeaturePlugin, part: Part, fn: Callable[..., Any],
               skip: int = 0) -> dict[str, Any]:
        """The parts ``fn``'s parameters name (after the first ``skip``)."""
        names = list(inspect.signature(fn).parameters)[skip:]
        missing = [n for n in names if n not in self.parts]
        if missing:
            raise PluginError(f"{plugin.name}'s part {part.name!r} needs {', '.join(missing)}: "
                              "nothing listed before it has that name")
        return {n: self.parts[n] for n in names}

    @property
    def provided(self) -> dict[str, Any]:
        """What handlers may ask for, by name: the engine, settings, actions, blobs, browser
        access, and every plugin's parts."""
        return {**{name: getattr(self, name) for name in _PROVIDED},
                **{name: part for name, part in self.parts.items() if name not in self._own}}

    def __getattr__(self, name: str) -> Any:
        # a plugin's part as an attribute (``services.agent``, ``services.clients``), as the
        # CLI and the app's state use them
        parts = self.__dict__.get("parts", {})
        if name in parts:
            return parts[name]
        raise AttributeError(name)

    async def start(self) -> None:
        await self.deployment.open()  # among replicas: the rows, older files imported once
        await self.access.start()
        await self.engine.start()
        # among replicas: heartbeat and leases, routed actions, the terminal relay, the janitor
        # (which expires the pair requests a dead replica left: the workers' pairing)
        pairing: Pairing = self.parts["pairing"]
        await self.deployment.join(self.engine, pairing)
        await _run(self._starts)
        self.retention.start()
        # the scheduler's first tick runs what was missed while the server was down
        await _run(self._intake_starts)

    async def stop(self) -> None:
        await _run(self._intake_stops)  # nothing new comes in while the rest stops
        await self.retention.stop()
        await _run(self._stops)
        await self.deployment.leave()  # among replicas the sessions are taken over at once
        await self.actions.stop()
        await _run(self._closes)
        await self.access.stop()
        await self.deployment.close()
        await self.engine.stop()


async def _run(steps: list[Step]) -> None:
    for step in steps:
        result = step()
        if inspect.isawaitable(result):
            await result
