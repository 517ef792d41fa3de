"""OAuth 2.0 / OpenID Connect (PKCE S256), over authlib's httpx client.

A public client by default. With ``client_secret_env`` the client is confidential: its secret
is read from that environment variable when a token call is made (never stored, never
logged), and it authenticates with ``client_secret_basic`` or, when the discovery document's
``token_endpoint_auth_methods_supported`` does not offer that, ``client_secret_post``
(:meth:`OAuthProvider.client_auth`).

One :class:`OAuthProvider` per configured provider with ``auth == "oauth"``. Order of calls
for the browser flow: :meth:`~OAuthProvider.authorization_url` (the caller keeps ``state``,
``nonce`` and the verifier) → the user logs in at the provider → the provider redirects to our
callback → :meth:`~OAuthProvider.exchange_code` with the same verifier and redirect URI →
:meth:`~OAuthProvider.validate_id_token` with the same nonce. Later,
:meth:`~OAuthProvider.refresh`. Every failure raises :class:`OAuthFailed` whose message is safe
to show and log (it never contains a token or a code).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

import msgspec

from codey_server.errors import ServerError
from codey_server.settings import ProviderConfig

# httpx, authlib and joserfc load when a login is first used (inside the methods below), not
# with the server: most servers never run one
if TYPE_CHECKING:
    import httpx
    from authlib.integrations.httpx_client import AsyncOAuth2Client
    from joserfc.jwk import KeySet

__all__ = ["ClientAuth", "Discovery", "OAuthFailed", "OAuthProvider", "TokenSet",
           "provider_error"]

_ID_TOKEN_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "EdDSA"]
#: what a confidential client may use, in order of preference (RFC 6749 §2.3.1: basic is the
#: one every server must support)
_SECRET_METHODS = ("client_secret_basic", "client_secret_post")
#: characters of a provider's error page kept in a message
_ERROR_TEXT_MAX = 300

AuthMethod = Literal["none", "client_secret_basic", "client_secret_post"]


class OAuthFailed(ServerError):
    """A login or refresh step failed; ``code`` is the OAuth error code (or ours)."""

    upstream_codes = True

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Discovery(msgspec.Struct, kw_only=True):
    """The parts of OIDC discovery metadata we use."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    device_authorization_endpoint: str | None = None
    jwks_uri: str | None = None
    userinfo_endpoint: str | None = None
    revocation_endpoint: str | None = None
    # RFC 8414 §2: absent means client_secret_basic only
    token_endpoint_auth_methods_supported: list[str] | None = None


class ClientAuth(msgspec.Struct, kw_only=True):
    """How to authenticate this client on a request to the provider: form fields to add
    (``client_id``, and ``client_secret`` for post) and an HTTP Basic header, if any."""

    method: AuthMethod
    data: dict[str, str]
    basic: tuple[str, str] | None = None

    def __repr__(self) -> str:  # data may hold the secret
        return f"ClientAuth(method={self.method!r})"

    @property
    def auth(self) -> httpx.Auth:
        """The request's ``auth=``: HTTP Basic, or httpx's no-op base ``Auth``."""
        import httpx

        return httpx.BasicAuth(*self.basic) if self.basic else httpx.Auth()


class TokenSet(msgspec.Struct, kw_only=True):
    """A token endpoint's answer, reduced to what we keep."""

    access_token: str
    refresh_token: str | None = None
    expires_at: float | None = None
    id_token: str | None = None
    scope: str | None = None

    def __repr__(self) -> str:
        return f"TokenSet(expires_at={self.expires_at!r}, scope={self.scope!r})"


def token_set(raw: dict[str, Any], previous_refresh: str | None = None) -> TokenSet:
    """Read a token response (RFC 6749 §5.1); raises OAuthFailed when it has no token."""
    access = raw.get("access_token")
    if not isinstance(access, str) or not access:
        raise OAuthFailed("invalid_response", "the token endpoint returned no access token")
    expires_at: float | None = None
    if isinstance(raw.get("expires_in"), (int, float)):
        expires_at = time.time() + float(raw["expires_in"])
    elif isinstance(raw.get("expires_at"), (int, float)):
        expires_at = float(raw["expires_at"])
    refresh = raw.get("refresh_token")
    id_token = raw.get("id_token")
    scope = raw.get("scope")
    return TokenSet(access_token=access,
                    refresh_token=refresh if isinstance(refresh, str) else previous_refresh,
                    expires_at=expires_at,
                    id_token=id_token if isinstance(id_token, str) else None,
                    scope=scope if isinstance(scope, str) else None)


