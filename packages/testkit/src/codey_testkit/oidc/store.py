"""In-memory storage of the provider: clients, codes, tokens, device authorizations, nonces.

Not thread-safe on its own: the provider serialises requests with one lock (see
`codey_testkit.oidc.app.OIDCProvider.handle`), which is plenty for a test server.
"""

from __future__ import annotations

import re

from .models import AuthorizationCode, Client, DeviceCredential, TokenRecord

__all__ = ["MemoryStore", "normalize_user_code"]

_USER_CODE_JUNK = re.compile(r"[^A-Z0-9]")


def normalize_user_code(user_code: str) -> str:
    """Canonical form of a user code: upper case, no dashes or spaces (RFC 8628 §6.1)."""
    return _USER_CODE_JUNK.sub("", user_code.upper())


class MemoryStore:
    """Dictionaries keyed the way the grants look records up."""

    def __init__(self) -> None:
        self.clients: dict[str, Client] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens_by_refresh: dict[str, TokenRecord] = {}
        self.tokens_by_jti: dict[str, TokenRecord] = {}
        self.devices_by_code: dict[str, DeviceCredential] = {}
        self.devices_by_user_code: dict[str, DeviceCredential] = {}
        self.nonces: set[tuple[str, str]] = set()

    # clients -----------------------------------------------------------------------------
    def add_client(self, client: Client) -> Client:
        """Register `client`, or merge its redirect URIs into the existing one with its id
        (and its secret, if it has one: registering a secret makes a client confidential)."""
        existing = self.clients.get(client.client_id)
        if existing is None:
            self.clients[client.client_id] = client
            return client
        for uri in client.redirect_uris:
            if uri not in existing.redirect_uris:
                existing.redirect_uris.append(uri)
        if client.client_secret is not None:
            existing.client_secret = client.client_secret
        return existing

    # tokens ------------------------------------------------------------------------------
    def add_token(self, record: TokenRecord) -> None:
        self.tokens_by_jti[record.access_jti] = record
        if record.refresh_token is not None:
            self.tokens_by_refresh[record.refresh_token] = record

    def revoke_family(self, family: str) -> None:
        """Revoke every token of a refresh-token rotation chain (used on refresh-token reuse)."""
        for record in self.tokens_by_jti.values():
            if record.family == family:
                record.revoked = True

    def is_access_token_revoked(self, jti: str) -> bool:
        record = self.tokens_by_jti.get(jti)
        return record is None or record.revoked

    # device authorizations ---------------------------------------------------------------
    def add_device(self, credential: DeviceCredential) -> None:
        self.devices_by_code[credential.device_code] = credential
        self.devices_by_user_code[normalize_user_code(credential.user_code)] = credential

    def device_by_user_code(self, user_code: str) -> DeviceCredential | None:
        return self.devices_by_user_code.get(normalize_user_code(user_code))

    def remove_device(self, credential: DeviceCredential) -> None:
        self.devices_by_code.pop(credential.device_code, None)
        self.devices_by_user_code.pop(normalize_user_code(credential.user_code), None)
