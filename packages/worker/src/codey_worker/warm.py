"""Warm sandboxes: one bubblewrap per session that stays up between its commands.

Starting bwrap for every command costs its namespaces and mounts each time — a few ms on an
idle machine, and under load (ten commands at once on each of ten workers) a third of the
steps per second. A :class:`WarmBox` starts bwrap once, with the session's mounts and
namespaces, and a small supervisor inside it (:mod:`codey_worker.warm_init`) that starts each
command in those namespaces and reports its exit. What a command gets is what a bwrap of its
own gave it:

* the same mounts and namespaces (the same :func:`~codey_worker.sandbox.bwrap_args`, with the
  workdir as the sandbox's folder; the command's ``cwd`` is entered by the supervisor);
* its background processes end with it: a reaper per command is their subreaper and kills
  what is left once the command exits, before the exit is reported;
* a TERM reaches the command's process group (through the supervisor), a kill everything it
  started; the worker's pipes are its stdout and stderr (passed over the socket).

A box is rebuilt when what its mounts depend on changes: :class:`WarmBoxes` compares the
bwrap argv a command would get now with the box's (a ``.git`` that appeared, a hidden path
that now exists, a socket under /run, the network toggle, the mode) and starts a new box for
the difference; the old one ends once its last command has. A box idle for
:data:`IDLE_S` ends, so does every box of a detached session, and at most :data:`MAX_BOXES`
live at once (the least recently used idle one goes first).

Only ``workspace-write`` commands under bwrap run here: ``read-only`` ones get a throwaway
``/tmp`` each (a box would share one), and Seatbelt has no namespaces to keep.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import marshal
import os
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from codey_worker.errors import WorkerError

__all__ = ["IDLE_S", "MAX_BOXES", "WarmBox", "WarmBoxes", "WarmError", "WarmRun"]

log = logging.getLogger(__name__)

IDLE_S = 60.0
MAX_BOXES = 32
START_TIMEOUT_S = 15.0
_SOURCE = (Path(__file__).with_name("warm_init.py")).read_text(encoding="utf-8")
#: the supervisor's code, compiled once here (for the interpreter that runs it: this one) and
#: read by each box from a pipe: compiling its text cost each box's start ~2 ms of CPU
_CODE = marshal.dumps(compile(_SOURCE, "codey_worker/warm_init.py", "exec"))
#: what ``python -c`` runs in the box: load that code from the pipe (its fd, then the socket's,
#: are the arguments), as ``__main__``
_LOADER = ("import marshal,os,sys;fd=int(sys.argv.pop(1));code=os.read(fd,1<<20);os.close(fd);"
           "del fd;exec(marshal.loads(code))")


class WarmError(WorkerError):
    """The box could not be started, or died: the caller runs the command the cold way."""


@dataclass
class WarmRun:
    """One command in a box: ``started`` gives (its pid, its reaper's pid) as the box sees
    them; ``exited`` (exit code, signal), once it and what it left behind are gone."""

    id: int
    started: asyncio.Future[tuple[int, int]]
    exited: asyncio.Future[tuple[int | None, int | None]]


@dataclass(eq=False)
class WarmBox:
    """A bwrap with the supervisor in it; see the module docstring.

    It holds nothing of an event loop but its socket's reader, which follows the loop the
    box is used from (a test that runs each command in its own ``asyncio.run`` reuses the
    box); bwrap is a plain child process, reaped when the box closes."""

    prefix: tuple[str, ...]  # the bwrap argv (up to and excluding the command)
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    #: the session's folder as the box bound it (device, inode): a folder removed and made
    #: again at its path is another one, which the box's mount does not show
    folder: tuple[int, int] | None = None
    runs: dict[int, WarmRun] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _ready: asyncio.Future[None] | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    async def start(cls, prefix: Sequence[str], env: Mapping[str, str]) -> WarmBox:
        """bwrap (``prefix``, ending in ``--``) with the supervisor, ready to run commands.
        Raises :class:`WarmError` when it does not come up."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # bwrap's options come through a pipe (--args): they stay out of its command line,
        # which ps and /proc show for as long as the box lives (paths of the user's folders)
        options_r, options_w = os.pipe()
        code_r, code_w = os.pipe()
        try:
            options = b"".join(a.encode() + b"\0" for a in prefix[1:])
            # (a pipe holds 64 KiB: the options and the code are far from it)
            if len(options) > 60 * 1024 or len(_CODE) > 60 * 1024:
                raise WarmError("the sandbox's options are too long for a pipe")
            os.write(options_w, options)
            os.write(code_w, _CODE)
            for fd in (options_w, code_w):  # (the reading ends see their end at once)
                os.close(fd)
            options_w = code_w = -1
            argv = [prefix[0], "--args", str(options_r), sys.executable, "-I", "-S", "-c",
                    _LOADER, str(code_r), str(theirs.fileno())]
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, env=dict(env),
                                    pass_fds=(theirs.fileno(), options_r, code_r),
                                    start_new_session=True)
        except OSError as exc:
            ours.close()
            raise WarmError(f"bwrap did not start: {exc}") from exc
        finally:
            theirs.close()
            for fd in (options_r, options_w, code_r, code_w):
                if fd >= 0:
                    os.close(fd)
        ours.setblocking(False)
        box = cls(tuple(prefix), proc, ours)
        box._ready = asyncio.get_running_loop().create_future()
        box._follow_loop()
        try:
            await asyncio.wait_for(asyncio.shield(box._ready), START_TIMEOUT_S)
        except (TimeoutError, WarmError) as exc:
            box.close()
            why = ""
            if proc.stderr is not None:
                with contextlib.suppress(Exception):
                    why = proc.stderr.read(4096).decode(errors="replace").strip()
            raise WarmError(f"the sandbox did not come up: {why or exc}") from None
        return box

    def _follow_loop(self) -> None:
        """Read the socket on the running loop (again, if the box was used from another)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.sock.fileno())
        self._loop = loop
        loop.add_reader(self.sock.fileno(), self._on_readable)

    # -- the socket ----------------------------------------------------------------------

    def _on_readable(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._lost("the sandbox's supervisor is gone")
                return
            try:
                message = json.loads(data)
            except ValueError:
                continue
            self._on_message(message)

    def _on_message(self, message: dict[str, object]) -> None:
        op = message.get("op")
        if op == "ready":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
            return
        run_id = message.get("id")
        run = self.runs.get(run_id) if isinstance(run_id, int) else None
        if run is None:
            return
        pid, reaper = message.get("pid"), message.get("reaper")
        if op == "started" and not run.started.done():
            if isinstance(pid, int) and isinstance(reaper, int):
                run.started.set_result((pid, reaper))
        elif op == "exit":
            self.runs.pop(run.id, None)
            self.last_used = time.monotonic()
            if not run.started.done():
                run.started.set_exception(WarmError("the command did not start"))
            if not run.exited.done():
                code, sig = message.get("code"), message.get("signal")
                run.exited.set_result((code if isinstance(code, int) else None,
                                       sig if isinstance(sig, int) else None))

    def _lost(self, why: str) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(WarmError(why))
        self.close()

    def _send(self, message: dict[str, object], fds: Sequence[int] = ()) -> None:
        data = marshal.dumps(message)  # (the supervisor imports no json: see warm_init)
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.send(data)
        except OSError as exc:
            raise WarmError(f"the sandbox's supervisor is gone: {exc}") from None

    # -- commands ------------------------------------------------------------------------

    def run(self, argv: Sequence[str], cwd: str, env: Mapping[str, str], stdout_w: int,
            stderr_w: int) -> WarmRun:
        """Start ``argv`` in the box; its output goes to the two write ends (the caller
        closes its copies). Raises :class:`WarmError` when the box is gone."""
        if self.closed or self.proc.poll() is not None:
            self.close()
            raise WarmError("the sandbox is closed")
        self._follow_loop()
        loop = asyncio.get_running_loop()
        run = WarmRun(next(self._ids), loop.create_future(), loop.create_future())
        self.runs[run.id] = run
        self.last_used = time.monotonic()
        try:
            self._send({"op": "run", "id": run.id, "argv": list(argv), "cwd": cwd,
                        "env": dict(env)}, (stdout_w, stderr_w))
        except WarmError:
            self.runs.pop(run.id, None)
            raise
        return run

    def signal(self, pgid: int, sig: int) -> None:
        """``sig`` to the command's process group (its pid: it leads its own session)."""
        with contextlib.suppress(WarmError):
            self._send({"op": "signal", "pgid": int(pgid), "sig": int(sig)})  # (no enum)

    def kill(self, reaper: int) -> None:
        """Kill the command and everything it started, now."""
        with contextlib.suppress(WarmError):
            self._send({"op": "kill", "reaper": int(reaper)})

    async def capture(self, argv: Sequence[str], cwd: str, env: Mapping[str, str],
                      timeout_s: float, limit: int = 1 << 20) -> tuple[int | None, bytes, bytes]:
        """Run ``argv`` in the box and read its output whole (at most ``limit`` bytes of
        each): (exit code, stdout, stderr). For the worker's own short reads (the context
        load's ``git status``); raises :class:`WarmError` or ``TimeoutError`` (the command
        is killed then)."""
        loop = asyncio.get_running_loop()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            run = self.run(argv, cwd, env, out_w, err_w)
        except WarmError:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)

        async def drain(fd: int) -> bytes:
            chunks: list[bytes] = []
            size = 0
            gone = loop.create_future()
            while True:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    loop.add_reader(fd, gone.set_result, None)
                    try:
                        await gone
                    finally:
                        loop.remove_reader(fd)
                    gone = loop.create_future()
                    continue
                if not data:
                    return b"".join(chunks)
                if size < limit:
                    chunks.append(data[:limit - size])
                    size += len(data)

        try:
            async with asyncio.timeout(timeout_s):
                out, err = await asyncio.gather(drain(out_r), drain(err_r))
                code, _ = await run.exited
        except BaseException:
            if run.started.done() and not run.started.cancelled() and \
                    run.started.exception() is None:
                self.kill(run.started.result()[1])
            raise
        finally:
            os.close(out_r)
            os.close(err_r)
        return code, out, err

    @property
    def busy(self) -> bool:
        return bool(self.runs)

    def close(self) -> None:
        """End the box: the supervisor sees the socket close and exits, bwrap's PID 1 with
        it, and the kernel kills what is left in the namespace. Commands still waited on
        end with :class:`WarmError`."""
        if self.closed:
            return
        self.closed = True
        for run in list(self.runs.values()):
            for future in (run.started, run.exited):
                if not future.done() and not future.get_loop().is_closed():
                    future.set_exception(WarmError("the sandbox was closed"))
        self.runs.clear()
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.sock.fileno())
        with contextlib.suppress(OSError):
            self.sock.close()
        _end(self.proc)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill bwrap (its PID 1 dies with it: ``--die-with-parent``) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
            proc.wait(5)
    if proc.stderr is not None:
        with contextlib.suppress(OSError):
            proc.stderr.close()


