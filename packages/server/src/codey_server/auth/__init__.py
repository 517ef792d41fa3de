"""Model-provider login run by the server: OAuth (PKCE), device code, API keys.

    AuthService(settings, engine)   start()/stop() in the lifespan; token_for(name) for the loop

Its HTTP routes (``/api/auth/*``) are in :mod:`codey_server.http.auth`.

Errors: :class:`AuthError` (a request that cannot be carried out) and
:class:`~codey_server.auth.oauth.OAuthFailed` (a provider said no), both ``ServerError``.
"""

from codey_server.auth.oauth import OAuthFailed
from codey_server.auth.service import (
    AuthError,
    AuthService,
    DeviceLogin,
    LoginLink,
    ProviderStatus,
)

__all__ = ["AuthError", "AuthService", "DeviceLogin", "LoginLink", "OAuthFailed",
           "ProviderStatus"]
