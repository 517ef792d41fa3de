"""``/api/sessions/{id}/checkpoints`` and ``/api/sessions/{id}/diff``: a session's turns'
checkpoints, what restoring one would change, the restore (whole or one file), and the change
between two turns. A refusal (a turn running, the checkpoint's commit gone, the machine
offline) is a 409 whose ``extra.code`` says which; the preview says it in ``refused``."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from codey_protocol.state import CheckpointMark
from codey_server.checkpoints.service import Checkpoints, Preview, Restored, TurnDiff
from codey_server.http.errors import errors
from codey_server.http.resource import Resource

__all__ = ["CheckpointsController"]

Path_ = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


class RestoreBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    #: files left as they are; omitted: the ones changed by hand since the turns
    keep: Annotated[list[Path_], msgspec.Meta(max_length=20_000)] | None = None


class RestoreFileBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    path: Path_


class CheckpointsController(Resource):
    path = "/api/sessions"
    tags = ["checkpoints"]

    @get("/{session_id:str}/checkpoints", responses=errors(404))
    async def listing(self, session_id: FromPath[str],
                      checkpoints: NamedDependency[Checkpoints]) -> list[CheckpointMark]:
        """The session's turns' checkpoints, oldest first."""
        return checkpoints.listing(session_id)

    @get("/{session_id:str}/checkpoints/{turn:str}/preview", responses=errors(404, 409))
    async def preview(self, session_id: FromPath[str], turn: FromPath[str],
                      checkpoints: NamedDependency[Checkpoints]) -> Preview:
        """What restoring the files as they were before ``turn`` would change: each file with
        its diff, the files changed by hand since (kept unless ticked), and ``refused``."""
        return await checkpoints.preview(session_id, turn)

    @post("/{session_id:str}/checkpoints/{turn:str}/restore", status_code=200,
          responses=errors(404, 409))
    async def restore(self, session_id: FromPath[str], turn: FromPath[str],
                      data: JSONBody[RestoreBody],
                      checkpoints: NamedDependency[Checkpoints]) -> Restored:
        """Make the workdir's files as they were before ``turn``, but for ``keep``."""
        return await checkpoints.restore(session_id, turn, data.keep)

    @post("/{session_id:str}/checkpoints/{turn:str}/restore-file", status_code=200,
          responses=errors(404, 409))
    async def restore_file(self, session_id: FromPath[str], turn: FromPath[str],
                           data: JSONBody[RestoreFileBody],
                           checkpoints: NamedDependency[Checkpoints]) -> Restored:
        """One file (relative to the workdir) as it was before ``turn``."""
        return await checkpoints.restore_file(session_id, turn, data.path)

    @get("/{session_id:str}/diff", responses=errors(404, 409))
    async def diff(self, session_id: FromPath[str],
                   checkpoints: NamedDependency[Checkpoints],
                   from_turn: Annotated[str, QueryParameter(name="from")],
                   to_turn: Annotated[str, QueryParameter(name="to")] = "") -> TurnDiff:
        """The change from before turn ``from`` to before turn ``to`` (omitted: to now)."""
        return await checkpoints.diff(session_id, from_turn, to_turn)
