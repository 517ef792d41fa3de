"""The worker's websocket loop: connect, prove who it is, serve actions, reconnect.

Order on each connection (``WS {server}/ws/worker``)::

    server: AuthChallenge{nonce, protocol_version}
    worker: AuthResponse{worker_id, ts, signature, credential}
            signature = Ed25519 over f"{nonce}:{worker_id}:{ts!r}" (base64url, no padding)
    server: Welcome{worker_id, heartbeat_s}   or closes 4401 / 4403 / 4426
    worker: Hello{..., known_sessions, running_actions, capabilities}
            (running_actions: what still runs from before; the server does not send those
            again, their answers come on this connection)

(the steps are :class:`codey_protocol.handshake.WorkerHandshake`; this module does the I/O)
    then:   actions down → :class:`~codey_worker.actions.ActionDispatcher`; events up;
            Heartbeat{ts} every ``heartbeat_s``.

Endings (:meth:`Worker.run` returns the process exit code):

* a dropped connection or a failed connect → reconnect after a backoff (0.5 s doubling to
  :data:`RECONNECT_CAP_S`, full jitter: :data:`RECONNECT_WAIT`, tenacity's), reset by every
  connection the server welcomed: a worker is back within about 2 s of its server, however
  long the server was away;
* close 4401 / 4403 → "this machine was unlinked …", exit 3;
* close 4409 (a newer connection of the same worker replaced this one) → exit 0;
* another protocol version (the server's challenge says which, or it closes 4426) → the reason,
  which names both versions, and exit 4: retrying cannot help;
* SIGINT / SIGTERM / SIGHUP (the terminal closed) / SIGQUIT → ``Disconnect{reason: "signal
  SIGTERM"}``, close, stop running commands (SIGTERM to their process groups), exit 0. Commands
  run in their own sessions, so a signal the worker died of would leave them running.

The worker's own directory (``home``: key, credential, config, records) is protected from every
action from the moment a :class:`Worker` is built (:func:`codey_worker.confine.protect`).

This module only moves frames; what an action does lives in :mod:`codey_worker.actions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_random_exponential,
)
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from codey_protocol import ProtocolError, codec
from codey_protocol import close_codes as cc
from codey_protocol import worker as wk
from codey_protocol.handshake import Refuse, WorkerHandshake
from codey_protocol.worker import (
    Action,
    Capabilities,
    Disconnect,
    Heartbeat,
    Hello,
    Log,
    Welcome,
)
from codey_worker.acp import AcpAgents
from codey_worker.actions import EXECUTORS, ActionDispatcher
from codey_worker.config import Identity, WorkerConfig, records_path
from codey_worker.confine import allow_reading, protect
from codey_worker.console import WorkerConsole
from codey_worker.errors import WorkerError
from codey_worker.mcp import McpManager
from codey_worker.pairing import machine_info, sign
from codey_worker.records import ActionRecords
from codey_worker.sandbox import Sandbox
from codey_worker.shell import CommandRegistry
from codey_worker.terminal import Terminals
from codey_worker.watch import WorkspaceWatcher

__all__ = [
    "EXIT_INCOMPATIBLE",
    "EXIT_OK",
    "EXIT_UNLINKED",
    "RECONNECT_WAIT",
    "IncompatibleServer",
    "Worker",
    "compiled_from_source",
    "release_free_memory",
    "ws_url",
]

#: the web terminal's frames (codey_worker.terminal)
_TERMINAL_FRAMES = (wk.TerminalOpen, wk.TerminalInput, wk.TerminalResize, wk.TerminalAck,
                    wk.TerminalDetach, wk.TerminalKill)

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_UNLINKED = 3
EXIT_INCOMPATIBLE = 4
HANDSHAKE_TIMEOUT_S = 15.0
#: the longest wait between two connection attempts. A worker is one client of one server:
#: there is no herd to spread, and every second of waiting is a second its sessions sit on
#: "waiting for machine" after the server is back (at 30 s a worker came back ~20 s late)
RECONNECT_CAP_S = 2.0
#: the wait before connecting again (tenacity): full jitter, anywhere up to a ceiling of 0.5 s
#: doubling to :data:`RECONNECT_CAP_S`, so the workers of a restarted server do not all come
#: back in the same instant
RECONNECT_WAIT = wait_random_exponential(multiplier=0.5, max=RECONNECT_CAP_S)
MCP_LIST_TIMEOUT_S = 20.0
MAX_FRAME_BYTES = 64 * 1024 * 1024  # patches and file writes can be large
#: signals that stop the worker cleanly (running commands are stopped too)
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)


class IncompatibleServer(WorkerError):
    """The server speaks another major protocol version."""


def ws_url(server: str) -> str:
    """``http(s)://host`` → ``ws(s)://host/ws/worker``."""
    base = server.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://"):]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://"):]
    return base + "/ws/worker"


