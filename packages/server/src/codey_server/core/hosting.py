"""The deployment as the features' parts see it: what a part is built from where it matters
whether this server runs alone or as one replica of a cluster.

:class:`codey_server.deployment.Deployment` implements it (``SingleServer`` or ``Replica``,
chosen once at start). The features never import that module (it sits above them: it builds
their stores); a part's builder asks for ``deployment`` and reads it through this port, the way
the agent reads leases through :class:`~codey_server.core.leases.Leases`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from codey_server.core.actions import WorkerLink
from codey_server.core.engine import Engine
from codey_server.core.leases import Leases
from codey_server.core.presence import Presence

__all__ = ["Gate", "Hosting", "RefreshGuard"]

#: a job that must run on one server at a time asks this before each run (see ``gate``)
Gate = Callable[[], Awaitable[bool]]
#: held around a provider's token refresh
RefreshGuard = Callable[[str], AbstractAsyncContextManager[None]]


class Hosting(Protocol):
    """One server alone, or one replica of a cluster, as a part's builder sees it."""

    #: this server's name among replicas ("" alone): put on the events of its sockets
    replica: str
    #: whether other servers share the log and the stores
    replicated: bool
    #: named leases among replicas (None alone: everything runs here)
    leases: Leases | None
    #: held around a provider's token refresh (None alone)
    refresh_guard: RefreshGuard | None

    def gate(self, lease: str, engine: Engine) -> Gate | None:
        """For a job that must run on one server at a time: what it asks before each run
        (None: it always runs here)."""
        ...

    def terminal_link(self, sockets: WorkerLink, presence: Presence) -> WorkerLink:
        """What the web terminals reach the workers through (called once)."""
        ...
