"""The model providers as a plugin: Settings → Models' providers and their logins
(``/api/providers``, ``/api/auth``), their commands and events; the auth service, which the
agent's model calls take their tokens from until the very end (it closes after the delivery)."""

from __future__ import annotations

from typing import Protocol

from codey_server.core.engine import Engine
from codey_server.core.hosting import Hosting
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.providers import decide, fold
from codey_server.providers.routes import AuthController, ProvidersController
from codey_server.providers.service import AuthService
from codey_server.providers.store import CredentialStore, LoginStore
from codey_server.settings import Settings

__all__ = ["PLUGIN"]


class _Stores(Protocol):
    @property
    def credentials(self) -> CredentialStore: ...

    @property
    def logins(self) -> LoginStore: ...


def _auth(settings: Settings, engine: Engine, stores: _Stores,
          deployment: Hosting) -> AuthService:
    # one replica at a time refreshes a provider's token (deployment.refresh_guard)
    return AuthService(settings, engine, store=stores.credentials, logins=stores.logins,
                       refresh_guard=deployment.refresh_guard)


PLUGIN = FeaturePlugin(
    "providers",
    routes=(AuthController, ProvidersController),
    commands=decide.COMMANDS,
    fold=fold.FOLD,
    parts=(Part("auth", _auth, start=AuthService.start, close=AuthService.stop),),
)