def provider_error(r: Any) -> OAuthFailed:
    """A provider's error answer as an OAuthFailed: the OAuth ``error`` and its description
    when the body is one (RFC 6749 §5.2), else ``http_<status>`` with the status and the
    start of the provider's own text. ``r`` is an ``httpx`` (or ``httpx2``) response."""
    try:
        body = r.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        description = body.get("error_description")
        return OAuthFailed(body["error"][:64], description if isinstance(description, str)
                           else f"the provider refused the request (HTTP {r.status_code})")
    text = " ".join(r.text.split())[:_ERROR_TEXT_MAX] if r.content else ""
    reason = r.reason_phrase or "error"
    return OAuthFailed(f"http_{r.status_code}",
                       f"the provider answered HTTP {r.status_code} {reason}"
                       + (f": {text}" if text else ""))


def _transport_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """(transport errors, status errors) of authlib's httpx client: it runs on httpx2 when
    that is installed (the mcp SDK brings it in a shared environment), else on httpx, so they
    may come from either."""
    import httpx

    try:
        import httpx2
    except ImportError:  # pragma: no cover - depends on the environment
        return (httpx.HTTPError,), (httpx.HTTPStatusError,)
    return (httpx.HTTPError, httpx2.HTTPError), (httpx.HTTPStatusError, httpx2.HTTPStatusError)


def _oauth_failed(err: Exception) -> OAuthFailed:
    from authlib.integrations.base_client.errors import OAuthError

    http_errors, status_errors = _transport_errors()
    if isinstance(err, OAuthError):
        return OAuthFailed(err.error or "oauth_error",
                           err.description or "the provider refused the request")
    if isinstance(err, status_errors):  # authlib raises it for a 5xx or a non-JSON body
        return provider_error(err.response)  # type: ignore[attr-defined]
    if isinstance(err, http_errors):
        return OAuthFailed("unreachable", f"cannot reach the provider: {type(err).__name__}")
    return OAuthFailed("oauth_error", type(err).__name__)


