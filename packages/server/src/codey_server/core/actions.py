"""Actions on workers, as the rest of the server sees them: the ports, and how one fails.

:class:`~codey_server.core.delivery.Delivery` implements :class:`Actions` (the agent's port)
over :class:`~codey_server.core.router.Router`. Its two transports plug in here: the worker
sockets (:mod:`codey_server.workers`) give it a :class:`Link` per connected worker, and among
replicas the cluster gives it :class:`Routes` through the database. The sockets also
implement :class:`WorkerLink`, for frames that are not actions (the web terminal). The
agent, the terminals, the workers and the cluster depend on these interfaces, never on each
other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from codey_protocol import worker as wk
from codey_server.errors import ServerError
from codey_server.eventlog.base import Fence

__all__ = ["ActionFailed", "Actions", "Link", "ProgressCallback", "Routes", "TerminalFrame",
           "WorkerLink"]

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
                              timeout: float | None = None) -> list[wk.McpServerInfo]:
        """Attach the session on the worker's current connection (once per connection; raises
        :class:`ActionFailed` when the worker refuses the workdir). Returns its MCP servers'
        tools as the worker listed them in the session's workdir when it attached it (the
        same list object while that attachment lasts); ``[]`` when not known here (attached
        by the worker's process before this connection, or a worker that reports none)."""

    async def run(self, worker_id: str, action: wk.ActionMessage, *,
                  on_progress: ProgressCallback | None = None,
                  timeout: float | None = None, skip: int = 0,
                  fence: Fence | None = None) -> wk.ActionOutcome:
        """The action's outcome; raises :class:`ActionFailed` or ``TimeoutError``.

        ``skip``: characters of the action's output the caller already has (the log shows
        them): left out when the output comes again from its start (among replicas, after
        a take-over). ``fence`` (among replicas, a session's runner): the action is written
        for the replicas only while that lease holding is current; raises
        :class:`~codey_server.errors.LeaseLost` otherwise, and nothing is sent.
        """

    async def cancel(self, worker_id: str, target_action_id: str, session_id: str) -> None:
        """Stop an action; its own outcome says how it ended ("cancelled while the worker
        was away" when nothing could reach it)."""

    def presence(self, worker_id: str) -> asyncio.Event:
        """Set while the worker is connected (to any replica), as folded."""

    def absence(self, worker_id: str) -> asyncio.Event:
        """Set while it is not."""


class Link(Protocol):
    """One worker's connection to this server, as the router sends on it."""

    async def send(self, msg: wk.ServerToWorker) -> None:
        """Send one frame; raises when the connection is broken (its end re-sends)."""


class Routes(Protocol):
    """Among replicas: the database that carries actions to the replica holding the worker,
    and their output and outcomes back (:mod:`codey_server.cluster`)."""

    async def route(self, worker_id: str, action: wk.ActionMessage, *, here: bool,
                    fence: Fence | None = None,
                    ) -> tuple[wk.ActionOutcome | ActionFailed | None, bool]:
        """Write the action for the replicas (once per id); returns the outcome already
        recorded for it, if any, and whether it had been written before (by an earlier
        runner of its session: a take-over). ``here``: its worker is linked to this server
        (wake nobody). ``fence``: raise :class:`~codey_server.errors.LeaseLost`, writing
        nothing, when that holding is not current or the action was written under a later
        one."""

    async def record(self, action_id: str, outcome: wk.ActionOutcome | ActionFailed) -> None:
        """Write the action's outcome, unless one is there already."""

    async def record_progress(self, progress: wk.ActionProgress) -> None:
        """Write output of an action carried out here for another replica."""

    async def cancel_elsewhere(self, worker_id: str, target_action_id: str,
                               session_id: str) -> None:
        """Ask the replica holding the worker to cancel the target."""


class WorkerLink(Protocol):
    """The worker sockets of this server, for frames that are not actions."""

    #: gets the web terminal's frames from workers
    on_terminal: Callable[[str, TerminalFrame], Awaitable[None]] | None

    async def send_to(self, worker_id: str, msg: wk.ServerToWorker) -> bool:
        """Send a frame that is not an action; False while the worker is not here."""
