"""authlib grants and extensions wired to the in-memory store.

- `AuthorizationCodeGrant` + `S256CodeChallenge` (PKCE required, S256 only) + `OpenIDCodeExt`
  (ID token with nonce). Codes are single use; a replayed code revokes what it issued.
- `RefreshTokenGrant`: rotating refresh tokens; presenting a rotated-away token revokes the
  whole rotation family (OAuth 2.0 Security BCP, RFC 9700 §4.14.2).
- `DeviceCodeGrant` + `DeviceAuthorizationEndpoint` (RFC 8628) with slow_down enforcement.

Each grant reaches storage and settings through `self.server` (a
`ProviderAuthorizationServer`).
"""

from __future__ import annotations

import time
from typing import Any

from authlib.oauth2.rfc6749 import InvalidRequestError, OAuth2Request, scope_to_list
from authlib.oauth2.rfc6749 import grants as oauth2_grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8628 import DeviceAuthorizationEndpoint
from authlib.oauth2.rfc8628 import DeviceCodeGrant as _DeviceCodeGrant
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode, OpenIDToken
from joserfc.jwk import KeySet

from .authorization_server import ProviderAuthorizationServer
from .models import AuthorizationCode, Client, DeviceCredential, TokenRecord, User

__all__ = [
    "TOKEN_ENDPOINT_AUTH_METHODS",
    "AuthorizationCodeGrant",
    "DeviceCodeGrant",
    "OpenIDCodeExt",
    "OpenIDTokenExt",
    "ProviderDeviceAuthorizationEndpoint",
    "RefreshTokenGrant",
    "S256CodeChallenge",
    "register_all",
]

TOKEN_ENDPOINT_AUTH_METHODS = ["none", "client_secret_basic", "client_secret_post"]


class S256CodeChallenge(CodeChallenge):  # type: ignore[misc]
    """PKCE (RFC 7636) that every authorization request must use, with S256 only.

    A missing `code_challenge_method` means "plain" (RFC 7636 §4.3), so it is refused too.
    """

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def __init__(self) -> None:
        super().__init__(required=True)

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: missing 'code_challenge'.")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("Only code_challenge_method=S256 is supported.")
        super().validate_code_challenge(grant, redirect_uri)


