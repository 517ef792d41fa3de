"""What the upgrades package raises (under :class:`~codey_server.errors.ServerError`)::

    UpgradeError          the data's format cannot be checked or brought up to date
      ├── DataTooNew      a newer release wrote the data (or a format no release wrote)
      └── BackupRefused   a backup or a restore that cannot be done as asked

Each carries one line for the user (``str(err)``), printed as it is: no traceback.
"""

from __future__ import annotations

from codey_server.errors import ServerError

__all__ = ["BackupRefused", "DataTooNew", "UpgradeError"]


class UpgradeError(ServerError):
    """The data's format cannot be checked or brought up to date (a marker that does not
    read, a migration that failed)."""


class DataTooNew(UpgradeError):
    """The data is in a format this code does not read: refuse to start."""


class BackupRefused(UpgradeError):
    """A backup or restore that cannot be done as asked (a target that is not empty, a
    folder that is no backup)."""
