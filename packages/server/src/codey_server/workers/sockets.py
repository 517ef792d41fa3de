"""Worker sockets (``WS /ws/worker``) and exactly-once action delivery.

Connection order: the server sends ``AuthChallenge{nonce}``; the worker answers
``AuthResponse`` signed with its Ed25519 key; the server checks the key from ``workers.json``
and the log's revocations, then sends ``Welcome`` (or closes 4401 unknown/bad signature,
4403 revoked); the worker sends ``Hello`` (closed 4426 across protocol versions); actions flow
down, events flow up. The steps and their checks are
:class:`codey_protocol.handshake.ServerHandshake`; this module does the socket's side.

:meth:`WorkerRegistry.run` delivers an action exactly once per ``action_id``: it is (re)sent on
every (re)connection of its worker until a result arrives — the worker answers a repeat from its
record instead of running it again. A caller waiting on a gone worker keeps waiting (the session
shows ``waiting_worker``) until it returns, the action is cancelled, or the timeout passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from litestar import WebSocket
from litestar.exceptions import WebSocketDisconnect

from codey_protocol import ProtocolError, codec
from codey_protocol import close_codes as cc
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.handshake import Refuse, ServerHandshake
from codey_server.core.actions import ActionFailed, ProgressCallback, TerminalFrame
from codey_server.core.background import Background
from codey_server.core.engine import Engine
from codey_server.http.frames import receive_frame
from codey_server.logsetup import printable
from codey_server.workers import decide
from codey_server.workers.pairing import KeyStore, verify_signature

log = logging.getLogger("codey.workers")

AUTH_TIMEOUT_S = 10.0

__all__ = ["ActionFailed", "WorkerRegistry", "serve_worker"]

@dataclass
class _InFlight:
    """An action sent (or to be sent) to a worker, and the callers waiting for its outcome.

    Each caller waits on a future of its own, settled directly when the outcome arrives: a
    caller that times out or is cancelled takes only its own future with it, and no shield or
    wait_for sits between the worker's answer and the caller (each added a loop iteration).
    """

    worker_id: str
    action: wk.ActionMessage
    on_progress: ProgressCallback | None
    waiters: list[asyncio.Future[wk.ActionOutcome]] = field(default_factory=list)
    outcome: wk.ActionOutcome | ActionFailed | None = None
    sent: bool = False  # handed to the current connection (a reconnect sends it again)
    sending: bool = False

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def settle(self, outcome: wk.ActionOutcome | ActionFailed) -> None:
        """Give every waiter the outcome (raised for them when it is an ActionFailed); the
        first settles it, later answers are ignored."""
        if self.outcome is not None:
            return
        self.outcome = outcome
        for waiter in self.waiters:
            self._give(waiter)

    def join(self, waiter: asyncio.Future[wk.ActionOutcome]) -> None:
        """Add a waiter; one joining after the outcome came gets it at once."""
        self.waiters.append(waiter)
        if self.outcome is not None:
            self._give(waiter)

    def _give(self, waiter: asyncio.Future[wk.ActionOutcome]) -> None:
        if waiter.done() or self.outcome is None:
            return
        if isinstance(self.outcome, ActionFailed):
            waiter.set_exception(self.outcome)
        else:
            waiter.set_result(self.outcome)


@dataclass
class _Conn:
    worker_id: str
    ws: WebSocket[Any, Any, Any]
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    attached: set[str] = field(default_factory=set)  # sessions attached on this connection
    last_rejection: float = -1e9  # monotonic time of the last frame_rejected sent
    rejected: int = 0  # bad frames since the last one said

    async def send(self, msg: Any) -> None:
        async with self.send_lock:
            await self.ws.send_data(codec.encode(msg), mode="text")


#: lines of each worker's terminal kept for its panel (in memory: they are a diagnostic, not
#: state, and a restart starts them afresh)
LOG_LINES_KEPT = 50


class LogLine(msgspec.Struct, kw_only=True, frozen=True):
    """One line the worker printed, as its panel shows it."""

    ts: float  # when the server got it
    level: str  # debug, info, warning or error
    message: str


class WorkerRegistry:
    def __init__(self, engine: Engine, keys: KeyStore, *, replica: str = "") -> None:
        self.engine = engine
        self.keys = keys
        #: this server's name among replicas ("" alone): put on its connect/disconnect events
        self.replica = replica
        #: called with the worker id when a worker connects here (the cluster picks up its
        #: routed actions)
        self.on_attach: list[Callable[[str], None]] = []
        #: brings ``keys`` up to date (among replicas, a worker may have paired through
        #: another one a moment ago); awaited once before refusing an unknown credential
        self.keys_missing: Callable[[], Awaitable[None]] | None = None
        self.log_lines: dict[str, deque[LogLine]] = {}
        #: gets the web terminal's frames from workers (set by the TerminalService)
        self.on_terminal: Callable[[str, TerminalFrame],
                                   Awaitable[None]] | None = None
        self._conns: dict[str, _Conn] = {}
        self._inflight: dict[str, _InFlight] = {}
        self._presence: dict[str, asyncio.Event] = {}
        self._background = Background(log)
        engine.listeners.append(self._on_event)
        self._absence: dict[str, asyncio.Event] = {}

    async def start(self) -> None:
        """Call once, after the engine started: no worker socket survives a restart, so the
        workers the state still shows as connected get ``worker_disconnected``; they come back
        through ``Hello``."""
        # among replicas, only this one's own sockets (another replica's are alive or are
        # swept by the cluster's janitor)
        await self.engine.submit(decide.restarted, self.replica)

    def connected(self, worker_id: str) -> bool:
        """Whether the worker's socket is on this server."""
        return worker_id in self._conns

    def connected_workers(self) -> list[str]:
        return list(self._conns)

    # queries --------------------------------------------------------------------------------

    async def ensure_attached(self, worker_id: str, session_id: str, workdir: str, *,
                              timeout: float | None = None) -> None:
        """Attach the session on the worker's current connection (idempotent, cheap).

        Raises ActionFailed when the worker refuses the workdir (e.g. outside its roots).
        """
        conn = self._conns.get(worker_id)
        if conn is not None and session_id in conn.attached:
            return
        attach = wk.AttachSession(action_id=f"act_{secrets.token_hex(8)}",
                                  session_id=session_id, workdir=workdir)
        await self.run(worker_id, attach, timeout=timeout)
        conn = self._conns.get(worker_id)
        if conn is not None:
            conn.attached.add(session_id)

    async def send_to(self, worker_id: str, msg: wk.ServerToWorker) -> bool:
        """Send a frame that is not an action (no record, no re-send); False while the worker
        is not connected."""
        conn = self._conns.get(worker_id)
        if conn is None:
            return False
        await conn.send(msg)
        return True

    def presence(self, worker_id: str) -> asyncio.Event:
        """Set while the worker is connected."""
        return self._presence.setdefault(worker_id, asyncio.Event())

    def absence(self, worker_id: str) -> asyncio.Event:
        """Set while the worker is not connected."""
        event = self._absence.get(worker_id)
        if event is None:
            event = self._absence[worker_id] = asyncio.Event()
            if worker_id not in self._conns:
                event.set()
        return event

    # actions --------------------------------------------------------------------------------

    async def run(self, worker_id: str, action: wk.ActionMessage, *,
                  on_progress: ProgressCallback | None = None,
                  timeout: float | None = None) -> wk.ActionOutcome:
        """Deliver ``action`` to the worker exactly once and wait for its outcome.

        Raises :class:`ActionFailed` for ``ActionErrored`` and ``TimeoutError`` when no outcome
        came in ``timeout`` seconds. Re-running with an ``action_id`` that is in flight joins
        the existing wait; once nobody waits (done, timed out or cancelled) the action is
        forgotten: not re-sent after a reconnect, and a late answer is ignored.
        """
        info = self.engine.state.workers.get(worker_id)
        if info is None or info.revoked:
            raise ActionFailed("revoked", "the worker was revoked; it will not run anything")
        waiter: asyncio.Future[wk.ActionOutcome] = asyncio.get_running_loop().create_future()
        flight = self._inflight.get(action.action_id)
        if flight is None:
            flight = _InFlight(worker_id, action, on_progress)
            self._inflight[action.action_id] = flight
        elif on_progress is not None:
            flight.on_progress = on_progress
        flight.join(waiter)
        try:
            async with asyncio.timeout(timeout):
                await self._deliver(flight)
                return await waiter
        finally:
            flight.waiters.remove(waiter)
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # settled as this caller left: nobody else will look
            if not flight.waiters:
                # done, timed out or abandoned: when nobody waits any more it must not be
                # re-sent on the next reconnect
                if self._inflight.get(action.action_id) is flight:
                    del self._inflight[action.action_id]
            elif not flight.sent and not flight.sending:
                # this caller was stopped while sending; the others still wait for an answer
                self._background.spawn(self._deliver(flight), f"deliver-{action.action_id}")

    async def _deliver(self, flight: _InFlight) -> None:
        """Send the action on the worker's current connection, once (joiners do not repeat
        it); without a connection it goes out when the worker connects (:meth:`attach`)."""
        while True:
            conn = self._conns.get(flight.worker_id)
            if conn is None or flight.sent or flight.sending or flight.done:
                return
            flight.sending = True
            try:
                with contextlib.suppress(Exception):  # a broken socket: the reconnect re-sends
                    await conn.send(flight.action)
            finally:
                flight.sending = False
            if self._conns.get(flight.worker_id) is conn:
                flight.sent = True
                return
            # the worker reconnected while this was sent on the old connection: send again

    async def cancel(self, worker_id: str, target_action_id: str, session_id: str) -> None:
        """Ask the worker to stop an action; the action's own outcome says how it ended."""
        conn = self._conns.get(worker_id)
        if conn is None:
            # nothing can stop it on the worker now: end the wait, and never send it again
            flight = self._inflight.pop(target_action_id, None)
            if flight is not None:
                flight.settle(ActionFailed("cancelled", "cancelled while the worker was "
                                                 "away"))
            return
        # connected: the worker answers the target itself (cancelled, or its real outcome)
        cancel = wk.Cancel(action_id=f"act_{secrets.token_hex(8)}", session_id=session_id,
                           target_action_id=target_action_id)
        with contextlib.suppress(Exception):
            await conn.send(cancel)

    # connection -----------------------------------------------------------------------------

    async def attach(self, conn: _Conn, credential: str) -> bool:
        """Register ``conn`` as the worker's connection; False if it was revoked meanwhile.

        The check and the registration have no await between them, so a revocation during
        the handshake cannot be missed; the new connection is registered before the old one
        is closed, so the old one's end is not reported as this worker going away.
        """
        info = self.engine.state.workers.get(conn.worker_id)
        if info is None or info.revoked or self.keys.check(conn.worker_id, credential) is None:
            return False
        old = self._conns.get(conn.worker_id)
        self._conns[conn.worker_id] = conn
        self.presence(conn.worker_id).set()
        self.absence(conn.worker_id).clear()
        if old is not None:
            with contextlib.suppress(Exception):
                await old.ws.close(code=cc.REPLACED, reason="replaced by a newer connection")
        # re-send everything this worker has not answered yet, with the same ids
        for flight in list(self._inflight.values()):
            if flight.worker_id == conn.worker_id and not flight.done:
                flight.sent = False  # the old connection's delivery counts for nothing now
                await self._deliver(flight)
        for hook in self.on_attach:
            hook(conn.worker_id)
        return True

    def detach(self, conn: _Conn) -> bool:
        if self._conns.get(conn.worker_id) is conn:
            del self._conns[conn.worker_id]
            self.presence(conn.worker_id).clear()
            self.absence(conn.worker_id).set()
            return True
        return False

    def _on_event(self, env: ev.Envelope) -> None:
        if isinstance(env.event, ev.WorkerRevoked):
            # it will not answer, and must not stay connected (on whichever server holds it)
            worker_id = env.event.worker_id
            self.fail_all(worker_id, "revoked", "the worker was revoked; it will not answer")
            self._background.spawn(self.close_worker(worker_id, cc.REVOKED,
                                                     "this worker was revoked"),
                                   f"close-{worker_id}")

    def fail_all(self, worker_id: str, code: str, message: str) -> None:
        """End every action waiting on this worker (it was revoked: it will not answer)."""
        for flight in list(self._inflight.values()):
            if flight.worker_id == worker_id:
                flight.settle(ActionFailed(code, message))

    async def close_worker(self, worker_id: str, code: int, reason: str) -> None:
        conn = self._conns.get(worker_id)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.ws.close(code=code, reason=reason)

    def _flight(self, conn: _Conn, action_id: str) -> _InFlight | None:
        flight = self._inflight.get(action_id)
        # a worker answers only for its own actions
        return flight if flight is not None and flight.worker_id == conn.worker_id else None

    async def handle(self, conn: _Conn, msg: wk.WorkerToServer) -> None:
        if isinstance(msg, wk.ActionAccepted):
            pass  # nothing waits on it: every unanswered action is re-sent after a reconnect
        elif isinstance(msg, wk.ActionProgress):
            flight = self._flight(conn, msg.action_id)
            if flight is not None and flight.on_progress is not None:
                await flight.on_progress(msg)
        elif isinstance(msg, wk.ActionResult):
            flight = self._flight(conn, msg.action_id)
            if flight is not None:
                flight.settle(msg.result)
        elif isinstance(msg, wk.ActionErrored):
            flight = self._flight(conn, msg.action_id)
            if flight is not None:
                flight.settle(ActionFailed(msg.code, msg.message))
        elif isinstance(msg, wk.Heartbeat):
            pass  # it arrived: that is all a beat says (serve_worker's silence limit)
        elif isinstance(msg, wk.WorkspaceChanged):
            # only for a session that runs on this worker: one worker must not write into
            # another's sessions
            await self.engine.submit(decide.workspace_changed,
                                     decide.WorkspaceReport(conn.worker_id, msg),
                                     exclusive=False)
        elif isinstance(msg, (wk.TerminalOutput, wk.TerminalEnded)):
            if self.on_terminal is not None:
                await self.on_terminal(conn.worker_id, msg)
        elif isinstance(msg, wk.Log):
            level = _LEVELS.get(msg.level, 20)
            lines = self.log_lines.setdefault(conn.worker_id, deque(maxlen=LOG_LINES_KEPT))
            lines.append(LogLine(ts=time.time(), level=msg.level, message=msg.message[:500]))
            # the worker's routine lines (one per action) only at debug in the server's log
            log.log(level if level >= 30 else 10, "worker %s: %s", conn.worker_id,
                    printable(msg.message[:2000]))


