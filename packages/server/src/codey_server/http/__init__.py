"""The HTTP and WebSocket API: one module per resource, each route in one place.

    state.py     GET /api/health, /api/state/bootstrap, /api/config
    sessions.py  /api/sessions/...: create, read, prompt, approvals, policy, interrupt,
                 compact, log
    pairing.py   /api/pairing/...: the worker's request and long poll, the browser's decision
    workers.py   /api/workers/{id}/revoke and /actions
    auth.py      /api/auth/... (model-provider login) and /api/logout (this browser)
    sockets.py   WS /ws/client and WS /ws/worker
    terminals.py /api/terminals (create, close) and WS /ws/terminal/{id} (one view)
    mcp.py       /mcp (Codey as an MCP server) and /api/mcp/tokens (its tokens)
    metrics.py   GET /metrics (Prometheus)
    schedules.py /api/schedules: create, change, delete, run now
    tasks.py     /api/tasks: the task board (create, change, move, delete, run)
    web.py       the static client at / and /favicon.ico
    telegram.py  /api/telegram/...: the Telegram channel's token, pairing code, chats, webhook
    files.py     /api/blobs (files sent with prompts) and /api/qr.svg (the pairing link)
    (elsewhere)  /dl/, the worker's wheels for the install line (codey_server.downloads)
    errors.py    the error hierarchy → HTTP statuses, the error body, documented 4xx
    openapi.py   the OpenAPI document at /schema
    resource.py  the controllers' base: OPTIONS lists every method of a path

Who may call a route is marked on the route (``opt=PUBLIC`` / ``opt=UNPAIRED_WORKER`` from
:mod:`codey_server.access`; no mark: a logged-in browser). Handlers get
:class:`~codey_server.services.Services` by dependency injection. Bodies and answers are
msgspec structs, so the OpenAPI document at ``/schema`` describes every one of them.

To add a route: put it in its resource's controller (or a new module with its own
``Resource`` controller, listed in :func:`route_handlers`), type its body and answer as
structs, mark it if it is not for a logged-in browser, list its error statuses with
``errors(...)``, and add a real request for it to ``tests/integration/test_openapi.py``.
"""

from __future__ import annotations

from litestar.types import ControllerRouterHandler

from codey_server.downloads import downloads_router
from codey_server.http.auth import AuthController, logout
from codey_server.http.errors import JSONRequest, exception_handlers
from codey_server.http.files import BlobsController, qr_svg
from codey_server.http.mcp import McpTokensController, mcp_endpoint
from codey_server.http.metrics import metrics
from codey_server.http.openapi import ClosedStructs, openapi_config
from codey_server.http.pairing import PairingController
from codey_server.http.schedules import SchedulesController
from codey_server.http.sessions import SessionsController
from codey_server.http.sockets import client_socket, worker_socket
from codey_server.http.state import StateController
from codey_server.http.tasks import TasksController
from codey_server.http.telegram import TelegramController
from codey_server.http.terminals import TerminalsController, terminal_socket
from codey_server.http.web import web_routes
from codey_server.http.workers import WorkersController
from codey_server.settings import Settings

__all__ = ["ClosedStructs", "JSONRequest", "exception_handlers", "openapi_config",
           "route_handlers"]


def route_handlers(settings: Settings) -> list[ControllerRouterHandler]:
    """Every route of the server, the static client last (it answers every other path)."""
    return [StateController, SessionsController, PairingController, WorkersController,
            AuthController, TelegramController, logout, client_socket, worker_socket,
            TerminalsController, terminal_socket, BlobsController, qr_svg, downloads_router,
            McpTokensController, mcp_endpoint, metrics, SchedulesController, TasksController,
            *web_routes(settings)]
