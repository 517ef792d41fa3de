"""The supervisor inside a warm sandbox (``codey_worker.warm``): it runs commands in the
namespaces and mounts bubblewrap made once, so a command does not pay for a new bwrap.

Run by the worker, inside bwrap, as ``python -I -S -c <loader> FD``: the loader reads this
file's code, compiled and marshalled by the worker, from a pipe; the standard library only (no
site, no environment), FD a ``SOCK_SEQPACKET`` Unix socket to the worker. One message per
packet; file descriptors travel beside them (``SCM_RIGHTS``). The worker's messages are
``marshal``-ed (the worker is trusted; marshal is built in), ours are JSON written by hand
(only ints, null and our own op names: the worker reads them with ``json``, safe against a
box gone bad).

Its start is a sandbox's start, paid once per session: so it imports nothing that is not
built into the interpreter but ``ctypes`` (for ``prctl``). ``json``, ``socket`` and ``signal``
would pull in ``re`` and ``enum`` and cost ~12 ms of CPU per box (9 ms is Python's own start);
it uses ``_socket`` and ``_signal`` directly.

worker → supervisor
    ``{"op": "run", "id", "argv", "cwd", "env"}`` with two fds (the command's stdout and
    stderr, write ends of the worker's pipes); ``{"op": "signal", "pgid", "sig"}`` (to the
    command's process group: a TERM with the grace period); ``{"op": "kill", "reaper"}``
    (everything the command started, now). The socket closing ends the supervisor, and with
    it the sandbox (bwrap's PID 1 goes, and the kernel kills the rest of the namespace).

supervisor (and the reapers it forks) → worker
    ``{"op": "ready"}``; ``{"op": "started", "id", "pid", "reaper"}``;
    ``{"op": "exit", "id", "code", "signal", "error"}`` — sent once the command *and
    everything it left behind* are gone.

Each command runs under a reaper of its own, forked by the supervisor: the reaper is a child
subreaper (``PR_SET_CHILD_SUBREAPER``), so whatever the command leaves behind — ``&``,
``nohup``, ``setsid``, a double fork — is reparented to it, not to the sandbox's PID 1; once
the command exits (or on ``kill``), the reaper kills what is left until it has no child, then
reports. That keeps the per-command guarantee of a bwrap of its own: a command's background
processes end with it. The command itself gets a session and process group of its own
(``setsid``), stdin from /dev/null, the signals Python ignores set back to their defaults,
and no descriptor but 0, 1 and 2.
"""

from __future__ import annotations

import _signal
import _socket
import errno
import marshal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs a box's start ~3 ms: for the type checker only)
    from typing import Any, NoReturn

PR_SET_CHILD_SUBREAPER = 36


def _encode(message: dict[str, object]) -> bytes:
    """``message`` as JSON: its values are ints, None or one of our op names."""
    parts = []
    for key, value in message.items():
        if value is None:
            text = "null"
        elif isinstance(value, int):
            text = str(int(value))
        else:
            text = f'"{value}"'  # an op name: letters only
        parts.append(f'"{key}": {text}')
    return ("{" + ", ".join(parts) + "}").encode()


def _send(sock: _socket.socket, message: dict[str, object]) -> None:
    try:
        sock.send(_encode(message))
    except OSError:
        pass  # the worker is gone: the socket closing ends us anyway


#: room for the file descriptors a message may carry (a run's two)
_FDS_SPACE = _socket.CMSG_SPACE(4 * 4)
_FD_SIZE = 4


def _receive(sock: _socket.socket) -> tuple[bytes, list[int]]:
    """One packet and the descriptors that came with it (socket.recv_fds, without the
    socket module)."""
    data, ancillary, _, _ = sock.recvmsg(1 << 20, _FDS_SPACE)
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % _FD_SIZE
            fds.extend(int.from_bytes(payload[i:i + _FD_SIZE], sys.byteorder, signed=True)
                       for i in range(0, usable, _FD_SIZE))
    return data, fds


def _prctl() -> Any:
    """libc's prctl, loaded once by the supervisor: each reaper is a fork of it, so a reaper
    pays nothing for ctypes (importing it there cost ~5-10 ms per command)."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


_PRCTL: Any = None


def _subreaper() -> None:
    if _PRCTL is not None:
        _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _children(me: int) -> list[int]:
    """The pids whose parent is ``me`` (reparented orphans included). (It reads /proc as
    shell.py's _group_alive does: this file runs alone, with the standard library only.)"""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(entry))
    return found


def _sweep(me: int) -> None:
    """Kill every process left under this reaper, until it has no child at all."""
    while True:
        for pid in _children(me):
            try:
                os.kill(pid, _signal.SIGKILL)
            except OSError:
                pass
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


_DEFAULT_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGINT, _signal.SIGTERM,
                    _signal.SIGCHLD, _signal.SIGQUIT)


