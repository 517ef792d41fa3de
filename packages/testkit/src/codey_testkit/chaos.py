"""Kill loops: ``kill -9`` the server while sessions stream, and the worker mid-command, then
check that nothing was lost, nothing repeated and no command ran twice.

``scripts/chaos.py`` runs them many times (``--server-kills 50 --worker-kills 20``); the test
suite runs one iteration of each (``test_chaos.py``). Everything is real: the server, the
worker, the scripted model server, browser sockets; the checks read the event log.

Server kills: each round starts a session whose turn streams a long answer in small pieces and
runs a command; the server is killed at a random moment while it streams and started again on
the same port and data dir. A browser socket follows the whole time, reconnecting after each
kill with the last seq it saw. At the end, every seq of the log reached the browser exactly
once, in order, and the browser's fold equals the server's state.

Worker kills: each round starts a session whose command appends its own marker to a file and
then sleeps; the worker is killed while it sleeps and started again. The server re-sends the
unfinished action; the worker must answer it from its record (``interrupted``), not run it
again. At the end every marker is in the file at most once.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from codey_protocol import codec
from codey_protocol.events import Envelope
from codey_protocol.state import State
from codey_testkit.model_handle import start_model_server
from codey_testkit.scenarios import create_session, provider_config, session
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import Deadline, WaitTimedOut, wait_until
from codey_testkit.wsclient import BrowserSocket

__all__ = ["ChaosResult", "server_kills", "worker_kills"]

STREAM_TEXT = " ".join(f"word{n}" for n in range(400))


@dataclass
class ChaosResult:
    rounds: int = 0
    events: int = 0
    gaps: list[int] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    state_differs: bool = False
    ran_twice: list[str] = field(default_factory=list)
    never_ran: list[str] = field(default_factory=list)  # a round whose command never started
    unfinished: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.gaps or self.duplicates or self.state_differs or self.ran_twice
                    or self.never_ran or self.unfinished)


def _settled(s: dict[str, Any]) -> bool:
    return s["status"] in ("idle", "error", "interrupted", "waiting_user") and \
        len(s["items"]) > 1 and not s["pending_actions"]


def _wait_settled(server: ServerProcess, sids: list[str], timeout: float) -> list[str]:
    """The sessions of ``sids`` still not settled after ``timeout`` s (none, when all did)."""
    left = list(sids)

    def settled() -> bool:
        left[:] = [sid for sid in left if not _settled(session(server, sid))]
        return not left

    # (the server may be coming back: look again)
    with contextlib.suppress(WaitTimedOut):
        wait_until(settled, timeout=timeout, interval=0.2, retry=Exception,
                   what="the sessions to settle")
    return left


class _Follower:
    """A browser that follows the log across server restarts, as the web client does."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.envelopes: list[dict[str, Any]] = []
        self.snapshot: dict[str, Any] | None = None
        self.socket: BrowserSocket | None = None
        self.last = 0

    def connect(self) -> None:
        self.socket = BrowserSocket(self.server, after_seq=self.last)

    def pump(self, seconds: float) -> None:
        """Read for ``seconds`` (or until the socket closes)."""
        assert self.socket is not None
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.socket.closed:
            self.socket.recv(0.05)
            self._take()

    def until_closed(self, timeout: float = 15.0) -> None:
        """Read what was sent until the socket closes (its server was killed)."""
        assert self.socket is not None
        deadline = Deadline(timeout, what="the killed server's socket to close")
        while not self.socket.closed:
            self.socket.recv(deadline.left())
            self._take()

    def catch_up(self, server: ServerProcess, timeout: float = 30.0) -> None:
        """Read until the follower has every event the server has now."""
        assert self.socket is not None
        self.socket.until_seq(server.http.get("/api/state/bootstrap").json()["seq"], timeout)
        self._take()

    def _take(self) -> None:
        assert self.socket is not None
        if self.socket.snapshot is not None and self.snapshot is None:
            self.snapshot = self.socket.snapshot
        fresh = self.socket.envelopes
        self.envelopes.extend(fresh)
        self.socket.envelopes = []
        if fresh:
            self.last = fresh[-1]["seq"]

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()


