"""Git workspaces as a plugin: ``/api/sessions/{id}/changes`` and ``/worktree/*``, the
``worktree_updated`` fold; the service that makes, counts and ships a session's worktree."""

from __future__ import annotations

from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.workspaces import fold
from codey_server.workspaces.routes import WorktreeController
from codey_server.workspaces.service import Workspaces

__all__ = ["PLUGIN"]


def _workspaces(engine: Engine, actions: Delivery) -> Workspaces:
    # a session's git worktree: made before its first turn, shipped on the user's word
    return Workspaces(engine, actions)


PLUGIN = FeaturePlugin(
    "workspaces",
    routes=(WorktreeController,),
    fold=fold.FOLD,
    parts=(Part("workspaces", _workspaces, start=Workspaces.start, stop=Workspaces.stop),),
)
