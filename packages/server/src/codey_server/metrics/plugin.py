"""Metrics as a plugin: ``GET /metrics``; the collector, which counts from the engine's
events, the model providers' calls and the open browser sockets."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import Any, Protocol

from codey_server.core.engine import Engine
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.metrics.collector import ServerMetrics
from codey_server.metrics.routes import metrics

__all__ = ["PLUGIN"]


class _Agent(Protocol):
    """The agent (``agent``), for its model providers."""

    @property
    def providers(self) -> Mapping[str, Any]: ...


def _metrics(engine: Engine, clients: Sized, agent: _Agent) -> ServerMetrics:
    return ServerMetrics(engine, lambda: len(clients), agent.providers.values())


PLUGIN = FeaturePlugin("metrics", routes=(metrics,), parts=(Part("metrics", _metrics),))
