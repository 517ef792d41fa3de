"""Processes that outlive an action (Codex's unified exec, Claude Code's background Bash):
``exec_start``, ``exec_write``, ``exec_kill``, ``exec_list``.

Order of calls (one :class:`ProcessTable` per worker)::

    start(ExecStart)   checks as for run_command (argv, local policy, workdir, cwd, sandbox),
                       then spawn: in the session's sandbox like a command, in a
                       pseudo-terminal when ``tty``; answer after ``yield_ms`` (or sooner when
                       it has ended) with the output so far and a ``process_id`` (``proc_…``)
    write(ExecWrite)   input to it (empty: a poll), wait ``yield_ms`` (or until it ends),
                       answer with what it wrote since the last answer
    kill(ExecKill)     SIGTERM, ``grace_s``, SIGKILL; answer with its last output
    listing(session)   its processes, running and recently ended
    forward(ExecForward)  on the user's click: a port it listens on inside its own network,
                       reachable on this machine's loopback (codey_worker.forward)
    connected()        the worker (re)connected: send every live tail whole again
    stop_session(id)   the session was detached: stop its processes, forget their ids
    close()            the worker is stopping: stop every process

What a caller must know:

* **Output.** stdout and stderr are one stream (a terminal shows them so). What has not been
  read yet is kept up to ``output_cap`` bytes: its head and its tail, the middle replaced by
  ``… [N bytes truncated] …`` and ``truncated`` set in the answer that returns it. Each
  answer returns (and forgets) everything unread; ``total_bytes`` counts all of it.
* **Live.** A process started with ``live`` (a server that reads it asked) is also watched
  for the browser, apart from the model's reads, which it never moves: the newest
  :data:`~codey_protocol.state.PROCESS_TAIL_BYTES` of its output are kept, and what it
  writes is pushed as :class:`~codey_protocol.worker.ProcessTail` frames coalesced like a
  command's output (16 KiB or ~50 ms); one that could not be sent (disconnected) is made
  up for by the whole tail (``reset``) at the next connection. Sandboxed with the network
  off, the ports it listens on in its own network are looked at every second and pushed
  when they change (``ProcessPorts``); its end is pushed too (``ProcessExited``).
* **Belonging.** A process belongs to its session: another session's ``process_id`` is
  unknown to it. Stopped, and forgotten, when the session is detached or the worker stops
  (SIGTERM/SIGINT to the worker). If the worker is killed (``kill -9``), sandboxed processes
  die with it (bwrap's ``--die-with-parent``); a ``full-access`` one, like a full-access
  command's detached children, is beyond its reach then.
* **Gone.** A ``process_id`` this table does not know — the worker restarted, the session
  was detached, it ended long ago — raises ``ActionRefused("process_gone")``; never a silent
  empty answer.
* **Cancel.** The wait of a ``start`` or ``write`` is registered in the
  :class:`~codey_worker.shell.CommandRegistry` under the action's id: cancelling that action
  (an interrupt of the turn that waits on it) stops the process, and the answer says
  ``stopped_by: "cancel"``. A process nobody is waiting on is not affected by an interrupt.
* **Terminal.** With ``tty`` the program runs in a pseudo-terminal that is its controlling
  terminal (a tiny Python helper makes it so before exec'ing the program), so ``"\\x03"``
  is Ctrl-C and ``"\\x04"`` at the start of a line is end of input. ``TERM`` is ``dumb``
  unless the action's ``env`` says otherwise: fewer escape sequences for the model to read.
  Output newlines stay ``\\n`` (no ``\\r\\n``); what is typed is echoed, as in a terminal.
* **Stopping.** SIGTERM goes to the process's group (its session, under ``tty``); inside the
  sandbox to every process of the sandbox's PID namespace but its PID 1, whatever group or
  session they made. After ``grace_s`` SIGKILL goes to the group, to bwrap and to the
  sandbox's PID 1, which takes the whole namespace with it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import os
import secrets
import signal
import struct
import sys
import termios
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from codey_protocol import codec
from codey_protocol.state import PROCESS_TAIL_BYTES
from codey_protocol.worker import (
    ExecForward,
    ExecKill,
    ExecOutput,
    ExecProcesses,
    ExecStart,
    ExecWrite,
    PortForwarded,
    ProcessExited,
    ProcessInfo,
    ProcessPorts,
    ProcessTail,
    StoppedBy,
    WorkerToServerMessage,
)
from codey_worker.confine import ActionRefused, relative_display, resolve_inside
from codey_worker.forward import PortForward, ProcDir, listening_ports
from codey_worker.frames import FRAME_BUDGET
from codey_worker.home import codey_home
from codey_worker.policy import LocalPolicy, check_protected_args
from codey_worker.sandbox import Sandbox, sandbox_denial
from codey_worker.shell import (
    CHUNK_MAX,
    DRAIN_S,
    FLUSH_INTERVAL_S,
    KILL_GRACE_S,
    CommandRegistry,
    _Box,
    _close_transport,
    _cut_incomplete_end,
    _cut_incomplete_start,
    _killpg,
    _pid_alive,
    _program_problem,
    build_env,
    truncation_marker,
)

__all__ = ["MAX_PROCESSES", "MAX_YIELD_MS", "ProcessTable"]

MAX_YIELD_MS = 30_000  # the longest one answer waits
MAX_PROCESSES = 16  # running at once per session
MAX_ENDED = 32  # ended processes remembered per session (for exec_write and exec_list)
INPUT_TIMEOUT_S = 10.0  # a process that does not read its input for this long: io_error
PORTS_EVERY_S = 1.0  # how often a live process's listening ports are looked at
_READ_SIZE = 64 * 1024

#: ``await send(frame)``: a frame to the server; raises while disconnected
Send = Callable[[bytes], Awaitable[None]]

#: made the pseudo-terminal the program's controlling terminal, then became the program
#: (runs inside the sandbox too: only the Python already there, no site, no user files)
_TTY_HELPER = """\
import fcntl, os, signal, sys, termios
try:
    os.setsid()
