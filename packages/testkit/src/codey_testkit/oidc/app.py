"""The provider core: routes an `HttpRequest` to authlib and returns an `HttpResponse`.

Endpoints (all relative to the issuer):

- `GET /.well-known/openid-configuration`, `GET /jwks.json`, `GET /_health`
- `GET|POST /authorize` — auto-consents for the configured user
- `POST /token` — authorization_code (PKCE S256), refresh_token (rotating), device_code
- `POST /device_authorization`; `GET /device?user_code=…[&approve=1]`, `POST /device`
- `GET|POST /userinfo` — Bearer access token with scope "openid"
- test hooks: `POST /_clients {client_id, redirect_uris, client_secret?}`,
  `POST /_device/approve {user_code}`, `POST /_device/deny {user_code}`,
  `POST /_fail {path, status, body?, times?}` (the next `times` requests to `path` get
  `status` with `body` as plain text: a provider having a bad day)

Settings decide how clients authenticate at the token endpoint
(`token_endpoint_auth_methods`: a client with a secret must use one of the secret methods) and
whether the device flow is offered (`device_flow`; without it there is no device endpoint).

`handle` is thread-safe (one lock): the HTTP adapter may call it from many threads.
"""

from __future__ import annotations

import html
import logging
import threading
from collections.abc import Callable
from typing import Any

from authlib.oauth2.rfc6749 import MissingAuthorizationError, OAuth2Error, ResourceProtector
from authlib.oauth2.rfc6750 import InvalidTokenError
from authlib.oauth2.rfc8628 import DEVICE_CODE_GRANT_TYPE
from authlib.oauth2.rfc9068 import JWTBearerTokenValidator
from authlib.oauth2.rfc9068.claims import JWTAccessTokenClaims
from joserfc.jwk import KeySet

from .authorization_server import ProviderAuthorizationServer
from .grants import register_all
from .keys import SigningKeys
from .messages import HttpRequest, HttpResponse
from .models import Client, User
from .settings import ProviderSettings
from .store import MemoryStore

__all__ = ["OIDCProvider"]

log = logging.getLogger("codey_testkit.oidc")

_Handler = Callable[[HttpRequest], HttpResponse]


class _AccessTokenValidator(JWTBearerTokenValidator):  # type: ignore[misc]
    """RFC 9068 validation (signature, iss, aud, exp) plus our own revocation list."""

    def __init__(self, issuer: str, audience: str, jwks: KeySet, store: MemoryStore) -> None:
        super().__init__(issuer=issuer, resource_server=audience)
        self._jwks = jwks
        self._store = store

    def get_jwks(self) -> KeySet:
        return self._jwks

    def validate_token(
        self, token: JWTAccessTokenClaims, scopes: list[str], request: Any, **kwargs: Any
    ) -> None:
        super().validate_token(token, scopes, request, **kwargs)
        if self._store.is_access_token_revoked(str(token.get("jti"))):
            raise InvalidTokenError(realm=self.realm)


