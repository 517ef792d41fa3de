"""Worker sockets (``WS /ws/worker``): the transport between this server and its workers.

Connection order: the server sends ``AuthChallenge{nonce}``; the worker answers
``AuthResponse`` signed with its Ed25519 key; the server checks the key from ``workers.json``
and the log's revocations, then sends ``Welcome`` (or closes 4401 unknown/bad signature,
4403 revoked); the worker sends ``Hello`` (closed 4426 across protocol versions); actions flow
down, events flow up. The steps and their checks are
:class:`codey_protocol.handshake.ServerHandshake`; this module does the socket's side.

Actions are not this module's business beyond moving their frames: exactly-once delivery is
:class:`~codey_server.core.router.Router`'s, driven by
:class:`~codey_server.core.delivery.Delivery`. After the hello the socket is the worker's
link there (with the actions its hello says it runs and the sessions it has attached), every
frame about an action goes to it, and the socket's end unlinks it. Whether a worker is
connected is read from the fold (:class:`~codey_server.core.presence.Presence`); this module
only appends ``worker_connected`` / ``worker_disconnected``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
from litestar import WebSocket
from litestar.exceptions import WebSocketDisconnect

from codey_protocol import ProtocolError, codec
from codey_protocol import close_codes as cc
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.handshake import Refuse, ServerHandshake
from codey_server.core.actions import TerminalFrame
from codey_server.core.background import Background
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.fold import find_process
from codey_server.core.router import Answer
from codey_server.core.tails import ProcessTails
from codey_server.http.frames import receive_frame
from codey_server.logsetup import printable
from codey_server.workers import decide
from codey_server.workers.keys import WorkerKeys
from codey_server.workers.pairing import verify_signature

log = logging.getLogger("codey.workers")

AUTH_TIMEOUT_S = 10.0

__all__ = ["LogLine", "WorkerRegistry", "serve_worker"]

#: frames about an action, for the router (by exact type: the hot path of every action)
_ANSWERS = frozenset({wk.ActionAccepted, wk.ActionProgress, wk.ActionResult, wk.ActionErrored})


@dataclass(eq=False)
class _Conn:
    """One worker socket; the router's link for that worker while it is the current one."""

    worker_id: str
    ws: WebSocket[Any, Any, Any]
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
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
    """The worker sockets of this server: handshakes, links for the router, the frames that
    are not actions (web terminal, logs, workspace changes), closing revoked workers."""

    def __init__(self, engine: Engine, keys: WorkerKeys, delivery: Delivery, *,
                 replica: str = "", tails: ProcessTails | None = None) -> None:
        self.engine = engine
        self.keys = keys
        self.delivery = delivery
        #: where the processes' live output goes (for the browsers; not the log)
        self.tails = tails if tails is not None else ProcessTails()
        #: reports about processes the log does not have yet (their exec call is being
        #: recorded): decided again once it has them (see :meth:`_process_reported`)
        self._early: OrderedDict[str, list[decide.ProcessReport]] = OrderedDict()
        #: this server's name among replicas ("" alone): put on its connect/disconnect events
        self.replica = replica
        self.log_lines: dict[str, deque[LogLine]] = {}
        #: gets the web terminal's frames from workers (set by the TerminalService)
        self.on_terminal: Callable[[str, TerminalFrame],
                                   Awaitable[None]] | None = None
        self._background = Background(log)
        engine.listeners.append(self._on_event)

    async def start(self) -> None:
        """Call once, after the engine started: no worker socket survives a restart, so the
        workers the state still shows as connected get ``worker_disconnected``; they come back
        through ``Hello``."""
        # among replicas, only this one's own sockets (another replica's are alive or are
        # swept by the cluster's janitor)
        await self.engine.submit(decide.restarted, self.replica)

    def _conn(self, worker_id: str) -> _Conn | None:
        link = self.delivery.link(worker_id)
        return link if isinstance(link, _Conn) else None

    async def send_to(self, worker_id: str, msg: wk.ServerToWorker) -> bool:
        """Send a frame that is not an action (no record, no re-send); False while the worker
        has no socket here."""
        conn = self._conn(worker_id)
        if conn is None:
            return False
        await conn.send(msg)
        return True

    # connection -----------------------------------------------------------------------------

    async def attach(self, conn: _Conn, credential: str, hello: wk.Hello | None = None) -> bool:
        """Make ``conn`` the worker's link here; False if it was revoked meanwhile.

        The key is looked up again (it may have been removed since the handshake began, on
        any replica); then the log's revocation check and the linking have no await between
        them, so a revocation folded here during the handshake cannot be missed (one folded
        later closes the linked socket). The new connection is linked before the old one is
        closed, so the old one's end is not reported as this worker going away. The actions
        it has not answered go out on it (except those its hello says it runs).
        """
        if await self.keys.check(conn.worker_id, credential) is None:
            return False
        info = self.engine.state.workers.get(conn.worker_id)
        if info is None or info.revoked:
            return False
        old = self._conn(conn.worker_id)
        await self.delivery.linked(
            conn.worker_id, conn, running=hello.running_actions if hello else (),
            known_sessions=hello.known_sessions if hello else ())
        if old is not None and old is not conn:
            with contextlib.suppress(Exception):
                await old.ws.close(code=cc.REPLACED, reason="replaced by a newer connection")
        return True

    def detach(self, conn: _Conn) -> bool:
        """``conn`` ended; True if it was the worker's current socket here."""
        return self.delivery.unlinked(conn.worker_id, conn)

    def _on_event(self, env: ev.Envelope) -> None:
        if isinstance(env.event, ev.ProcessStarted):
            early = self._early.pop(env.event.process_id, None)
            if early:
                self._background.spawn(self._decide_reports(early),
                                       f"reports-{env.event.process_id}")
        if isinstance(env.event, ev.WorkerRevoked):
            # it must not stay connected (on whichever server holds it); its actions fail in
            # the router, which folds this too
            worker_id = env.event.worker_id
            self._background.spawn(self.close_worker(worker_id, cc.REVOKED,
                                                     "this worker was revoked"),
                                   f"close-{worker_id}")

    async def close_worker(self, worker_id: str, code: int, reason: str) -> None:
        conn = self._conn(worker_id)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.ws.close(code=code, reason=reason)

    async def handle(self, conn: _Conn, msg: wk.WorkerToServer) -> None:
        if type(msg) in _ANSWERS:
            await self.delivery.received(conn.worker_id, conn, cast(Answer, msg))
        elif isinstance(msg, wk.Heartbeat):
            pass  # it arrived: that is all a beat says (serve_worker's silence limit)
        elif isinstance(msg, wk.WorkspaceChanged):
            # only for a session that runs on this worker: one worker must not write into
            # another's sessions
            await self.engine.submit(decide.workspace_changed,
                                     decide.WorkspaceReport(conn.worker_id, msg),
                                     exclusive=False)
        elif isinstance(msg, wk.ProcessTail):
            if self._runs_on(conn.worker_id, msg.session_id, msg.process_id):
                self.tails.add(msg.session_id, msg.process_id, msg.data, msg.reset)
        elif isinstance(msg, (wk.ProcessPorts, wk.ProcessExited)):
            await self._process_reported(decide.ProcessReport(conn.worker_id, msg))
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


    def _runs_on(self, worker_id: str, session_id: str, process_id: str) -> bool:
        """Whether the process (or, not recorded yet, its session) is that worker's."""
        session = self.engine.state.sessions.get(session_id)
        if session is None:
            return False
        p = find_process(session, process_id)
        return (p.worker_id if p is not None else session.worker_id) == worker_id

    async def _process_reported(self, r: decide.ProcessReport) -> None:
        """Decide a process report now; for a process the log does not have yet — its
        ``exec`` call's answer is on its way into the log, a server may bind its port within
        the call's wait — keep it until ``process_started`` is folded (:meth:`_on_event`)."""
        session = self.engine.state.sessions.get(r.report.session_id)
        if session is None or session.worker_id != r.worker_id:
            return
        if find_process(session, r.report.process_id) is None:
            early = self._early.setdefault(r.report.process_id, [])
            early.append(r)
            del early[:-EARLY_REPORTS_KEPT]
            while len(self._early) > EARLY_PROCESSES_KEPT:
                self._early.popitem(last=False)
            return
        await self.engine.submit(decide.process_reported, r)

    async def _decide_reports(self, reports: list[decide.ProcessReport]) -> None:
        for r in reports:
            await self.engine.submit(decide.process_reported, r)


#: reports kept for processes not recorded yet: per process, and processes
EARLY_REPORTS_KEPT = 4
EARLY_PROCESSES_KEPT = 64

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
        # the stored key, read now (among replicas: a worker paired through another replica
        # a moment ago is there, one revoked anywhere is not)
        public_key = await registry.keys.check(auth.worker_id, auth.credential) \
            if isinstance(auth, wk.AuthResponse) else None
        info = engine.state.workers.get(auth.worker_id) if isinstance(
            auth, wk.AuthResponse) else None
        if isinstance(auth, wk.AuthResponse) and public_key is not None and info is None:
            # its pairing was committed by another replica and is not folded here yet
            await engine.catch_up()
            info = engine.state.workers.get(auth.worker_id)
        welcome = hs.receive_auth(
            auth, now=time.time(), known=info is not None,
            revoked=info is not None and info.revoked, public_key=public_key,
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
    except WebSocketDisconnect:
        return
    if not await registry.attach(conn, credential, hello):
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
