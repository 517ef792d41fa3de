"""Browser sockets (``WS /ws/client``): subscribe-then-read, commands, shutdown.

Order on a socket (design §3): the browser's first frame is ``Subscribe{after_seq}``. The
server attaches a live subscription to the log FIRST, then sends what is stored after
``after_seq`` (or a ``Snapshot`` when ``after_seq`` is 0 or older than the log keeps) in batches,
then live events, dropping any live event whose seq was already sent. No gap, no duplicate.

Processes' live output is not in the log: once the catch-up is sent, the socket also gets
every tail the server keeps (:class:`~codey_server.core.tails.ProcessTails`), whole, then
what each process writes, as ``process_tails`` frames between the events.

A browser that falls behind overflows its bounded queue and is closed with
``LAGGING``; it resumes with ``after_seq`` — the log is the buffer, nothing is lost.
A browser that reads nothing at all blocks the send itself (its TCP window is full), so the
queue's overflow would never be seen: each send has ``send_timeout`` seconds, after which the
socket is closed with ``LAGGING`` too, instead of lingering until the ping timeout
(1011, 40 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from litestar import WebSocket
from litestar.exceptions import WebSocketDisconnect

from codey_protocol import ProtocolError, codec
from codey_protocol import client as cl
from codey_protocol import close_codes as cc
from codey_server.core.engine import Engine
from codey_server.core.rules import CommandRejected
from codey_server.core.tails import ProcessTails
from codey_server.errors import LogClosed, ServerError, SubscriberOverflow
from codey_server.http.frames import receive_frame

log = logging.getLogger("codey.clients")


__all__ = ["ClientHub", "serve_client"]


class ClientHub:
    """The set of open browser sockets, so shutdown and logout can reach every one; and the
    processes' live tails they are sent."""

    def __init__(self, tails: ProcessTails | None = None) -> None:
        self._sockets: dict[int, tuple[WebSocket[Any, Any, Any], str | None]] = {}
        self.shutting_down = asyncio.Event()
        self._emptied: asyncio.Event | None = None
        self.tails = tails if tails is not None else ProcessTails()

    def add(self, ws: WebSocket[Any, Any, Any], session_key: str | None) -> None:
        self._sockets[id(ws)] = (ws, session_key)

    def remove(self, ws: WebSocket[Any, Any, Any]) -> None:
        self._sockets.pop(id(ws), None)
        if not self._sockets and self._emptied is not None:
            self._emptied.set()

    def __len__(self) -> int:
        return len(self._sockets)

    async def close_session(self, session_key: str, code: int = cc.UNAUTHORIZED) -> None:
        """Close every socket opened with this browser session (logout)."""
        for ws, key in list(self._sockets.values()):
            if key == session_key:
                with contextlib.suppress(Exception):
                    await ws.close(code=code, reason="logged out")

    def begin_shutdown(self) -> None:
        self.shutting_down.set()

    async def all_closed(self, timeout: float) -> bool:
        """Wait until no socket is open (each closes once it has sent ``shutdown``), for
        ``timeout`` s at most; whether they all closed."""
        if not self._sockets:
            return True
        if self._emptied is None:
            self._emptied = asyncio.Event()
        try:
            await asyncio.wait_for(self._emptied.wait(), timeout)
        except TimeoutError:
            return False
        return True


