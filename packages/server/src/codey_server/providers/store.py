"""``auth.json``: model-provider credentials, on disk in the data dir only (0600, atomic).

Nothing in here is ever put in an event, a response, a log line or a frame to a worker; the
only way out is :meth:`codey_server.providers.AuthService.token_for`, which the agent loop calls.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Literal

import msgspec

from codey_server.secretfile import read_secret_file, write_secret_file

log = logging.getLogger("codey.auth")

__all__ = ["Credential", "CredentialStore"]

Method = Literal["oauth", "device_code", "api_key"]


class Credential(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a login left behind for one provider.

    ``api_key`` for the API-key method; ``access_token`` (+ ``refresh_token``, ``expires_at``)
    for the OAuth methods. ``obtained_at`` is when the current access token was issued to us,
    so the refresher can tell how long it was meant to live.
    """

    method: Method
    api_key: str | None = None
    access_token: str | None = None
    refresh_token: str | None = None
    expires_at: float | None = None
    obtained_at: float = msgspec.field(default_factory=time.time)
    account: str | None = None
    scope: str | None = None

    def __repr__(self) -> str:  # never let a stray log line print a secret
        return (f"Credential(method={self.method!r}, account={self.account!r}, "
                f"expires_at={self.expires_at!r})")

    __str__ = __repr__


class _File(msgspec.Struct, kw_only=True):
    version: int = 1
    providers: dict[str, Credential] = msgspec.field(default_factory=dict)


_decoder = msgspec.json.Decoder(_File)
_encoder = msgspec.json.Encoder()


class CredentialStore:
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

    def get(self, provider: str) -> Credential | None:
        return self._file.providers.get(provider)

    def put(self, provider: str, credential: Credential) -> None:
        self._file.providers[provider] = credential
        self._save()

    def remove(self, provider: str) -> bool:
        if self._file.providers.pop(provider, None) is None:
            return False
        self._save()
        return True

    def names(self) -> list[str]:
        return list(self._file.providers)

    def _save(self) -> None:
        write_secret_file(self.path, _encoder.encode(self._file))
