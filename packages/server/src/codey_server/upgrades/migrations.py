"""What each migration of :data:`~codey_server.upgrades.plan.MIGRATIONS` does to the data.

A step takes the data (:class:`Data`) and returns what the user should be told of it, one
line per change (nothing: it changed nothing the user would notice). Steps are idempotent:
run twice (a start that stopped half-way and started again), the second run changes nothing
and tells nothing. The decisions are pure functions beside them (:func:`keep_token_rights`),
tested on data in the old shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codey_server.secretfile import read_secret_file, write_secret_file
from codey_server.upgrades.data import LogDatabase, PostgresDatabase
from codey_server.upgrades.errors import UpgradeError

__all__ = ["STEPS", "Data", "Step", "keep_token_rights"]


@dataclass(frozen=True)
class Data:
    """What a step works on: the data dir and the log's database."""

    data_dir: Path
    db: LogDatabase


#: a migration's step: changes the data, returns what to tell the user
Step = Callable[[Data], list[str]]

#: the file of MCP tokens (one server; among replicas the rows of ``codey_mcp_tokens``)
TOKENS_FILE = "mcp_tokens.json"
#: the rights a token had before tokens had scopes: every tool, sessions under any policy
BEFORE_SCOPES = {"scope": "admin", "max_policy": "full-auto"}


def keep_token_rights(records: list[Any]) -> list[str]:
    """Give each MCP token record made before scopes (one without ``scope``) the rights it
    had then, in place; the names of the tokens changed. (Decoded with today's defaults, such
    a token would get ``scope: sessions, max_policy: suggest``: less than it could do.)"""
    changed = []
    for record in records:
        if isinstance(record, dict) and "scope" not in record:
            record.update(BEFORE_SCOPES)
            changed.append(str(record.get("name") or record.get("token_id") or "?"))
    return changed


def _token_notice(names: list[str]) -> list[str]:
    if not names:
        return []
    listed = ", ".join(sorted(set(names)))
    return [f"MCP tokens made before scopes keep the rights they had ({listed}): scope admin, "
            "sessions up to full-auto. Make a narrower token in the MCP dialog if an agent "
            "needs less."]


def _tokens_in_file(path: Path) -> list[str]:
    raw = read_secret_file(path)
    if not raw:
        return []
    try:
        records = json.loads(raw)
    except ValueError:
        raise UpgradeError(f"codey-server: {path} does not read as JSON; restore it from a "
                           "backup, or move it away (its tokens then stop working)") from None
    if not isinstance(records, list):
        return []
    names = keep_token_rights(records)
    if names:
        write_secret_file(path, json.dumps(records).encode())
    return names


def _tokens_in_rows(db: PostgresDatabase) -> list[str]:
    """The replicas' rows: ``codey_mcp_tokens``, and the copy of an older cluster's file in
    ``codey_files`` that the first replica of this version imports once."""
    conn, names = db.conn, []
    with conn.transaction():
        if conn.execute("SELECT to_regclass('codey_mcp_tokens') IS NOT NULL").fetchone()[0]:
            for token_id, record in conn.execute(
                    "SELECT token_id, record FROM codey_mcp_tokens FOR UPDATE").fetchall():
                decoded = json.loads(bytes(record))
                changed = keep_token_rights([decoded])
                if changed:
                    conn.execute("UPDATE codey_mcp_tokens SET record = %s WHERE token_id = %s",
                                 (json.dumps(decoded).encode(), token_id))
                    names += changed
        if conn.execute("SELECT to_regclass('codey_files') IS NOT NULL").fetchone()[0]:
            row = conn.execute("SELECT data FROM codey_files WHERE name = %s FOR UPDATE",
                               (TOKENS_FILE,)).fetchone()
            if row is not None:
                records = json.loads(bytes(row[0]))
                changed = keep_token_rights(records) if isinstance(records, list) else []
                if changed:
                    conn.execute("UPDATE codey_files SET data = %s WHERE name = %s",
                                 (json.dumps(records).encode(), TOKENS_FILE))
                    names += changed
    return names


def tokens_keep_their_rights(data: Data) -> list[str]:
    """Migration 2: MCP tokens made before scopes (the data dir's file, the replicas' rows)
    get scope ``admin`` and ``max_policy`` ``full-auto``, what they could do then."""
    names = _tokens_in_file(data.data_dir / TOKENS_FILE)
    if isinstance(data.db, PostgresDatabase):
        names += _tokens_in_rows(data.db)
    return _token_notice(names)


def sandbox_by_default(data: Data) -> list[str]:
    """Migration 3: nothing to change (a session without a sandbox setting runs in
    ``workspace-write``); the user of existing sessions is told."""
    if not data.db.has_event("session_created"):
        return []
    return ["Sessions now run their commands in the OS sandbox (workspace-write: they write "
            "only in their folder, with no network) unless you chose otherwise; a session's "
            "sandbox setting, in its header, changes it."]


#: each migration's step, by its number
STEPS: Mapping[int, Step] = {
    2: tokens_keep_their_rights,
    3: sandbox_by_default,
}
