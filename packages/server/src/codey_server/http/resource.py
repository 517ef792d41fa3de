"""``Resource``, the base of every controller.

Handlers ask for the server's parts by name, typed with Litestar's ``NamedDependency``
(``engine: NamedDependency[Engine]``): ``create_app`` provides each of
:class:`~codey_server.services.Services`' parts under its attribute name, so a feature's routes
import only the types they use, never the services that hold every feature.

A ``Resource`` is a Litestar ``Controller`` whose paths answer ``OPTIONS`` with all their
methods: Litestar 2 builds a path's ``OPTIONS`` answer when the path's first handler is registered
and never updates it, so a path served by two handlers (``GET`` and ``POST /api/sessions``)
answered ``Allow: GET, OPTIONS`` (litestar#4169, fixed in Litestar 3). ``as_router`` rebuilds
each path once all its handlers are known, which gives it a correct answer.
"""

from __future__ import annotations

from litestar import Controller, Router
from litestar.routes import ASGIRoute, HTTPRoute, WebSocketRoute

__all__ = ["Resource"]

Route = HTTPRoute | ASGIRoute | WebSocketRoute


def _rebuilt(route: Route) -> Route:
    if not isinstance(route, HTTPRoute):
        return route
    own = [h for h in route.route_handlers if "OPTIONS" not in h.http_methods]
    return HTTPRoute(path=route.path, route_handlers=own)


class Resource(Controller):
    """Use it like ``Controller``."""

    def as_router(self) -> Router:
        router = super().as_router()
        router.routes = [_rebuilt(route) for route in router.routes]
        return router
