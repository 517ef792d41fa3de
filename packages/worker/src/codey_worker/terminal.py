"""The web terminal: a shell in tmux on this machine, its bytes streamed to the server.

Off unless the owner's ``worker-config.json`` says ``"terminal": true``: it is a full shell
under this user, reachable from every browser logged in to the server.

Each terminal is a tmux session (``codey-<terminal_id>``) on the worker's own tmux socket
(``$CODEY_HOME/tmux.sock``), started in the workdir with the same stripped environment as
commands (:func:`codey_worker.shell.build_env`). A browser's view of it is a tmux *client*
(``tmux attach``) running in a pseudo-terminal here: closing the browser ends the client, never
the shell, so reopening finds the same shell, and two browsers are two clients of one session.

Flow control: at most :data:`WINDOW` bytes of a client's output are unacknowledged
(``terminal_ack`` from the server, sent once the browser took them); past that the client's
pty is not read, so a slow browser slows the shell instead of growing anyone's memory.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import logging
import os
import pty
import re
import shutil
import signal
import struct
import termios
from collections.abc import Awaitable, Callable
from pathlib import Path

from codey_protocol import codec
from codey_protocol import worker as wk
from codey_worker.confine import ActionRefused
from codey_worker.policy import LocalPolicy
from codey_worker.shell import build_env

__all__ = ["WINDOW", "Terminals"]

log = logging.getLogger("codey.worker.terminal")

#: unacknowledged output bytes per client before its pty is left unread
WINDOW = 256 * 1024
_READ = 64 * 1024
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

Send = Callable[[bytes], Awaitable[None]]


class _Client:
    def __init__(self, terminal_id: str, client_id: str, proc: asyncio.subprocess.Process,
                 master: int) -> None:
        self.terminal_id = terminal_id
        self.client_id = client_id
        self.proc = proc
        self.master = master
        self.unacked = 0
        self.reading = False
        # input that came before tmux drew anything: tmux switching its pty to raw mode would
        # flush it, so it waits for the first output
        self.drawn = False
        self.pending: list[bytes] = []
        self.ending = "exited"  # what ended it, reported in terminal_ended


class Terminals:
    """Every terminal client of this worker; :meth:`handle` takes the server's frames."""

    def __init__(self, send: Send, policy: LocalPolicy, home: Path, *,
                 enabled: bool) -> None:
        self.send = send
        self.policy = policy
        self.enabled = enabled
        self.socket = str(home / "tmux.sock")
        self._clients: dict[str, _Client] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- frames from the server ---------------------------------------------------------------

    async def handle(self, msg: wk.ServerToWorker) -> None:
        if isinstance(msg, wk.TerminalOpen):
            try:
                await self._open(msg)
            except ActionRefused as refused:
                await self._ended(msg.client_id, msg.terminal_id, refused.code,
                                  refused.message, alive=False)
        elif isinstance(msg, wk.TerminalInput):
            client = self._clients.get(msg.client_id)
            if client is not None:
                if not client.drawn:
                    client.pending.append(msg.data.encode())
                    return
                with contextlib.suppress(OSError):
                    _write_all(client.master, msg.data.encode())
        elif isinstance(msg, wk.TerminalResize):
            client = self._clients.get(msg.client_id)
            if client is not None:
                _set_size(client.master, msg.cols, msg.rows)
                # the client is not in the pty's foreground group (it has no controlling
                # terminal), so the kernel does not tell it: tell it, it reads the new size
                _signal(client.proc, signal.SIGWINCH)
        elif isinstance(msg, wk.TerminalAck):
            client = self._clients.get(msg.client_id)
            if client is not None:
                client.unacked = max(0, client.unacked - msg.nbytes)
                if client.unacked < WINDOW:
                    self._resume(client)
        elif isinstance(msg, wk.TerminalDetach):
            client = self._clients.get(msg.client_id)
            if client is not None:
                client.ending = "detached"
                _signal(client.proc, signal.SIGTERM)
        elif isinstance(msg, wk.TerminalKill):
            for client in self._clients.values():
                if client.terminal_id == msg.terminal_id:
                    client.ending = "closed"
            if _ID.match(msg.terminal_id):
                await self._tmux("kill-session", "-t", _session(msg.terminal_id))

    async def close_all(self) -> None:
        """The connection is gone: end every client (the shells go on in tmux)."""
        for client in list(self._clients.values()):
            client.ending = "detached"
            _signal(client.proc, signal.SIGTERM)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- opening ------------------------------------------------------------------------------

    async def _open(self, msg: wk.TerminalOpen) -> None:
        if not self.enabled:
            raise ActionRefused("terminal_disabled", "the web terminal is off on this machine "
                                "(set \"terminal\": true in its worker-config.json)")
        if not (_ID.match(msg.terminal_id) and _ID.match(msg.client_id)):
            raise ActionRefused("bad_request", "malformed terminal or client id")
        if msg.client_id in self._clients:
            raise ActionRefused("bad_request", f"client {msg.client_id} is already open")
        tmux = shutil.which("tmux")
        if tmux is None:
            raise ActionRefused("no_tmux", "tmux is not installed on this machine")
        workdir = self.policy.check_workdir(msg.workdir)
        if not workdir.is_dir():
            raise ActionRefused("not_found", f"workdir {workdir} does not exist")
        cols, rows = max(2, min(msg.cols, 1000)), max(2, min(msg.rows, 500))
        name = _session(msg.terminal_id)
        # the user's own shell: git there runs the repository's hooks as the user set them
        # up (the model's commands get git's hardening; this is not one of them)
        env = build_env({"TERM": "xterm-256color"}, cwd=str(workdir), harden_git=False)
        if await self._tmux("has-session", "-t", name) != 0:
            # the shell's environment is the stripped one: tmux starts it from this command's
            code = await self._tmux("new-session", "-d", "-s", name, "-x", str(cols), "-y",
                                    str(rows), "-c", str(workdir), env=env)
            if code != 0:
                raise ActionRefused("terminal_failed", f"tmux could not start a shell ({code})")
            # the page is the terminal: no tmux status line in it
            await self._tmux("set-option", "-t", name, "status", "off")
        master, slave = pty.openpty()
        _set_size(slave, cols, rows)
        try:
            proc = await asyncio.create_subprocess_exec(
                tmux, "-S", self.socket, "attach-session", "-t", name, stdin=slave,
                stdout=slave, stderr=slave, env=env, cwd=str(workdir),
                start_new_session=True)
        except OSError as err:
            os.close(master)
            raise ActionRefused("terminal_failed", f"tmux attach failed: {err}") from None
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        client = _Client(msg.terminal_id, msg.client_id, proc, master)
        self._clients[msg.client_id] = client
        self._resume(client)
        task = asyncio.get_running_loop().create_task(self._watch(client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tmux(self, *args: str, env: dict[str, str] | None = None) -> int:
        proc = await asyncio.create_subprocess_exec(
            "tmux", "-S", self.socket, *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            env=env if env is not None else build_env({}, harden_git=False))
        return await proc.wait()

    # -- output -------------------------------------------------------------------------------

    def _resume(self, client: _Client) -> None:
        if not client.reading and client.master >= 0:
            asyncio.get_running_loop().add_reader(client.master, self._readable, client)
            client.reading = True

    def _pause(self, client: _Client) -> None:
        if client.reading:
            asyncio.get_running_loop().remove_reader(client.master)
            client.reading = False

    def _readable(self, client: _Client) -> None:
        try:
            data = os.read(client.master, _READ)
        except BlockingIOError:
            return
        except OSError:  # EIO: the client side of the pty closed
            data = b""
        if not data:
            self._pause(client)
            return
        if not client.drawn:
            client.drawn = True
            # tmux has drawn, so its pty is raw by now: what was typed meanwhile can go in
            pending, client.pending = b"".join(client.pending), []
            if pending:
                with contextlib.suppress(OSError):
                    _write_all(client.master, pending)
        client.unacked += len(data)
        if client.unacked >= WINDOW:
            self._pause(client)
        frame = codec.encode(wk.TerminalOutput(client_id=client.client_id,
                                               data=base64.b64encode(data).decode()))
        task = asyncio.get_running_loop().create_task(self._send(frame))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, frame: bytes) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self.send(frame)

    async def _watch(self, client: _Client) -> None:
        await client.proc.wait()
        # what the pty still holds was written before the client ended
        with contextlib.suppress(OSError):
            while client.reading:
                data = os.read(client.master, _READ)
                if not data:
                    break
                await self._send(codec.encode(wk.TerminalOutput(
                    client_id=client.client_id, data=base64.b64encode(data).decode())))
        self._pause(client)
        os.close(client.master)
        client.master = -1
        self._clients.pop(client.client_id, None)
        alive = await self._tmux("has-session", "-t", _session(client.terminal_id)) == 0
        ending = client.ending if client.ending != "exited" or not alive else "detached"
        await self._ended(client.client_id, client.terminal_id, ending, "", alive=alive)

    async def _ended(self, client_id: str, terminal_id: str, code: str, message: str, *,
                     alive: bool) -> None:
        await self._send(codec.encode(wk.TerminalEnded(
            client_id=client_id, terminal_id=terminal_id, code=code, message=message,
            shell_alive=alive)))


def _session(terminal_id: str) -> str:
    return f"codey-{terminal_id}"


def _set_size(fd: int, cols: int, rows: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ,
                    struct.pack("HHHH", max(2, min(rows, 500)), max(2, min(cols, 1000)), 0, 0))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            # the pty's input buffer is full (a huge paste): the rest is dropped rather than
            # blocking the worker's loop
            log.warning("terminal input dropped: %d bytes", len(view))
            return


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
