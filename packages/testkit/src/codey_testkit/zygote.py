"""A Python that imported the server once and forks the kit's server processes from it.

Why: the suite starts codey-server ~400 times (each integration and e2e test its own, on port
0 with a temporary home), and each start spent ~1.9 CPU-seconds importing — litestar, our
modules, and the provider SDK the server loads at start (pydantic models by the hundred): half
the CPU of the whole unit + integration run, and CI ran near its time limit. A child forked from
a process that has imported them runs the same ``python -m codey_server.cli …`` main in a
process of its own (its own pid, session, stdio, environment, working folder, sockets), so what
a test talks to is still the real server; only the interpreter's start and the imports are
shared, as a forkserver shares them.

Used by :class:`~codey_testkit.procs.ManagedProcess` for ``[sys.executable, "-m", M, …]`` where
``M`` is in :data:`FORKABLE`, unless ``CODEY_TEST_FORK=0``, and only when the child's
``PYTHON*`` variables are the zygote's (they act at an interpreter's start, which a fork skips).
Tests of the start itself (imports, the CLI's script, old releases) run their own executables.

The zygote itself::

    python -m codey_testkit.zygote SOCKET

imports :data:`PRELOAD`, prints ``zygote ready``, and answers each connection on the
``SOCK_SEQPACKET`` socket: one request (JSON: argv, env, cwd; the child's stdin and log as two
file descriptors), one fork, ``{"pid": N}`` back, and ``{"status": S}`` (an exit code, or minus
the signal) when the child ends. One thread: a fork from a threaded process could copy a lock
held by another thread.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["FORKABLE", "ForkedChild", "fork_child"]

#: the modules whose ``-m`` children are forked (this one for its ``--probe``, which the kit's
#: tests use to hold a forked child to what Popen's would do)
FORKABLE = frozenset({"codey_server.cli", "codey_worker.cli", "codey_testkit.model_server",
                      "codey_testkit.zygote"})
#: what the zygote imports: the forkable mains, and what the server imports at its start in a
#: thread (the SDKs, their vendored transport and base client)
PRELOAD = ("codey_server.cli", "codey_worker.cli", "codey_testkit.model_server", "openai",
           "anthropic",
           "openai._vendor.httpx_aiohttp", "anthropic._vendor.httpx_aiohttp",
           "openai._base_client", "anthropic._base_client", "aiohttp")

_MESSAGE = 1 << 20


# -- the zygote ----------------------------------------------------------------------------


def main() -> None:
    path = sys.argv[1]
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    import gc

    gc.collect()
    gc.freeze()  # the imports stay out of every child's collections (and their pages shared)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    sel.register(0, selectors.EVENT_READ)  # the test process's pipe: its end is ours
    print("zygote ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                _spawn(conn, children)
            elif key.fileobj == 0:
                if not os.read(0, 4096):
                    return
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
        _reap(children)


def _spawn(conn: socket.socket, children: dict[int, socket.socket]) -> None:
    try:
        data, fds, _, _ = socket.recv_fds(conn, _MESSAGE, 2)
        request = json.loads(data)
    except (OSError, ValueError) as err:
        with contextlib.suppress(OSError):
            conn.send(json.dumps({"error": str(err)}).encode())
        conn.close()
        return
    pid = os.fork()
    if pid == 0:  # the child: never returns into the zygote's loop
        code = 70
        try:
            code = _child(request, fds)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    conn.send(json.dumps({"pid": pid}).encode())


def _child(request: dict[str, Any], fds: list[int]) -> int:
    """What ``subprocess.Popen(argv, stdin=…, stdout=log, stderr=STDOUT, env=…, cwd=…,
    start_new_session=True)`` and the interpreter's own start and exit would do."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    stdin, log = fds
    os.dup2(stdin, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as Popen's close_fds
    if request.get("cwd"):
        os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    module, args = request["module"], request["args"]
    sys.argv = [module, *args]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:  # as an uncaught exception ends an interpreter: printed, status 1
        traceback.print_exc()
        code = 1
    # the interpreter's own exit: wait for non-daemon threads, run atexit, flush
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    return code


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
            conn.close()


# -- the test process's side ---------------------------------------------------------------


class ForkedChild:
    """A child forked by the zygote, with the part of :class:`subprocess.Popen`'s interface
    the kit uses: ``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``kill``."""

    def __init__(self, pid: int, conn: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._read(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read(timeout)
        if code is None:
            raise subprocess.TimeoutExpired([str(self.pid)], timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def _read(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            self._conn.settimeout(timeout)
            try:
                data = self._conn.recv(_MESSAGE)
            except (TimeoutError, BlockingIOError):
                return None
            except OSError:
                data = b""
            # the zygote gone without a word (killed with the test run): the child's end is
            # unknown, and it has lost its parent; say it ended
            self.returncode = json.loads(data)["status"] if data else -signal.SIGKILL
            self._conn.close()
            return self.returncode


class _Zygote:
    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="codey-zygote-")
        self.path = os.path.join(self.folder, "sock")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        #: the variables an interpreter reads as it starts: a child that asks for others is
        #: started as its own interpreter
        self.python_env = _python_env(env)
        self.log: IO[bytes] = open(os.path.join(self.folder, "zygote.log"), "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "codey_testkit.zygote", self.path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env,
            start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != b"zygote ready":
            self.log.seek(0)
            raise RuntimeError(f"the test zygote did not start: {line!r} "
                               f"{self.log.read()[-2000:]!r}")
        atexit.register(self.stop)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def spawn(self, module: str, args: list[str], env: Mapping[str, str], cwd: str | None,
              log: IO[bytes]) -> ForkedChild:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self.path)
        request = json.dumps({"module": module, "args": args, "env": dict(env),
                              "cwd": cwd}).encode()
        with open(os.devnull, "rb") as devnull:
            socket.send_fds(conn, [request], [devnull.fileno(), log.fileno()])
        answer = json.loads(conn.recv(_MESSAGE) or b"{}")
        if "pid" not in answer:
            conn.close()
            raise OSError(f"the test zygote did not fork: {answer}")
        return ForkedChild(int(answer["pid"]), conn)


_ZYGOTE: _Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def _python_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def fork_child(argv: list[str], env: Mapping[str, str], cwd: Path | str | None,
               log: IO[bytes]) -> ForkedChild | None:
    """``argv`` forked from this test process's zygote (started on first use); None when it
    is not one of :data:`FORKABLE`'s ``-m`` mains, when ``CODEY_TEST_FORK=0``, or when ``env``
    asks for other ``PYTHON*`` variables than the zygote's: the caller then starts it."""
    global _ZYGOTE
    if os.environ.get("CODEY_TEST_FORK", "1") == "0" or len(argv) < 3 or \
            argv[0] != sys.executable or argv[1] != "-m" or argv[2] not in FORKABLE:
        return None
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None:
            _ZYGOTE = _Zygote()
    asked = _python_env(env)
    if asked != _ZYGOTE.python_env:
        differ = sorted(k for k in {*asked, *_ZYGOTE.python_env}
                        if asked.get(k) != _ZYGOTE.python_env.get(k))
        warnings.warn(f"{argv[2]} started, not forked: it asks for other {', '.join(differ)}",
                      stacklevel=3)
        return None
    return _ZYGOTE.spawn(argv[2], argv[3:], env, None if cwd is None else str(cwd), log)


def probe(args: list[str]) -> None:
    """A child to test the zygote with: says what it is, then does what ``args`` say —
    ``exit N``, ``raise``, ``wait`` (until SIGTERM, which exits 3) — and leaves a line from an
    atexit function and from a non-daemon thread it started."""
    print(json.dumps({"pid": os.getpid(), "sid": os.getsid(0), "cwd": os.getcwd(),
                      "env": os.environ.get("PROBE"), "argv": sys.argv[1:],
                      "stdin": os.read(0, 10).decode()}), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    atexit.register(lambda: print("atexit ran", flush=True))
    threading.Thread(target=lambda: print("thread ran", flush=True)).start()
    if args[0] == "exit":
        sys.exit(int(args[1]))
    if args[0] == "raise":
        raise RuntimeError("probe raised")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    print("waiting", flush=True)
    signal.pause()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        probe(sys.argv[2:])
    else:
        main()
