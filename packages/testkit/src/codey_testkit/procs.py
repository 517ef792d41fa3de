"""Real child processes for tests, e2e and benchmarks.

Typical use::

    with ManagedProcess("model-server", log_dir=tmp_path) as proc:
        proc.start([sys.executable, "-m", "codey_testkit.model_server", "--port", "0", ...])
        url = proc.wait_for_url(r"listening on (http://\\S+)")
        ...                       # talk to it
    # leaving the block stops it: SIGTERM, then SIGKILL after the timeout

stdout and stderr both go to one log file (``log_path``) so a failing test can show it and
``wait_for_line`` can scan it. Each child runs in its own process group, so stopping it also
cleans up whatever it spawned.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from codey_testkit.errors import ProcessError, ProcessExitedError, ProcessTimeoutError
from codey_testkit.waiting import WaitTimedOut, wait_until
from codey_testkit.zygote import ForkedChild, fork_child

__all__ = ["ManagedProcess", "StopsOnExit", "free_port", "pids_with", "serve_http"]

_POLL_S = 0.02
_URL_RE = r"(https?://[\w.\-\[\]:]+:(\d+)\S*)"


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free a moment ago.

    Racy by nature (another process may take it before you bind); prefer starting servers on
    port 0 and reading the bound port from their output.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class StopsOnExit:
    """Leaving a ``with`` block stops the thing: every process wrapper here ends the same way.

    Subclasses give ``stop()`` and their own ``__enter__`` (which starts, or returns self).
    """

    def stop(self) -> object:
        raise TypeError(f"{type(self).__name__} must define stop()")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ManagedProcess(StopsOnExit):
    """A child process with its output in a log file; a context manager that stops it on exit.

    Call :meth:`start` once, then :meth:`wait_for_line` / :meth:`wait_for_url` to learn when it
    is ready, and :meth:`stop` (or leave the ``with`` block) to end it. :meth:`kill9` simulates
    a crash. ``pid`` and ``returncode`` mirror :class:`subprocess.Popen`.
    """

    def __init__(self, name: str = "proc", log_dir: Path | str | None = None) -> None:
        self.name = name
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self.log_path: Path | None = None
        self._popen: subprocess.Popen[bytes] | ForkedChild | None = None
        self._log_file: IO[bytes] | None = None
        self.argv: list[str] = []

    # -- lifecycle -----------------------------------------------------------------------

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        *,
        inherit_env: bool = True,
    ) -> Self:
        """Start ``argv`` with stdout+stderr appended to ``log_path``; return self.

        ``env`` is layered over ``os.environ`` unless ``inherit_env`` is False.
        ``PYTHONUNBUFFERED=1`` is set so Python children's lines reach the log at once.
        Raises ProcessError if already started or the executable cannot be run.
        """
        if self._popen is not None:
            raise ProcessError(f"{self.name}: already started")
        log_dir = self._log_dir or Path(tempfile.mkdtemp(prefix="codey-proc-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = _unique_log_path(log_dir, self.name)
        full_env = dict(os.environ) if inherit_env else {}
        full_env["PYTHONUNBUFFERED"] = "1"
        if env:
            full_env.update(env)
        self.argv = [str(a) for a in argv]
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        # the server and the model server fork from a process that has imported them (see
        # codey_testkit.zygote: it halves the suite's CPU); anything else is started
        forked = fork_child(self.argv, full_env, cwd, self._log_file)
        if forked is not None:
            self._popen = forked
            return self
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=str(cwd) if cwd is not None else None,
                start_new_session=True,  # own process group: stop() can reap grandchildren
            )
        except OSError as exc:
            self._log_file.close()
            self._log_file = None
            raise ProcessError(f"{self.name}: cannot start {self.argv!r}: {exc}") from exc
        return self

    @property
    def pid(self) -> int:
        """The child's pid (also its process group id). Raises ProcessError before start()."""
        return self._require().pid

    @property
    def returncode(self) -> int | None:
        """Exit status once exited (negative = killed by that signal), else None."""
        if self._popen is None:
            return None
        return self._popen.poll()

    @property
    def running(self) -> bool:
        """True while the child has been started and has not exited."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def path(self) -> Path | None:
        """Same as ``log_path``."""
        return self.log_path

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit and return its status; ProcessTimeoutError on timeout."""
        try:
            return self._require().wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise ProcessTimeoutError(f"{self.name}: still running after {timeout}s") from exc

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the child only (not its group). No-op if it already exited."""
        proc = self._require()
        if proc.poll() is None:
            proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Send ``sig``, wait up to ``timeout`` s, then SIGKILL; return the exit status.

        Afterwards anything left in the child's process group is SIGKILLed too. Idempotent;
        returns None if never started.
        """
        if self._popen is None:
            return None
        proc = self._popen
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            except ProcessLookupError:
                proc.wait()
        self._kill_group()
        self._close_log()
        return proc.returncode

    def kill9(self) -> int:
        """SIGKILL the child alone (a crash: its children survive until stop()); return status."""
        proc = self._require()
        if proc.poll() is None:
            proc.kill()
        return proc.wait()

    def __enter__(self) -> Self:
        return self


    # -- output --------------------------------------------------------------------------

    def read_log(self) -> str:
        """The whole log so far (undecodable bytes replaced)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes().decode("utf-8", "replace")

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log, for error messages."""
        return "\n".join(self.read_log().splitlines()[-lines:])

    def log_offset(self) -> int:
        """Current length of the log in characters; pass as ``start`` to only see newer lines."""
        return len(self.read_log())

    def wait_for_line(
        self, pattern: str | re.Pattern[str], timeout: float = 10.0, *, start: int = 0
    ) -> re.Match[str]:
        """Wait until a complete log line (after char offset ``start``) matches ``pattern``.

        Uses ``re.search`` on each line and returns the first match. Raises ProcessExitedError
        if the child exits first and ProcessTimeoutError after ``timeout`` seconds; both
        messages carry the log tail.
        """
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern

        def search() -> re.Match[str] | None:
            exited = self.returncode is not None  # read before the log: no lost last line
            text = self.read_log()[start:]
            complete = text if exited else text[: text.rfind("\n") + 1]
            for line in complete.splitlines():
                found = regex.search(line)
                if found is not None:
                    return found
            if exited:
                raise ProcessExitedError(
                    f"{self.name} exited with {self.returncode} before printing a line matching "
                    f"{regex.pattern!r}; log tail:\n{self.log_tail()}"
                )
            return None

        try:
            found = wait_until(search, timeout=timeout, interval=_POLL_S,
                               what=f"{self.name} to print a line matching {regex.pattern!r}")
        except WaitTimedOut:
            raise ProcessTimeoutError(
                f"{self.name}: no line matching {regex.pattern!r} within {timeout}s; "
                f"log tail:\n{self.log_tail()}"
            ) from None
        assert found is not None
        return found

    def wait_for_url(
        self, pattern: str | None = None, timeout: float = 10.0, *, start: int = 0
    ) -> str:
        """Wait for a line with a URL and return it (group 1 of ``pattern``, else the match).

        The default pattern finds the first ``http(s)://host:port...`` on a line.
        """
        found = self.wait_for_line(pattern or _URL_RE, timeout, start=start)
        return found.group(1) if found.re.groups else found.group(0)

    def wait_for_port(
        self, pattern: str | None = None, timeout: float = 10.0, *, start: int = 0
    ) -> int:
        """Wait for a URL line (see wait_for_url) and return its port number."""
        url = self.wait_for_url(pattern, timeout, start=start)
        found = re.search(r":(\d+)(?:[/?#]|$)", url.split("://", 1)[-1])
        if found is None:
            raise ProcessError(f"{self.name}: no port in {url!r}")
        return int(found.group(1))

    # -- internals -----------------------------------------------------------------------

    def _require(self) -> subprocess.Popen[bytes] | ForkedChild:
        if self._popen is None:
            raise ProcessError(f"{self.name}: not started")
        return self._popen

    def _kill_group(self) -> None:
        if self._popen is None:
            return
        try:
            os.killpg(self._popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # group already empty

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __repr__(self) -> str:
        state = "not started" if self._popen is None else f"pid={self._popen.pid}"
        return f"<ManagedProcess {self.name} {state} rc={self.returncode}>"


def pids_with(marker: str) -> list[int]:
    """The processes on this machine (zombies left out) with ``marker`` in an argument: a
    test's own workdir, or a command only it runs, so a test can wait for them to be gone."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X") and any(marker in arg for arg in argv):
            found.append(int(entry.name))
    return found


def _unique_log_path(log_dir: Path, name: str) -> Path:
    safe = re.sub(r"[^\w.\-]+", "_", name) or "proc"
    candidate = log_dir / f"{safe}.log"
    n = 1
    while candidate.exists():
        n += 1
        candidate = log_dir / f"{safe}-{n}.log"
    return candidate


def serve_http(name: str, host: str, port: int,
               handler: type[BaseHTTPRequestHandler]) -> None:
    """Serve ``handler`` until killed, saying ``<name> listening on http://host:port`` first
    (the line the test kit's handles wait for): the main of every fake service of the kit."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    bound_host, bound_port = str(server.server_address[0]), server.server_address[1]
    print(f"{name} listening on http://{bound_host}:{bound_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)
