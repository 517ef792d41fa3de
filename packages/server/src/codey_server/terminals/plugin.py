"""Web terminals as a plugin: ``/api/terminals`` and ``/ws/terminal/{id}``, their events; the
service between browsers' views and the workers' tmux, whose views close with their login."""

from __future__ import annotations

from codey_server.core.actions import WorkerLink
from codey_server.core.engine import Engine
from codey_server.core.hosting import Hosting
from codey_server.core.presence import Presence
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.terminals import fold
from codey_server.terminals.routes import TerminalsController, terminal_socket
from codey_server.terminals.service import TerminalService

__all__ = ["PLUGIN"]


def _terminals(engine: Engine, workers: WorkerLink, presence: Presence,
               deployment: Hosting) -> TerminalService:
    # among replicas a browser's terminal reaches the worker's replica through the database
    return TerminalService(engine, deployment.terminal_link(workers, presence), presence,
                           routed=deployment.replicated)


PLUGIN = FeaturePlugin(
    "terminals",
    routes=(TerminalsController, terminal_socket),
    fold=fold.FOLD,
    parts=(Part("terminals", _terminals, on_logout=TerminalService.close_views_of),),
)
