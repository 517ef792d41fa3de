"""Where the Telegram channel keeps a pasted bot token and the current pairing code.

- :class:`FileTelegramStore` (one server): the token in ``DATA_DIR/telegram.json`` (0600), the
  code in this server's memory;
- :class:`PgTelegramStore` (replicas, ``--database-url``): the token in the
  ``codey_telegram_token`` row, sealed with AES-256-GCM under the cluster's secret key (as
  provider logins are; without a key a token cannot be pasted, see :func:`_require`); the code
  in the ``codey_telegram_pairing`` row as an HMAC under that key (its SHA-256 without one),
  never in clear, expiring by the database's clock. The bot runs on the replica holding the
  ``telegram`` lease, so the token pasted and the code shown through any replica must reach it.

A code is used once, a new one replaces the old, and the wrong tries are counted by the store:
after ``tries`` wrong codes the code dies. Among replicas each try is one statement on the row
(a compare-and-set), so two replicas checking at the same moment can neither both accept the
code nor accept it after its last wrong try.

A change of the token notifies ``telegram:token`` with its commit: :meth:`watch` wakes the
channel's lease loop on every replica, so a deleted token stops the bot at once (the loop's
own tick, every :data:`~codey_server.channels.telegram.HOLD_S`, covers a lost notification).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import msgspec

from codey_server.cluster.crypto import KEY_ENV, SecretKey
from codey_server.cluster.db import SharedDb
from codey_server.cluster.errors import SecretKeyError
from codey_server.secretfile import read_secret_file, write_secret_file

__all__ = ["FileTelegramStore", "PgTelegramStore", "TelegramStore", "code_digest",
           "normalize_code"]

log = logging.getLogger("codey.telegram")

_TOKEN_AAD = b"telegram-token"
_NOW = "extract(epoch FROM now())"


class _TokenFile(msgspec.Struct, kw_only=True):
    token: str


def normalize_code(given: str) -> str:
    """A code as typed (``abcd-efgh``) as it was made (``ABCDEFGH``)."""
    return given.strip().upper().replace("-", "")


def code_digest(code: str, key: SecretKey | None = None) -> str:
    """What is kept of a code: an HMAC under the secret key, or its SHA-256 without one."""
    data = b"telegram-pairing:" + normalize_code(code).encode()
    if key is None:
        return hashlib.sha256(data).hexdigest()
    return key.mac(data).hex()


class TelegramStore(Protocol):
    async def token(self) -> str | None:
        """The pasted token; None when none is. SecretKeyError when it cannot be opened."""
        ...

    async def put_token(self, token: str) -> None: ...

    async def remove_token(self) -> None: ...

    async def new_code(self, code: str, ttl_s: float) -> float:
        """Keep ``code`` (replacing the previous one) for ``ttl_s``; its expiry (epoch s)."""
        ...

    async def take_code(self, given: str, tries: int) -> bool:
        """True once for the current code while it is valid; a wrong code counts a try, and
        the ``tries``-th wrong one ends the code."""
        ...

    def watch(self) -> asyncio.Event:
        """An event set at the next change of the token (take it *before* reading it)."""
        ...


class FileTelegramStore:
    """One server: the token in its file, the code (its SHA-256) in memory."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._now = clock
        #: (digest, expires_at, wrong tries so far) of the current code
        self._code: tuple[str, float, int] | None = None
        self._event = asyncio.Event()

    async def token(self) -> str | None:
        raw = read_secret_file(self.path)
        if raw:
            try:
                return msgspec.json.decode(raw, type=_TokenFile).token
            except msgspec.MsgspecError:
                log.warning("%s is not a token file; ignored", self.path)
        return None

    async def put_token(self, token: str) -> None:
        write_secret_file(self.path, msgspec.json.encode(_TokenFile(token=token)))
        self._changed()

    async def remove_token(self) -> None:
        self.path.unlink(missing_ok=True)
        self._changed()

    async def new_code(self, code: str, ttl_s: float) -> float:
        expires = self._now() + ttl_s
        self._code = (code_digest(code), expires, 0)
        return expires

    async def take_code(self, given: str, tries: int) -> bool:
        if self._code is None:
            return False
        digest, expires, wrong = self._code
        if self._now() >= expires:
            self._code = None
            return False
        if hmac.compare_digest(code_digest(given), digest):
            self._code = None
            return True
        wrong += 1
        self._code = None if wrong >= tries else (digest, expires, wrong)  # guessing: it dies
        return False

    def _changed(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def watch(self) -> asyncio.Event:
        return self._event


def _require(key: SecretKey | None) -> SecretKey:
    if key is None:
        raise SecretKeyError(
            f"a Telegram bot token pasted among replicas is kept encrypted, and this server has "
            f"no secret key: set ${KEY_ENV} (the same on every replica) or secret_key_file in "
            "config.json (see docs/security.md), or give every replica the token in its "
            "environment")
    return key


class PgTelegramStore:
    """``codey_telegram_token`` and ``codey_telegram_pairing``: one row each, read when
    asked."""

    def __init__(self, db: SharedDb, key: SecretKey | None) -> None:
        self.db = db
        self.key = key
        self._event = asyncio.Event()
        #: in a statement's RETURNING: tells every replica, with the statement's commit
        self._notify = db.notify_sql("telegram", "'token'")
        db.subscribe("telegram", self._notified)

    async def token(self) -> str | None:
        rows = await self.db.execute("SELECT sealed FROM codey_telegram_token")
        if not rows:
            return None
        plain = _require(self.key).open(bytes(rows[0][0]), aad=_TOKEN_AAD,
                                        what="the stored Telegram bot token")
        return plain.decode()

    async def put_token(self, token: str) -> None:
        sealed = _require(self.key).seal(token.encode(), aad=_TOKEN_AAD)  # no key: nothing kept
        await self.db.execute(
            "INSERT INTO codey_telegram_token (id, sealed) VALUES (1, %s) ON CONFLICT (id) DO "
            f"UPDATE SET sealed = excluded.sealed, updated = {_NOW} "
            f"RETURNING {self._notify}", (sealed,))

    async def remove_token(self) -> None:
        await self.db.execute(
            f"DELETE FROM codey_telegram_token RETURNING {self._notify}")

    async def new_code(self, code: str, ttl_s: float) -> float:
        rows = await self.db.execute(
            "INSERT INTO codey_telegram_pairing (id, digest, expires_at) "
            f"VALUES (1, %s, {_NOW} + %s) ON CONFLICT (id) DO UPDATE SET "
            "digest = excluded.digest, expires_at = excluded.expires_at, tries = 0 "
            "RETURNING expires_at", (code_digest(code, self.key), ttl_s))
        return float(rows[0][0])

    async def take_code(self, given: str, tries: int) -> bool:
        # the right code takes the row, unless its last wrong try counted first
        rows = await self.db.execute(
            "DELETE FROM codey_telegram_pairing WHERE digest = %s AND tries < %s "
            f"AND expires_at > {_NOW} RETURNING 1", (code_digest(given, self.key), tries))
        if rows:
            return True
        await self.db.execute(
            f"UPDATE codey_telegram_pairing SET tries = tries + 1 WHERE expires_at > {_NOW}")
        await self.db.execute(
            f"DELETE FROM codey_telegram_pairing WHERE tries >= %s OR expires_at <= {_NOW}",
            (tries,))
        return False

    def _notified(self, _key: str) -> None:  # "token", or "" after a reconnection
        event, self._event = self._event, asyncio.Event()
        event.set()

    def watch(self) -> asyncio.Event:
        return self._event
