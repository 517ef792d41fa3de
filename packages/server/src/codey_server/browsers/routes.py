"""``WS /ws/client``: a logged-in browser's socket; ``POST /api/logout``: its session's end."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, WebSocket, post, websocket
from litestar.di import NamedDependency

from codey_server.browsers.sockets import ClientHub, serve_client
from codey_server.core.engine import Engine
from codey_server.http.access import BrowserAccess, browser_session
from codey_server.http.errors import errors
from codey_server.settings import Settings

__all__ = ["LoggedOut", "client_socket", "logout"]


class LoggedOut(msgspec.Struct, kw_only=True):
    logged_out: bool


@websocket("/ws/client")
async def client_socket(socket: WebSocket[Any, Any, Any], engine: NamedDependency[Engine],
                        clients: NamedDependency[ClientHub],
                            settings: NamedDependency[Settings]) -> None:
    """A logged-in browser: subscribe, then events down and commands up."""
    await socket.accept()
    await serve_client(socket, engine, clients,
                       batch=settings.catchup_batch,
                       queue_max=settings.client_queue_max,
                       send_timeout=settings.client_send_timeout_s,
                       session_key=browser_session(socket))


@post("/api/logout", status_code=200, tags=["auth"], responses=errors())
async def logout(request: Request[Any, Any, Any],
                 access: NamedDependency[BrowserAccess]) -> Response[LoggedOut]:
    """End this browser's session: the cookie stops working and every socket it opened (the
    browser's, its terminals') closes with 4401."""
    session = browser_session(request)
    if session is not None:
        await access.log_out(session)
    return Response(LoggedOut(logged_out=True), cookies=[access.cleared_cookie()],
                    headers={"cache-control": "no-store"})
