"""Leases, as the agent and the singleton jobs see them (the cluster implements them).

A named lease is held by one replica at a time until it expires; one server alone has none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Leases"]


class Leases(Protocol):
    #: the names this replica holds now
    held: set[str]
    #: told the name of a lease this replica lost (not renewed in time)
    on_lost: list[Callable[[str], None]]

    async def acquire(self, name: str) -> bool: ...

    async def release(self, name: str) -> None: ...

    async def free(self, names: list[str]) -> set[str]:
        """The names nobody holds (or whose holder let them lapse)."""
