"""Long-lived processes of a real codey-worker, driven through a real codey-server: started,
polled, stopped when the worker stops (SIGTERM) or dies (kill -9, sandboxed ones), and a
process id from before a restart answered ``process_gone``."""

from __future__ import annotations

import json
import random
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.procs import ManagedProcess, free_port
from codey_testkit.procs import pids_with as processes_with
from codey_testkit.stack import ServerProcess
from codey_testkit.waiting import wait_until
from codey_worker.sandbox import detect

pytestmark = pytest.mark.integration

PAIR_LINE = r"^Open (\S+)/#/pair/([BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}) to link"
SANDBOXED = detect().kind == "bwrap"



def sleeping(seconds: str) -> int:
    """How many ``sleep <seconds>`` processes run: the command itself, not the bwrap processes
    whose argv carries it too (those exist before the sandbox is set up, so counting them
    would let a test act while bwrap is still arming ``--die-with-parent``)."""
    exact = b"sleep\0" + seconds.encode() + b"\0"
    return sum(1 for pid in processes_with(seconds)
               if _cmdline(pid) == exact)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Stack:
    def __init__(self, server: ServerProcess, home: Path, work: Path, logs: Path) -> None:
        self.server, self.home, self.work, self.logs = server, home, work, logs
        self.worker_id = ""

    def start_worker(self, name: str) -> ManagedProcess:
        proc = ManagedProcess(name, log_dir=self.logs)
        proc.start([sys.executable, "-m", "codey_worker.cli", "--server", self.server.url],
                   env={"CODEY_HOME": str(self.home)})
        if not self.worker_id:
            code = proc.wait_for_line(PAIR_LINE, timeout=30).group(2)
            pending = self.server.http.get("/api/pairing/requests").json()
            r = self.server.http.post(
                f"/api/pairing/requests/{pending[0]['request_id']}/approve", json={"code": code})
            assert r.status_code == 200, r.text
            self.worker_id = r.json()["worker_id"]
        proc.wait_for_line("^connected to", timeout=30)
        wait_until(self.connected, what="the worker to be connected", timeout=30)
        return proc

    def connected(self) -> bool:
        state = self.server.http.get("/api/state/bootstrap").json()["state"]
        return bool(state["workers"][self.worker_id]["connected"])

    def action(self, body: dict[str, Any], timeout: float = 60) -> Any:
        body = {"session_id": "ses_1", **body}
        r = self.server.http.post(f"/api/workers/{self.worker_id}/actions", json=body,
                                  params={"timeout": timeout}, timeout=timeout + 10)
        return r.json()


@pytest.fixture()
def stack(tmp_path: Path, outside_tmp: Path) -> Iterator[Stack]:
    home = tmp_path / "home"
    home.mkdir()
    work = outside_tmp / "work"  # outside /tmp: the sandbox has a /tmp of its own
    work.mkdir()
    (home / "worker-config.json").write_text(json.dumps({"allowed_roots": [str(work)]}))
    server = ServerProcess(tmp_path / "server", log_dir=tmp_path / "logs",
                           extra_args=["--port", str(free_port()), "--direct-actions"])
    with server:
        yield Stack(server, home, work, tmp_path / "logs")


def test_processes_live_and_die_with_the_worker(stack: Stack) -> None:
    proj = stack.work / "proj"
    mode = "workspace-write" if SANDBOXED else "full-access"
    t = f"{600 + random.random():.6f}"
    with stack.start_worker("worker-1") as worker:
        assert stack.action({"type": "attach_session", "workdir": str(proj)})["ok"]
        started = stack.action({"type": "exec_start", "workdir": str(proj), "sandbox": mode,
                                "argv": ["sh", "-c", f"echo ready; sleep {t} & sleep {t}"],
                                "yield_ms": 0})
        assert started["ok"] and started["result"]["running"], started
        process_id = started["result"]["process_id"]
        seen = ""

        def ready() -> bool:
            nonlocal seen
            polled = stack.action({"type": "exec_write", "process_id": process_id,
                                   "yield_ms": 100})
            assert polled["ok"], polled
            seen += polled["result"]["output"]
            return "ready" in seen

        wait_until(ready, what="the process to say it is ready")
        listed = stack.action({"type": "exec_list"})
        assert [p["process_id"] for p in listed["result"]["processes"]] == [process_id]
        wait_until(lambda: sleeping(t) == 2, what="the sleeps")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        assert processes_with(t) == []  # stopped before the worker exited

    with stack.start_worker("worker-2") as again:
        gone = stack.action({"type": "exec_write", "process_id": process_id})
        assert (gone["ok"], gone["code"]) == (False, "process_gone"), gone
        if SANDBOXED:
            t2 = f"{600 + random.random():.6f}"
            boxed = stack.action({"type": "exec_start", "workdir": str(proj),
                                  "argv": ["sh", "-c", f"sleep {t2} & sleep {t2}"],
                                  "yield_ms": 0})
            assert boxed["ok"] and boxed["result"]["running"], boxed
            wait_until(lambda: sleeping(t2) == 2, what="the sandboxed sleeps")
            again.kill9()
            # bwrap's --die-with-parent: the sandbox and everything in it go with the worker
            wait_until(lambda: processes_with(t2) == [], timeout=15,
                       what="the sandbox to die with the worker")
