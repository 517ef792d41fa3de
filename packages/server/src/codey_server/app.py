"""``create_app(settings)``: the Litestar application — the one place that wires the features.

Each feature keeps its routes in its own package (``board/routes.py``, ``workers/routes.py``,
…); they are listed here. The long-lived parts are in :class:`~codey_server.services.Services`:
started and stopped in the lifespan, and handed to handlers by name (``engine:
NamedDependency[Engine]``) — no module-level mutable state.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from litestar import Litestar
from litestar.di import Provide
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin
from litestar.types import ControllerRouterHandler

from codey_server import http
from codey_server.agent.routes import ConfigController
from codey_server.blobs.routes import BlobsController, qr_svg
from codey_server.board.routes import TasksController
from codey_server.browsers.routes import client_socket, logout
from codey_server.channels.routes import TelegramController
from codey_server.http.access import access_middleware
from codey_server.http.clientaddr import client_address_middleware
from codey_server.http.sessions import SessionsController
from codey_server.http.state import StateController
from codey_server.http.web import web_routes
from codey_server.mcp.routes import McpTokensController, mcp_endpoint
from codey_server.metrics.routes import metrics
from codey_server.providers.routes import AuthController, ProvidersController
from codey_server.schedules.routes import SchedulesController
from codey_server.services import Services
from codey_server.settings import Settings
from codey_server.terminals.routes import TerminalsController, terminal_socket
from codey_server.upgrades.routes import AboutController
from codey_server.workers.downloads import downloads_router
from codey_server.workers.pairing_routes import PairingController
from codey_server.workers.routes import WorkersController, worker_socket
from codey_server.workspaces.routes import WorktreeController

__all__ = ["create_app", "route_handlers"]

#: the parts of :class:`Services` handlers may ask for, each under its own name
PARTS = ("engine", "settings", "clients", "access", "auth", "blobs", "mcp", "mcp_tokens",
         "metrics", "pairing", "agent", "keys", "workers", "actions", "telegram", "terminals",
         "workspaces")


def route_handlers(settings: Settings) -> list[ControllerRouterHandler]:
    """Every route of the server, the static client last (it answers every other path)."""
    return [StateController, ConfigController, SessionsController, PairingController,
            WorkersController, AuthController, ProvidersController, TelegramController, logout,
            client_socket, worker_socket, TerminalsController, terminal_socket, BlobsController,
            qr_svg, downloads_router, McpTokensController, mcp_endpoint, metrics,
            SchedulesController, TasksController, WorktreeController, AboutController,
            *web_routes(settings)]


class _App(Litestar):
    """Litestar without the pydantic and attrs plugins it adds whenever those libraries are
    installed (the mcp and openai SDKs bring pydantic): every type the routes take or give is
    a msgspec struct, and importing the two plugins was most of ``create_app``'s time."""

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        plugins.append(MsgspecDIPlugin())
        return plugins


def _provider(services: Services, part: str) -> Callable[[], Any]:
    def provide() -> Any:
        return getattr(services, part)

    return provide


def create_app(settings: Settings) -> Litestar:
    """Build the app. Services start in the lifespan, so creating an app does no I/O."""
    services = Services(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        app.state.services = services  # for the CLI's signal handler
        await services.start()
        try:
            yield
        finally:
            await services.stop()

    return _App(
        route_handlers=route_handlers(settings),
        dependencies={part: Provide(_provider(services, part), sync_to_thread=False)
                      for part in PARTS},
        # the client's address first: the access checks and every handler see the real one
        middleware=[client_address_middleware(settings), access_middleware(services.access)],
        exception_handlers=http.exception_handlers,
        request_class=http.JSONRequest,
        openapi_config=http.openapi_config(),
        plugins=[http.StructSchemas()],
        lifespan=[lifespan],
        debug=False,
        # Litestar's default config would replace the root handlers (and their secret-masking
        # filter, see logsetup.py) and reset the level; the CLI owns logging
        logging_config=None,
    )
