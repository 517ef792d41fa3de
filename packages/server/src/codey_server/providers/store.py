"""Model-provider credentials: the port, and where they are kept.

- :class:`FileCredentialStore`: ``auth.json`` in the data dir (0600, atomic), one server;
- :class:`PgCredentialStore`: ``codey_credentials`` rows every replica reads, each sealed
  with AES-256-GCM under the cluster's secret key (:mod:`codey_server.cluster.crypto`; the
  provider's name is the associated data). Without a key nothing can be stored or read there:
  :class:`~codey_server.cluster.SecretKeyError` says how to set one.

Nothing in here is ever put in an event, a response, a log line or a frame to a worker; the
only way out is :meth:`codey_server.providers.AuthService.token_for`, which the agent loop calls.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Literal, Protocol

import msgspec

from codey_server.cluster.crypto import KEY_ENV, SecretKey
from codey_server.cluster.db import SharedDb
from codey_server.cluster.errors import SecretKeyError
from codey_server.secretfile import read_secret_file, write_secret_file

log = logging.getLogger("codey.auth")

__all__ = ["Credential", "CredentialStore", "FileCredentialStore", "LoginStore", "MemoryLoginStore",
           "PendingLogin", "PgCredentialStore", "PgLoginStore"]

Method = Literal["oauth", "device_code", "api_key"]


class Credential(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a login left behind for one provider.

    ``api_key`` for the API-key method; ``access_token`` (+ ``refresh_token``, ``expires_at``)
    for the OAuth methods. ``obtained_at`` is when the current access token was issued to us,
    so the refresher can tell how long it was meant to live. ``base_url`` is the provider's
    base URL when the credential was given: it is sent to that endpoint only (None: stored
    before credentials were bound, bound to the provider's URL at the next start).
    """

    method: Method
    api_key: str | None = None
    access_token: str | None = None
    refresh_token: str | None = None
    expires_at: float | None = None
    obtained_at: float = msgspec.field(default_factory=time.time)
    account: str | None = None
    scope: str | None = None
    base_url: str | None = None

    def __repr__(self) -> str:  # never let a stray log line print a secret
        return (f"Credential(method={self.method!r}, account={self.account!r}, "
                f"expires_at={self.expires_at!r})")

    __str__ = __repr__


class _File(msgspec.Struct, kw_only=True):
    version: int = 1
    providers: dict[str, Credential] = msgspec.field(default_factory=dict)


_decoder = msgspec.json.Decoder(_File)
_encoder = msgspec.json.Encoder()


class CredentialStore(Protocol):
    """Credentials by provider name."""

    async def get(self, provider: str) -> Credential | None: ...

    async def put(self, provider: str, credential: Credential) -> None: ...

    async def remove(self, provider: str) -> bool:
        """Forget them; False when there were none."""
        ...

    async def names(self) -> list[str]: ...