async def serve_client(ws: WebSocket[Any, Any, Any], engine: Engine, hub: ClientHub, *,
                       batch: int = 2000, queue_max: int = 256, send_timeout: float = 15.0,
                       session_key: str | None = None) -> None:
    """Run one accepted browser socket until it closes."""
    hub.add(ws, session_key)
    try:
        first = await receive_frame(ws)
        try:
            msg = codec.decode_client_to_server(first)
        except ProtocolError as err:
            await _send(ws, cl.Error(code=err.code, message=err.message))
            await ws.close(code=cc.TOO_LARGE if err.code == "too_large" else
                           cc.BAD_FIRST_FRAME, reason="expected subscribe")
            return
        if not isinstance(msg, cl.Subscribe):
            await _send(ws, cl.Error(code="bad_frame", message="the first frame must be subscribe",
                                     request_id=msg.request_id))
            await ws.close(code=cc.BAD_FIRST_FRAME, reason="expected subscribe")
            return
        sub = engine.log.subscribe(maxsize=queue_max)
        try:
            sender = asyncio.create_task(_send_events(ws, engine, sub, msg.after_seq, batch, hub,
                                                      send_timeout))
            receiver = asyncio.create_task(_receive_commands(ws, engine))
            done, pending = await asyncio.wait({sender, receiver},
                                               return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in done:
                exc = task.exception()
                if exc is not None and not isinstance(exc, WebSocketDisconnect):
                    raise exc
        finally:
            sub.close()
    except WebSocketDisconnect:
        pass
    finally:
        hub.remove(ws)


async def _send(ws: WebSocket[Any, Any, Any], msg: Any) -> None:
    await ws.send_data(codec.encode(msg), mode="text")


def _events_frame(raws: list[bytes]) -> bytes:
    # Stored envelopes are already JSON: join them instead of decoding and re-encoding.
    return b'{"type":"events","events":[' + b",".join(raws) + b"]}"


class _NotReading(ServerError):
    """A send did not finish in time: the browser reads nothing."""


async def _send_events(ws: WebSocket[Any, Any, Any], engine: Engine, sub: Any, after_seq: int,
                       batch: int, hub: ClientHub, send_timeout: float) -> None:
    try:
        await _stream_events(ws, engine, sub, after_seq, batch, hub, send_timeout)
    except _NotReading:
        log.info("a browser read nothing for %.0f s: closed with %d", send_timeout,
                 cc.LAGGING)
        with contextlib.suppress(Exception):
            await ws.close(code=cc.LAGGING, reason="not reading; resume with after_seq")


async def _stream_events(ws: WebSocket[Any, Any, Any], engine: Engine, sub: Any,
                         after_seq: int, batch: int, hub: ClientHub,
                         send_timeout: float) -> None:
    async def send(data: bytes) -> None:
        try:
            await asyncio.wait_for(ws.send_data(data, mode="text"), send_timeout)
        except TimeoutError:
            raise _NotReading from None

    last_sent = after_seq
    first_seq = await engine.log.first_seq()
    if after_seq > engine.log.last_seq:
        # the browser has seen events this log never had (the data dir was replaced)
        await _send(ws, cl.Resync(reason="unknown seq"))
        await ws.close(code=cc.LAGGING, reason="resync")
        return
    if after_seq == 0 or after_seq < first_seq - 1:
        state = engine.state
        last_sent = state.seq
        await send(codec.encode(cl.Snapshot(seq=state.seq, state=state)))
    # catch up from the log (also covers events committed before the subscription attached
    # but not yet folded into the snapshot's state)
    sent_any = last_sent != after_seq
    while True:
        raws = await engine.log.read_raw(last_sent, batch)
        if not raws:
            break
        await send(_events_frame(raws))
        sent_any = True
        last_sent = codec.decode_envelope(raws[-1]).seq
        if len(raws) < batch:
            break
    if not sent_any:
        # nothing missed: an empty batch tells the browser its subscription is live
        await send(_events_frame([]))
    # the live tails: every one whole now, then what comes (merged while this socket sends)
    tails = hub.tails.watch()
    shutdown = asyncio.create_task(hub.shutting_down.wait())
    get: asyncio.Task[Any] | None = None
    tail: asyncio.Task[Any] | None = None
    try:
        while True:
            if get is None:
                get = asyncio.create_task(sub.get())
            if tail is None:
                tail = asyncio.create_task(tails.wait())
            done, _ = await asyncio.wait({get, tail, shutdown},
                                         return_when=asyncio.FIRST_COMPLETED)
            if shutdown in done:
                get.cancel()
                if get.done() and not get.cancelled():
                    get.exception()  # retrieved: the log may have closed at the same moment
                await _send(ws, cl.Shutdown())
                await ws.close(code=cc.GOING_AWAY, reason="server shutting down")
                return
            if get in done:
                try:
                    envs = get.result()
                except SubscriberOverflow:
                    await ws.close(code=cc.LAGGING,
                                   reason="too far behind; resume with after_seq")
                    return
                except LogClosed:
                    await _send(ws, cl.Shutdown())
                    await ws.close(code=cc.GOING_AWAY, reason="server shutting down")
                    return
                get = None
                fresh = [e for e in envs if e.seq > last_sent]
                if fresh:
                    await send(codec.encode(cl.Events(events=fresh)))
                    last_sent = fresh[-1].seq
            if tail in done:
                tail = None
                frame = tails.take()
                if frame is not None:
                    await send(codec.encode(frame))
    finally:
        hub.tails.unwatch(tails)
        shutdown.cancel()
        for task in (get, tail):
            if task is not None and not task.done():
                task.cancel()


async def _receive_commands(ws: WebSocket[Any, Any, Any], engine: Engine) -> None:
    while True:
        data = await receive_frame(ws)
        try:
            msg = codec.decode_client_to_server(data)
        except ProtocolError as err:
            await _send(ws, cl.Error(code=err.code, message=err.message))
            if err.code == "too_large":
                await ws.close(code=cc.TOO_LARGE, reason="frame too large")
                return
            continue
        if isinstance(msg, cl.Subscribe):
            await _send(ws, cl.Error(code="conflict", message="already subscribed",
                                     request_id=msg.request_id))
            continue
        try:
            envs = await engine.execute(msg)
        except CommandRejected as err:
            await _send(ws, cl.Error(code=err.code, message=err.message,
                                     request_id=msg.request_id))
            continue
        except ServerError as err:
            log.exception("command failed")
            await _send(ws, cl.Error(code="internal", message=str(err),
                                     request_id=msg.request_id))
            continue
        session_id = envs[0].session_id if envs else getattr(msg, "session_id", None)
        await _send(ws, cl.Ack(request_id=msg.request_id, session_id=session_id,
                               seq=envs[-1].seq if envs else None))
