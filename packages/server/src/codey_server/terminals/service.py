"""Web terminals: browsers' sockets on one side, the worker's tmux clients on the other.

A terminal is created (``terminal_created``) on a worker whose owner enabled it, then each
browser that opens it (``WS /ws/terminal/{id}``) is one *view*: a tmux client on the worker
(``codey_worker.terminal``), attached (``terminal_attached``) until the browser leaves
(``terminal_detached``, the shell goes on) or the shell ends (``terminal_closed``). The log
says who opened which shell where and when; what was typed and printed never enters it.

Bytes: the browser sends ``{"type": "input", "data"}`` and ``{"type": "resize", "cols",
"rows"}`` as text frames; the server sends the terminal's output as binary frames and, when the
view ends, ``{"type": "ended", "code", "message", "shell_alive"}`` before closing.

Flow control: output is acknowledged to the worker only once the browser's socket took it
(``terminal_ack``); the worker stops reading a view's pty past a window of unacknowledged
bytes, so a slow browser holds at most that window here, never more.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import secrets
from typing import Any

import msgspec
from litestar import WebSocket
from litestar.exceptions import WebSocketDisconnect

from codey_protocol import close_codes as cc
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.core.actions import WorkerLink
from codey_server.core.engine import Engine
from codey_server.core.presence import Presence
from codey_server.core.rules import CommandRejected
from codey_server.terminals import decide

__all__ = ["TerminalService", "viewer_name"]

log = logging.getLogger("codey.terminals")


#: output queued for one view before it counts as stuck (the worker's window is 256 KiB)
_MAX_QUEUED = 1024 * 1024


class _BrowserFrame(msgspec.Struct, kw_only=True):
    type: str
    data: str = ""
    cols: int = 80
    rows: int = 24


def viewer_name(session_key: str | None) -> str:
    """Who, in the log: a short hash of the browser's login, never the login itself."""
    if not session_key:
        return "script"
    return "browser " + hashlib.sha256(session_key.encode()).hexdigest()[:8]


class _View:
    def __init__(self, ws: WebSocket[Any, Any, Any], worker_id: str, terminal_id: str,
                 session_key: str | None = None) -> None:
        self.ws = ws
        #: the browser login it was opened with: a logout closes it
        self.session_key = session_key
        self.worker_id = worker_id
        self.terminal_id = terminal_id
        self.queue: asyncio.Queue[bytes | wk.TerminalEnded] = asyncio.Queue()
        self.queued = 0


