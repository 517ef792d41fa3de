"""Model-provider login run by the server: OAuth (PKCE), device code, API keys.

    service.py   ``AuthService(settings, engine)``: start()/stop() in the lifespan;
                 ``token_for(name)`` for the agent loop
    oauth.py     OAuth 2.0 / OIDC with PKCE over authlib; device.py the device-code grant
    store.py     ``auth.json``: credentials, on disk in the data dir only (0600)
    fold.py      ``auth_status_updated`` into the state
    routes.py    ``/api/auth/*``

Nothing is imported here: authlib and httpx load only when a login is used.

Errors: :class:`~codey_server.providers.service.AuthError` (a request that cannot be
carried out) and
:class:`~codey_server.providers.oauth.OAuthFailed` (a provider said no), both ``ServerError``.
"""
