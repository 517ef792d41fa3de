"""Local OAuth 2.0 / OpenID Connect provider for tests, built on authlib's server classes.

Layers, from the outside in: `http` (stdlib ThreadingHTTPServer, bytes only) → `app`
(`OIDCProvider.handle`: routing, consent, test hooks) → `authorization_server` (authlib's
`AuthorizationServer` bound to our request/response values) → `grants` (authlib grants and
extensions) → `store`/`models` (in-memory records). Run it as a process with
`codey-oidc-provider` (see `codey_testkit.oidc_provider`).
"""

from .app import OIDCProvider
from .http import ProviderHTTPServer, create_server
from .messages import HttpRequest, HttpResponse
from .process import OIDCProviderProcess
from .settings import ClientSettings, ProviderSettings, SettingsError, parse_args

__all__ = [
    "ClientSettings",
    "HttpRequest",
    "HttpResponse",
    "OIDCProvider",
    "OIDCProviderProcess",
    "ProviderHTTPServer",
    "ProviderSettings",
    "SettingsError",
    "create_server",
    "parse_args",
]
