"""The HTTP API's shared parts, and the routes of the core (sessions, state).

    access.py    who may call what: the access token, browser sessions, Host/Origin checks,
                 the route marks (``opt=PUBLIC``, ``opt=UNPAIRED_WORKER``)
    clientaddr.py  the client's address behind trusted proxies (``X-Forwarded-For``)
    errors.py    the error hierarchy → HTTP statuses, the error body, documented 4xx
    fields.py    request fields with their rules in their types (pattern, length)
    openapi.py   the OpenAPI document at /schema
    resource.py  the controllers' base: OPTIONS lists every method of a path
    web.py       the static client at / and /favicon.ico
    state.py     GET /api/health, /api/state/bootstrap
    sessions.py  /api/sessions/...: create, read, prompt, approvals, policy, interrupt,
                 compact, log
    plugin.py    ``FeaturePlugin`` and ``Part``: what a feature brings to the server (its
                 routes, decisions, fold and long-lived parts), as a Litestar plugin

Each feature keeps its own routes in its package (``board/routes.py``, ``workers/routes.py``,
…) and lists them in its plugin (``board/plugin.py``); the core's (state, sessions) are in
``codey_server.features.CORE``. :func:`codey_server.app.create_app` takes every plugin.

Who may call a route is marked on the route (``opt=PUBLIC`` / ``opt=UNPAIRED_WORKER`` from
:mod:`codey_server.http.access`; no mark: a logged-in browser). Handlers ask for the parts
they use by name (``engine: NamedDependency[Engine]``). Bodies and answers are msgspec
structs, so the OpenAPI document at ``/schema`` describes every one of them.

To add a route: put it in its feature's controller (or a new module with its own
``Resource`` controller, listed in its feature's ``plugin.py``), type its body and answer as
structs, with the body's rules in its types (``fields.py``), mark it if it is not for a
logged-in browser, list its error statuses with ``errors(...)``, and add a real request for it to
``tests/integration/test_openapi.py`` (``test_schemathesis.py`` then tries many).
"""

from codey_server.http.errors import JSONRequest, exception_handlers
from codey_server.http.openapi import StructSchemas, openapi_config

__all__ = ["JSONRequest", "StructSchemas", "exception_handlers", "openapi_config"]
