"""MCP tokens: what :class:`McpTokens` makes, lists, revokes and checks, and where it keeps
them — the data dir's ``mcp_tokens.json`` (one server) or the ``codey_mcp_tokens`` rows every
replica reads (``--database-url``).

A token is shown once, when made; only its SHA-256 is kept, with its name, scope, maximum
policy and dates. Among replicas every check reads the row: a token made on one replica works
on the next call to any other, and once a revocation has answered no replica accepts it.
``last_used_at`` is written at most once a minute per token (a column of its own, so it never
rewrites the record).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from pathlib import Path
from typing import Literal, Protocol

import msgspec

from codey_protocol.events import ApprovalPolicy
from codey_server.cluster.db import SharedDb
from codey_server.secretfile import write_secret_file

__all__ = ["DEFAULT_MAX_POLICY", "DEFAULT_SCOPE", "POLICIES", "SCOPES", "TOKEN_PREFIX",
           "FileMcpTokenStore", "McpScope", "McpToken", "McpTokenStore", "McpTokens",
           "PgMcpTokenStore"]

TOKEN_PREFIX = "cmcp_"

McpScope = Literal["read", "sessions", "admin"]
#: each scope includes the ones before it: read ⊂ sessions ⊂ admin
SCOPES: tuple[McpScope, ...] = ("read", "sessions", "admin")
POLICIES: tuple[ApprovalPolicy, ...] = ("suggest", "auto-edit", "full-auto")
#: what a token gets when nothing is said (and what tokens made before scopes have)
DEFAULT_SCOPE: McpScope = "sessions"
DEFAULT_MAX_POLICY: ApprovalPolicy = "suggest"
#: ``last_used_at`` is written at most this often per token
_USED_SAVE_S = 60.0


class McpToken(msgspec.Struct, kw_only=True):
    token_id: str
    name: str
    created_at: float
    sha256: str = ""  # of the token; the token itself is shown once and never kept
    last_used_at: float | None = None
    #: what it may do: ``read`` (list and read sessions, workers, tasks), ``sessions`` (also
    #: start sessions and send prompts), ``admin`` (also change the task board, and pick a
    #: worktree session's base revision and run its setup script)
    scope: McpScope = DEFAULT_SCOPE
    #: the most a session it starts or prompts may do without asking
    max_policy: ApprovalPolicy = DEFAULT_MAX_POLICY

    def allows(self, scope: McpScope) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def allows_policy(self, policy: str) -> bool:
        ranks = {p: n for n, p in enumerate(POLICIES)}
        return policy in ranks and ranks[policy] <= ranks[self.max_policy]


_decode_list = msgspec.json.Decoder(list[McpToken]).decode
_decode_one = msgspec.json.Decoder(McpToken).decode


class McpTokenStore(Protocol):
    """Where the token records are kept."""

    async def add(self, record: McpToken) -> None: ...

    async def all(self) -> list[McpToken]: ...

    async def remove(self, token_id: str) -> McpToken | None:
        """Delete it; its record, or None when there was none."""
        ...

    async def find(self, sha256: str) -> McpToken | None: ...

    async def used(self, record: McpToken, now: float) -> None:
        """Record that ``record`` was used at ``now`` (the caller rate-limits this)."""
        ...


class FileMcpTokenStore:
    """``DATA_DIR/mcp_tokens.json`` (0600), held in memory: nothing else writes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tokens: dict[str, McpToken] = {}
        if path.exists():
            self._tokens = {t.token_id: t for t in _decode_list(path.read_bytes())}

    def _save(self) -> None:
        write_secret_file(self.path, msgspec.json.encode(list(self._tokens.values())))

    async def add(self, record: McpToken) -> None:
        self._tokens[record.token_id] = record
        self._save()

    async def all(self) -> list[McpToken]:
        return list(self._tokens.values())

    async def remove(self, token_id: str) -> McpToken | None:
        record = self._tokens.pop(token_id, None)
        if record is not None:
            self._save()
        return record

    async def find(self, sha256: str) -> McpToken | None:
        for record in self._tokens.values():
            if hmac.compare_digest(record.sha256, sha256):
                return record
        return None

    async def used(self, record: McpToken, now: float) -> None:
        record.last_used_at = now
        self._save()