def _spawn(request: dict[str, Any], out_fd: int, err_fd: int) -> int:
    """Start the command: ``posix_spawn`` (a vfork, no copy of this process), in a session
    of its own, stdin /dev/null, the two fds as stdout and stderr and no other, the signals
    Python ignores back to their defaults, no signal blocked, in the request's folder (the
    reaper's own: it is there for this command alone). A failure to start is the command's
    exit (127 missing, 126 not runnable), as a shell says it; the rare case posix_spawn
    cannot take goes through fork and exec."""
    argv = request["argv"]
    try:
        os.chdir(request["cwd"])
        null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        return os.posix_spawnp(
            argv[0], argv, request["env"], setsid=True, setsigdef=_DEFAULT_SIGNALS,
            setsigmask=[], file_actions=[(os.POSIX_SPAWN_DUP2, null, 0),
                                         (os.POSIX_SPAWN_DUP2, out_fd, 1),
                                         (os.POSIX_SPAWN_DUP2, err_fd, 2)])
    except OSError as exc:
        code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
        try:
            os.write(err_fd, f"codey-worker: cannot execute {argv[0]}: "
                             f"{exc.strerror}\n".encode())
        except OSError:
            pass
        child = os.fork()
        if child == 0:
            os._exit(code)
        return child
    except (AttributeError, NotImplementedError):
        child = os.fork()
        if child == 0:
            _exec(request, out_fd, err_fd)
        return child


def _exec(request: dict[str, Any], out_fd: int, err_fd: int) -> NoReturn:
    """In the command's own process: set it up and exec (never returns)."""
    try:
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.closerange(3, 65536)
        for sig in _DEFAULT_SIGNALS:
            _signal.signal(sig, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
        os.chdir(request["cwd"])
        argv = request["argv"]
        os.execvpe(argv[0], argv, request["env"])
    except OSError as exc:
        code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
        try:
            os.write(2, f"codey-worker: cannot execute {request['argv'][0]}: "
                        f"{exc.strerror}\n".encode())
        except OSError:
            pass
        os._exit(code)
    os._exit(126)


def _reaper(sock: _socket.socket, request: dict[str, Any], out_fd: int,
            err_fd: int) -> NoReturn:
    """In the reaper: run the command, wait for it, clear up after it, report."""
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    me = os.getpid()
    killed: list[bool] = []

    def on_term(signum: int, frame: object) -> None:
        # "kill": the whole command, now (the grace period, if any, was the worker's TERM)
        killed.append(True)
        for pid in _children(me):
            try:
                os.kill(pid, _signal.SIGKILL)
            except OSError:
                pass

    _signal.signal(_signal.SIGTERM, on_term)
    try:
        _subreaper()
    except OSError:
        pass
    child = _spawn(request, out_fd, err_fd)
    os.close(out_fd)
    os.close(err_fd)
    _send(sock, {"op": "started", "id": request["id"], "pid": child, "reaper": me})
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            status = None
            break
    _sweep(me)
    code: int | None = None
    sig: int | None = None
    if status is not None:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
        else:
            code = os.waitstatus_to_exitcode(status)
    _send(sock, {"op": "exit", "id": request["id"], "code": code, "signal": sig})
    os._exit(0)


def main(fd: int) -> None:
    global _PRCTL
    _PRCTL = _prctl()
    os.set_inheritable(fd, False)  # (a command gets 0, 1 and 2 and nothing else)
    sock = _socket.socket(fileno=fd)
    # reapers are reaped as they end; the supervisor waits on nothing
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)
    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
    _send(sock, {"op": "ready", "pid": os.getpid()})
    while True:
        try:
            data, fds = _receive(sock)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return  # the worker closed the socket: the sandbox ends
        try:
            request = marshal.loads(data)
            op = request["op"]
            if op == "run" and len(fds) == 2:
                for received in fds:
                    os.set_inheritable(received, False)
                pid = os.fork()
                if pid == 0:
                    _reaper(sock, request, fds[0], fds[1])
                for extra in fds:
                    os.close(extra)
                fds = []
            elif op == "signal":
                os.killpg(int(request["pgid"]), int(request["sig"]))
            elif op == "kill":
                os.kill(int(request["reaper"]), _signal.SIGTERM)
        except (OSError, ValueError, KeyError, TypeError, EOFError):
            pass
        finally:
            for extra in fds:
                try:
                    os.close(extra)
                except OSError:
                    pass


if __name__ == "__main__":
    main(int(sys.argv[1]))
