"""The data's format on PostgreSQL (a throwaway cluster): the marker in the database, the
refusal of a newer one, and an older cluster's rows migrated after a backup of them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest

from codey_protocol import events as ev
from codey_protocol.version import __version__
from codey_server.cluster.db import SharedDb
from codey_server.eventlog.postgres import PostgresEventLog
from codey_server.settings import Settings
from codey_server.upgrades.backup import BACKUPS_DIR, read_manifest
from codey_server.upgrades.data import PostgresDatabase, read_file_marker
from codey_server.upgrades.errors import DataTooNew
from codey_server.upgrades.plan import FORMAT, UNMARKED, Found
from codey_server.upgrades.startup import PENDING, prepare
from codey_testkit.postgres import PostgresCluster, pg_bin

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed")]

OLD_RECORD = {"token_id": "mt_0a1b2c3d4e5f", "name": "ci-agent", "created_at": 1795400000.5,
              "sha256": "9f" * 32, "last_used_at": None}


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    with PostgresCluster() as pg:
        yield pg


def _marker(dsn: str) -> Found | None:
    db = PostgresDatabase(dsn).open()
    try:
        return db.marker()
    finally:
        db.close()


def test_a_new_database_is_marked(cluster: PostgresCluster, tmp_path: Path) -> None:
    dsn = cluster.create_database("fresh")
    decided = prepare(Settings(data_dir=tmp_path / "data", database_url=dsn))
    assert decided.found is None and decided.steps == ()
    assert _marker(dsn) == Found(FORMAT, __version__)
    assert read_file_marker(tmp_path / "data") == Found(FORMAT, __version__)


def test_a_database_of_a_newer_release_is_refused(cluster: PostgresCluster,
                                                  tmp_path: Path) -> None:
    dsn = cluster.create_database("newer")
    settings = Settings(data_dir=tmp_path / "data", database_url=dsn)
    prepare(settings)
    db = PostgresDatabase(dsn).open()
    db.mark(FORMAT + 1, "9.9.0")  # the newer neighbour
    db.close()
    with pytest.raises(DataTooNew) as refused:
        prepare(settings)
    line = str(refused.value)
    assert "\n" not in line and "codey 9.9.0" in line and f"codey {__version__}" in line
    assert "postgresql://" in line and f"format {FORMAT + 1}" in line
    assert _marker(dsn) == Found(FORMAT + 1, "9.9.0")  # untouched


def test_an_older_clusters_rows_are_backed_up_then_migrated(cluster: PostgresCluster,
                                                            tmp_path: Path) -> None:
    dsn = cluster.create_database("older")

    async def old_cluster() -> None:  # a log with a session, and a token from before scopes
        log = PostgresEventLog(dsn)
        await log.open()
        await log.append([("s1", ev.SessionCreated(worker_id="w", workdir="/src",
                                                   provider="p", model="m", title="old"))])
        await log.close()
        shared = SharedDb(dsn)
        await shared.open()
        await shared.execute(
            "INSERT INTO codey_mcp_tokens (token_id, sha256, record) VALUES (%s, %s, %s)",
            (OLD_RECORD["token_id"], OLD_RECORD["sha256"], json.dumps(OLD_RECORD).encode()))
        await shared.close()

    asyncio.run(old_cluster())
    data = tmp_path / "data"
    decided = prepare(Settings(data_dir=data, database_url=dsn))

    assert decided.found == UNMARKED and decided.upgrade
    with psycopg.connect(dsn) as conn:
        record = json.loads(bytes(conn.execute("SELECT record FROM codey_mcp_tokens")
                                  .fetchone()[0]))
    assert (record["scope"], record["max_policy"]) == ("admin", "full-auto")
    [folder] = (data / BACKUPS_DIR).iterdir()
    assert read_manifest(folder).database == "postgresql"
    [row] = [json.loads(line) for line in
             (folder / "postgres" / "codey_mcp_tokens.jsonl").read_text().splitlines()]
    assert row["token_id"] == OLD_RECORD["token_id"] and "base64" in row["record"]
    [notice] = msgspec.json.decode((data / PENDING).read_bytes(), type=list[ev.DataUpgraded])
    assert any("ci-agent" in c for c in notice.changes)
    assert any("workspace-write" in c for c in notice.changes)
    assert _marker(dsn) == Found(FORMAT, __version__)
    # another replica starting on it afterwards finds it done (its own data dir is new)
    assert prepare(Settings(data_dir=tmp_path / "other", database_url=dsn)).steps == ()