class AuthorizationCodeGrant(oauth2_grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_ENDPOINT_AUTH_METHODS
    server: ProviderAuthorizationServer

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        data = request.payload.data
        now = time.time()
        nonce = data.get("nonce") or None
        record = AuthorizationCode(
            code=code,
            client_id=request.client.get_client_id(),
            redirect_uri=data["redirect_uri"],
            scope=request.scope or "",
            user=request.user,
            code_challenge=data["code_challenge"],
            code_challenge_method=data["code_challenge_method"],
            nonce=nonce,
            auth_time=int(now),
            expires_at=now + self.server.settings.code_ttl,
        )
        self.server.store.codes[code] = record
        if nonce:
            self.server.store.nonces.add((record.client_id, nonce))

    def query_authorization_code(self, code: str, client: Client) -> AuthorizationCode | None:
        record = self.server.store.codes.get(code)
        if record is None or record.client_id != client.get_client_id():
            return None
        if record.used:
            # RFC 6749 §4.1.2: a code used twice SHOULD revoke the tokens it produced.
            if record.token_family is not None:
                self.server.store.revoke_family(record.token_family)
            return None
        if record.is_expired():
            return None
        return record

    def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
        # Kept (marked used) rather than deleted, so a replay can be recognised.
        authorization_code.used = True

    def authenticate_user(self, authorization_code: AuthorizationCode) -> User:
        return authorization_code.user


class RefreshTokenGrant(oauth2_grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_ENDPOINT_AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True
    server: ProviderAuthorizationServer

    def authenticate_refresh_token(self, refresh_token: str) -> TokenRecord | None:
        record = self.server.store.tokens_by_refresh.get(refresh_token)
        if record is None or record.revoked or record.is_expired():
            return None
        if record.refresh_used:
            self.server.store.revoke_family(record.family)
            return None
        return record

    def authenticate_user(self, refresh_token: TokenRecord) -> User:
        return refresh_token.user

    def revoke_old_credential(self, refresh_token: TokenRecord) -> None:
        refresh_token.refresh_used = True


class DeviceCodeGrant(_DeviceCodeGrant):  # type: ignore[misc]
    server: ProviderAuthorizationServer

    def query_device_credential(self, device_code: str) -> DeviceCredential | None:
        return self.server.store.devices_by_code.get(device_code)

    def query_user_grant(self, user_code: str) -> tuple[User | None, bool] | None:
        credential = self.server.store.device_by_user_code(user_code)
        if credential is None or credential.approved is None:
            return None
        return credential.user, credential.approved

    def should_slow_down(self, credential: DeviceCredential) -> bool:
        """Too fast means sooner than the credential's interval after the previous poll;
        each slow_down raises that interval (RFC 8628 §3.5)."""
        now = time.monotonic()
        previous, credential.last_poll_at = credential.last_poll_at, now
        if previous is not None and now - previous < credential.interval:
            credential.interval += self.server.settings.device_slow_down_increment
            return True
        return False

    def create_token_response(self) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        result: tuple[int, dict[str, Any], list[tuple[str, str]]] = super().create_token_response()
        # A device code yields tokens once; later polls with it are invalid.
        self.server.store.remove_device(self.request.credential)
        return result


class ProviderDeviceAuthorizationEndpoint(DeviceAuthorizationEndpoint):  # type: ignore[misc]
    """`POST /device_authorization`: issues device_code/user_code (RFC 8628 §3.2)."""

    server: ProviderAuthorizationServer

    def __init__(self, server: ProviderAuthorizationServer) -> None:
        super().__init__(server)
        self.EXPIRES_IN = server.settings.device_expires
        self.INTERVAL = server.settings.device_interval

    def get_verification_uri(self) -> str:
        return f"{self.server.issuer}/device"

    def save_device_credential(
        self, client_id: str, scope: str | None, data: dict[str, Any]
    ) -> None:
        client = self.server.query_client(client_id)
        self.server.store.add_device(
            DeviceCredential(
                device_code=data["device_code"],
                user_code=data["user_code"],
                client_id=client_id,
                scope=client.get_allowed_scope(scope) if client else "",
                expires_at=time.time() + data["expires_in"],
                interval=data["interval"],
            )
        )


class _IdTokenMixin:
    """ID token contents shared by the code, refresh and device grants (OIDC Core §2)."""

    def __init__(self, server: ProviderAuthorizationServer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.server = server

    def resolve_client_private_key(self, client: Client) -> KeySet:
        return self.server.keys.private

    def get_client_algorithm(self, client: Client) -> str:
        return "RS256"

    def get_encode_header(self, client: Client) -> dict[str, str]:
        return {"alg": "RS256", "kid": self.server.keys.kid, "typ": "JWT"}

    def get_client_claims(self, client: Client) -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": self.server.issuer,
            "aud": [client.get_client_id()],
            "iat": now,
            "exp": now + self.server.settings.id_token_ttl,
        }

    def get_compatible_claims(self, request: OAuth2Request) -> dict[str, Any]:
        claims: dict[str, Any] = super().get_compatible_claims(request)  # type: ignore[misc]
        if request.refresh_token is not None:
            claims["auth_time"] = request.refresh_token.auth_time
        return claims

    def generate_user_info(self, user: User, scope: str) -> UserInfo:
        info = UserInfo(sub=user.sub)
        if "email" in scope_to_list(scope):
            info["email"] = user.email
            info["email_verified"] = True
        return info


class OpenIDCodeExt(_IdTokenMixin, OpenIDCode):  # type: ignore[misc]
    """OIDC for the authorization code grant: nonce checked for replay, echoed in the ID token."""

    def exists_nonce(self, nonce: str, request: OAuth2Request) -> bool:
        return (request.payload.client_id, nonce) in self.server.store.nonces


class OpenIDTokenExt(_IdTokenMixin, OpenIDToken):  # type: ignore[misc]
    """Adds an ID token to refresh and device-code responses when scope has "openid"."""


def register_all(server: ProviderAuthorizationServer) -> None:
    """Register every grant and the device authorization endpoint on `server`."""
    server.register_grant(
        AuthorizationCodeGrant, [S256CodeChallenge(), OpenIDCodeExt(server, require_nonce=False)]
    )
    server.register_grant(RefreshTokenGrant, [OpenIDTokenExt(server)])
    server.register_grant(DeviceCodeGrant, [OpenIDTokenExt(server)])
    server.register_endpoint(ProviderDeviceAuthorizationEndpoint(server))
