"""The one root exception of ``codey_worker``.

    WorkerError                    anything the worker refuses or fails to do on purpose
      ├── ActionRefused            (codey_worker.confine) an action the worker will not carry
      │                            out; ``code`` is machine-readable ("path_outside_workdir", ...)
      └── PatchError               (codey_worker.patch) a patch that does not parse, does not
                                   apply, or names a path outside its root

Executors turn these into error results; they never cross the wire as tracebacks.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Root of every error the worker raises on purpose. ``str(err)`` is fit to show a user."""
