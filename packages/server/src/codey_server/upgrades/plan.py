"""The data's format, and what to do about the format found at start: pure, no I/O.

The data (the event log's database and the data dir's files) carries the number of the
format it is in, a *marker* (:mod:`.markers`). At start the server compares it with the
format its own code writes, :data:`FORMAT`, and :func:`plan` says what to do:

- no data yet: write the marker (:class:`Plan` with no step);
- the same format: nothing;
- an older format: back up, then run each :class:`Migration` after it, in order, then write
  the marker (:class:`Plan` with steps);
- a newer format (a newer release ran here): refuse to start (:class:`Refusal`), saying which
  release to run or which backup to restore.

Formats are the numbers of migrations: the data is in format N once migration N ran. Data
written before formats were marked (codey 0.1.0 and earlier) is format :data:`UNMARKED`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codey_protocol.version import __version__

__all__ = ["FORMAT", "MIGRATIONS", "UNMARKED", "Found", "Migration", "Plan", "Refusal", "plan"]

#: the format of data written before formats were marked (codey 0.1.0 and earlier)
UNMARKED = 1


@dataclass(frozen=True)
class Migration:
    """One change of the data's format: ``number`` is the format it brings the data to
    (the format before it is the previous migration's, or :data:`UNMARKED`)."""

    number: int
    #: one line, logged as it runs
    description: str


#: every migration, in order (never edited once released: a new change is a new migration,
#: with its step in :data:`codey_server.upgrades.migrations.STEPS`)
MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, "MCP tokens made before scopes keep the rights they had "
                 "(scope admin, sessions up to full-auto)"),
    Migration(3, "sessions run their commands in the OS sandbox (workspace-write) unless "
                 "their own setting says otherwise"),
)

#: the format this code writes: its last migration's
FORMAT = MIGRATIONS[-1].number


@dataclass(frozen=True)
class Found:
    """The marker found on the data: its format, and the release that wrote it ("" when
    the data was not marked)."""

    format: int
    version: str = ""


@dataclass(frozen=True)
class Plan:
    """What to do with data found in format ``found`` (None: there is no data yet) to bring
    it to ``target``: back it up (:attr:`backup`), run ``steps`` in order, mark it."""

    found: int | None
    target: int
    steps: tuple[Migration, ...] = ()

    @property
    def backup(self) -> bool:
        """Whether the data must be backed up first: a migration will change it."""
        return bool(self.steps)

    @property
    def upgrade(self) -> bool:
        """Whether this brings older data to a newer format (and the user is told)."""
        return self.found is not None and self.found < self.target


@dataclass(frozen=True)
class Refusal:
    """This code cannot open the data: it is newer (or older than any migration knows)."""

    found: Found
    target: int
    version: str
    #: a backup in a format this code reads, when one is known (a restorable folder)
    backup: str = ""

    def line(self, data: str) -> str:
        """One line for the user: both versions and what to do (``data``: where the data
        is, the data dir or the database)."""
        if self.found.format < UNMARKED:
            return (f"codey-server: the data in {data} is in format {self.found.format}, which "
                    f"no release of Codey wrote; codey {self.version} reads formats "
                    f"{UNMARKED} to {self.target}")
        by = f"codey {self.found.version}" if self.found.version else "a newer codey"
        what = (f"run {by} or newer" if self.found.version else "run the newer codey")
        restore = (f", or restore the backup it made before upgrading: codey-server restore "
                   f"{self.backup} --data-dir NEW_DIR" if self.backup else
                   ", or restore the backup it made before upgrading (in the data dir's "
                   "backups/) with codey-server restore")
        return (f"codey-server: the data in {data} is in format {self.found.format}, written by "
                f"{by}; this is codey {self.version}, which reads format {self.target} at "
                f"most: {what}{restore}")


def plan(found: Found | None, *, target: int = FORMAT,
         migrations: Sequence[Migration] = MIGRATIONS, version: str = __version__,
         backup: str = "") -> Plan | Refusal:
    """What to do with data whose marker is ``found`` (None: there is no data yet) for code
    that writes format ``target`` (release ``version``). ``backup``: a backup this code could
    restore, named in a refusal."""
    if found is None:
        return Plan(found=None, target=target)
    if found.format > target or found.format < UNMARKED:
        return Refusal(found=found, target=target, version=version, backup=backup)
    steps = tuple(m for m in migrations if found.format < m.number <= target)
    return Plan(found=found.format, target=target, steps=steps)