except OSError:
    pass
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
# ^C and ^\\ reach the program even when whoever started the worker ignored them (a script's
# `codey-worker &` runs with SIGINT and SIGQUIT ignored, and exec keeps an ignored signal)
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as e:
    sys.stderr.write(f"codey-worker: cannot run {sys.argv[1]}: {e.strerror}\\n")
    os._exit(127 if isinstance(e, FileNotFoundError) else 126)
"""


class _Unread:
    """Output not read yet: a head and a rolling tail of at most ``cap`` bytes in all."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def __len__(self) -> int:
        return len(self.head) + len(self.tail) + self.dropped

    def add(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0 and not self.tail and not self.dropped:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        excess = len(self.tail) - self.tail_cap
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def take(self, final: bool) -> tuple[str, bool]:
        """Everything unread as text (and whether its middle was cut); then empty."""
        head, tail, dropped = bytes(self.head), bytes(self.tail), self.dropped
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0
        if not dropped:
            return self._decoder.decode(head + tail, final=final), False
        # the cut breaks the text: decode the two sides on their own
        text_head = self._decoder.decode(_cut_incomplete_end(head), final=True)
        self._decoder.reset()
        clean_tail = _cut_incomplete_start(tail)
        dropped += len(head) - len(_cut_incomplete_end(head)) + len(tail) - len(clean_tail)
        text = text_head + truncation_marker(dropped) + self._decoder.decode(clean_tail,
                                                                             final=final)
        return text, True


class _Live:
    """A ``live`` process's newest output for the browser, apart from the model's reads:
    a ring of the last :data:`PROCESS_TAIL_BYTES`, and what was not pushed yet. When more
    was pending than the ring holds (or a push failed) the next push is the ring, whole."""

    def __init__(self) -> None:
        self.ring = bytearray()
        self.pending = bytearray()
        self.reset = False
        self.timer: asyncio.TimerHandle | None = None
        #: one push task at a time per process: it sends what is pending until nothing is
        #: (so a process writing faster than the socket sends makes no pile of tasks)
        self.pushing = False
        self.final = False  # it ended: what is left goes, cut or not
        self.exited = False  # its end is to be said, after its last output

    def add(self, data: bytes) -> bool:
        """Keep ``data``; True when a push is due now (a full chunk, or a reset)."""
        self.ring += data
        if len(self.ring) > PROCESS_TAIL_BYTES:
            del self.ring[:len(self.ring) - PROCESS_TAIL_BYTES]
        if not self.reset:
            self.pending += data
            if len(self.pending) > PROCESS_TAIL_BYTES:
                self.reset = True
        if self.reset:
            self.pending.clear()
            return True
        return len(self.pending) >= CHUNK_MAX

    def take(self, final: bool) -> tuple[str, bool] | None:
        """The next push (text, reset), or None when there is nothing to push. An
        incomplete UTF-8 sequence at the end waits for its rest, unless ``final``."""
        reset = self.reset
        data = _cut_incomplete_start(bytes(self.ring)) if reset else bytes(self.pending)
        self.reset = False
        whole = data if final else _cut_incomplete_end(data)
        self.pending = bytearray(data[len(whole):])
        if not whole and not reset:
            return None
        return whole.decode("utf-8", errors="replace"), reset

    def missed(self) -> None:
        """A push did not reach the server: send the whole ring next time."""
        self.reset = True
        self.pending.clear()


@dataclass(eq=False)
class _Proc:
    """One process of a session, and everything the table knows of it."""

    process_id: str
    session_id: str
    argv: list[str]
    cwd: str  # relative to the workdir
    tty: bool
    mode: Literal["read-only", "workspace-write", "full-access"]
    network: bool
    writable: list[Path]
    hidden: list[Path]
    proc: asyncio.subprocess.Process
    out_fd: int
    in_fd: int | None
    box: _Box | None
    unread: _Unread
    started_at: float = field(default_factory=time.time)
    started_mono: float = field(default_factory=time.monotonic)
    total: int = 0
    eof: bool = False
    returncode: int | None = None
    ended_at: float | None = None
    stopped_by: StoppedBy = ""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)  # exited, output drained
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    timer: asyncio.TimerHandle | None = None
    #: pushed to the server as it comes (``ExecStart.live``); None: only read by exec_write
    live: _Live | None = None
    #: its sandbox's /proc entry (bwrap, network off): ports looked at, forwards made through
    proc_dir: ProcDir | None = None
    ports: dict[int, int] = field(default_factory=dict)  # listening: port → family (4, 6)
    #: as the server last heard (it starts with none; None: unknown, after a reconnect)
    ports_sent: list[int] | None = field(default_factory=list)
    forwards: dict[int, PortForward] = field(default_factory=dict)

    @property
    def isolated(self) -> bool:
        """Sandboxed by bwrap in a network of its own (started with the network off)."""
        return self.box is not None and self.box.bwrap and not self.network

    @property
    def pgid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.returncode is None

    def exit_code_and_signal(self) -> tuple[int | None, int | None]:
        rc = self.returncode
        if rc is None:
            return None, None
        if self.box is not None and self.box.bwrap and 128 < rc <= 128 + 64:
            rc = 128 - rc  # bwrap's 128+N for "killed by signal N"
        return (rc, None) if rc >= 0 else (None, -rc)


