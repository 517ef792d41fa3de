"""Where :class:`~codey_server.http.access.BrowserAccess` keeps the access token and the
browser sessions: the port, its file backend (one server) and its PostgreSQL backend
(replicas).

Sessions are kept as the SHA-256 of their id (``digest``), never the id, with the time they
were made; one older than :data:`SESSION_MAX_AGE_S` does not count, and is deleted by the next
:meth:`~AccessStore.forget_expired` (a server's start, each login).

- :class:`FileAccessStore`: ``DATA_DIR/access_token`` and ``DATA_DIR/browser_sessions.json``
  (0600, replaced atomically), held in memory: nothing else writes them.
- :class:`PgAccessStore`: the token in ``codey_secrets`` (one for the whole cluster: the first
  replica makes it, or brings the one its data dir had the first time; every replica then
  uses that one, so the cookie's name, derived from it, is the same on all), the sessions in
  ``codey_browser_sessions``. Every check reads the row: a login on one replica works on the
  next request to any other, and once a logout has answered no replica accepts the cookie.
  A logout notifies ``logout:<digest>`` with its commit, so the replicas that hold that
  browser's sockets close them.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

import msgspec

from codey_server.cluster.db import SharedDb, lock_key
from codey_server.secretfile import read_secret_file, write_secret_file

log = logging.getLogger("codey.access")

__all__ = ["SESSIONS_FILE", "SESSION_MAX_AGE_S", "TOKEN_FILE", "AccessStore", "FileAccessStore",
           "PgAccessStore", "load_or_create_token"]

TOKEN_FILE = "access_token"
SESSIONS_FILE = "browser_sessions.json"
SESSION_MAX_AGE_S = 30 * 24 * 3600
#: the token is at least this long; a shorter one (hand-edited) is replaced
_MIN_TOKEN_CHARS = 32


def _new_token() -> str:
    return secrets.token_urlsafe(32)  # 256 bits


def _read_token_file(data_dir: Path) -> str | None:
    raw = read_secret_file(data_dir / TOKEN_FILE)
    token = raw.decode(errors="replace").strip() if raw is not None else ""
    return token if len(token) >= _MIN_TOKEN_CHARS else None


def load_or_create_token(data_dir: Path) -> str:
    """The access token in ``data_dir/access_token``, created (256 random bits) if missing."""
    token = _read_token_file(data_dir)
    if token is None:  # missing, empty or hand-edited into something guessable
        token = _new_token()
        write_secret_file(data_dir / TOKEN_FILE, token.encode() + b"\n")
    return token


class AccessStore(Protocol):
    """The access token and the browser sessions (by the SHA-256 of their id)."""

    #: True when other servers share it (then a delete may come from elsewhere)
    shared: bool
    #: called with a session's digest when another server ended it
    on_removed: list[Callable[[str], None]]

    async def load_token(self) -> str:
        """The access token, made when there is none."""
        ...

    async def add_session(self, digest: str) -> None: ...

    async def has_session(self, digest: str) -> bool:
        """Whether the session exists and is younger than :data:`SESSION_MAX_AGE_S`."""
        ...

    async def remove_session(self, digest: str) -> bool:
        """End it; False when there was none."""
        ...

    async def existing(self, digests: Iterable[str]) -> set[str]:
        """Of ``digests``, those that still count."""
        ...

    async def forget_expired(self) -> None:
        """Delete the sessions older than :data:`SESSION_MAX_AGE_S` (they no longer count;
        this keeps them from piling up)."""
        ...


class FileAccessStore:
    """The data dir's files, as one server keeps them."""

    shared = False

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.on_removed: list[Callable[[str], None]] = []
        self._sessions: dict[str, float] | None = None  # digest -> created at

    def token(self) -> str:
        """The token, read or made now (sync: the file is local)."""
        return load_or_create_token(self.data_dir)

    async def load_token(self) -> str:
        return self.token()

    def _store(self) -> dict[str, float]:
        if self._sessions is None:
            self._sessions = {}
            raw = read_secret_file(self.data_dir / SESSIONS_FILE)
            if raw:
                try:
                    self._sessions = msgspec.json.decode(raw, type=dict[str, float])
                except msgspec.DecodeError:
                    log.warning("%s is unreadable; every browser must log in again",
                                SESSIONS_FILE)
            now = time.time()
            self._sessions = {k: t for k, t in self._sessions.items()
                              if now - t < SESSION_MAX_AGE_S}
        return self._sessions

    def _save(self) -> None:
        write_secret_file(self.data_dir / SESSIONS_FILE, msgspec.json.encode(self._store()))

    async def add_session(self, digest: str) -> None:
        self._store()[digest] = time.time()
        self._save()

    def has(self, digest: str) -> bool:
        created = self._store().get(digest)
        return created is not None and time.time() - created < SESSION_MAX_AGE_S

    async def has_session(self, digest: str) -> bool:
        return self.has(digest)

    async def remove_session(self, digest: str) -> bool:
        if self._store().pop(digest, None) is None:
            return False
        self._save()
        return True

    async def existing(self, digests: Iterable[str]) -> set[str]:
        return {d for d in digests if self.has(d)}

    async def forget_expired(self) -> None:
        sessions = self._store()
        now = time.time()
        expired = [d for d, created in sessions.items() if now - created >= SESSION_MAX_AGE_S]
        for digest in expired:
            del sessions[digest]
        if expired:
            self._save()


