"""``/api/health``, ``/api/state/bootstrap``: the server as a whole."""

from __future__ import annotations

import msgspec
from litestar import get
from litestar.di import NamedDependency

from codey_protocol.state import State
from codey_server.core.engine import Engine
from codey_server.http.access import PUBLIC
from codey_server.http.errors import errors
from codey_server.http.resource import Resource

__all__ = ["Bootstrap", "Health", "StateController"]


class Health(msgspec.Struct, kw_only=True):
    status: str  # always "ok" when the server answers
    seq: int  # the last folded event


class Bootstrap(msgspec.Struct, kw_only=True):
    seq: int
    state: State


class StateController(Resource):
    path = "/api"
    tags = ["server"]

    @get("/health", sync_to_thread=False, opt=PUBLIC, responses=errors(login=False))
    def health(self, engine: NamedDependency[Engine]) -> Health:
        """Liveness, and the seq of the last folded event. Needs no login."""
        return Health(status="ok", seq=engine.state.seq)

    @get("/state/bootstrap", sync_to_thread=False, responses=errors())
    def bootstrap(self, engine: NamedDependency[Engine]) -> Bootstrap:
        """The whole folded state and its seq (a browser then subscribes after that seq)."""
        state = engine.state
        return Bootstrap(seq=state.seq, state=state)