class TerminalService:
    def __init__(self, engine: Engine, workers: WorkerLink, presence: Presence, *,
                 routed: bool = False) -> None:
        self.engine = engine
        #: the worker sockets here, or among replicas the relay that reaches them all
        self.workers = workers
        #: the view ends when the worker is no longer connected (to this server, or among
        #: replicas, to any: ``routed``)
        self.presence = presence
        self._here = not routed
        self._views: dict[str, _View] = {}  # by client id
        workers.on_terminal = self._from_worker

    # -- create and close ---------------------------------------------------------------------

    async def create(self, worker_id: str, workdir: str, session_id: str | None,
                     by: str) -> str:
        envs = await self.engine.submit(decide.opened,
                                        decide.Open(worker_id, workdir, session_id, by))
        created = envs[0].event
        assert isinstance(created, ev.TerminalCreated)
        return created.terminal_id

    async def close(self, terminal_id: str, by: str) -> int:
        t = self.engine.state.terminals.get(terminal_id)
        if t is None:
            raise CommandRejected("not_found", f"no terminal {terminal_id!r}")
        if t.closed:
            return self.engine.state.seq
        with contextlib.suppress(Exception):
            await self.workers.send_to(t.worker_id, wk.TerminalKill(terminal_id=terminal_id))
        envs = await self.engine.submit(decide.closed, decide.Close(terminal_id, by))
        return envs[-1].seq if envs else self.engine.state.seq

    # -- one browser's view ---------------------------------------------------------------------

    async def serve(self, ws: WebSocket[Any, Any, Any], terminal_id: str, cols: int, rows: int,
                    by: str, session_key: str | None = None) -> None:
        t = self.engine.state.terminals.get(terminal_id)
        if t is None or t.closed:
            await ws.close(code=cc.NO_TERMINAL, reason="no such terminal")
            return
        client_id = f"tc_{secrets.token_hex(8)}"
        view = _View(ws, t.worker_id, terminal_id, session_key)
        self._views[client_id] = view
        opened = await self.workers.send_to(t.worker_id, wk.TerminalOpen(
            terminal_id=terminal_id, client_id=client_id, workdir=t.workdir, cols=cols,
            rows=rows))
        if not opened:
            self._views.pop(client_id, None)
            await ws.close(code=cc.MACHINE_OFFLINE, reason="the machine is offline")
            return
        await self.engine.submit(decide.attached, decide.Attach(terminal_id, by))
        ended: wk.TerminalEnded | None = None
        writer = asyncio.create_task(self._write_browser(view, client_id))
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(self._read_browser(view, client_id)), writer,
            asyncio.create_task(self.presence.absence(t.worker_id, here=self._here).wait())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if writer in done and not writer.cancelled() and writer.exception() is None:
                ended = writer.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._views.pop(client_id, None)
        if ended is None:
            # the browser left, or the machine went away: the shell goes on in tmux
            with contextlib.suppress(Exception):
                await self.workers.send_to(t.worker_id, wk.TerminalDetach(client_id=client_id))
        reason = (ended.code if ended is not None else
                  "machine offline" if self.presence.absence(t.worker_id,
                                                             here=self._here).is_set()
                  else "left")
        with contextlib.suppress(Exception):
            if ended is not None:
                await ws.send_data(msgspec.json.encode({
                    "type": "ended", "code": ended.code, "message": ended.message,
                    "shell_alive": ended.shell_alive}).decode(), mode="text")
            await ws.close(code=1000 if ended is not None else cc.MACHINE_OFFLINE,
                           reason=reason[:100])
        await self.engine.submit(decide.detached, decide.Detach(terminal_id, by, ended))

    async def close_views_of(self, session_key: str) -> None:
        """A logout: close every terminal view that browser login opened (its shells go on in
        tmux, as when a browser leaves)."""
        for view in list(self._views.values()):
            if view.session_key == session_key:
                with contextlib.suppress(Exception):
                    await view.ws.close(code=cc.UNAUTHORIZED, reason="logged out")

    async def _read_browser(self, view: _View, client_id: str) -> None:
        decoder = msgspec.json.Decoder(_BrowserFrame)
        while True:
            msg = await view.ws.receive()
            if msg["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(detail="left", code=msg.get("code") or 1000)
            raw = msg.get("text") or msg.get("bytes") or b""
            if not isinstance(raw, (str, bytes)):
                continue
            try:
                frame = decoder.decode(raw)
            except msgspec.DecodeError:
                continue  # a malformed frame from the page: nothing to do with it
            if frame.type == "input" and frame.data:
                await self.workers.send_to(view.worker_id, wk.TerminalInput(
                    client_id=client_id, data=frame.data[:65536]))
            elif frame.type == "resize":
                await self.workers.send_to(view.worker_id, wk.TerminalResize(
                    client_id=client_id, cols=frame.cols, rows=frame.rows))

    async def _write_browser(self, view: _View, client_id: str) -> wk.TerminalEnded:
        while True:
            item = await view.queue.get()
            if isinstance(item, wk.TerminalEnded):
                return item
            view.queued -= len(item)
            await view.ws.send_data(item, mode="binary")
            await self.workers.send_to(view.worker_id, wk.TerminalAck(client_id=client_id,
                                                                      nbytes=len(item)))

    # -- frames from workers --------------------------------------------------------------------

    async def _from_worker(self, worker_id: str,
                           msg: wk.TerminalOutput | wk.TerminalEnded) -> None:
        view = self._views.get(msg.client_id)
        if view is None or view.worker_id != worker_id:
            return  # a view that is gone, or another worker's: nothing to deliver
        if isinstance(msg, wk.TerminalEnded):
            view.queue.put_nowait(msg)
            return
        try:
            data = base64.b64decode(msg.data, validate=True)
        except ValueError:
            return
        if view.queued + len(data) > _MAX_QUEUED:
            # the worker ignores its window: end this view rather than hold more
            log.warning("terminal view %s: output beyond the window, ended", msg.client_id)
            view.queue.put_nowait(wk.TerminalEnded(client_id=msg.client_id,
                                                   terminal_id=view.terminal_id,
                                                   code="overflow", shell_alive=True))
            return
        view.queued += len(data)
        view.queue.put_nowait(data)
