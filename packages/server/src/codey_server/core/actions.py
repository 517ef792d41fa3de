"""Actions on workers, as the rest of the server sees them: the ports, and how one fails.

The worker sockets (:mod:`codey_server.workers`) implement :class:`WorkerLink` on one server;
among replicas the cluster routes the agent's :class:`Actions` through the database to the
replica that holds the worker's socket. The agent, the terminals and the cluster depend on
these interfaces, never on each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from codey_protocol import worker as wk
from codey_server.errors import ServerError

__all__ = ["ActionFailed", "Actions", "ProgressCallback", "TerminalFrame", "WorkerLink"]

ProgressCallback = Callable[[wk.ActionProgress], Awaitable[None]]
TerminalFrame = wk.TerminalOutput | wk.TerminalEnded


class ActionFailed(ServerError):
    """An action the worker refused or could not carry out (``ActionErrored``), or one that
    can no longer be (revoked, cancelled while the worker was away): ``code``, ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Actions(Protocol):
    """Actions on workers, exactly once per ``action_id`` (the agent's port)."""

    async def ensure_attached(self, worker_id: str, session_id: str, workdir: str, *,
                              timeout: float | None = None) -> None: ...

    async def run(self, worker_id: str, action: wk.ActionMessage, *,
                  on_progress: ProgressCallback | None = None,
                  timeout: float | None = None) -> wk.ActionOutcome:
        """The action's outcome; raises :class:`ActionFailed` or ``TimeoutError``."""

    async def cancel(self, worker_id: str, target_action_id: str, session_id: str) -> None: ...

    def presence(self, worker_id: str) -> asyncio.Event: ...

    def absence(self, worker_id: str) -> asyncio.Event: ...


class WorkerLink(Actions, Protocol):
    """The workers whose sockets are on this server: actions, and frames that are not."""

    #: called with the worker id when a worker connects here
    on_attach: list[Callable[[str], None]]
    #: gets the web terminal's frames from workers
    on_terminal: Callable[[str, TerminalFrame], Awaitable[None]] | None

    def connected(self, worker_id: str) -> bool: ...

    def connected_workers(self) -> list[str]: ...

    async def send_to(self, worker_id: str, msg: wk.ServerToWorker) -> bool:
        """Send a frame that is not an action; False while the worker is not here."""
