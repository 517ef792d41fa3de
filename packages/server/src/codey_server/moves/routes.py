"""``POST /api/sessions/{id}/move``: "Move to…" — the session, its files and its conversation go
on on another paired machine, in a new folder there (``extra.code`` of a refusal says why:
``conflict`` for a turn under way, an offline machine or the same one; ``forbidden`` for a
folder outside the target's roots; ``too_large``; the worker's own codes)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from codey_server.http.errors import errors
from codey_server.http.fields import NonBlank
from codey_server.http.resource import Resource
from codey_server.moves.service import Moves

__all__ = ["MoveController", "MoveResult"]


class MoveBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    worker_id: Annotated[NonBlank, msgspec.Meta(max_length=200)]
    #: the folder on the target (new, or empty; inside its allowed roots)
    workdir: Annotated[NonBlank, msgspec.Meta(max_length=4096)]


class MoveResult(msgspec.Struct, kw_only=True):
    session_id: str
    worker_id: str
    workdir: str
    from_worker: str
    from_workdir: str
    bundle: str  # sha256 of the bundle in the blob store
    bundle_size: int
    files: int
    seconds: float


class MoveController(Resource):
    path = "/api/sessions"
    tags = ["moves"]

    @post("/{session_id:str}/move", status_code=200, responses=errors(400, 403, 404, 409, 413))
    async def move(self, session_id: FromPath[str], data: JSONBody[MoveBody],
                   moves: NamedDependency[Moves]) -> MoveResult:
        """Move the session to ``workdir`` on ``worker_id``: its running processes are
        stopped, its work (uncommitted changes included) bundled on its machine and unpacked
        on the other, and it goes on there. Its files on the first machine stay as they
        were; "Move back" is a move to the first machine."""
        done = await moves.move(session_id, data.worker_id, data.workdir)
        return MoveResult(**{f: getattr(done, f) for f in MoveResult.__struct_fields__})
