"""Where the worker keeps its files: ``$CODEY_HOME``, else ``~/.codey``.

Alone in its module, below everything that needs it: the executors (:mod:`codey_worker.shell`,
:mod:`codey_worker.processes`, :mod:`codey_worker.mcp`, :mod:`codey_worker.search`) detect the
sandbox there, and :mod:`codey_worker.config` reads its files there — and config imports what
the executors hold (an ACP agent's settings), so the executors cannot import config.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["codey_home"]


def codey_home(env: dict[str, str] | None = None) -> Path:
    """``$CODEY_HOME`` if set (``~`` expanded), else ``~/.codey``."""
    source = os.environ if env is None else env
    value = source.get("CODEY_HOME")
    return Path(os.path.expanduser(value)) if value else Path.home() / ".codey"
