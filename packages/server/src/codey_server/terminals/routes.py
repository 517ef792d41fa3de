"""``/api/terminals``: create and close web terminals; ``WS /ws/terminal/{id}``: view one.

The shell runs on the worker in tmux (``codey_worker.terminal``); the bytes go through
:class:`~codey_server.terminals.service.TerminalService`, never into the log.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, WebSocket, post, websocket
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from codey_server.http.access import browser_session
from codey_server.http.errors import errors
from codey_server.http.fields import AbsolutePath
from codey_server.http.resource import Resource
from codey_server.terminals.service import TerminalService, viewer_name

__all__ = ["NewTerminal", "TerminalCreated", "TerminalsController", "terminal_socket"]


class NewTerminal(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    worker_id: str
    workdir: AbsolutePath  # inside the worker's allowed roots
    session_id: str | None = None  # the session whose view opened it, if any


class TerminalCreated(msgspec.Struct, kw_only=True):
    terminal_id: str


class TerminalClosedReply(msgspec.Struct, kw_only=True):
    seq: int


class TerminalsController(Resource):
    path = "/api/terminals"
    tags = ["terminals"]

    @post(status_code=201, responses=errors(400, 403, 404))
    async def create_terminal(self, request: Request[Any, Any, Any],
                              data: JSONBody[NewTerminal],
                              terminals: NamedDependency[TerminalService]) -> TerminalCreated:
        """Start a shell (in tmux) on a worker whose owner enabled the web terminal."""
        terminal_id = await terminals.create(
            data.worker_id, data.workdir, data.session_id, viewer_name(browser_session(request)))
        return TerminalCreated(terminal_id=terminal_id)

    @post("/{terminal_id:str}/close", status_code=200, responses=errors(404))
    async def close_terminal(self, request: Request[Any, Any, Any], terminal_id: FromPath[str],
                             terminals: NamedDependency[TerminalService]) -> TerminalClosedReply:
        """End the shell and every view of it."""
        seq = await terminals.close(terminal_id, viewer_name(browser_session(request)))
        return TerminalClosedReply(seq=seq)


@websocket("/ws/terminal/{terminal_id:str}")
async def terminal_socket(socket: WebSocket[Any, Any, Any], terminal_id: FromPath[str],
                          terminals: NamedDependency[TerminalService], cols: FromQuery[int] = 80,
                          rows: FromQuery[int] = 24) -> None:
    """A logged-in browser's view of a terminal: input and resizes up, output down."""
    await socket.accept()
    session_key = browser_session(socket)
    await terminals.serve(socket, terminal_id, cols, rows, viewer_name(session_key), session_key)
