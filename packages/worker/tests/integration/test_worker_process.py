"""A real codey-worker process against a real codey-server: pairing, actions, exactly once,
reconnects, unlinking and signals."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sqlite3
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codey_testkit import waiting
from codey_testkit.procs import ManagedProcess, free_port
from codey_testkit.stack import ServerProcess
from codey_worker.sandbox import detect

pytestmark = pytest.mark.integration

PAIR_LINE = r"^Open (\S+)/#/pair/([BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}) to link"


@dataclass
class Stack:
    server: ServerProcess
    home: Path
    work: Path
    logs: Path

    def start_worker(self, name: str = "worker") -> ManagedProcess:
        proc = ManagedProcess(name, log_dir=self.logs)
        proc.start([sys.executable, "-m", "codey_worker.cli", "--server", self.server.url],
                   env={"CODEY_HOME": str(self.home)})
        return proc

    def approve(self, worker: ManagedProcess) -> str:
        code = worker.wait_for_line(PAIR_LINE, timeout=30).group(2)
        pending = self.server.http.get("/api/pairing/requests").json()
        assert [p["code"] for p in pending] == [code]
        r = self.server.http.post(f"/api/pairing/requests/{pending[0]['request_id']}/approve",
                                  json={"code": code})
        assert r.status_code == 200, r.text
        worker_id: str = r.json()["worker_id"]
        worker.wait_for_line(rf"^paired as {worker_id}$", timeout=30)
        return worker_id

    def action(self, worker_id: str, body: dict[str, Any], timeout: float = 30) -> Any:
        r = self.server.http.post(f"/api/workers/{worker_id}/actions", json=body,
                                  params={"timeout": timeout}, timeout=timeout + 10)
        return r.json()

    def worker_state(self, worker_id: str) -> dict[str, Any]:
        state = self.server.http.get("/api/state/bootstrap").json()["state"]
        info: dict[str, Any] = state["workers"][worker_id]
        return info


@pytest.fixture()
def stack(tmp_path: Path) -> Iterator[Stack]:
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "worker-config.json").write_text(json.dumps(
        {"allowed_roots": [str(work)], "denied_commands": ["sudo"]}))
    # a fixed port, so a restarted server is found again at the same URL
    server = ServerProcess(tmp_path / "server", log_dir=tmp_path / "logs",
                           extra_args=["--port", str(free_port()), "--direct-actions"])
    with server:
        yield Stack(server=server, home=home, work=work, logs=tmp_path / "logs")


def wait_until(check: Any, timeout: float = 15.0, what: str = "the condition") -> None:
    waiting.wait_until(check, timeout=timeout, interval=0.05, what=what)


def test_pairs_connects_and_runs_actions(stack: Stack) -> None:
    with stack.start_worker() as worker:
        worker_id = stack.approve(worker)
        worker.wait_for_line(rf"^connected to {stack.server.url}$", timeout=30)
        identity = stack.home / "worker.json"
        assert stat.S_IMODE(identity.stat().st_mode) == 0o600
        assert json.loads(identity.read_text())["worker_id"] == worker_id
        wait_until(lambda: stack.worker_state(worker_id)["connected"], what="the worker to connect")
        caps = stack.worker_state(worker_id)["capabilities"]
        assert "run_command" in caps["executors"] and "cancel" in caps["executors"]
        # the sandbox it found, on its terminal and in its hello
        sandbox = detect()
        worker.wait_for_line(rf"^sandbox: {re.escape(sandbox.describe())}$")
        assert (caps["sandbox"]["kind"], caps["sandbox"]["reason"]) == (
            sandbox.kind, sandbox.reason)

        proj = stack.work / "proj"
        attached = stack.action(worker_id, {"type": "attach_session", "session_id": "ses_1",
                                            "workdir": str(proj)})
        assert attached["ok"] and attached["result"]["workdir"] == str(proj)
        assert attached["result"]["created"] is True and proj.is_dir()

        ran = stack.action(worker_id, {"type": "run_command", "session_id": "ses_1",
                                       "workdir": str(proj),
                                       "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]})
        assert ran["ok"], ran
        assert (ran["result"]["exit_code"], ran["result"]["stdout"], ran["result"]["stderr"]) == (
            3, "out\n", "err\n")
        assert {"stream": "stdout", "data": "out\n"} in ran["progress"]
        worker.wait_for_line(r"^\[ses_1\] running: sh -c 'echo out; echo err >&2; exit 3'$")
        if sandbox.available:
            # a command runs in the sandbox unless the action says otherwise (the target is
            # outside /tmp: the sandbox's /tmp is its own, the host's is not there at all)
            outside = Path(tempfile.mkdtemp(prefix="codey-test-", dir="/var/tmp"))
            try:
                escape = ["sh", "-c", f"echo x > {outside}/escaped"]
                boxed = stack.action(worker_id, {"type": "run_command", "session_id": "ses_1",
                                                 "workdir": str(proj), "argv": escape})
                assert boxed["ok"] and boxed["result"]["exit_code"] != 0, boxed
                assert boxed["result"]["sandbox_denied"] is True
                assert not (outside / "escaped").exists()
                bare = stack.action(worker_id, {"type": "run_command", "session_id": "ses_1",
                                                "workdir": str(proj), "argv": escape,
                                                "sandbox": "full-access"})
                assert bare["ok"] and bare["result"]["exit_code"] == 0, bare
                assert (outside / "escaped").exists()
            finally:
                shutil.rmtree(outside)

        patch = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch"
        patched = stack.action(worker_id, {"type": "apply_patch", "session_id": "ses_1",
                                           "workdir": str(proj), "patch": patch})
        assert patched["ok"] and patched["result"]["files"][0]["path"] == "a.txt"
        assert (proj / "a.txt").read_text() == "hello\n"
        worker.wait_for_line(r"^\[ses_1\] patch: 1 file$")

        outside = stack.action(worker_id, {"type": "read_file", "session_id": "ses_1",
                                           "workdir": str(proj), "path": "../../home/worker.json"})
        assert (outside["ok"], outside["code"]) == (False, "path_outside_workdir")
        elsewhere = stack.action(worker_id, {"type": "list_dir", "session_id": "ses_1",
                                             "workdir": "/etc"})
        assert (elsewhere["ok"], elsewhere["code"]) == (False, "outside_allowed_roots")
        denied = stack.action(worker_id, {"type": "run_command", "session_id": "ses_1",
                                          "workdir": str(proj), "argv": ["sudo", "id"]})
        assert (denied["ok"], denied["code"]) == (False, "denied_command")

        # the same action id twice: run once, the second answer comes from the record
        once = {"type": "run_command", "session_id": "ses_1", "action_id": "act_once",
                "workdir": str(proj), "argv": ["sh", "-c", "echo x >> count"]}
        assert stack.action(worker_id, once)["ok"]
        assert stack.action(worker_id, once)["ok"]
        assert (proj / "count").read_text() == "x\n"

        # two callers at once with one action id: both get the one run's answer
        joined = {"type": "run_command", "session_id": "ses_1", "action_id": "act_joined",
                  "workdir": str(proj), "argv": ["sh", "-c", "sleep 0.5; echo y >> joined"]}
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: stack.action(worker_id, joined), range(2)))
        assert [a["ok"] for a in answers] == [True, True], answers
        assert (proj / "joined").read_text() == "y\n"

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(15) == 0
        assert "stopping (signal SIGTERM)" in worker.read_log()
        wait_until(lambda: not stack.worker_state(worker_id)["connected"],
                   what="the worker to show as disconnected")


def test_action_cut_by_a_crash_is_answered_interrupted_never_run_again(stack: Stack) -> None:
    proj = stack.work / "proj"
    proj.mkdir()
    with stack.start_worker("worker-1") as first:
        worker_id = stack.approve(first)
        first.wait_for_line("^connected to", timeout=30)
        wait_until(lambda: stack.worker_state(worker_id)["connected"], what="the worker to connect")
        body = {"type": "run_command", "session_id": "ses_1", "action_id": "act_cut",
                "workdir": str(proj), "argv": ["sh", "-c", "echo x >> count; sleep 2"]}
        late = stack.action(worker_id, body, timeout=1)
        assert late["code"] == "timeout"
        wait_until(lambda: (proj / "count").exists(), what="the command to count")
        first.kill9()
    with stack.start_worker("worker-2") as second:
        second.wait_for_line("^connected to", timeout=30)
        # the server re-sends the unanswered action; the new process never runs it
        answer = stack.action(worker_id, body, timeout=20)
        assert (answer["ok"], answer["code"]) == (False, "interrupted")
        assert (proj / "count").read_text() == "x\n"
        with sqlite3.connect(stack.home / "actions" / "records.sqlite3") as db:
            status, response = db.execute(
                "SELECT status, response FROM records WHERE action_id = 'act_cut'").fetchone()
        assert status == "finished" and b'"interrupted"' in response


def test_reconnects_after_the_server_restarts(stack: Stack) -> None:
    with stack.start_worker() as worker:
        worker_id = stack.approve(worker)
        worker.wait_for_line("^connected to", timeout=30)
        offset = worker.log_offset()
        stack.server.kill9()
        worker.wait_for_line(r"^reconnecting in \d+\.\d s…", timeout=15, start=offset)
        stack.server.start()
        worker.wait_for_line("^connected to", timeout=60, start=offset)
        wait_until(lambda: stack.worker_state(worker_id)["connected"], timeout=30,
                   what="the worker to connect")
        listed = stack.action(worker_id, {"type": "list_dir", "session_id": "s",
                                          "workdir": str(stack.work)})
        assert listed["ok"], listed


#: how long the server stays away, in the worker's failed attempts (what grows its backoff):
#: after five, an uncapped backoff (0.5 s doubling) would wait up to 16 s before the next
AWAY_ATTEMPTS = 5
#: a worker is back this soon after its server is (the issue's bound)
BACK_WITHIN_S = 3.0


def test_back_within_seconds_of_a_server_that_was_away_long(stack: Stack) -> None:
    """However long the server was away, the worker is connected again (its hello folded,
    the server says so) within 3 s of the server listening again: the backoff is capped."""
    with stack.start_worker() as worker:
        worker_id = stack.approve(worker)
        wait_until(lambda: stack.worker_state(worker_id)["connected"], timeout=30,
                   what="the worker to connect")
        offset = worker.log_offset()
        away = time.monotonic()
        stack.server.kill9()
        wait_until(lambda: len(re.findall(r"(?m)^reconnecting in", worker.read_log()[offset:]))
                   >= AWAY_ATTEMPTS, timeout=60,
                   what=f"{AWAY_ATTEMPTS} attempts to reconnect to the killed server")
        away = time.monotonic() - away
        offset = worker.log_offset()
        stack.server.start()
        back = time.monotonic()
        wait_until(lambda: stack.worker_state(worker_id)["connected"], timeout=60,
                   what="the worker to connect")
        took = time.monotonic() - back
        worker.wait_for_line("^connected to", timeout=5, start=offset)
        print(f"worker connected again {took:.2f} s after the server was back "
              f"(away {away:.1f} s, {AWAY_ATTEMPTS} attempts)")
        assert took <= BACK_WITHIN_S, f"back after {took:.1f} s"


def test_revoked_worker_exits_3_with_one_line(stack: Stack) -> None:
    with stack.start_worker() as worker:
        worker_id = stack.approve(worker)
        worker.wait_for_line("^connected to", timeout=30)
        wait_until(lambda: stack.worker_state(worker_id)["connected"], what="the worker to connect")
        assert stack.server.http.post(f"/api/workers/{worker_id}/revoke").status_code < 300
        assert worker.wait(20) == 3
        assert worker.read_log().splitlines()[-1] == (
            "this machine was unlinked; run codey-worker unpair and pair again")
    # and it stays refused on the next start
    with stack.start_worker("worker-again") as again:
        assert again.wait(30) == 3


def test_denied_pairing_exits_1(stack: Stack) -> None:
    with stack.start_worker() as worker:
        worker.wait_for_line(PAIR_LINE, timeout=30)
        pending = stack.server.http.get("/api/pairing/requests").json()
        r = stack.server.http.post(f"/api/pairing/requests/{pending[0]['request_id']}/deny")
        assert r.status_code < 300
        assert worker.wait(30) == 1
        assert "Pairing was denied" in worker.read_log()
        assert not (stack.home / "worker.json").exists()
