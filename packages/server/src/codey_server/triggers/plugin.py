"""Triggers as a plugin: ``/api/triggers``, the webhook at ``/hooks/t/<id>``, their events,
the secrets' file and the per-trigger rate limits."""

from __future__ import annotations

from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.settings import Settings
from codey_server.triggers import fold
from codey_server.triggers.limits import RateLimits
from codey_server.triggers.routes import HookController, TriggersController
from codey_server.triggers.secrets import SECRETS_FILE, TriggerSecrets

__all__ = ["PLUGIN"]


def _secrets(settings: Settings) -> TriggerSecrets:
    return TriggerSecrets(settings.data_dir / SECRETS_FILE)


PLUGIN = FeaturePlugin(
    "triggers",
    routes=(TriggersController, HookController),
    fold=fold.FOLD,
    parts=(Part("trigger_secrets", _secrets), Part("trigger_limits", lambda: RateLimits())),
)
