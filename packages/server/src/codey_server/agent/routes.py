"""``/api/config``: the model providers sessions can use (never a credential)."""

from __future__ import annotations

from typing import Literal

import msgspec
from litestar import get
from litestar.di import NamedDependency

from codey_server.agent.service import AgentService
from codey_server.core.engine import Engine
from codey_server.http.errors import errors
from codey_server.http.resource import Resource
from codey_server.settings import ProviderConfig, Settings

__all__ = ["ConfigController", "ProviderInfo", "ServerConfig"]


class ProviderInfo(msgspec.Struct, kw_only=True):
    name: str
    kind: Literal["responses", "chat", "ollama", "anthropic"]
    models: list[str]  # for Ollama: the list discovered at start-up
    default_model: str
    auth: Literal["none", "api_key", "oauth"]


class ServerConfig(msgspec.Struct, kw_only=True):
    default_provider: str
    providers: list[ProviderInfo]


class ConfigController(Resource):
    path = "/api"
    tags = ["server"]

    @get("/config", sync_to_thread=False, responses=errors())
    def config(self, engine: NamedDependency[Engine], settings: NamedDependency[Settings],
               agent: NamedDependency[AgentService]) -> ServerConfig:
        """The configured model providers (never a credential)."""
        context = engine.context

        def info(p: ProviderConfig) -> ProviderInfo:
            return ProviderInfo(name=p.name, kind=p.kind,
                                models=agent.providers[p.name].models,
                                default_model=context.default_models.get(p.name, ""),
                                auth=p.auth)

        return ServerConfig(default_provider=context.default_provider,
                            providers=[info(p) for p in settings.providers])
