"""The provider's records, shaped for authlib's model mixins.

Every class implements the mixin authlib's grants call into (`ClientMixin`,
`AuthorizationCodeMixin`, `TokenMixin`, `DeviceCredentialMixin`). Times are `time.time()`
seconds. Records are mutable because authlib's flows mark them (used, revoked, polled).
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass

from authlib.oauth2.rfc6749 import ClientMixin, TokenMixin, list_to_scope, scope_to_list
from authlib.oauth2.rfc8628 import DEVICE_CODE_GRANT_TYPE, DeviceCredentialMixin
from authlib.oidc.core import AuthorizationCodeMixin

__all__ = [
    "GRANT_TYPES",
    "AuthorizationCode",
    "Client",
    "DeviceCredential",
    "TokenRecord",
    "User",
]

GRANT_TYPES: tuple[str, ...] = ("authorization_code", "refresh_token", DEVICE_CODE_GRANT_TYPE)


@dataclass(frozen=True)
class User:
    """The one resource owner the provider auto-consents for."""

    sub: str
    email: str

    def get_user_id(self) -> str:
        return self.sub


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    """A registered client. Redirect URIs are matched exactly (no prefix, no normalising)."""

    client_id: str
    redirect_uris: list[str]
    scopes: tuple[str, ...]
    client_secret: str | None = None
    #: the methods the provider accepts (ProviderSettings.token_endpoint_auth_methods)
    auth_methods: tuple[str, ...] = ("none", "client_secret_basic", "client_secret_post")

    @property
    def is_public(self) -> bool:
        return self.client_secret is None

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        # OIDC Core §3.1.2.1 makes redirect_uri REQUIRED, so there is no default to fall back on.
        return None

    def get_allowed_scope(self, scope: str | None) -> str:
        if not scope:
            return ""
        allowed = set(self.scopes)
        return str(list_to_scope([s for s in scope_to_list(scope) if s in allowed]))

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        if self.client_secret is None:
            return False
        return hmac.compare_digest(self.client_secret.encode(), client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if method not in self.auth_methods:
            return False
        if self.is_public:
            return method == "none"
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in GRANT_TYPES


@dataclass
class AuthorizationCode(AuthorizationCodeMixin):  # type: ignore[misc]
    """An issued authorization code with its PKCE challenge and OIDC nonce."""

    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: User
    code_challenge: str
    code_challenge_method: str
    nonce: str | None
    auth_time: int
    expires_at: float
    #: the token family issued from this code; revoked if the code is replayed (RFC 6749 §4.1.2).
    token_family: str | None = None
    used: bool = False

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def is_expired(self) -> bool:
        return time.time() >= self.expires_at


@dataclass
class TokenRecord(TokenMixin):  # type: ignore[misc]
    """One issued token pair. `family` groups a refresh-token rotation chain.

    `refresh_used` marks a rotated-away refresh token (presenting it again is reuse and
    revokes the family); `revoked` kills the whole pair, access token included.
    """

    client_id: str
    user: User
    scope: str
    access_jti: str
    access_expires_at: float
    refresh_token: str | None
    refresh_expires_at: float
    family: str
    auth_time: int
    refresh_used: bool = False
    revoked: bool = False

    def check_client(self, client: Client) -> bool:
        return self.client_id == client.get_client_id()

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return max(0, int(self.refresh_expires_at - time.time()))

    def is_expired(self) -> bool:
        return time.time() >= self.refresh_expires_at

    def is_revoked(self) -> bool:
        return self.revoked or self.refresh_used

    def get_user(self) -> User:
        return self.user


@dataclass
class DeviceCredential(DeviceCredentialMixin):  # type: ignore[misc]
    """A device authorization (RFC 8628) and the user's decision on it, once made."""

    device_code: str
    user_code: str
    client_id: str
    scope: str
    expires_at: float
    interval: int
    #: `time.monotonic()` of the previous pending poll, for slow_down.
    last_poll_at: float | None = None
    #: None while pending; True approved, False denied.
    approved: bool | None = None
    user: User | None = None

    def get_client_id(self) -> str:
        return self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_user_code(self) -> str:
        return self.user_code

    def is_expired(self) -> bool:
        return time.time() >= self.expires_at
