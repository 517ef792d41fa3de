"""A model provider as a turn sees it: its settings and its wire, never its client.

The turn machines (:mod:`~codey_server.agent.turn`) are pure: they build request bodies and
read context windows, but the provider's SDK client, its connections and its credentials stay
in :class:`~codey_server.agent.models.ModelProvider`, which the driver calls by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from codey_server.agent.context import window_for
from codey_server.agent.wire import Wire
from codey_server.settings import ProviderConfig

__all__ = ["ProviderInfo"]


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """One configured provider, as a value: its name, settings, wire and default model."""

    name: str
    config: ProviderConfig
    wire: Wire
    default_model: str

    def context_window(self, model: str) -> int:
        return window_for(self.config, model)