def compiled_from_source() -> bool:
    """Whether this process compiled the worker's modules from source and cached none
    (``PYTHONDONTWRITEBYTECODE``, a read-only install without a cache). A run that writes
    the cache as it compiles is not told apart: it is the first after an install."""
    cached = __spec__.cached if __spec__ is not None else None
    return cached is None or not os.path.exists(cached)


def release_free_memory() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); False
    where there is no such call (musl, macOS).

    Compiling modules from source leaves megabytes of freed memory in the middle of the C
    heap, which glibc keeps resident (it only returns the top of its heap by itself): 2.7
    MiB of an idle worker started without a bytecode cache (issue 27). With one there is
    next to nothing to return, and ``ctypes`` itself is 0.3 MiB: :class:`Worker` calls this
    only after :func:`compiled_from_source`.
    """
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (ImportError, OSError, AttributeError):
        return False
    trim(0)
    return True


class _Lost(WorkerError):
    """A connection that failed or ended, and is to be made again; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Worker:
    """One worker process: its executors and its connection to one server.

    ``await Worker(...).run()`` until it returns an exit code. Signals are installed by
    :meth:`run` (pass ``handle_signals=False`` in tests and call :meth:`stop` instead).
    Building one protects ``home`` (the worker's own files) from every action.
    """

    def __init__(self, identity: Identity, server: str, config: WorkerConfig, home: Path,
                 console: WorkerConsole, *, handle_signals: bool = True,
                 sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
        """``sleep`` waits before reconnecting (by default: the delay, or until :meth:`stop`);
        tests give one that records the delays instead."""
        # first of all: no action may read the key or rewrite the config in the worker's home
        protect(home)
        # … except the user's own skills, whose SKILL.md paths the model is given to read
        allow_reading(home / "skills")
        self.identity = identity
        self.server = server.rstrip("/")
        self.config = config
        self.home = home
        self.console = console
        self._handle_signals = handle_signals
        self._sleep = sleep or self._pause
        self._stop = asyncio.Event()
        self._stop_reason = "stopped"
        self._ws: ClientConnection | None = None
        self._heartbeat_s = 5.0
        #: release_free_memory once connected, if start-up compiled the modules
        self._trim = compiled_from_source()
        self.records = ActionRecords(records_path(home))
        #: the OS sandbox around commands and MCP servers (detected once: one bwrap run)
        self.sandbox = Sandbox.detected(home, config.sandbox)
        self.mcp = McpManager(config.mcp_servers, log_dir=home / "logs", policy=config.policy,
                              sandbox=self.sandbox)
        self.watcher = WorkspaceWatcher(self.send)
        # the console's lines also go to the server (the worker panel shows the last ones)
        console.forward = self._forward_line
        self._line_tasks: set[asyncio.Task[None]] = set()
        self.terminals = Terminals(self.send, config.policy, home, enabled=config.terminal)
        self.acp = AcpAgents(config.acp_agents, config.policy, home / "acp_sessions.json")
        self.dispatcher = ActionDispatcher(
            self.send, self.records, config.policy, registry=CommandRegistry(), mcp=self.mcp,
            watcher=self.watcher, console=console, acp=self.acp, home=home,
            sandbox=self.sandbox)

    # -- sending ----------------------------------------------------------------------------

    async def send(self, frame: bytes) -> None:
        """Send one encoded frame as text; raises ConnectionError while disconnected."""
        ws = self._ws
        if ws is None:
            raise ConnectionError("not connected")
        await ws.send(frame, text=True)  # already UTF-8 JSON: no decode and encode again

    def _forward_line(self, level: Literal["debug", "info", "warning", "error"],
                      message: str) -> None:
        if self._ws is None:
            return  # the server cannot take it now; the terminal still shows it
        try:
            task = asyncio.get_running_loop().create_task(self._log(level, message))
        except RuntimeError:  # not on the loop's thread
            return
        self._line_tasks.add(task)
        task.add_done_callback(self._line_tasks.discard)

    def stop(self, reason: str = "stopped") -> None:
        """Ask :meth:`run` to disconnect and return 0."""
        self._stop_reason = reason
        self._stop.set()

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> int:
        """Connect and serve until told to stop or unlinked; returns the exit code."""
        self.console.sandbox(self.sandbox.support.describe(), self.sandbox.support.available)
        # private /tmp dirs of sessions that were never detached (a week untouched)
        await asyncio.to_thread(self.sandbox.prune)
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if self._handle_signals:
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) == signal.SIG_IGN:
                    # ignored by whoever started us (``nohup`` ignores SIGHUP): a worker
                    # started to outlive its terminal must not stop when the terminal goes
                    continue
                loop.add_signal_handler(sig, self.stop, f"signal {sig.name}")
                installed.append(sig)
        try:
            return await self._loop()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.dispatcher.shutdown(reason=self._stop_reason)
            self.records.close()

    async def _loop(self) -> int:
        url = ws_url(self.server)
        reconnecting = AsyncRetrying(
            wait=RECONNECT_WAIT, retry=retry_if_exception_type(_Lost),
            stop=lambda _: self._stop.is_set(), sleep=self._sleep,
            before_sleep=self._reconnecting, reraise=True)
        code: int | None = None
        with contextlib.suppress(_Lost):  # lost, and told to stop meanwhile
            async for attempt in reconnecting:
                with attempt:
                    code = await self._connection(url, attempt.retry_state)
        if code is not None:
            return code
        self.console.stopping(self._stop_reason)
        return EXIT_OK

    async def _connection(self, url: str, attempt: RetryCallState) -> int | None:
        """One connection, from connecting to its end. Returns the exit code when the worker
        must not connect again, None when told to stop; raises :class:`_Lost` (to be tried
        again after a wait) otherwise."""
        if self._stop.is_set():
            return None
        await self._list_mcp_tools()
        if self._stop.is_set():  # stopped while listing: don't connect just to leave
            return None
        reason = "connection lost"
        try:
            # compression=None: deflating every streamed output chunk cost more CPU than it
            # saved (100 MB of output: 73 MB/s with it, 113 MB/s without)
            async with connect(url, compression=None, max_size=MAX_FRAME_BYTES,
                               open_timeout=HANDSHAKE_TIMEOUT_S,
                               ping_interval=20, ping_timeout=20,
                               close_timeout=5) as ws:
                await self._handshake(ws)
                self._ws = ws
                # a good connection: the next drop waits as after a first failure again
                attempt.attempt_number = 1
                self.console.connected(self.server)
                await self._send_hello(ws)
                self.dispatcher.connected()
                if self._trim:  # started, connected, and idle until asked: once
                    self._trim = False
                    release_free_memory()
                await self._serve(ws)
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            if code in (cc.UNAUTHORIZED, cc.REVOKED):
                self.console.unlinked()
                return EXIT_UNLINKED
            if code == cc.REPLACED:
                self.console.replaced()
                return EXIT_OK
            if code == cc.UPGRADE_REQUIRED:
                self.console.error(exc.rcvd.reason if exc.rcvd else "protocol mismatch")
                return EXIT_INCOMPATIBLE
            reason = f"closed with code {code}" if code else "connection lost"
        except IncompatibleServer as exc:
            self.console.error(str(exc))
            return EXIT_INCOMPATIBLE
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        except ProtocolError as exc:
            reason = f"bad frame from the server: {exc.message}"
        finally:
            self._ws = None
            await self.terminals.close_all()  # their shells go on in tmux
        if self._stop.is_set():
            return None
        raise _Lost(reason)

    def _reconnecting(self, state: RetryCallState) -> None:
        """Said before each wait, with the delay tenacity is about to wait."""
        lost = state.outcome.exception() if state.outcome is not None else None
        self.console.reconnecting(state.upcoming_sleep,
                                  lost.reason if isinstance(lost, _Lost) else "connection lost")

    async def _pause(self, delay: float) -> None:
        """Wait ``delay`` seconds before reconnecting, or until told to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay)

    async def _list_mcp_tools(self) -> None:
        """List MCP tools before connecting: Hello carries them, and the server gives Hello
        only a few seconds after Welcome."""
        if not self.mcp.names or all(s.tools or s.error for s in self.mcp.cached()):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.mcp.list_all(), MCP_LIST_TIMEOUT_S)

    async def _handshake(self, ws: ClientConnection) -> Welcome:
        """Answer the challenge and wait for ``welcome`` (codey_protocol.handshake)."""
        key = self.identity.private_key
        hs = WorkerHandshake(self.identity.worker_id, self.identity.credential,
                             lambda message: sign(key, message))
        while True:
            frame = codec.decode_server_to_worker(
                await asyncio.wait_for(ws.recv(), HANDSHAKE_TIMEOUT_S))
            answer = hs.receive(frame, time.time())
            if isinstance(answer, Refuse):
                if answer.code == cc.UPGRADE_REQUIRED:
                    raise IncompatibleServer(answer.reason)
                raise ProtocolError("bad_frame", answer.reason)
            if isinstance(answer, Welcome):
                self._heartbeat_s = answer.heartbeat_s if answer.heartbeat_s > 0 else 5.0
                return answer
            await ws.send(codec.encode(answer).decode())

    async def _send_hello(self, ws: ClientConnection) -> None:
        info = machine_info()
        hello = Hello(
            worker_version=info["worker_version"],
            hostname=info["hostname"],
            os=info["os"],
            python_version=info["python_version"],
            known_sessions=self.dispatcher.known_sessions(),
            running_actions=self.dispatcher.running(),
            capabilities=Capabilities(executors=list(EXECUTORS), mcp_servers=self.mcp.cached(),
                                      terminal=self.terminals.enabled,
                                      acp_agents=self.acp.names(),
                                      sandbox=self.sandbox.info(),
                                      roots=_roots(self.config.allowed_roots)),
        )
        await ws.send(codec.encode(hello).decode())

    async def _serve(self, ws: ClientConnection) -> None:
        """Read frames and beat until the connection drops (raises) or a stop is asked."""
        reader = asyncio.create_task(self._read(ws), name="ws-reader")
        beater = asyncio.create_task(self._heartbeat(), name="ws-heartbeat")
        stopper = asyncio.create_task(self._stop.wait(), name="ws-stop")
        try:
            await asyncio.wait({reader, beater, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if stopper.done() and not reader.done():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self.send(codec.encode(Disconnect(reason=self._stop_reason))), 2)
                with contextlib.suppress(Exception):
                    await ws.close(1000, self._stop_reason[:100])
                return
            for worker_task in (reader, beater):
                if worker_task.done() and (error := worker_task.exception()) is not None:
                    raise error
        finally:
            for task in (reader, beater, stopper):
                task.cancel()
            await asyncio.gather(reader, beater, stopper, return_exceptions=True)

    async def _read(self, ws: ClientConnection) -> None:
        while True:
            # raises ConnectionClosed with the close code; bytes as they came, for msgspec
            raw = await ws.recv(decode=False)
            try:
                msg = codec.decode_server_to_worker(raw)
            except ProtocolError as exc:
                await self._log("error", f"bad frame ({exc.code}): {exc.message}")
                continue
            if isinstance(msg, Action):
                try:
                    await self.dispatcher.handle(msg, raw)
                except Exception as exc:  # e.g. the record store failed: say so, keep serving
                    log.exception("could not accept action %s", msg.action_id)
                    await self._log("error", f"could not accept action {msg.action_id}: {exc}")
            elif isinstance(msg, wk.FrameRejected):
                # a bug on one side or the other: say it where the owner looks
                self.console.error(f"the server refused a frame ({msg.code}): {msg.message}")
            elif isinstance(msg, _TERMINAL_FRAMES):
                await self.terminals.handle(msg)
            else:
                await self._log("warning", f"unexpected {type(msg).__name__} after the handshake")

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            # only "still here": the actions it runs are said once, in the hello, where the
            # server uses them (a beat's list told it nothing its answers had not)
            await self.send(codec.encode(Heartbeat(ts=time.time())))

    async def _log(self, level: Literal["debug", "info", "warning", "error"],
                   message: str) -> None:
        with contextlib.suppress(Exception):
            await self.send(codec.encode(Log(level=level, message=message)))



def _roots(configured: list[Path]) -> list[str]:
    """The allowed roots, as configured and resolved (a root that is a symlink is both): the
    server refuses a session's workdir outside all of them at its creation."""
    return list(dict.fromkeys(str(p) for r in configured
                              for p in (r, Path(os.path.realpath(r)))))
