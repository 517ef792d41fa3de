"""Leases, as the agent and the singleton jobs see them (the cluster implements them).

A named lease is held by one replica at a time until it expires; one server alone has none.
Each holding has an **epoch**, raised by every take (free, expired or someone else's) and kept
by renewals. A :class:`Fence` is what a writer carries: the lease, the epoch it was taken with
and its owner. A write that carries one is checked by the store against the lease row in the
same transaction (Kleppmann's fencing token), so a replica that was paused past its lease and
woke up still believing it holds it cannot write after the replica that took it over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from codey_server.eventlog.base import Fence  # (below the core: the log checks fences)

__all__ = ["Fence", "Leases"]


class Leases(Protocol):
    #: the names this replica holds now
    held: set[str]
    #: told the name of a lease this replica lost (not renewed in time)
    on_lost: list[Callable[[str], None]]

    async def acquire(self, name: str) -> bool: ...

    async def release(self, name: str) -> None: ...

    async def free(self, names: list[str]) -> set[str]:
        """The names nobody holds (or whose holder let them lapse)."""

    def fence(self, name: str) -> Fence | None:
        """The fence of the lease as held now (None when not held here)."""