class OAuthProvider:
    """One OAuth provider: discovery (fetched once, on first use), token calls, ID tokens."""

    def __init__(self, config: ProviderConfig, http: httpx.AsyncClient) -> None:
        if not config.issuer or not config.client_id:
            raise OAuthFailed("not_configured",
                              f"provider {config.name!r} needs issuer and client_id for OAuth")
        self.config = config
        self.issuer = config.issuer.rstrip("/")
        self.client_id = config.client_id
        self._http = http
        self._discovery: Discovery | None = None
        self._jwks: KeySet | None = None

    async def discovery(self) -> Discovery:
        if self._discovery is None:
            import httpx

            url = f"{self.issuer}/.well-known/openid-configuration"
            try:
                r = await self._http.get(url)
                r.raise_for_status()
                meta = msgspec.json.decode(r.content, type=Discovery)
            except (httpx.HTTPError, msgspec.DecodeError, msgspec.ValidationError) as err:
                raise OAuthFailed("discovery_failed",
                                  f"OIDC discovery at {url} failed: {type(err).__name__}"
                                  ) from None
            if meta.issuer.rstrip("/") != self.issuer:
                raise OAuthFailed("discovery_failed",
                                  f"discovery names issuer {meta.issuer!r}, not {self.issuer!r}")
            self._discovery = meta
        return self._discovery

    def _secret(self) -> str | None:
        name = self.config.client_secret_env
        if not name:
            return None
        secret = os.environ.get(name)
        if not secret:
            raise OAuthFailed("not_configured",
                              f"provider {self.config.name!r} is a confidential client: set "
                              f"its client secret in the environment variable {name}")
        return secret

    async def client_auth(self) -> ClientAuth:
        """How this client authenticates: ``none`` (public), else ``client_secret_basic`` if
        the provider supports it, else ``client_secret_post``. Raises OAuthFailed when the
        secret is missing from the environment or the provider supports neither method."""
        secret = self._secret()
        if secret is None:
            return ClientAuth(method="none", data={"client_id": self.client_id})
        meta = await self.discovery()
        supported = meta.token_endpoint_auth_methods_supported or ["client_secret_basic"]
        method = next((m for m in _SECRET_METHODS if m in supported), None)
        if method == "client_secret_basic":
            # RFC 6749 §2.3.1: both parts form-encoded before they go into the header
            return ClientAuth(method="client_secret_basic", data={},
                              basic=(quote(self.client_id, safe=""), quote(secret, safe="")))
        if method == "client_secret_post":
            return ClientAuth(method="client_secret_post",
                              data={"client_id": self.client_id, "client_secret": secret})
        raise OAuthFailed("unsupported",
                          f"provider {self.config.name!r} accepts none of "
                          f"{', '.join(_SECRET_METHODS)} at its token endpoint "
                          f"(it offers {', '.join(supported)})")

    async def _client(self, redirect_uri: str | None = None) -> AsyncOAuth2Client:
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        auth = await self.client_auth()
        secret = auth.data.get("client_secret") or (
            self._secret() if auth.method == "client_secret_basic" else None)
        return AsyncOAuth2Client(client_id=self.client_id, client_secret=secret,
                                 token_endpoint_auth_method=auth.method,
                                 scope=" ".join(self.config.scopes), redirect_uri=redirect_uri,
                                 code_challenge_method="S256", timeout=30.0)

    def _extra(self) -> dict[str, str]:
        return {"audience": self.config.audience} if self.config.audience else {}

    async def authorization_url(self, *, redirect_uri: str, state: str, nonce: str,
                                code_verifier: str) -> str:
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        meta = await self.discovery()
        # no secret is needed to build a link: a public client's settings do
        async with AsyncOAuth2Client(client_id=self.client_id, scope=" ".join(self.config.scopes),
                                     redirect_uri=redirect_uri, code_challenge_method="S256",
                                     ) as client:
            url, _ = client.create_authorization_url(
                meta.authorization_endpoint, state=state, code_verifier=code_verifier,
                nonce=nonce, **self._extra())
        return str(url)

    async def exchange_code(self, *, code: str, redirect_uri: str,
                            code_verifier: str) -> TokenSet:
        meta = await self.discovery()
        oauth = await self._client(redirect_uri)  # raises OAuthFailed itself
        try:
            async with oauth as client:
                raw = await client.fetch_token(meta.token_endpoint, grant_type="authorization_code",
                                               code=code, code_verifier=code_verifier,
                                               redirect_uri=redirect_uri)
        except Exception as err:  # authlib raises OAuthError; transport raises httpx errors
            raise _oauth_failed(err) from None
        return token_set(dict(raw))

    async def refresh(self, refresh_token: str) -> TokenSet:
        meta = await self.discovery()
        oauth = await self._client()
        try:
            async with oauth as client:
                raw = await client.refresh_token(meta.token_endpoint,
                                                 refresh_token=refresh_token)
        except Exception as err:
            raise _oauth_failed(err) from None
        return token_set(dict(raw), previous_refresh=refresh_token)

    async def _keyset(self, refetch: bool = False) -> KeySet:
        import httpx
        from joserfc.errors import JoseError
        from joserfc.jwk import KeySet

        if self._jwks is None or refetch:
            meta = await self.discovery()
            if not meta.jwks_uri:
                raise OAuthFailed("invalid_id_token", "the provider publishes no JWKS")
            try:
                r = await self._http.get(meta.jwks_uri)
                r.raise_for_status()
                self._jwks = KeySet.import_key_set(r.json())
            except (httpx.HTTPError, ValueError, JoseError) as err:
                raise OAuthFailed("invalid_id_token",
                                  f"cannot load the provider's keys: {type(err).__name__}"
                                  ) from None
        return self._jwks

    async def validate_id_token(self, id_token: str, nonce: str) -> dict[str, Any]:
        """Check signature, ``iss``, ``aud`` (our client id), ``exp`` and ``nonce``; return
        the claims."""
        from joserfc import jwt
        from joserfc.errors import JoseError

        for attempt in (0, 1):  # a key rotation: refetch the JWKS once
            try:
                token = jwt.decode(id_token, await self._keyset(refetch=attempt == 1),
                                   algorithms=_ID_TOKEN_ALGORITHMS)
                break
            except JoseError as err:
                if attempt == 1:
                    raise OAuthFailed("invalid_id_token",
                                      f"ID token signature: {err.error}") from None
        registry = jwt.JWTClaimsRegistry(
            leeway=60,
            iss={"essential": True, "value": self.issuer},
            sub={"essential": True},
            exp={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        claims: dict[str, Any] = dict(token.claims)
        try:
            registry.validate(claims)
        except JoseError as err:
            raise OAuthFailed("invalid_id_token", f"ID token claims: {err.error} "
                                                  f"{getattr(err, 'claim', '')}") from None
        aud = claims.get("aud")
        audiences = aud if isinstance(aud, list) else [aud]
        if self.client_id not in audiences:
            raise OAuthFailed("invalid_id_token", "ID token is for another client")
        return claims

    async def userinfo_account(self, access_token: str) -> str | None:
        """The email (else subject) from the userinfo endpoint; None if it cannot tell."""
        import httpx

        meta = await self.discovery()
        if not meta.userinfo_endpoint:
            return None
        try:
            r = await self._http.get(meta.userinfo_endpoint,
                                     headers={"Authorization": f"Bearer {access_token}"})
            if r.status_code != 200:
                return None
            info = r.json()
        except (httpx.HTTPError, ValueError):
            return None
        return account_of(info)


def account_of(claims: dict[str, Any]) -> str | None:
    for key in ("email", "preferred_username", "sub"):
        value = claims.get(key)
        if isinstance(value, str) and value:
            return value
    return None
