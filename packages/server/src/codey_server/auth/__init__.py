"""Model-provider login run by the server: OAuth (PKCE), device code, API keys.

    AuthService(settings, engine)   start()/stop() in the lifespan; token_for(name) for the loop
    auth_routes                     the /api/auth/* handlers

Errors: :class:`AuthError` (a request that cannot be carried out) and
:class:`~codey_server.auth.oauth.OAuthFailed` (a provider said no), both ``ServerError``.
"""

from codey_server.auth.oauth import OAuthFailed
from codey_server.auth.routes import auth_routes
from codey_server.auth.service import AuthError, AuthService, LoginLink

__all__ = ["AuthError", "AuthService", "LoginLink", "OAuthFailed", "auth_routes"]