class PgMcpTokenStore:
    """``codey_mcp_tokens``: a row per token, looked up by its SHA-256 on every call."""

    def __init__(self, db: SharedDb) -> None:
        self.db = db

    @staticmethod
    def _record(data: bytes, last_used_at: float | None) -> McpToken:
        record = _decode_one(bytes(data))
        record.last_used_at = last_used_at
        return record

    async def add(self, record: McpToken) -> None:
        await self.db.execute(
            "INSERT INTO codey_mcp_tokens (token_id, sha256, record, last_used_at) "
            "VALUES (%s, %s, %s, %s)", (record.token_id, record.sha256,
                                        msgspec.json.encode(record), record.last_used_at))

    async def all(self) -> list[McpToken]:
        rows = await self.db.execute("SELECT record, last_used_at FROM codey_mcp_tokens")
        return [self._record(data, used) for data, used in rows]

    async def remove(self, token_id: str) -> McpToken | None:
        rows = await self.db.execute(
            "DELETE FROM codey_mcp_tokens WHERE token_id = %s RETURNING record, last_used_at",
            (token_id,))
        return self._record(*rows[0]) if rows else None

    async def find(self, sha256: str) -> McpToken | None:
        # an index lookup by the hash: a timing difference could tell only a hash's prefix
        # of a 256-bit random token, which is of no use to a guesser
        rows = await self.db.execute(
            "SELECT record, last_used_at FROM codey_mcp_tokens WHERE sha256 = %s", (sha256,))
        return self._record(*rows[0]) if rows else None

    async def used(self, record: McpToken, now: float) -> None:
        await self.db.execute(
            "UPDATE codey_mcp_tokens SET last_used_at = %s WHERE token_id = %s",
            (now, record.token_id))
        record.last_used_at = now

    async def import_file(self, raw: bytes) -> int:
        """Bring in an ``mcp_tokens.json`` (a data dir's, or ``codey_files``'s); the number
        of tokens brought in."""
        try:
            records = _decode_list(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return 0
        added = 0
        for record in records:
            rows = await self.db.execute(
                "INSERT INTO codey_mcp_tokens (token_id, sha256, record, last_used_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (record.token_id, record.sha256, msgspec.json.encode(record),
                 record.last_used_at))
            added += len(rows)
        return added


class McpTokens:
    """The MCP tokens: made, listed, revoked and checked, kept in ``store`` (the data dir's
    ``mcp_tokens.json`` when none is given)."""

    def __init__(self, path: Path, store: McpTokenStore | None = None) -> None:
        self.store: McpTokenStore = store or FileMcpTokenStore(path)

    async def create(self, name: str, scope: McpScope = DEFAULT_SCOPE,
                     max_policy: ApprovalPolicy = DEFAULT_MAX_POLICY) -> tuple[McpToken, str]:
        """A new token: its record (without the secret) and the token, to show once."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = McpToken(token_id=f"mt_{secrets.token_hex(6)}", name=name.strip()[:80] or "agent",
                          created_at=time.time(),
                          sha256=hashlib.sha256(token.encode()).hexdigest(), scope=scope,
                          max_policy=max_policy)
        await self.store.add(record)
        return record, token

    async def list(self) -> list[McpToken]:
        return sorted(await self.store.all(), key=lambda t: t.created_at)

    async def revoke(self, token_id: str) -> McpToken | None:
        """Revoke it: once this returns, no server accepts it. Its record, or None."""
        return await self.store.remove(token_id)

    async def check(self, token: str) -> McpToken | None:
        if not token.startswith(TOKEN_PREFIX):
            return None
        record = await self.store.find(hashlib.sha256(token.encode()).hexdigest())
        if record is None:
            return None
        now = time.time()
        saved = record.last_used_at
        if saved is None or now - saved >= _USED_SAVE_S:
            await self.store.used(record, now)  # kept across restarts, at most once a minute
        else:
            record.last_used_at = now
        return record