class WarmBoxes:
    """The worker's warm boxes, one per session (see the module docstring)."""

    def __init__(self, idle_s: float = IDLE_S, max_boxes: int = MAX_BOXES) -> None:
        self.idle_s = idle_s
        self.max_boxes = max_boxes
        self._boxes: dict[str, WarmBox] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._draining: set[WarmBox] = set()
        self._janitor: asyncio.Task[None] | None = None
        self.started = 0  # boxes started, for tests and the bench
        # a pool dropped without close() (a test's sandbox) takes its boxes with it
        weakref.finalize(self, _close_all, self._boxes, self._draining)

    async def get(self, session_id: str, prefix: Sequence[str],
                  env: Mapping[str, str], folder: Path | None = None) -> WarmBox:
        """The session's box for this bwrap argv and ``folder`` (the workdir it binds): its
        current one when both are the same, else a new one (the old one ends after its last
        command). A folder is the same while it is the same directory, not the same path: a
        worktree removed and made again at its path (issue 33) is bound anew, where the old
        box would still show the removed one, empty."""
        lock = self._locks.get(session_id)
        if lock is None or _lock_loop(lock) not in (None, asyncio.get_running_loop()):
            lock = self._locks[session_id] = asyncio.Lock()
        async with lock:
            box = self._boxes.get(session_id)
            here = _identity(folder)
            if box is not None and not box.closed and box.prefix == tuple(prefix) and \
                    box.folder == here:
                box.last_used = time.monotonic()
                return box
            if box is not None:
                self._retire(box)
            self._make_room()
            box = await WarmBox.start(prefix, env)
            box.folder = here
            self.started += 1
            self._boxes[session_id] = box
            self._start_janitor()
            return box

    def current(self, session_id: str) -> WarmBox | None:
        """The session's live box, if it has one (none is started)."""
        box = self._boxes.get(session_id)
        return box if box is not None and not box.closed else None

    def _retire(self, box: WarmBox) -> None:
        if box.busy:
            self._draining.add(box)
        else:
            box.close()

    def _make_room(self) -> None:
        while len(self._boxes) >= self.max_boxes:
            idle = [(b.last_used, s) for s, b in self._boxes.items() if not b.busy]
            if not idle:
                return  # all busy: one more box for a while is better than a refusal
            _, session_id = min(idle)
            self._boxes.pop(session_id).close()

    def _start_janitor(self) -> None:
        loop = asyncio.get_running_loop()
        if self._janitor is None or self._janitor.done() or self._janitor.get_loop() is not loop:
            self._janitor = loop.create_task(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        while self._boxes or self._draining:
            await asyncio.sleep(min(self.idle_s / 2, 10.0))
            self.sweep()

    def sweep(self, now: float | None = None) -> None:
        """End the boxes idle for ``idle_s`` and the retired ones whose commands are done."""
        now = time.monotonic() if now is None else now
        for session_id, box in list(self._boxes.items()):
            if box.closed or (not box.busy and now - box.last_used >= self.idle_s):
                self._boxes.pop(session_id, None)
                box.close()
        for box in list(self._draining):
            if box.closed or not box.busy:
                self._draining.discard(box)
                box.close()

    def drop(self, session_id: str) -> None:
        """The session was detached: its box ends (its commands were stopped already)."""
        box = self._boxes.pop(session_id, None)
        self._locks.pop(session_id, None)
        if box is not None:
            box.close()

    def close(self) -> None:
        _close_all(self._boxes, self._draining)
        if self._janitor is not None and not self._janitor.get_loop().is_closed():
            self._janitor.cancel()

    def __len__(self) -> int:
        return len(self._boxes)


def _identity(folder: Path | None) -> tuple[int, int] | None:
    """(device, inode) of ``folder``; None when there is none (or it is not there)."""
    if folder is None:
        return None
    try:
        info = os.stat(folder)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _close_all(boxes: dict[str, WarmBox], draining: set[WarmBox]) -> None:
    for box in [*boxes.values(), *draining]:
        box.close()
    boxes.clear()
    draining.clear()


def _lock_loop(lock: asyncio.Lock) -> asyncio.AbstractEventLoop | None:
    """The loop an asyncio lock is bound to (None until first contended)."""
    return getattr(lock, "_loop", None)


def supervisor_env(path: str | None = None) -> dict[str, str]:
    """The supervisor's own environment: nothing of the worker's but a PATH and a locale
    (each command gets its own, in its request)."""
    return {"PATH": path or os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}