def _check_log(follower: _Follower, server: ServerProcess, result: ChaosResult) -> None:
    seqs = [e["seq"] for e in follower.envelopes]
    start = follower.snapshot["seq"] if follower.snapshot else 0
    seen: set[int] = set()
    expected = start + 1
    for seq in seqs:
        if seq in seen or seq <= start:
            result.duplicates.append(seq)
            continue
        if seq != expected:
            result.gaps.extend(range(expected, seq))
        seen.add(seq)
        expected = seq + 1
    result.events = len(seqs)
    state = State() if follower.snapshot is None else codec.decode_state(
        json.dumps(follower.snapshot["state"]))
    from codey_server.features import apply

    for env in follower.envelopes:
        apply(state, msgspec.convert(env, Envelope))
    served = server.http.get("/api/state/bootstrap").json()
    if state.seq != served["seq"]:
        result.gaps.extend(range(state.seq + 1, served["seq"] + 1))
    mine = msgspec.to_builtins(state)
    theirs = served["state"]
    for key in ("workers", "pair_requests", "rate_limits", "auth"):  # live, not folded here
        mine.pop(key, None)
        theirs.pop(key, None)
    result.state_differs = mine != theirs


def server_kills(root: Path, rounds: int, *, seed: int = 1) -> ChaosResult:
    """``rounds`` times: a streaming turn, ``kill -9`` of the server in the middle, restart."""
    rng = random.Random(seed)
    script = {"model": "scripted-1", "steps": [
        {"match": {"user": "stream"}, "reply": {
            "text": STREAM_TEXT, "chunk_size": 8, "delay_ms": 4,
            "calls": [{"name": "shell", "arguments": {"command": ["echo", "ran"]}}]}},
        {"match": {"tool": "shell"}, "reply": {"text": "done", "chunk_size": 2,
                                                "delay_ms": 2}},
    ]}
    result = ChaosResult()
    with start_model_server(script, root / "model") as model, \
            ServerProcess(root / "server", config=provider_config(model)) as server, \
            WorkerProcess(server, root / "worker") as worker:
        project = Path(worker.workdir("chaos"))
        project.mkdir(parents=True, exist_ok=True)
        follower = _Follower(server)
        follower.connect()
        sids: list[str] = []
        for _ in range(rounds):
            sids.append(create_session(server, worker, str(project), "stream"))
            follower.pump(rng.uniform(0.2, 1.5))  # somewhere in the stream
            server.kill9()
            follower.until_closed()  # what was sent before the socket died
            follower.close()
            server.start()
            worker.wait_connected(30)
            follower.connect()
            result.rounds += 1
        result.unfinished = _wait_settled(server, sids, 60 + 10 * rounds)
        follower.catch_up(server)
        _check_log(follower, server, result)
        follower.close()
    return result


def worker_kills(root: Path, rounds: int, *, seed: int = 2) -> ChaosResult:
    """``rounds`` times: a command that marks a file then sleeps; ``kill -9`` of the worker
    while it sleeps; restart. No marker may appear twice."""
    rng = random.Random(seed)
    steps = []
    for n in range(rounds):
        marker = f"marker-{n}"
        # "run marker-1." is not inside "run marker-10.": each prompt matches its own step
        steps.append({"match": {"user": f"run {marker}."}, "reply": {"calls": [{
            "name": "shell", "arguments": {"command": [
                # (in the workdir: the command runs in the worker's sandbox, which writes
                # nowhere else)
                "bash", "-c", f"echo {marker} >> runs.txt; sleep 2; echo finished"]}}]}})
    steps.append({"match": {"tool": "shell"}, "reply": {"text": "done"}})
    result = ChaosResult()
    with start_model_server({"model": "scripted-1", "steps": steps}, root / "model") as model, \
            ServerProcess(root / "server", config=provider_config(model)) as server, \
            WorkerProcess(server, root / "worker") as worker:
        project = Path(worker.workdir("chaos"))
        project.mkdir(parents=True, exist_ok=True)
        runs = project / "runs.txt"
        sids = []
        for n in range(rounds):
            marker = f"marker-{n}"
            sids.append(create_session(server, worker, str(project), f"run {marker}."))
            def ran(marker: str = marker) -> bool:
                return runs.exists() and marker in runs.read_text().split()

            try:
                wait_until(ran, timeout=30, interval=0.05, what=f"{marker} in runs.txt")
            except WaitTimedOut:
                result.never_ran.append(marker)  # the round proves nothing: say so
            time.sleep(rng.uniform(0.1, 1.0))  # mid-command
            worker.kill9()
            worker.start()
            result.rounds += 1
        result.unfinished = _wait_settled(server, sids, 60 + 5 * rounds)
        lines = runs.read_text().split() if runs.exists() else []
        result.ran_twice = sorted({m for m in lines if lines.count(m) > 1})
    return result
