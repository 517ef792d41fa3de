"""codey_worker: the process that runs a Codey server's actions on a developer machine.

Entry point: ``codey-worker`` (:func:`codey_worker.cli.main`). The pieces, from the outside in:
:mod:`~codey_worker.pairing` (link the machine), :mod:`~codey_worker.connection` (the websocket
loop), :mod:`~codey_worker.actions` (exactly-once dispatch to the executors: ``shell`` runs the
``shell`` tool's commands, ``processes`` the ``exec`` tool's processes, then ``fs``, ``patch``,
``mcp``), :mod:`~codey_worker.policy` (the owner's local rules).

The names below are imported lazily, so ``import codey_worker`` stays cheap (the websocket and
MCP libraries load only when used).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    # every Codey package has one version, kept in the protocol package (true from a source
    # tree too, where the installed metadata may be older)
    "__version__": "codey_protocol.version",
    "ActionDispatcher": "codey_worker.actions",
    "ActionRecords": "codey_worker.records",
    "ActionRefused": "codey_worker.confine",
    "CommandRegistry": "codey_worker.shell",
    "ConfigError": "codey_worker.config",
    "Identity": "codey_worker.config",
    "LocalPolicy": "codey_worker.policy",
    "McpManager": "codey_worker.mcp",
    "PatchError": "codey_worker.patch",
    "PairingError": "codey_worker.pairing",
    "Worker": "codey_worker.connection",
    "WorkerConfig": "codey_worker.config",
    "WorkerConsole": "codey_worker.console",
    "WorkerError": "codey_worker.errors",
    "WorkspaceWatcher": "codey_worker.watch",
    "load_config": "codey_worker.config",
    "load_identity": "codey_worker.config",
    "pair": "codey_worker.pairing",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'codey_worker' has no attribute {name!r}")
    return getattr(import_module(module), name)
