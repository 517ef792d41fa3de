"""Web terminals among replicas: a browser's terminal socket on one replica, the worker's
socket on another, the frames between them through the database.

:class:`TerminalRelay` is the :class:`~codey_server.core.actions.WorkerLink` the terminal
service uses in a cluster. It wraps this replica's worker sockets:

- a frame for a worker whose socket is here goes straight to it; for a worker connected to
  another replica (the fold's ``WorkerInfo.replica``) it becomes a row of
  ``codey_terminal_frames`` addressed to that replica, which sends it on the worker's socket.
  A relayed ``terminal_open`` tells the worker's replica where that view lives;
- a frame from a worker for a view here goes to the terminal service; for a view opened
  through another replica it becomes a row addressed to that one.

Rows, not NOTIFY payloads: output frames are up to 64 KiB and a payload holds 8000 bytes. A
replica takes its rows with one ``DELETE … RETURNING`` (woken by ``t:<replica>`` on the
cluster channel, and by a poll every second), then handles them in id order. Each
view's frames are written by one task, one after the other, so id order is their order even
when another view's row commits later with a smaller id (it is taken by the next read, not
skipped). Flow control is the worker's, as with one server: output is acknowledged only once
the browser's socket took it, whichever replica that socket is on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from codey_protocol import codec
from codey_protocol import worker as wk
from codey_server.cluster.replicas import CHANNEL, Cluster, kicked_loop
from codey_server.core.actions import TerminalFrame, WorkerLink
from codey_server.core.presence import Presence

__all__ = ["TerminalRelay"]

log = logging.getLogger("codey.cluster")

#: views opened here by other replicas' browsers, remembered at most (a view whose worker
#: left without a word is never ended here; the oldest go first)
MAX_REMOTE_VIEWS = 4096
_SCHEMA = """
CREATE TABLE IF NOT EXISTS codey_terminal_frames (
    id bigserial PRIMARY KEY, replica text NOT NULL, created timestamptz NOT NULL DEFAULT now(),
    frame bytea NOT NULL);
CREATE INDEX IF NOT EXISTS codey_terminal_frames_replica ON codey_terminal_frames (replica);
"""


class _Relayed(msgspec.Struct, kw_only=True):
    """One row: a frame for a worker's socket (``to_worker``) or for a view (``to_view``)."""

    to_worker: bool
    worker_id: str
    #: the replica the view is on (for a relayed terminal_open: where its output goes)
    origin: str
    frame: bytes


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(_Relayed).decode


class TerminalRelay:
    """This replica's worker sockets, extended to the workers on other replicas (for the
    terminal service); see the module docstring."""

    def __init__(self, cluster: Cluster, sockets: WorkerLink, presence: Presence) -> None:
        self.cluster = cluster
        self.sockets = sockets
        self.presence = presence
        #: the terminal service's handler of frames from workers (set by the service)
        self.on_terminal: Callable[[str, TerminalFrame], Awaitable[None]] | None = None
        #: the views opened here by another replica's browser: client id → that replica
        self._remote_views: dict[str, str] = {}
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        sockets.on_terminal = self._from_worker
        cluster.on_notify.append(self._on_notify)

    @property
    def me(self) -> str:
        return self.cluster.replica_id

    async def start(self) -> None:
        await self.cluster.execute(_SCHEMA)
        # rows left for an earlier run of this replica name are for views that are gone
        await self.cluster.execute("DELETE FROM codey_terminal_frames WHERE replica = %s",
                                   (self.me,))
        self._kick = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(
            kicked_loop(self._kick, self._take, "relaying terminal frames"),
            name="terminal-relay")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    # WorkerLink --------------------------------------------------------------------------

    async def send_to(self, worker_id: str, msg: wk.ServerToWorker) -> bool:
        if await self.sockets.send_to(worker_id, msg):
            return True
        info = self.presence.engine.state.workers.get(worker_id)
        if not self.presence.connected(worker_id) or info is None or not info.replica \
                or info.replica == self.me:
            return False  # not connected anywhere (or, by the fold, here but gone already)
        await self._write(info.replica, _Relayed(to_worker=True, worker_id=worker_id,
                                                 origin=self.me, frame=codec.encode(msg)))
        return True

    # frames ------------------------------------------------------------------------------

    async def _from_worker(self, worker_id: str, msg: TerminalFrame) -> None:
        """A frame from a worker whose socket is here: to the view here, or to the replica
        whose browser opened it."""
        elsewhere = self._remote_views.get(msg.client_id)
        if elsewhere is None:
            if self.on_terminal is not None:
                await self.on_terminal(worker_id, msg)
            return
        if isinstance(msg, wk.TerminalEnded):
            self._remote_views.pop(msg.client_id, None)
        await self._write(elsewhere, _Relayed(to_worker=False, worker_id=worker_id,
                                              origin=self.me, frame=codec.encode(msg)))

    async def _write(self, replica: str, row: _Relayed) -> None:
        await self.cluster.execute(
            "INSERT INTO codey_terminal_frames (replica, frame) VALUES (%s, %s) "
            "RETURNING pg_notify(%s, 't:' || replica)", (replica, _encode(row), CHANNEL))

    def _on_notify(self, payload: str) -> None:
        if payload == f"t:{self.me}":
            self._kick.set()

    async def _take(self) -> None:
        rows = await self.cluster.execute(
            "DELETE FROM codey_terminal_frames WHERE replica = %s RETURNING id, frame",
            (self.me,))
        for _, data in sorted(rows, key=lambda r: int(r[0])):
            try:
                row = _decode(bytes(data))
                await self._deliver(row)
            except Exception as err:  # one bad row must not stop the others
                log.warning("a relayed terminal frame was dropped (%s)", err)

    async def _deliver(self, row: _Relayed) -> None:
        if row.to_worker:
            msg: Any = codec.decode_server_to_worker(row.frame)
            if isinstance(msg, wk.TerminalOpen):
                self._remote_views[msg.client_id] = row.origin
                while len(self._remote_views) > MAX_REMOTE_VIEWS:
                    del self._remote_views[next(iter(self._remote_views))]
            elif isinstance(msg, wk.TerminalDetach):
                self._remote_views.pop(msg.client_id, None)
            if not await self.sockets.send_to(row.worker_id, msg) \
                    and isinstance(msg, wk.TerminalOpen):
                # the worker left this replica meanwhile: the view ends as an offline one does
                self._remote_views.pop(msg.client_id, None)
                await self._write(row.origin, _Relayed(
                    to_worker=False, worker_id=row.worker_id, origin=self.me,
                    frame=codec.encode(wk.TerminalEnded(
                        client_id=msg.client_id, terminal_id=msg.terminal_id,
                        code="machine offline", message="the machine is offline",
                        shell_alive=True))))
            return
        frame = codec.decode_worker_to_server(row.frame)
        if isinstance(frame, (wk.TerminalOutput, wk.TerminalEnded)) \
                and self.on_terminal is not None:
            await self.on_terminal(row.worker_id, frame)
