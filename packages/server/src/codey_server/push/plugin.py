"""Web Push as a plugin: ``/api/push`` (devices, the decision from a notification), its
events, and the service that pushes the notices (:mod:`codey_server.core.notices`)."""

from __future__ import annotations

from typing import Protocol

from codey_server.core.engine import Engine
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.push import fold
from codey_server.push.routes import PushController
from codey_server.push.service import PushService
from codey_server.push.store import PushStore
from codey_server.settings import Settings

__all__ = ["PLUGIN"]


class _Stores(Protocol):
    @property
    def push(self) -> PushStore: ...


def _push(settings: Settings, engine: Engine, stores: _Stores) -> PushService:
    return PushService(settings, engine, stores.push)


PLUGIN = FeaturePlugin(
    "push",
    routes=(PushController,),
    fold=fold.FOLD,
    parts=(Part("push", _push, start=PushService.start, stop=PushService.stop),),
)
