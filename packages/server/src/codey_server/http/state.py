"""``/api/health``, ``/api/state/bootstrap``, ``/api/config``: the server as a whole."""

from __future__ import annotations

from typing import Literal

import msgspec
from litestar import get

from codey_protocol.state import State
from codey_server.access import PUBLIC
from codey_server.http.errors import errors
from codey_server.http.resource import Resource, ServicesDep
from codey_server.settings import ProviderConfig

__all__ = ["Bootstrap", "Health", "ProviderInfo", "ServerConfig", "StateController"]


class Health(msgspec.Struct, kw_only=True):
    status: str  # always "ok" when the server answers
    seq: int  # the last folded event


class Bootstrap(msgspec.Struct, kw_only=True):
    seq: int
    state: State


class ProviderInfo(msgspec.Struct, kw_only=True):
    name: str
    kind: Literal["responses", "chat", "ollama"]
    models: list[str]  # for Ollama: the list discovered at start-up
    default_model: str
    auth: Literal["none", "api_key", "oauth"]


class ServerConfig(msgspec.Struct, kw_only=True):
    default_provider: str
    providers: list[ProviderInfo]


class StateController(Resource):
    path = "/api"
    tags = ["server"]

    @get("/health", sync_to_thread=False, opt=PUBLIC, responses=errors(login=False))
    def health(self, services: ServicesDep) -> Health:
        """Liveness, and the seq of the last folded event. Needs no login."""
        return Health(status="ok", seq=services.engine.state.seq)

    @get("/state/bootstrap", sync_to_thread=False, responses=errors())
    def bootstrap(self, services: ServicesDep) -> Bootstrap:
        """The whole folded state and its seq (a browser then subscribes after that seq)."""
        state = services.engine.state
        return Bootstrap(seq=state.seq, state=state)

    @get("/config", sync_to_thread=False, responses=errors())
    def config(self, services: ServicesDep) -> ServerConfig:
        """The configured model providers (never a credential)."""
        context = services.engine.context

        def info(p: ProviderConfig) -> ProviderInfo:
            return ProviderInfo(name=p.name, kind=p.kind,
                                models=services.agent.providers[p.name].models,
                                default_model=context.default_models.get(p.name, ""),
                                auth=p.auth)

        return ServerConfig(default_provider=context.default_provider,
                            providers=[info(p) for p in services.settings.providers])
