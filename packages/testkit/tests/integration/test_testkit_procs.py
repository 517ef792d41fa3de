"""ManagedProcess against small real Python children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codey_testkit.errors import ProcessError, ProcessExitedError, ProcessTimeoutError
from codey_testkit.procs import ManagedProcess, free_port
from codey_testkit.waiting import wait_until

pytestmark = pytest.mark.integration

SERVE = """
import signal, socket, sys, time
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen()
print("noise first", flush=True)
print(f"demo listening on http://127.0.0.1:{sock.getsockname()[1]}/x", flush=True)
print("to stderr", file=sys.stderr, flush=True)
def bye(*_):
    print("got SIGTERM", flush=True); sys.exit(3)
signal.signal(signal.SIGTERM, bye)
time.sleep(60)
"""


def test_url_discovery_log_and_graceful_stop(tmp_path: Path) -> None:
    with ManagedProcess("demo server", log_dir=tmp_path) as proc:
        proc.start([sys.executable, "-c", SERVE])
        url = proc.wait_for_url(r"listening on (\S+)")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/x")
        assert proc.wait_for_port() == int(url.rsplit(":", 1)[1].split("/")[0])
        proc.wait_for_line("to stderr")  # stderr goes to the same log
        assert proc.running and proc.returncode is None
        assert proc.log_path == tmp_path / "demo_server.log" == proc.path
        offset = proc.log_offset()
        assert proc.stop() == 3
        assert proc.wait_for_line("got SIGTERM", start=offset)
    assert not proc.running


def test_exit_before_line_and_timeout(tmp_path: Path) -> None:
    quick = ManagedProcess("quick", tmp_path).start(
        [sys.executable, "-c", "print('bye'); raise SystemExit(4)"])
    with pytest.raises(ProcessExitedError, match="exited with 4") as caught:
        quick.wait_for_line("never", timeout=10)
    assert "bye" in str(caught.value)
    quick.stop()

    with ManagedProcess("slow", tmp_path) as slow:
        slow.start([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"])
        started = time.monotonic()
        with pytest.raises(ProcessTimeoutError, match="up"):
            slow.wait_for_line("ready", timeout=0.3)
        assert time.monotonic() - started < 5


def test_kill9_then_stop_reaps_the_process_group(tmp_path: Path) -> None:
    child = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', " \
            "'import time; time.sleep(60)']); print(f'child {p.pid}', flush=True); time.sleep(60)"
    proc = ManagedProcess("parent", tmp_path).start([sys.executable, "-c", child])
    grandchild = int(proc.wait_for_line(r"child (\d+)").group(1))
    assert proc.kill9() == -signal.SIGKILL
    os.kill(grandchild, 0)  # a crash leaves the child running...
    proc.stop()

    def gone() -> bool:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, timeout=5, what="stop() to end the grandchild too")


def test_stop_escalates_to_sigkill_and_misuse_is_reported(tmp_path: Path) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
               "print('ready', flush=True); time.sleep(60)"
    proc = ManagedProcess("stubborn", tmp_path).start([sys.executable, "-c", stubborn])
    proc.wait_for_line("ready")
    assert proc.stop(timeout=0.3) == -signal.SIGKILL
    assert proc.stop() == -signal.SIGKILL  # idempotent
    with pytest.raises(ProcessError, match="already started"):
        proc.start([sys.executable, "-c", "pass"])
    with pytest.raises(ProcessError, match="not started"):
        _ = ManagedProcess("nothing").pid
    with pytest.raises(ProcessError, match="cannot start"):
        ManagedProcess("missing", tmp_path).start(["/nonexistent/binary"])


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_with_on_a_started_server_and_worker_starts_neither_again(tmp_path: Path) -> None:
    # ``with worker.start(timeout=60):`` started a second worker of the same identity, and
    # the server dropped the first in the middle of its command (test_behind_nginx.py)
    from codey_testkit.stack import ServerProcess, WorkerProcess

    with ServerProcess(tmp_path / "server").start() as server:
        with WorkerProcess(server, tmp_path / "worker").start() as worker:
            assert (server.starts, worker.starts) == (1, 1)
        assert worker.proc is not None and not worker.proc.running


PROBE = [sys.executable, "-m", "codey_testkit.zygote", "--probe"]


def _said(proc: ManagedProcess) -> dict[str, object]:
    said: dict[str, object] = json.loads(proc.wait_for_line(r"^\{.*\}$").group(0))
    return said


@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_forked_child_is_started_as_popen_would(tmp_path: Path, fork: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The zygote's children (the server's, the model server's) against a started one: own
    pid and session, the env and folder asked for, stdin empty, stdout and stderr in the log,
    exit codes, an uncaught exception, atexit and non-daemon threads at the end, signals."""
    monkeypatch.setenv("CODEY_TEST_FORK", fork)
    (tmp_path / "here").mkdir()
    with ManagedProcess("probe", log_dir=tmp_path) as proc:
        proc.start([*PROBE, "exit", "7"], env={"PROBE": "yes"}, cwd=tmp_path / "here")
        assert proc.wait(10) == 7
        said = _said(proc)
        assert said == {"pid": proc.pid, "sid": proc.pid, "cwd": str(tmp_path / "here"),
                        "env": "yes", "argv": ["--probe", "exit", "7"], "stdin": ""}
        log = proc.read_log()
        assert "to stderr" in log and "atexit ran" in log and "thread ran" in log
    with ManagedProcess("probe-raise", log_dir=tmp_path) as proc:
        proc.start([*PROBE, "raise"])
        assert proc.wait(10) == 1
        assert "RuntimeError: probe raised" in proc.read_log()
    with ManagedProcess("probe-term", log_dir=tmp_path) as proc:
        proc.start([*PROBE, "wait"])
        proc.wait_for_line("waiting")
        assert proc.returncode is None and proc.running
        assert proc.stop() == 3
    with ManagedProcess("probe-kill", log_dir=tmp_path) as proc:
        proc.start([*PROBE, "wait"])
        proc.wait_for_line("waiting")
        assert proc.kill9() == -signal.SIGKILL


def test_a_child_asking_for_other_python_variables_is_started_not_forked(
        tmp_path: Path) -> None:
    """PYTHONPATH and the like act when an interpreter starts, which a fork skips."""
    with ManagedProcess("probe", log_dir=tmp_path) as proc, \
            pytest.warns(UserWarning, match="not forked: it asks for other PYTHONPATH"):
        proc.start([*PROBE, "exit", "0"], env={"PYTHONPATH": str(tmp_path)})
        assert proc.wait(10) == 0
        assert isinstance(proc._popen, subprocess.Popen)
    with ManagedProcess("probe", log_dir=tmp_path) as proc:
        proc.start([*PROBE, "exit", "0"])
        assert proc.wait(10) == 0
        assert not isinstance(proc._popen, subprocess.Popen)
