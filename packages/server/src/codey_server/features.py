"""The server's features, listed once: :data:`PLUGINS`.

Each feature package exports one plugin (``<feature>/plugin.py``'s ``PLUGIN``, a
:class:`~codey_server.http.plugin.FeaturePlugin`): its routes, its decisions, its part of the
fold and its long-lived parts. Everything else is derived from this list: the engine's rules
(:data:`RULES`; tests fold and decide with :func:`apply` and :func:`decide`), the app's routes
(:func:`codey_server.app.create_app`) and the parts :class:`~codey_server.services.Services`
builds, starts, stops and hands to handlers. Adding a feature is its package and one line here
(and its name in the layers contract of ``pyproject.toml``; ``test_plugins.py`` says so when it
is missing).

The order matters three ways: a part is built from the parts listed before it; the parts start
and stop in the list's order (:mod:`codey_server.http.plugin` gives the steps); and when
several features fold one event, they fold it in this order.
"""

from __future__ import annotations

from codey_server.agent import plugin as agent
from codey_server.blobs import plugin as blobs
from codey_server.board import plugin as board
from codey_server.browsers import plugin as browsers
from codey_server.channels import plugin as channels
from codey_server.checkpoints import plugin as checkpoints
from codey_server.core import decide as core_decide
from codey_server.core import fold as core_fold
from codey_server.core.rules import Rules
from codey_server.http.plugin import FeaturePlugin
from codey_server.http.sessions import SessionsController
from codey_server.http.state import StateController
from codey_server.mcp import plugin as mcp
from codey_server.metrics import plugin as metrics
from codey_server.moves import plugin as moves
from codey_server.providers import plugin as providers
from codey_server.push import plugin as push
from codey_server.schedules import plugin as schedules
from codey_server.terminals import plugin as terminals
from codey_server.triggers import plugin as triggers
from codey_server.upgrades import plugin as upgrades
from codey_server.workers import plugin as workers
from codey_server.workspaces import plugin as workspaces

__all__ = ["CORE", "PLUGINS", "RULES", "apply", "apply_all", "decide"]

#: the core's own: the sessions' and the state's routes (``http/``), its commands and its fold
#: (``core/``: a session's life, project memory); it builds no part of its own (the engine,
#: presence, the delivery and retention are the services' own, built before every plugin)
CORE = FeaturePlugin("core", routes=(StateController, SessionsController),
                     commands=core_decide.COMMANDS, fold=core_fold.FOLD)

PLUGINS: tuple[FeaturePlugin, ...] = (
    CORE,  # first: the other features fold a session's events after it has them
    browsers.PLUGIN,
    workers.PLUGIN,
    providers.PLUGIN,
    agent.PLUGIN,  # after the providers: its model calls take their tokens
    workspaces.PLUGIN,
    terminals.PLUGIN,  # after the workers: it reaches their sockets
    blobs.PLUGIN,
    moves.PLUGIN,  # before the MCP endpoint: its move_session tool uses it
    mcp.PLUGIN,
    schedules.PLUGIN,
    board.PLUGIN,
    triggers.PLUGIN,  # after the board and the schedules: it starts sessions and tasks
    metrics.PLUGIN,  # after the browsers and the agent: it counts their sockets and calls
    channels.PLUGIN,
    push.PLUGIN,
    upgrades.PLUGIN,
    checkpoints.PLUGIN,  # after the agent: its turns ask for checkpoints
)

RULES = Rules(plugin.feature for plugin in PLUGINS)
decide = RULES.decide
apply = RULES.apply
apply_all = RULES.apply_all
