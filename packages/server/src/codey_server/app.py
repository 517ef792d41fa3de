"""``create_app(settings)``: the Litestar application.

The routes are in :mod:`codey_server.http` (one module per resource), the long-lived parts in
:class:`~codey_server.services.Services`: started and stopped in the lifespan, handed to
handlers by dependency injection — no module-level mutable state.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from litestar import Litestar
from litestar.di import Provide

from codey_server import http
from codey_server.access import access_middleware
from codey_server.services import Services
from codey_server.settings import Settings

__all__ = ["create_app"]


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

    def provide_services() -> Services:
        return services

    return Litestar(
        route_handlers=http.route_handlers(settings),
        dependencies={"services": Provide(provide_services, sync_to_thread=False)},
        middleware=[access_middleware(services.access)],
        exception_handlers=http.exception_handlers,
        request_class=http.JSONRequest,
        openapi_config=http.openapi_config(),
        plugins=[http.ClosedStructs()],
        lifespan=[lifespan],
        debug=False,
        # Litestar's default config would replace the root handlers (and their secret-masking
        # filter, see logsetup.py) and reset the level; the CLI owns logging
        logging_config=None,
    )