class ProcessTable:
    """The worker's long-lived processes, by session. See the module docstring.

    ``sandbox``: the worker's (None: this machine's, with ``$CODEY_HOME``'s temp dirs).
    ``registry``: where the waits of ``start`` and ``write`` are registered for ``cancel``.
    ``send``: where the frames of ``live`` processes go.
    """

    def __init__(self, policy: LocalPolicy, sandbox: Sandbox | None = None, *,
                 registry: CommandRegistry | None = None,
                 grace_s: float = KILL_GRACE_S, drain_s: float = DRAIN_S,
                 send: Send | None = None, ports_every_s: float = PORTS_EVERY_S) -> None:
        self.policy = policy
        #: where ``live`` processes' frames go (None: nowhere; they are only read)
        self.send = send
        self.ports_every_s = ports_every_s
        self._epoch = 0  # connections so far (a push that failed on an older one goes on)
        self._sandbox = sandbox
        self.registry = registry or CommandRegistry()
        self.grace_s = grace_s
        self.drain_s = drain_s
        self._procs: dict[str, _Proc] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox.detected(codey_home())
        return self._sandbox

    # -- the actions -------------------------------------------------------------------------

    async def start(self, action: ExecStart) -> ExecOutput:
        """``exec_start``. Raises ActionRefused before anything runs (the codes of
        ``run_command``, and ``too_many_processes``)."""
        # registered before the spawn: a cancel that comes while the process is being started
        # (the spawn is awaited) stops it as soon as it runs, rather than finding nothing
        cancel = self.registry._register(action.action_id)
        try:
            return await self._start(action, cancel)
        finally:
            self.registry._unregister(action.action_id)

    async def _start(self, action: ExecStart, cancel: asyncio.Event) -> ExecOutput:
        self._check_start(action)
        argv = list(action.argv)
        self.policy.check_command(argv)
        self.policy.check_env(action.env)
        workdir = self.policy.check_workdir(action.workdir)
        if not workdir.is_dir():
            raise ActionRefused("not_found", f"workdir {workdir} does not exist")
        cwd = resolve_inside(workdir, action.cwd or ".", real=True)
        if not cwd.exists():
            raise ActionRefused("not_found", f"cwd {action.cwd!r} does not exist")
        if not cwd.is_dir():
            raise ActionRefused("not_a_directory", f"cwd {action.cwd!r} is not a directory")
        check_protected_args(argv, cwd, self.sandbox.home)
        running = [p for p in self._procs.values()
                   if p.session_id == action.session_id and p.running]
        if len(running) >= MAX_PROCESSES:
            raise ActionRefused(
                "too_many_processes",
                f"this session already runs {len(running)} processes (at most "
                f"{MAX_PROCESSES}): stop one with exec_kill first")
        env = build_env(action.env, cwd=str(cwd))
        if action.tty and "TERM" not in action.env:
            env["TERM"] = "dumb"
        process_id = "proc_" + secrets.token_hex(8)
        box: _Box | None = None
        writable: list[Path] = []
        hidden: list[Path] = []
        start_new_session = True
        fds: tuple[int, ...] = ()
        if action.tty:
            # the helper makes the terminal its controlling one (setsid in it, not here)
            argv = [sys.executable, "-I", "-S", "-c", _TTY_HELPER, *argv]
        if action.sandbox != "full-access":
            self.sandbox.require()
            missing = _program_problem(action.argv[0], cwd, env)
            if missing is not None:
                return ExecOutput(process_id=process_id, exit_code=missing.exit_code,
                                  output=missing.stderr)
            spec = self.sandbox.spec(mode=action.sandbox, network=action.network,
                                     workdir=workdir, cwd=cwd,
                                     tmp=self.sandbox.tmp_for(action.sandbox,
                                                              action.session_id))
            box = _Box(spec, bwrap=self.sandbox.support.kind == "bwrap")
            env = self.sandbox.env(env, spec)
            writable = [*spec.writable_roots(), Path("/tmp")]
            hidden = spec.hidden_paths()
            if box.bwrap:
                box.status_r, status_w = os.pipe()
                os.set_blocking(box.status_r, False)
                fds = (status_w,)
                argv = self.sandbox.wrap(argv, spec, status_fd=status_w)
            else:
                argv = self.sandbox.wrap(argv, spec)
        elif action.tty:
            start_new_session = False  # the helper calls setsid itself
        child_in, our_in, child_out, our_out = _open_pipes(action)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=child_in, stdout=child_out, stderr=child_out, cwd=str(cwd),
                env=env, start_new_session=start_new_session, pass_fds=fds)
        except OSError as exc:
            for fd in (our_in, our_out):
                if fd is not None:
                    os.close(fd)
            if box is not None:
                box.close()
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return ExecOutput(process_id=process_id, exit_code=code,
                              output=f"codey-worker: cannot run {action.argv[0]}: "
                                     f"{exc.strerror or exc}\n")
        finally:
            for fd in {child_in, child_out, *fds}:
                os.close(fd)
        p = _Proc(process_id=process_id, session_id=action.session_id, argv=list(action.argv),
                  cwd=relative_display(workdir, cwd), tty=action.tty, mode=action.sandbox,
                  network=action.network, writable=writable, hidden=hidden, proc=proc,
                  out_fd=our_out, in_fd=our_in, box=box,
                  unread=_Unread(min(max(action.output_cap, 0), FRAME_BUDGET // 2)),
                  live=_Live() if action.live else None)
        self._procs[process_id] = p
        asyncio.get_running_loop().add_reader(p.out_fd, self._readable, p)
        self._spawn(p, self._watch(p))
        if p.live is not None and p.isolated:
            self._spawn(p, self._watch_ports(p))
        if action.timeout_s is not None:
            p.timer = asyncio.get_running_loop().call_later(
                action.timeout_s, lambda: self._stop_soon(p, "timeout"))
        self._forget_ended(action.session_id)
        await self._wait(p, action.action_id, action.yield_ms, cancel)
        return self._answer(p)

    async def write(self, action: ExecWrite) -> ExecOutput:
        """``exec_write``: raises ``process_gone`` for a process it does not know,
        ``process_ended`` for input to one that has ended (a poll still reads its output)."""
        p = self._get(action.session_id, action.process_id)
        if action.yield_ms < 0:
            raise ActionRefused("bad_request", "yield_ms must not be negative")
        data = action.input.encode("utf-8")
        if action.close_stdin and p.tty:
            data += b"\x04"  # a terminal's end of input
        if data or action.close_stdin:
            if not p.running or p.in_fd is None:
                code, sig = p.exit_code_and_signal()
                how = (f"exit code {code}" if code is not None else f"signal {sig}"
                       ) if not p.running else "its input was closed"
                raise ActionRefused("process_ended", f"{p.process_id} cannot take input "
                                    f"({how}); an empty exec_write reads what it wrote")
            if data:
                await self._send_input(p, data)
            if action.close_stdin and not p.tty:
                os.close(p.in_fd)
                p.in_fd = None
        await self._wait(p, action.action_id, action.yield_ms)
        return self._answer(p)

    async def kill(self, action: ExecKill) -> ExecOutput:
        """``exec_kill``: stop it and answer with what it wrote last."""
        p = self._get(action.session_id, action.process_id)
        await self._terminate(p, "exec_kill")
        return self._answer(p)

    def listing(self, session_id: str) -> ExecProcesses:
        """``exec_list``: the session's processes, oldest first."""
        out = []
        for p in self._procs.values():
            if p.session_id != session_id:
                continue
            code, sig = p.exit_code_and_signal()
            out.append(ProcessInfo(process_id=p.process_id, argv=p.argv, cwd=p.cwd, tty=p.tty,
                                   sandbox=p.mode, running=p.running, exit_code=code,
                                   signal=sig, started_at=p.started_at, ended_at=p.ended_at,
                                   unread_bytes=len(p.unread), stopped_by=p.stopped_by))
        return ExecProcesses(processes=out)

    async def forward(self, action: ExecForward) -> PortForwarded:
        """``exec_forward``: ``port`` of an isolated process, on this machine's loopback (the
        same forward when asked again). Refuses what the user could not have been shown: a
        process with the machine's network, or one not listening on ``port`` now."""
        p = self._get(action.session_id, action.process_id)
        existing = p.forwards.get(action.port)
        if existing is not None:
            return self._forwarded(p, existing)
        if not p.running:
            raise ActionRefused("process_ended", f"{p.process_id} has ended")
        if not p.isolated:
            raise ActionRefused("bad_request", f"{p.process_id} is not in a network of its "
                                "own: its ports are this machine's already")
        proc_dir = self._proc_dir(p)
        family = listening_ports(proc_dir).get(action.port) if proc_dir is not None else None
        if proc_dir is None or family is None:
            raise ActionRefused("not_listening", f"{p.process_id} does not listen on port "
                                f"{action.port}")
        forward = await PortForward.open(proc_dir, action.port, family)
        if not p.running or action.port in p.forwards:  # ended, or forwarded, meanwhile
            await forward.close()
            if action.port in p.forwards:
                return self._forwarded(p, p.forwards[action.port])
            raise ActionRefused("process_ended", f"{p.process_id} has ended")
        p.forwards[action.port] = forward
        return self._forwarded(p, forward)

    @staticmethod
    def _forwarded(p: _Proc, forward: PortForward) -> PortForwarded:
        return PortForwarded(process_id=p.process_id, port=forward.port, host=forward.host,
                             host_port=forward.host_port)

    def connected(self) -> None:
        """The worker is connected again: whatever it pushed meanwhile was lost, so every
        live tail goes whole, and ports are said again."""
        self._epoch += 1
        for p in self._procs.values():
            if p.live is None:
                continue
            p.ports_sent = None
            if p.live.ring:
                p.live.missed()
            if p.live.ring or p.live.exited:
                self._push_soon(p, final=p.done.is_set())

    async def stop_session(self, session_id: str, stopped_by: StoppedBy = "detach") -> int:
        """Stop every process of the session and forget them; returns how many ran."""
        procs = [p for p in self._procs.values() if p.session_id == session_id]
        ran = sum(p.running for p in procs)
        await asyncio.gather(*(self._terminate(p, stopped_by) for p in procs))
        for p in procs:
            self._procs.pop(p.process_id, None)
        return ran

    async def close(self) -> None:
        """Stop every process (the worker is stopping)."""
        procs = list(self._procs.values())
        await asyncio.gather(*(self._terminate(p, "worker_exit") for p in procs),
                             return_exceptions=True)
        self._procs.clear()
        # their forwards' ends, and the last pushes (which may not reach the server now)
        if self._stopping:
            await asyncio.wait(list(self._stopping), timeout=self.drain_s)

    def running(self) -> list[str]:
        """Ids of the processes running now (all sessions)."""
        return [p.process_id for p in self._procs.values() if p.running]

    # -- inside ------------------------------------------------------------------------------

    @staticmethod
    def _check_start(action: ExecStart) -> None:
        if not action.argv or not action.argv[0]:
            raise ActionRefused("bad_request", "argv is empty")
        if any("\x00" in arg for arg in action.argv):
            raise ActionRefused("bad_request", "argv contains a NUL byte")
        if action.timeout_s is not None and not action.timeout_s > 0:
            raise ActionRefused("bad_request", f"timeout_s must be positive, got "
                                               f"{action.timeout_s}")
        if action.yield_ms < 0 or action.output_cap < 0:
            raise ActionRefused("bad_request", "yield_ms and output_cap must not be negative")
        if action.tty and not (0 < action.cols < 10_000 and 0 < action.rows < 10_000):
            raise ActionRefused("bad_request", "cols and rows must be positive")

    def _get(self, session_id: str, process_id: str) -> _Proc:
        p = self._procs.get(process_id)
        if p is None or p.session_id != session_id:
            raise ActionRefused(
                "process_gone",
                f"no process {process_id} in this session: it was stopped (the session was "
                "detached, or the worker restarted) or forgotten after it ended; start it "
                "again with exec_start")
        return p

    def _spawn(self, p: _Proc, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        p.tasks.add(task)
        task.add_done_callback(p.tasks.discard)

    def _stop_soon(self, p: _Proc, stopped_by: StoppedBy) -> None:
        task = asyncio.get_running_loop().create_task(self._terminate(p, stopped_by))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _readable(self, p: _Proc) -> None:
        try:
            data = os.read(p.out_fd, _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # EIO: every other end of the terminal was closed
            data = b""
        if data:
            p.unread.add(data)
            p.total += len(data)
            if p.live is not None:
                self._live_output(p, data)
        else:
            self._close_output(p)
        p.changed.set()

    # -- live: what the browser watches -----------------------------------------------------

    def _live_output(self, p: _Proc, data: bytes) -> None:
        assert p.live is not None
        if p.live.add(data):
            self._push_soon(p)
        elif p.live.timer is None:
            p.live.timer = asyncio.get_running_loop().call_later(
                FLUSH_INTERVAL_S, self._push_soon, p)

    def _push_soon(self, p: _Proc, final: bool = False, exited: bool = False) -> None:
        """Push what is pending of ``p``'s tail (and, ``exited``, its end after it)."""
        live = p.live
        if live is None or self.send is None:
            return
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        live.final = live.final or final
        live.exited = live.exited or exited
        if live.pushing:
            return  # the push under way takes it
        live.pushing = True
        task = asyncio.get_running_loop().create_task(self._push(p))
        self._stopping.add(task)  # (kept until done, like the stops: not the process's own)
        task.add_done_callback(self._stopping.discard)

    async def _push(self, p: _Proc) -> None:
        live = p.live
        assert live is not None
        try:
            while True:
                chunk = live.take(live.final)
                if chunk is None and not live.exited:
                    return
                epoch = self._epoch
                if chunk is not None:
                    text, reset = chunk
                    msg: WorkerToServerMessage = ProcessTail(
                        session_id=p.session_id, process_id=p.process_id, data=text,
                        reset=reset)
                else:  # its last output went: now its end
                    live.exited = False
                    code, sig = p.exit_code_and_signal()
                    msg = ProcessExited(session_id=p.session_id, process_id=p.process_id,
                                        exit_code=code, signal=sig, stopped_by=p.stopped_by)
                if not await self._send(msg):
                    if chunk is not None:
                        live.missed()
                    else:
                        live.exited = True
                    if epoch == self._epoch:
                        return  # disconnected: connected() starts again
                    # it connected again meanwhile: go on, on the new connection
        finally:
            live.pushing = False

    async def _send(self, msg: WorkerToServerMessage) -> bool:
        if self.send is None:
            return False
        try:
            await self.send(codec.encode(msg))
        except Exception:  # disconnected: connected() makes up for it
            return False
        return True

    def _proc_dir(self, p: _Proc) -> ProcDir | None:
        """``p``'s sandbox's /proc entry, taken once while its PID 1 runs."""
        if p.proc_dir is None and p.box is not None and p.running:
            child = p.box.child_pid()
            if child is not None:
                p.proc_dir = ProcDir.open(child, p.box.net_namespace())
        return p.proc_dir

    async def _watch_ports(self, p: _Proc) -> None:
        """While an isolated live process runs: the ports it listens on, pushed when they
        change (and again after a reconnect)."""
        while p.running and not p.done.is_set():
            proc_dir = self._proc_dir(p)
            if proc_dir is not None:
                p.ports = listening_ports(proc_dir)
                ports = sorted(p.ports)
                if ports != p.ports_sent and p.running and await self._send(ProcessPorts(
                        session_id=p.session_id, process_id=p.process_id, ports=ports)):
                    p.ports_sent = ports
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(p.done.wait()), self.ports_every_s)

    def _close_output(self, p: _Proc) -> None:
        if p.eof:
            return
        p.eof = True
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(p.out_fd)
        with contextlib.suppress(OSError):
            os.close(p.out_fd)

    async def _watch(self, p: _Proc) -> None:
        """Wait for the process to exit (and its sandbox to be gone, its output drained)."""
        try:
            rc = await p.proc.wait()
            if p.box is not None:
                await p.box.wait_gone(self.drain_s)
            if not p.eof:
                await _wait_event(p.changed, lambda: p.eof, self.drain_s)
            if not p.eof:
                # leftovers of a full-access process still hold its output open
                _killpg(p.pgid, signal.SIGKILL)
                await _wait_event(p.changed, lambda: p.eof, self.drain_s)
                self._close_output(p)
            p.returncode = rc
            p.ended_at = time.time()
        finally:
            if p.timer is not None:
                p.timer.cancel()
            if p.in_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(p.in_fd)
                p.in_fd = None
            if p.box is not None:
                p.box.close()
            _close_transport(p.proc)
            if p.returncode is None:  # cancelled: the worker is going away
                self._close_output(p)
                p.returncode = p.proc.returncode if p.proc.returncode is not None else -9
                p.ended_at = time.time()
            p.done.set()
            p.changed.set()
            self._ended(p)

    def _ended(self, p: _Proc) -> None:
        """After ``p`` ended: its forwards and /proc handle go; a live one's last output and
        its end are pushed."""
        forwards, p.forwards = list(p.forwards.values()), {}
        if forwards:
            task = asyncio.get_running_loop().create_task(self._close_forwards(forwards))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
        if p.proc_dir is not None:
            p.proc_dir.close()
        p.ports = {}
        self._push_soon(p, final=True, exited=True)

    @staticmethod
    async def _close_forwards(forwards: list[PortForward]) -> None:
        await asyncio.gather(*(f.close() for f in forwards), return_exceptions=True)

    async def _wait(self, p: _Proc, action_id: str, yield_ms: int,
                    registered: asyncio.Event | None = None) -> None:
        """Until ``yield_ms`` has passed, the process has ended, or the action is cancelled
        (then the process is stopped). ``registered``: the action's cancel, registered by the
        caller (who unregisters it)."""
        deadline = time.monotonic() + min(yield_ms, MAX_YIELD_MS) / 1000
        cancel = registered if registered is not None else self.registry._register(action_id)
        try:
            while not p.done.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                if cancel.is_set():
                    await self._terminate(p, "cancel")
                    return
                waits = [asyncio.ensure_future(p.done.wait()),
                         asyncio.ensure_future(cancel.wait())]
                try:
                    await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
        except asyncio.CancelledError:
            # the task waiting was cancelled (the worker is stopping): take the process along
            self._stop_soon(p, "worker_exit")
            raise
        finally:
            if registered is None:
                self.registry._unregister(action_id)

    async def _terminate(self, p: _Proc, stopped_by: StoppedBy) -> None:
        """SIGTERM, up to ``grace_s``, SIGKILL; returns once it has ended."""
        if not p.done.is_set() and p.running:
            if not p.stopped_by:
                p.stopped_by = stopped_by
            if p.box is not None and p.box.bwrap:
                _signal_sandbox(p.box, signal.SIGTERM)
                _signal_sandbox(p.box, signal.SIGCONT)
            else:
                _killpg(p.pgid, signal.SIGTERM)
                _killpg(p.pgid, signal.SIGCONT)
            try:
                await asyncio.wait_for(asyncio.shield(p.done.wait()), self.grace_s)
            except TimeoutError:
                _killpg(p.pgid, signal.SIGKILL)
                if p.box is not None:
                    p.box.kill()
        await p.done.wait()

    async def _send_input(self, p: _Proc, data: bytes) -> None:
        assert p.in_fd is not None
        fd = p.in_fd
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + INPUT_TIMEOUT_S
        view = memoryview(data)
        while view:
            try:
                sent = os.write(fd, view)
                view = view[sent:]
                continue
            except BlockingIOError:
                pass
            except OSError as exc:  # EPIPE: it closed its input, or ended
                raise ActionRefused("process_ended", f"{p.process_id} does not read its "
                                    f"input any more ({exc.strerror or exc})") from None
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(fd, _set_ready, ready)
            try:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                await asyncio.wait_for(ready, left)
            except TimeoutError:
                raise ActionRefused("io_error", f"{p.process_id} did not read its input "
                                    f"within {INPUT_TIMEOUT_S:g} s") from None
            finally:
                loop.remove_writer(fd)

    def _answer(self, p: _Proc) -> ExecOutput:
        ended = p.done.is_set()
        text, cut = p.unread.take(final=ended)
        code, sig = p.exit_code_and_signal()
        out = ExecOutput(process_id=p.process_id, output=text, running=not ended,
                         exit_code=code if ended else None, signal=sig if ended else None,
                         truncated=cut, total_bytes=p.total,
                         duration_ms=int((time.monotonic() - p.started_mono) * 1000),
                         stopped_by=p.stopped_by)
        if ended and p.box is not None and code not in (0, None) and not p.stopped_by:
            hint = sandbox_denial(text, network=p.network, writable=p.writable,
                                  hidden=p.hidden)
            if hint is not None:
                out.sandbox_denied, out.sandbox_hint = True, hint
        return out

    def _forget_ended(self, session_id: str) -> None:
        ended = [p for p in self._procs.values()
                 if p.session_id == session_id and p.done.is_set()]
        for p in ended[:max(0, len(ended) - MAX_ENDED)]:
            self._procs.pop(p.process_id, None)


def _open_pipes(action: ExecStart) -> tuple[int, int | None, int, int]:
    """(child's stdin, our end of it, child's stdout+stderr, our end of it). A terminal:
    both ends are its master side (ours) and slave side (the child's)."""
    if action.tty:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ,
                    struct.pack("HHHH", action.rows, action.cols, 0, 0))
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR  # "\n" stays "\n" in the output
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        os.set_blocking(master, False)
        os.set_inheritable(master, False)
        our_in = os.dup(master)
        os.set_inheritable(our_in, False)
        return slave, our_in, os.dup(slave), master
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.set_blocking(in_w, False)
    os.set_blocking(out_r, False)
    return in_r, in_w, out_w, out_r


def _set_ready(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _wait_event(event: asyncio.Event, done: Callable[[], bool], timeout: float) -> None:
    """Wait up to ``timeout`` for ``done()`` to hold, re-checked each time ``event`` is set."""
    deadline = time.monotonic() + timeout
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), left)


def _signal_sandbox(box: _Box, sig: int) -> None:
    """``sig`` to every process in the sandbox's PID namespace but its PID 1 (bwrap's
    reaper): the program and whatever it started, in whatever group or session."""
    leader = box.child_pid()
    if leader is None or not _pid_alive(leader):
        return
    try:
        namespace = os.readlink(f"/proc/{leader}/ns/pid")
    except OSError:
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == leader:
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != namespace:
                continue
            os.kill(int(entry), sig)
        except OSError:
            continue
