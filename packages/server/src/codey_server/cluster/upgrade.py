"""Bringing the state of an older cluster (or of a single server's data dir) into the rows,
once.

Before the rows, replicas copied the data dir's secret files to each other through the
``codey_files`` table. The first replica of this version to start imports each file — from
``codey_files`` when it has it (the union of every replica's), else from its own data dir —
and records that it did (``codey_shared_meta``, ``imported:<file>``). It is never imported
again: a login, token or key deleted later must not come back from an old file. Replicas
starting together take turns (a lock), so the second finds the marks.

A file that cannot be imported yet (provider logins without the secret key that seals them)
is left unmarked, and the next start with a key imports it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from codey_server.cluster.db import SharedDb
from codey_server.cluster.errors import SharedStateError
from codey_server.secretfile import read_secret_file

log = logging.getLogger("codey.shared")

__all__ = ["Importer", "import_once"]

#: reads a file's bytes into the rows; returns how many entries it added
Importer = Callable[[bytes], Awaitable[int]]


async def import_once(db: SharedDb, data_dir: Path, importers: Mapping[str, Importer]) -> None:
    """Import each file named in ``importers`` unless it was imported before (see the
    module)."""
    async with db.locked("import"):
        done = {str(r[0]) for r in await db.execute(
            "SELECT name FROM codey_shared_meta WHERE name LIKE 'imported:%%'")}
        todo = [name for name in importers if f"imported:{name}" not in done]
        if not todo:
            return
        copied: dict[str, bytes] = {}
        if (await db.execute("SELECT to_regclass('codey_files') IS NOT NULL"))[0][0]:
            copied = {str(name): bytes(data) for name, data in await db.execute(
                "SELECT name, data FROM codey_files WHERE name = ANY(%s)", (todo,))}
        for name in todo:
            raw = copied.get(name)
            source = "codey_files"
            if raw is None:
                raw, source = read_secret_file(data_dir / name), str(data_dir / name)
            if raw:
                try:
                    added = await importers[name](raw)
                except SharedStateError as err:
                    log.warning("%s from %s not imported yet: %s", name, source, err)
                    continue
                if added:
                    log.info("imported %d entries of %s from %s", added, name, source)
            await db.execute("INSERT INTO codey_shared_meta (name, value) VALUES (%s, 'yes') "
                             "ON CONFLICT (name) DO NOTHING", (f"imported:{name}",))