class FileCredentialStore:
    """Credentials by provider name, written through to ``path`` on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = _File()
        raw = read_secret_file(path)
        if raw:
            try:
                self._file = _decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                # Keep the unreadable file for the owner to look at; start logged out.
                broken = path.with_name(path.name + ".broken")
                path.replace(broken)
                log.warning("%s was unreadable and was moved to %s; log in again", path, broken)

    async def get(self, provider: str) -> Credential | None:
        return self._file.providers.get(provider)

    async def put(self, provider: str, credential: Credential) -> None:
        self._file.providers[provider] = credential
        self._save()

    async def remove(self, provider: str) -> bool:
        if self._file.providers.pop(provider, None) is None:
            return False
        self._save()
        return True

    async def names(self) -> list[str]:
        return list(self._file.providers)

    def _save(self) -> None:
        write_secret_file(self.path, _encoder.encode(self._file))


_credential_decoder = msgspec.json.Decoder(Credential)


def _require(key: SecretKey | None) -> SecretKey:
    if key is None:
        raise SecretKeyError(
            f"provider logins among replicas are kept encrypted, and this server has no "
            f"secret key: set ${KEY_ENV} (the same on every replica) or secret_key_file "
            "in config.json (see docs/security.md)")
    return key


def _aad(provider: str) -> bytes:
    return b"credential:" + provider.encode()


class PgCredentialStore:
    """``codey_credentials``: a sealed row per provider, read on every use (a logout on one
    replica holds on all of them once it has answered)."""

    def __init__(self, db: SharedDb, key: SecretKey | None) -> None:
        self.db = db
        self.key = key

    def _key(self) -> SecretKey:
        return _require(self.key)

    def seal(self, provider: str, credential: Credential) -> bytes:
        return self._key().seal(_encoder.encode(credential), aad=_aad(provider))

    async def get(self, provider: str) -> Credential | None:
        rows = await self.db.execute(
            "SELECT sealed FROM codey_credentials WHERE provider = %s", (provider,))
        if not rows:
            return None
        plain = self._key().open(bytes(rows[0][0]), aad=_aad(provider),
                                 what=f"the stored login of provider {provider!r}")
        return _credential_decoder.decode(plain)

    async def put(self, provider: str, credential: Credential) -> None:
        sealed = self.seal(provider, credential)  # no key: refused before anything is written
        await self.db.execute(
            "INSERT INTO codey_credentials (provider, sealed) VALUES (%s, %s) "
            "ON CONFLICT (provider) DO UPDATE SET sealed = excluded.sealed, "
            "updated = extract(epoch FROM now())", (provider, sealed))

    async def remove(self, provider: str) -> bool:
        rows = await self.db.execute(
            "DELETE FROM codey_credentials WHERE provider = %s RETURNING 1", (provider,))
        return bool(rows)

    async def names(self) -> list[str]:
        rows = await self.db.execute("SELECT provider FROM codey_credentials ORDER BY provider")
        return [str(r[0]) for r in rows]

    async def import_file(self, raw: bytes) -> int:
        """Bring in an ``auth.json`` (a data dir's, or ``codey_files``'s), sealing each
        login; the number brought in. Needs the key."""
        try:
            file = _decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return 0
        added = 0
        for provider, credential in file.providers.items():
            rows = await self.db.execute(
                "INSERT INTO codey_credentials (provider, sealed) VALUES (%s, %s) "
                "ON CONFLICT (provider) DO NOTHING RETURNING 1",
                (provider, self.seal(provider, credential)))
            added += len(rows)
        return added


class PendingLogin(msgspec.Struct, kw_only=True, frozen=True):
    """An OAuth login begun (its link given to a browser) and not yet called back."""

    provider: str
    #: SHA-256 of the browser-session id that asked for it (None: no session, ``--no-auth``)
    session_hash: str | None
    binder: str
    verifier: str
    nonce: str
    redirect_uri: str
    created: float


_login_decoder = msgspec.json.Decoder(PendingLogin)


def _state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


class LoginStore(Protocol):
    """Logins begun, by their OAuth ``state``: the callback takes one once, on any server."""

    async def put(self, state: str, login: PendingLogin) -> None: ...

    async def take(self, state: str) -> PendingLogin | None:
        """Remove and return it (single use); None when unknown or already taken."""
        ...

    async def expire(self, ttl_s: float) -> None:
        """Forget the ones begun more than ``ttl_s`` ago."""
        ...


class MemoryLoginStore:
    """In this server's memory: the identity provider's redirect comes back to it."""

    def __init__(self) -> None:
        self._logins: dict[str, PendingLogin] = {}

    async def put(self, state: str, login: PendingLogin) -> None:
        self._logins[state] = login

    async def take(self, state: str) -> PendingLogin | None:
        return self._logins.pop(state, None)

    async def expire(self, ttl_s: float) -> None:
        now = time.time()
        for state in [s for s, p in self._logins.items() if now - p.created > ttl_s]:
            del self._logins[state]


class PgLoginStore:
    """``codey_oauth_logins``: the redirect through the proxy may reach any replica. Rows are
    keyed by the state's SHA-256 and sealed like credentials (the PKCE verifier and the
    binder are secrets): without a key a login cannot begin."""

    def __init__(self, db: SharedDb, key: SecretKey | None) -> None:
        self.db = db
        self.key = key

    async def put(self, state: str, login: PendingLogin) -> None:
        digest = _state_hash(state)
        sealed = _require(self.key).seal(_encoder.encode(login),
                                               aad=b"oauth-login:" + digest.encode())
        await self.db.execute(
            "INSERT INTO codey_oauth_logins (state_hash, sealed) VALUES (%s, %s)",
            (digest, sealed))

    async def take(self, state: str) -> PendingLogin | None:
        digest = _state_hash(state)
        rows = await self.db.execute(
            "DELETE FROM codey_oauth_logins WHERE state_hash = %s RETURNING sealed", (digest,))
        if not rows:
            return None
        plain = _require(self.key).open(bytes(rows[0][0]),
                                              aad=b"oauth-login:" + digest.encode(),
                                              what="a pending OAuth login")
        return _login_decoder.decode(plain)

    async def expire(self, ttl_s: float) -> None:
        await self.db.execute(
            "DELETE FROM codey_oauth_logins WHERE created < extract(epoch FROM now()) - %s",
            (ttl_s,))
