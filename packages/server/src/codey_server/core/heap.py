"""Handing the C heap's free pages back to the system, after the server's big transient
buffers (issue 36).

A snapshot encodes the whole state into one buffer (megabytes after a few thousand tool
steps), and every model call builds its request body (the whole conversation) in one. glibc
serves a block that big with its own ``mmap`` the first time, and once such a block is freed
it raises its threshold to that block's size: from then on, such buffers come from the heap,
and the pages they leave free stay resident, because glibc only gives back the top of its
heap by itself. ``scripts/bench/soak.py`` measured 9 MiB of a server's 128 MiB held that way
after 10,000 tool steps, growing with the sessions' conversations. ``malloc_trim(0)`` gives
back every free page; the engine calls it after each snapshot (every 5,000 events by
default), where it has just freed the biggest of those buffers.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["release_free_memory"]

#: glibc's ``malloc_trim``, looked up at the first call (ctypes is not imported at start);
#: None where there is none
_trim: Callable[[int], int] | None = None
_looked_up = False


def release_free_memory() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); False
    where there is no such call (musl, macOS)."""
    global _trim, _looked_up
    if not _looked_up:
        _looked_up = True
        try:
            import ctypes

            _trim = ctypes.CDLL(None).malloc_trim
        except (ImportError, OSError, AttributeError):
            _trim = None
    if _trim is None:
        return False
    _trim(0)
    return True