class PgAccessStore:
    """The token and the sessions as rows shared by every replica (see the module)."""

    shared = True

    def __init__(self, db: SharedDb, data_dir: Path) -> None:
        self.db = db
        self.data_dir = data_dir
        self.on_removed: list[Callable[[str], None]] = []
        db.subscribe("logout", self._removed_elsewhere)

    def _removed_elsewhere(self, digest: str) -> None:
        for hook in self.on_removed:
            hook(digest)

    async def load_token(self) -> str:
        async with self.db.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("access_token"),))
            row = await (await conn.execute(
                "SELECT value FROM codey_secrets WHERE name = 'access_token'")).fetchone()
            if row is not None:
                token = str(row[0])
            else:
                # the first replica of a cluster brings the token its data dir had (its
                # bookmarked link and its browsers' cookies keep working), once: after
                # that, a deleted row (a rotation) gets a fresh token
                imported = await (await conn.execute(
                    "SELECT 1 FROM codey_shared_meta WHERE name = 'imported:access_token'"
                )).fetchone()
                token = (None if imported else _read_token_file(self.data_dir)) or _new_token()
                await conn.execute(
                    "INSERT INTO codey_secrets (name, value) VALUES ('access_token', %s)",
                    (token,))
                await conn.execute(
                    "INSERT INTO codey_shared_meta (name, value) VALUES "
                    "('imported:access_token', 'yes') ON CONFLICT (name) DO NOTHING")
        # a copy for `codey-server url` (never read back by the server once the row exists)
        if _read_token_file(self.data_dir) != token:
            write_secret_file(self.data_dir / TOKEN_FILE, token.encode() + b"\n")
        return token

    async def add_session(self, digest: str) -> None:
        await self.db.execute(
            "INSERT INTO codey_browser_sessions (digest) VALUES (%s) "
            "ON CONFLICT (digest) DO NOTHING", (digest,))

    async def has_session(self, digest: str) -> bool:
        rows = await self.db.execute(
            "SELECT 1 FROM codey_browser_sessions WHERE digest = %s "
            "AND created > extract(epoch FROM now()) - %s", (digest, SESSION_MAX_AGE_S))
        return bool(rows)

    async def remove_session(self, digest: str) -> bool:
        # the notification commits with the delete: the replicas holding this browser's
        # sockets close them
        rows = await self.db.execute(
            "DELETE FROM codey_browser_sessions WHERE digest = %s "
            f"RETURNING {self.db.notify_sql('logout')}", (digest, digest))
        return bool(rows)

    async def existing(self, digests: Iterable[str]) -> set[str]:
        wanted = list(digests)
        if not wanted:
            return set()
        rows = await self.db.execute(
            "SELECT digest FROM codey_browser_sessions WHERE digest = ANY(%s) "
            "AND created > extract(epoch FROM now()) - %s", (wanted, SESSION_MAX_AGE_S))
        return {str(r[0]) for r in rows}

    async def forget_expired(self) -> None:
        await self.db.execute(
            "DELETE FROM codey_browser_sessions WHERE created <= extract(epoch FROM now()) - %s",
            (SESSION_MAX_AGE_S,))

    async def import_sessions(self, raw: bytes) -> int:
        """Bring in a ``browser_sessions.json`` (a data dir's, or ``codey_files``'s);
        the number of sessions brought in."""
        try:
            sessions = msgspec.json.decode(raw, type=dict[str, float])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return 0
        now = time.time()
        added = 0
        for digest, created in sessions.items():
            if now - created < SESSION_MAX_AGE_S:
                rows = await self.db.execute(
                    "INSERT INTO codey_browser_sessions (digest, created) VALUES (%s, %s) "
                    "ON CONFLICT (digest) DO NOTHING RETURNING 1", (digest, created))
                added += len(rows)
        return added
