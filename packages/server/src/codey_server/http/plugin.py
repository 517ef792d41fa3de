"""Features as Litestar plugins: what a feature package brings to the server, in one object.

Each feature package exports one :class:`FeaturePlugin` as ``PLUGIN`` in its ``plugin.py``:
its routes, the browser commands it decides, its part of the fold, and the long-lived parts it
builds (:class:`Part`). :data:`codey_server.features.PLUGINS` lists them, once; everything
else is derived from that list, in its order:

* the engine's rules (``features.RULES``: every plugin's :attr:`~FeaturePlugin.feature`; when
  several features fold one event, they fold it in the list's order);
* the app's routes (each plugin adds its own in :meth:`~FeaturePlugin.on_app_init`, as
  Litestar's own plugins do; the static client is added after them all);
* the parts :class:`~codey_server.services.Services` builds, starts and stops, and hands to
  handlers by name.

Adding a feature is its package, with a ``plugin.py``, and one line in that list (and its name
in the layers contract of ``pyproject.toml``, which a test checks).

**A part** is built by its ``build``, a function whose parameters name what it is built from:
the server's own parts (``settings``, ``deployment`` — read through
:class:`~codey_server.core.hosting.Hosting` —, ``stores``, ``blobs``, ``engine``, ``tails``,
``presence``, ``actions``) or a part that a plugin before it in the list (or earlier in the same
plugin) built. A name nothing built before is an error when the services are built, not at
the first request. A builder never mutates another part: what one part needs from another is a
parameter.

**Its hooks** (``start``, ``stop``, ``close``, ``on_logout``) take the part first; further
parameters are named as the builder's are. Each may be a coroutine function or a plain one.
``Services`` runs them in this order (within one step, in the list's order)::

    start:  the deployment opens, browser access, the engine replays the log, the deployment
            joins (among replicas) → every part's ``start`` → the core's retention → every
            intake part's ``start``
    stop:   every intake part's ``stop`` → retention → every other part's ``stop`` → the
            deployment leaves, the delivery of actions stops → every part's ``close`` →
            browser access, the deployment closes, the engine (a last snapshot)

An *intake* part brings work in on its own (the browser sockets, the MCP endpoint, the
scheduler, the Telegram bot): it starts once everything that carries work out is running and
stops before any of it, so nothing new arrives while the rest stops. ``close`` is for what the
work in flight uses to its very end (the model providers' tokens), after the deployment left.
``on_logout`` is called with a browser login's key when it logs out (it closes what that login
opened).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from litestar.config.app import AppConfig
from litestar.plugins import InitPlugin
from litestar.types import ControllerRouterHandler

from codey_server.core.rules import Decider, Feature, FoldHandler

__all__ = ["FeaturePlugin", "Hook", "Part"]

#: a part's lifecycle hook: the part first, then named parts (see the module)
Hook = Callable[..., Awaitable[None] | None]


@dataclass(frozen=True)
class Part:
    """One long-lived part a feature builds, under the ``name`` handlers ask for it by."""

    name: str
    #: its parameters name the parts it is built from
    build: Callable[..., object]
    start: Hook | None = None
    stop: Hook | None = None
    #: stopped after the deployment left and the delivery stopped (see the module)
    close: Hook | None = None
    #: brings work in on its own: started after, and stopped before, every other part
    intake: bool = False
    #: called with the part and a browser login's key when that login logs out
    on_logout: Callable[[Any, str], Awaitable[None]] | None = None


class FeaturePlugin(InitPlugin):
    """A feature: its routes, its decisions, its part of the fold and its parts."""

    __slots__ = ("feature", "name", "parts", "routes")

    def __init__(self, name: str, *, routes: Iterable[ControllerRouterHandler] = (),
                 commands: Mapping[type[Any], Decider] | None = None,
                 fold: Mapping[type[Any], FoldHandler] | None = None,
                 parts: Iterable[Part] = ()) -> None:
        self.name = name
        self.routes: tuple[ControllerRouterHandler, ...] = tuple(routes)
        #: its part of the write path and of the fold, as the engine's rules take it
        self.feature = Feature(name, commands=dict(commands or {}), fold=dict(fold or {}))
        self.parts: tuple[Part, ...] = tuple(parts)

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.route_handlers.extend(self.routes)
        return app_config

    def __repr__(self) -> str:
        return f"FeaturePlugin({self.name!r})"
