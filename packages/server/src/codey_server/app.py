"""``create_app(settings)``: the Litestar application, from the feature plugins.

Each feature is a Litestar plugin (:data:`codey_server.features.PLUGINS`, listed once) that
adds its own routes; the static client comes after them all (it answers every other path).
The long-lived parts are in :class:`~codey_server.services.Services`, built from the same
list: started and stopped in the lifespan, and handed to handlers by name (``engine:
NamedDependency[Engine]``, :attr:`~codey_server.services.Services.provided`) — no
module-level mutable state.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from litestar import Litestar
from litestar.di import Provide
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin

from codey_server import http
from codey_server.features import PLUGINS
from codey_server.http.access import access_middleware
from codey_server.http.clientaddr import client_address_middleware
from codey_server.http.web import WebClient
from codey_server.services import Services
from codey_server.settings import Settings

__all__ = ["create_app"]


class _App(Litestar):
    """Litestar without the pydantic and attrs plugins it adds whenever those libraries are
    installed (the mcp and openai SDKs bring pydantic): every type the routes take or give is
    a msgspec struct, and importing the two plugins was most of ``create_app``'s time."""

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        plugins.append(MsgspecDIPlugin())
        return plugins


def _provider(services: Services, name: str) -> Callable[[], Any]:
    def provide() -> Any:
        return getattr(services, name)

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
        dependencies={name: Provide(_provider(services, name), sync_to_thread=False)
                      for name in services.provided},
        # the client's address first: the access checks and every handler see the real one
        middleware=[client_address_middleware(settings), access_middleware(services.access)],
        exception_handlers=http.exception_handlers,
        request_class=http.JSONRequest,
        openapi_config=http.openapi_config(),
        # each feature's routes, in the list's order; then the static client
        plugins=[http.StructSchemas(), *PLUGINS, WebClient(settings)],
        lifespan=[lifespan],
        debug=False,
        # Litestar's default config would replace the root handlers (and their secret-masking
        # filter, see logsetup.py) and reset the level; the CLI owns logging
        logging_config=None,
    )
