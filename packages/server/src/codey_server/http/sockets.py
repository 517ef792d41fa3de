"""``WS /ws/client`` (browsers) and ``WS /ws/worker`` (workers): accept, then hand the socket
to its protocol — :func:`~codey_server.clients.serve_client` and
:func:`~codey_server.workers.serve_worker` hold everything that happens on it."""

from __future__ import annotations

from typing import Any

from litestar import WebSocket, websocket

from codey_server.access import UNPAIRED_WORKER, browser_session
from codey_server.clients import serve_client
from codey_server.http.resource import ServicesDep
from codey_server.workers import serve_worker

__all__ = ["client_socket", "worker_socket"]


@websocket("/ws/client")
async def client_socket(socket: WebSocket[Any, Any, Any], services: ServicesDep) -> None:
    """A logged-in browser: subscribe, then events down and commands up."""
    await socket.accept()
    await serve_client(socket, services.engine, services.clients,
                       batch=services.settings.catchup_batch,
                       queue_max=services.settings.client_queue_max,
                       send_timeout=services.settings.client_send_timeout_s,
                       session_key=browser_session(socket))


# no login: a worker proves itself by signing the server's challenge
@websocket("/ws/worker", opt=UNPAIRED_WORKER)
async def worker_socket(socket: WebSocket[Any, Any, Any], services: ServicesDep) -> None:
    """A paired worker: the signed handshake, hello, then actions down and events up."""
    await socket.accept()
    await serve_worker(socket, services.workers,
                       silence_s=services.settings.worker_silence_s)