class OIDCProvider:
    """One provider instance: settings, key, store and authlib server, behind `handle`.

    Create it once the issuer URL is known (after the socket is bound), then call `handle`
    for every request. `keys` defaults to a freshly generated RSA key.
    """

    def __init__(
        self, settings: ProviderSettings, issuer: str, keys: SigningKeys | None = None
    ) -> None:
        self.settings = settings
        self.issuer = issuer.rstrip("/")
        self.keys = keys if keys is not None else SigningKeys()
        self.store = MemoryStore()
        self.user = User(sub=settings.user_sub, email=settings.user_email)
        for client in settings.clients:
            self.add_client(client.client_id, list(client.redirect_uris), client.client_secret)
        self.server = ProviderAuthorizationServer(
            self.issuer, settings, self.store, self.keys, self.user
        )
        register_all(self.server)
        self.resource_protector = ResourceProtector()
        self.resource_protector.register_token_validator(
            _AccessTokenValidator(
                self.issuer, settings.audience, self.keys.public_keyset(), self.store
            )
        )
        self._lock = threading.Lock()
        self._routes: dict[tuple[str, str], _Handler] = {
            ("GET", "/.well-known/openid-configuration"): self._discovery,
            ("GET", "/.well-known/oauth-authorization-server"): self._discovery,
            ("GET", "/jwks.json"): self._jwks,
            ("GET", "/_health"): self._health,
            ("GET", "/authorize"): self._authorize,
            ("POST", "/authorize"): self._authorize,
            ("POST", "/token"): self._token,
            ("POST", "/device_authorization"): self._device_authorization,
            ("GET", "/device"): self._device_page,
            ("POST", "/device"): self._device_page,
            ("GET", "/userinfo"): self._userinfo,
            ("POST", "/userinfo"): self._userinfo,
            ("POST", "/_clients"): self._register_client,
            ("POST", "/_device/approve"): lambda r: self._device_hook(r, approve=True),
            ("POST", "/_device/deny"): lambda r: self._device_hook(r, approve=False),
            ("POST", "/_fail"): self._fail_hook,
        }
        if not settings.device_flow:
            del self._routes[("POST", "/device_authorization")]
        self._failures: dict[str, tuple[int, str, int]] = {}  # path -> status, body, times

    def add_client(
        self, client_id: str, redirect_uris: list[str], client_secret: str | None = None
    ) -> Client:
        """Register a client, or add redirect URIs to an existing one. Returns the client."""
        client = Client(client_id, list(redirect_uris), self.settings.scopes, client_secret,
                        self.settings.token_endpoint_auth_methods)
        return self.store.add_client(client)

    def handle(self, request: HttpRequest) -> HttpResponse:
        """Answer one request. Never raises for bad input: errors become 4xx responses."""
        with self._lock:
            failure = self._failures.get(request.path)
            if failure is not None:
                status, body, times = failure
                if times <= 1:
                    del self._failures[request.path]
                else:
                    self._failures[request.path] = (status, body, times - 1)
                return HttpResponse(status, [("Content-Type", "text/plain")], body.encode())
        handler = self._routes.get((request.method, request.path))
        if handler is None:
            if any(path == request.path for _, path in self._routes):
                return HttpResponse.json_body(405, {"error": "method_not_allowed"})
            return HttpResponse.json_body(404, {"error": "not_found"})
        with self._lock:
            return handler(request)

    # metadata ----------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """The OpenID Provider Metadata (OIDC Discovery 1.0 §3, RFC 8414)."""
        base = self.issuer
        device = self.settings.device_flow
        meta: dict[str, Any] = {
            "issuer": base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
            "device_authorization_endpoint": f"{base}/device_authorization",
            "userinfo_endpoint": f"{base}/userinfo",
            "jwks_uri": f"{base}/jwks.json",
            "scopes_supported": list(self.settings.scopes),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": [
                "authorization_code",
                "refresh_token",
                *([DEVICE_CODE_GRANT_TYPE] if device else []),
            ],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [SigningKeys.ALG],
            "token_endpoint_auth_methods_supported": list(
                self.settings.token_endpoint_auth_methods),
            "code_challenge_methods_supported": ["S256"],
            "claims_supported": ["iss", "sub", "aud", "exp", "iat", "auth_time", "nonce",
                                 "at_hash", "email", "email_verified"],
            "request_parameter_supported": False,
            "request_uri_parameter_supported": False,
        }
        if not device:
            del meta["device_authorization_endpoint"]
        return meta

    def _discovery(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json_body(200, self.metadata(), [("Cache-Control", "no-cache")])

    def _jwks(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json_body(200, self.keys.public_jwks(), [("Cache-Control", "no-cache")])

    def _health(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json_body(200, {"status": "ok", "issuer": self.issuer})

    # OAuth endpoints ---------------------------------------------------------------------
    def _authorize(self, request: HttpRequest) -> HttpResponse:
        # The test user is always logged in and always consents, so the consent step is a
        # validation followed straight away by the authorization response.
        try:
            grant = self.server.get_consent_grant(request=request, end_user=self.user)
        except OAuth2Error as error:
            # Before the redirect URI is validated errors must not redirect (RFC 6749
            # §4.1.2.1); authlib only sets error.redirect_uri once it is trusted.
            response: HttpResponse = self.server.handle_error_response(request, error)
            return response
        result: HttpResponse = self.server.create_authorization_response(
            request=grant.request, grant_user=self.user, grant=grant
        )
        return result

    def _token(self, request: HttpRequest) -> HttpResponse:
        response: HttpResponse = self.server.create_token_response(request)
        return response

    def _device_authorization(self, request: HttpRequest) -> HttpResponse:
        response: HttpResponse = self.server.create_endpoint_response(
            "device_authorization", request
        )
        return response

    def _userinfo(self, request: HttpRequest) -> HttpResponse:
        try:
            claims = self.resource_protector.validate_request(["openid"], request)
        except MissingAuthorizationError:
            # RFC 6750 §3.1: no credentials → a bare challenge, no error code.
            return HttpResponse.json_body(
                401, {"error": "invalid_request"}, [("WWW-Authenticate", "Bearer")]
            )
        except OAuth2Error as error:
            status, body, headers = error()
            return HttpResponse.json_body(status, body, headers)
        if claims.get("sub") != self.user.sub:
            return HttpResponse.json_body(401, {"error": "invalid_token"})
        info: dict[str, Any] = {"sub": self.user.sub}
        if "email" in str(claims.get("scope", "")).split():
            info.update(email=self.user.email, email_verified=True)
        return HttpResponse.json_body(200, info)

    # device verification (the user's side) -----------------------------------------------
    def decide_device(self, user_code: str, *, approve: bool) -> bool:
        """Record the user's decision on a device authorization.

        Returns False when the user code is unknown, expired or already decided.
        """
        credential = self.store.device_by_user_code(user_code)
        if credential is None or credential.is_expired() or credential.approved is not None:
            return False
        credential.approved = approve
        credential.user = self.user if approve else None
        return True

    def _device_page(self, request: HttpRequest) -> HttpResponse:
        params = request.query if request.method == "GET" else request.form
        user_code = (params.get("user_code") or [""])[0]
        action = (params.get("action") or [""])[0]
        if (params.get("approve") or [""])[0] == "1":
            action = "approve"
        if not user_code or not action:
            return HttpResponse.html(200, _device_form(user_code))
        if action not in ("approve", "deny"):
            return HttpResponse.html(400, _page("Unknown action", "<p>Use approve or deny.</p>"))
        if not self.decide_device(user_code, approve=action == "approve"):
            body = "<p>That code is unknown, expired or already used.</p>"
            return HttpResponse.html(400, _page("Invalid code", body))
        verb = "approved" if action == "approve" else "denied"
        return HttpResponse.html(200, _page(f"Device {verb}", "<p>You can close this page.</p>"))

    # test hooks --------------------------------------------------------------------------
    def _device_hook(self, request: HttpRequest, *, approve: bool) -> HttpResponse:
        body = request.json()
        if body is None:
            body = {k: v[0] for k, v in request.form.items()}
        user_code = body.get("user_code") if isinstance(body, dict) else None
        if not isinstance(user_code, str):
            return HttpResponse.json_body(400, {"error": "user_code required"})
        if not self.decide_device(user_code, approve=approve):
            return HttpResponse.json_body(404, {"error": "unknown, expired or decided user_code"})
        return HttpResponse.json_body(200, {"status": "approved" if approve else "denied"})

    def _fail_hook(self, request: HttpRequest) -> HttpResponse:
        body = request.json()
        if not isinstance(body, dict) or not isinstance(body.get("path"), str):
            return HttpResponse.json_body(400, {"error": "path required"})
        status, text, times = body.get("status", 503), body.get("body", ""), body.get("times", 1)
        if not isinstance(status, int) or not isinstance(text, str) or not isinstance(times, int):
            return HttpResponse.json_body(400, {"error": "status, body, times: int, str, int"})
        self._failures[body["path"]] = (status, text, max(1, times))
        return HttpResponse.json_body(200, {"path": body["path"], "status": status})

    def _register_client(self, request: HttpRequest) -> HttpResponse:
        body = request.json()
        if not isinstance(body, dict) or not isinstance(body.get("client_id"), str):
            return HttpResponse.json_body(400, {"error": "client_id required"})
        uris = body.get("redirect_uris", [])
        secret = body.get("client_secret")
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            return HttpResponse.json_body(400, {"error": "redirect_uris must be strings"})
        if secret is not None and not isinstance(secret, str):
            return HttpResponse.json_body(400, {"error": "client_secret must be a string"})
        client = self.add_client(body["client_id"], uris, secret)
        return HttpResponse.json_body(
            200,
            {
                "client_id": client.client_id,
                "redirect_uris": client.redirect_uris,
                "token_endpoint_auth_method": "none" if client.is_public else "client_secret_basic",
            },
        )


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def _device_form(user_code: str) -> str:
    value = html.escape(user_code, quote=True)
    form = (
        "<form method='post' action='/device'>"
        "<label for='user_code'>Code</label> "
        f"<input id='user_code' name='user_code' value='{value}' autocomplete='off'> "
        "<button name='action' value='approve' data-testid='device-approve'>Approve</button> "
        "<button name='action' value='deny' data-testid='device-deny'>Deny</button>"
        "</form>"
    )
    return _page("Connect a device", form)
