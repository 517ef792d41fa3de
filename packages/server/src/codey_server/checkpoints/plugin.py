"""Checkpoints as a plugin: ``/api/sessions/{id}/checkpoints*`` and ``/diff``, the
``checkpoint_recorded`` fold, and the service the agent's turns and the rewind use
(``services.checkpoints``)."""

from __future__ import annotations

from typing import Any

from codey_server.checkpoints import fold
from codey_server.checkpoints.routes import CheckpointsController
from codey_server.checkpoints.service import Checkpoints
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.settings import Settings

__all__ = ["PLUGIN"]


def _checkpoints(engine: Engine, actions: Delivery, settings: Settings, agent: Any
                 ) -> Checkpoints:
    built = Checkpoints(engine, actions, max_file_bytes=settings.checkpoint_max_file_bytes,
                        keep=settings.checkpoints_keep)
    # the agent's turns ask for a checkpoint before their first change
    agent.deps.checkpoints = built
    return built


PLUGIN = FeaturePlugin(
    "checkpoints",
    routes=(CheckpointsController,),
    fold=fold.FOLD,
    parts=(Part("checkpoints", _checkpoints, stop=Checkpoints.stop),),
)