_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


async def serve_worker(ws: WebSocket[Any, Any, Any], registry: WorkerRegistry, *,
                       silence_s: float = 15.0) -> None:
    """Run one accepted worker socket: handshake, hello, then frames until it closes.

    A worker beats every ``silence_s / 3`` (5 s); one that sends nothing for ``silence_s`` is
    frozen or cut off (SIGSTOP, a suspended laptop, a dead NAT entry) although its TCP
    connection may look alive for a while yet: it is closed with ``SILENT``, so it
    shows as disconnected and its sessions as waiting for it, instead of "connected" until the
    pings fail (about 40 s). It comes back through a new handshake like any reconnect."""
    engine = registry.engine
    # three beats fit in the silence a worker is allowed
    hs = ServerHandshake(secrets.token_urlsafe(24), heartbeat_s=silence_s / 3)

    async def next_frame() -> wk.WorkerToServer | None:
        try:
            return codec.decode_worker_to_server(
                await asyncio.wait_for(receive_frame(ws), AUTH_TIMEOUT_S))
        except (TimeoutError, ProtocolError):
            return None  # the machine refuses it like a wrong frame

    try:
        await ws.send_data(codec.encode(hs.challenge(time.time())), mode="text")
        auth = await next_frame()
        if isinstance(auth, wk.AuthResponse) and registry.keys_missing is not None and \
                registry.keys.check(auth.worker_id, auth.credential) is None:
            await registry.keys_missing()
        info = engine.state.workers.get(auth.worker_id) if isinstance(
            auth, wk.AuthResponse) else None
        welcome = hs.receive_auth(
            auth, now=time.time(), known=info is not None,
            revoked=info is not None and info.revoked,
            public_key=registry.keys.check(auth.worker_id, auth.credential)
            if isinstance(auth, wk.AuthResponse) else None,
            verify=verify_signature)
        if isinstance(welcome, Refuse):
            await ws.close(code=welcome.code, reason=welcome.reason)
            return
        conn = _Conn(worker_id=welcome.worker_id, ws=ws)
        await conn.send(welcome)
        hello = hs.receive_hello(await next_frame())
        if isinstance(hello, Refuse):
            log.warning("worker %s refused: %s", conn.worker_id, hello.reason)
            await ws.close(code=hello.code, reason=hello.reason[:120])
            return
        credential = hs.credential or ""
        conn.attached = set(hello.known_sessions)
    except WebSocketDisconnect:
        return
    if not await registry.attach(conn, credential):
        await ws.close(code=cc.REVOKED, reason="this worker was revoked")
        return
    await engine.submit(decide.connected, decide.Hello(conn.worker_id, hello, registry.replica))
    reason = "connection lost"
    try:
        while True:
            try:
                data = await asyncio.wait_for(receive_frame(ws), silence_s)
            except TimeoutError:
                reason = f"no heartbeat for {silence_s:g} s: unreachable"
                log.warning("worker %s: %s", conn.worker_id, reason)
                with contextlib.suppress(Exception):
                    # the peer may be frozen: do not wait long for its side of the close
                    await asyncio.wait_for(ws.close(code=cc.SILENT, reason="no heartbeat"), 2)
                break
            try:
                frame = codec.decode_worker_to_server(data)
            except ProtocolError as err:
                if err.code == "too_large":
                    await ws.close(code=cc.TOO_LARGE, reason="frame too large")
                    break
                # said and told once a second at most: a worker in a loop of bad frames (or a
                # fuzzer that reads nothing) must neither flood the server's log nor make this
                # loop wait on its socket
                conn.rejected += 1
                now = time.monotonic()
                if now - conn.last_rejection >= 1.0:
                    conn.last_rejection = now
                    log.warning("worker %s sent a bad frame: %s%s", conn.worker_id,
                                printable(err.message[:500]),
                                f" ({conn.rejected - 1} more since the last said)"
                                if conn.rejected > 1 else "")
                    conn.rejected = 0
                    with contextlib.suppress(Exception):
                        await conn.send(wk.FrameRejected(code=err.code,
                                                         message=err.message[:500]))
                continue
            if isinstance(frame, wk.Disconnect):
                reason = frame.reason or "worker disconnected"
                break
            await registry.handle(conn, frame)
    except WebSocketDisconnect:
        pass
    finally:
        if registry.detach(conn):
            with contextlib.suppress(Exception):
                await engine.submit(decide.disconnected, decide.Disconnected(
                    conn.worker_id, reason, registry.replica))
