"""authlib's `AuthorizationServer` bound to our plain `HttpRequest`/`HttpResponse` values.

This is the "framework integration" authlib asks for: it turns our requests into
`OAuth2Request`/`JsonRequest`, our responses out of `(status, body, headers)` tuples, and
answers `query_client`/`save_token` from the in-memory store. The grants (grants.py) reach
the store, settings, keys and user through `grant.server`.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any

from authlib.common.security import generate_token
from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    JsonPayload,
    JsonRequest,
    OAuth2Payload,
    OAuth2Request,
)
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from joserfc.jwk import KeySet

from .keys import SigningKeys
from .messages import HttpRequest, HttpResponse, first_values
from .models import Client, TokenRecord, User
from .settings import ProviderSettings
from .store import MemoryStore

__all__ = ["ProviderAuthorizationServer", "jwt_claims_unverified"]

log = logging.getLogger("codey_testkit.oidc")


def jwt_claims_unverified(token: str) -> dict[str, Any]:
    """Claims of a JWT we just signed ourselves (no verification: only for bookkeeping)."""
    payload = token.split(".")[1]
    padded = payload + "=" * (-len(payload) % 4)
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(padded))
    return claims


class _Payload(OAuth2Payload):  # type: ignore[misc]
    def __init__(self, values: dict[str, list[str]]) -> None:
        self._datalist = values
        self._data = first_values(values)

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> dict[str, list[str]]:
        return self._datalist


class _OAuth2Request(OAuth2Request):  # type: ignore[misc]
    """Parameters come from the query for GET and from the urlencoded body for POST
    (RFC 6749 §3.1 and §3.2); they are never mixed."""

    def __init__(self, request: HttpRequest) -> None:
        super().__init__(request.method, request.url, headers=request.headers)
        self._args = first_values(request.query)
        self._form = first_values(request.form)
        self.payload = _Payload(request.query if request.method == "GET" else request.form)

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _JsonPayload(JsonPayload):  # type: ignore[misc]
    def __init__(self, request: HttpRequest) -> None:
        self._request = request

    @property
    def data(self) -> Any:
        return self._request.json()


class _JsonRequest(JsonRequest):  # type: ignore[misc]
    def __init__(self, request: HttpRequest) -> None:
        super().__init__(request.method, request.url, request.headers)
        self.payload = _JsonPayload(request)


class _AccessTokenGenerator(JWTBearerTokenGenerator):  # type: ignore[misc]
    """RFC 9068 JWT access tokens: iss, sub, aud (the configured audience), exp, scope,
    client_id, jti; signed RS256 with the provider's key (its `kid` in the header)."""

    def __init__(self, issuer: str, keys: SigningKeys, settings: ProviderSettings) -> None:
        super().__init__(
            issuer,
            alg=SigningKeys.ALG,
            refresh_token_generator=lambda **_: generate_token(48),
            expires_generator=lambda client, grant_type: settings.access_token_ttl,
        )
        self._keys = keys
        self._audience = settings.audience

    def get_jwks(self) -> KeySet:
        return self._keys.private

    def get_audiences(self, client: Client, user: User | None, scope: str) -> str:
        return self._audience


class ProviderAuthorizationServer(AuthorizationServer):  # type: ignore[misc]
    """authlib's authorization server for the test provider.

    Construct it, then register grants and endpoints (done by `OIDCProvider`). All calls go
    through `create_*_response(HttpRequest)` and return `HttpResponse`.
    """

    def __init__(
        self,
        issuer: str,
        settings: ProviderSettings,
        store: MemoryStore,
        keys: SigningKeys,
        user: User,
    ) -> None:
        super().__init__(scopes_supported=list(settings.scopes))
        self.issuer = issuer
        self.settings = settings
        self.store = store
        self.keys = keys
        self.user = user
        self.register_token_generator("default", _AccessTokenGenerator(issuer, keys, settings))

    # framework integration ---------------------------------------------------------------
    def create_oauth2_request(self, request: HttpRequest | OAuth2Request) -> OAuth2Request:
        if isinstance(request, OAuth2Request):
            return request
        return _OAuth2Request(request)

    def create_json_request(self, request: HttpRequest) -> JsonRequest:
        return _JsonRequest(request)

    def handle_response(
        self, status: int, body: Any, headers: list[tuple[str, str]]
    ) -> HttpResponse:
        headers = list(headers)
        if isinstance(body, dict):
            return HttpResponse.json_body(status, body, headers)
        data = body.encode() if isinstance(body, str) else bytes(body or b"")
        return HttpResponse(status, headers, data)

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        # Nothing subscribes to authlib's signals here; log them for --verbose runs.
        log.debug("signal %s", name)

    # storage -----------------------------------------------------------------------------
    def query_client(self, client_id: str) -> Client | None:
        return self.store.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        """Record the issued pair so refresh, reuse detection and revocation can find it."""
        claims = jwt_claims_unverified(token["access_token"])
        now = time.time()
        previous: TokenRecord | None = request.refresh_token
        code = request.authorization_code
        if previous is not None:
            auth_time = previous.auth_time
        elif code is not None:
            auth_time = code.auth_time
        else:
            auth_time = int(now)
        record = TokenRecord(
            client_id=request.client.get_client_id(),
            user=request.user,
            scope=token.get("scope", ""),
            access_jti=claims["jti"],
            access_expires_at=float(claims["exp"]),
            refresh_token=token.get("refresh_token"),
            refresh_expires_at=now + self.settings.refresh_token_ttl,
            family=previous.family if previous is not None else generate_token(16),
            auth_time=auth_time,
        )
        self.store.add_token(record)
        if code is not None:
            code.token_family = record.family
