"""``Moves``: a session moved to another paired machine, with its files ("Move to…").

The order, each step refused or stopped with a reason the transcript and the caller see:

1. :func:`~.decide.check`: the target is another machine, online, the folder inside its
   roots; no turn under way (no tool mid-call, no approval or question waiting), so no
   action of the session is pending anywhere.
2. The transcript says so; the session's running processes (``exec``) on the source are
   asked to stop, and the move waits (a while) for them to end.
3. ``session_bundle`` on the source, read back in chunks, checked against its sha256 and
   kept in the blob store (a bundle over :data:`MOVE_MAX_BYTES` is refused there).
4. ``session_unpack`` on the target, into the folder asked for.
5. ``session_moved`` — decided on the picture taken at step 1: a session that worked or moved
   meanwhile is not moved (the target's folder stays, unused). From then on every action of
   the session goes to the target: the router sends an action to the session's worker as the
   state says at the time it is sent, and nothing was pending at the move, so nothing runs on
   both. The source's files are never touched: the bundle is read from them.

"Move back" is the same move the other way, to a new folder on the first machine.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from codey_protocol import worker as wk
from codey_server.core.actions import ActionFailed, Actions
from codey_server.core.rules import CommandRejected
from codey_server.errors import ServerError
from codey_server.moves.decide import Moved, Said, Stop, check, moved, said, stop_processes

if TYPE_CHECKING:
    from codey_server.core.engine import Engine

log = logging.getLogger("codey.moves")

__all__ = ["MOVE_MAX_BYTES", "MoveError", "MoveOutcome", "Moves"]

#: the largest bundle a move carries (it crosses to the target in one frame)
MOVE_MAX_BYTES = 40 * 1024 * 1024
#: how long the source's processes get to stop before the move goes on without them
STOP_WAIT_S = 15.0
BUNDLE_TIMEOUT_S = 600.0
CHUNK = 512 * 1024


class MoveError(ServerError):
    """A move refused or failed: ``code`` (not_found, conflict, forbidden, bad_request, or the
    worker's: too_large, outside_allowed_roots, …) and the reason the user sees."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class _Blobs(Protocol):
    def put(self, data: bytes) -> str: ...


@dataclass(frozen=True)
class MoveOutcome:
    session_id: str
    worker_id: str
    workdir: str
    from_worker: str
    from_workdir: str
    bundle: str
    bundle_size: int
    files: int
    seconds: float


class Moves:
    def __init__(self, engine: Engine, actions: Actions, blobs: _Blobs) -> None:
        self.engine = engine
        self.actions = actions
        self.blobs = blobs
        self._moving: set[str] = set()

    def _check(self, session_id: str, worker_id: str, workdir: str) -> None:
        try:
            check(self.engine.state, session_id, worker_id, workdir)
        except CommandRejected as err:
            raise MoveError(err.code, err.message) from None

    async def move(self, session_id: str, worker_id: str, workdir: str) -> MoveOutcome:
        """Move the session (see the module); raises :class:`MoveError`."""
        self._check(session_id, worker_id, workdir)
        if session_id in self._moving:
            raise MoveError("conflict", "the session is being moved already")
        self._moving.add(session_id)
        try:
            return await self._move(session_id, worker_id, workdir)
        finally:
            self._moving.discard(session_id)

    def _name(self, worker_id: str) -> str:
        w = self.engine.state.workers.get(worker_id)
        return (w.name or w.hostname) if w is not None else worker_id

    async def _say(self, session_id: str, code: str, text: str) -> None:
        await self.engine.submit(said, Said(session_id, code, text))

    async def _move(self, session_id: str, worker_id: str, workdir: str) -> MoveOutcome:
        started = time.monotonic()
        s = self.engine.state.sessions[session_id]
        source, from_workdir = s.worker_id, s.workdir
        target = self._name(worker_id)
        await self._say(session_id, "moving", f"Moving to {target}, {workdir}: the session's "
                        f"processes on {self._name(source)} are stopped first.")
        await self.engine.submit(stop_processes, Stop(session_id))
        await self._processes_ended(session_id)
        self._check(session_id, worker_id, workdir)  # (still: nothing started meanwhile)
        items = len(self.engine.state.sessions[session_id].items)
        try:
            bundled, data = await self._bundle(source, session_id, from_workdir)
            digest = await asyncio.to_thread(self.blobs.put, data)
            unpacked = await self.actions.run(worker_id, wk.SessionUnpack(
                action_id=self.engine.context.new_id("act"), session_id=session_id,
                workdir=workdir, bundle_b64=base64.b64encode(data).decode("ascii"),
                source=bundled.source, branch=bundled.branch, head=bundled.head,
                snapshot=bundled.snapshot), timeout=BUNDLE_TIMEOUT_S)
            assert isinstance(unpacked, wk.SessionUnpacked)
            await self.engine.submit(moved, Moved(
                session_id, worker_id, unpacked.path, source, from_workdir, items, digest,
                len(data)))
        except (ActionFailed, TimeoutError, CommandRejected, MoveError) as err:
            code, message = _words(err)
            await self._say(session_id, "move_failed", f"The move to {target} failed: "
                            f"{message}. The session stays on {self._name(source)}.")
            raise MoveError(code, message) from None
        seconds = time.monotonic() - started
        size = f"{len(data) / 1024:.0f} KiB" if len(data) < 1024 * 1024 else \
            f"{len(data) / (1024 * 1024):.1f} MiB"
        await self._say(session_id, "moved", f"Moved to {target}, {unpacked.path}: "
                        f"{unpacked.files} files ({size} bundled) in {seconds:.1f} s. The "
                        f"files on {self._name(source)} are as they were.")
        return MoveOutcome(session_id, worker_id, unpacked.path, source, from_workdir, digest,
                           len(data), unpacked.files, seconds)

    async def _processes_ended(self, session_id: str) -> None:
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            s = self.engine.state.sessions.get(session_id)
            if s is None or all(p.status in ("ended", "gone") for p in s.processes):
                return
            await asyncio.sleep(0.1)
        log.info("session %s: its processes did not end in %.0f s; moving on", session_id,
                 STOP_WAIT_S)

    async def _bundle(self, worker_id: str, session_id: str,
                      workdir: str) -> tuple[wk.SessionBundled, bytes]:
        bundled = await self.actions.run(worker_id, wk.SessionBundle(
            action_id=self.engine.context.new_id("act"), session_id=session_id,
            workdir=workdir, max_bytes=MOVE_MAX_BYTES), timeout=BUNDLE_TIMEOUT_S)
        assert isinstance(bundled, wk.SessionBundled)
        if bundled.size > MOVE_MAX_BYTES:
            raise MoveError("too_large", f"the bundle is {bundled.size} bytes, over the "
                                         f"{MOVE_MAX_BYTES} a move carries")
        parts: list[bytes] = []
        offset = 0
        while True:
            chunk = await self.actions.run(worker_id, wk.SessionBundleRead(
                action_id=self.engine.context.new_id("act"), session_id=session_id,
                bundle_id=bundled.bundle_id, offset=offset, length=CHUNK), timeout=120.0)
            assert isinstance(chunk, wk.BundleChunk)
            part = base64.b64decode(chunk.data_b64)
            parts.append(part)
            offset += len(part)
            if chunk.eof or not part or offset > MOVE_MAX_BYTES:
                break
        data = b"".join(parts)
        if len(data) != bundled.size or hashlib.sha256(data).hexdigest() != bundled.sha256:
            raise MoveError("bad_bundle", "the bundle read back is not the one the source made")
        return bundled, data


def _words(err: Exception) -> tuple[str, str]:
    if isinstance(err, TimeoutError):
        return "timeout", "the machine did not answer in time"
    if isinstance(err, (ActionFailed, CommandRejected, MoveError)):
        return err.code, err.message
    return "error", str(err)
