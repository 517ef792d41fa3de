"""Moving a session to another machine as a plugin: ``POST /api/sessions/{id}/move`` and the
part that carries it out (``moves``; the MCP endpoint's ``move_session`` uses it too)."""

from __future__ import annotations

from typing import Protocol

from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.moves.routes import MoveController
from codey_server.moves.service import Moves

__all__ = ["PLUGIN"]


class _Blobs(Protocol):
    """The files store (``blobs``): a move's bundle is kept there."""

    def put(self, data: bytes) -> str: ...


def _moves(engine: Engine, actions: Delivery, blobs: _Blobs) -> Moves:
    return Moves(engine, actions, blobs)


PLUGIN = FeaturePlugin("moves", routes=(MoveController,), parts=(Part("moves", _moves),))
