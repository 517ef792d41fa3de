"""Benchmark worker actions: read_file round trip, streaming a command's big output, the
sandbox's overhead per command, a command step's own cost, grep, and an idle worker's memory.

    uv run python scripts/bench/actions.py             # 300 calls, 100 MB of output
    uv run python scripts/bench/actions.py --quick     # 30 calls, 10 MB: a smoke run
    uv run python scripts/bench/actions.py --only c    # the sandbox's overhead alone
    uv run python scripts/bench/actions.py --only d --only e --only f

Starts a real ``codey-server`` (port 0) and a real ``codey-worker`` (temp ``CODEY_HOME``),
pairs them through the HTTP API, then runs actions with ``POST /api/workers/{id}/actions``.

a. ``read_file`` of a 1 KiB file, ``--calls`` times, p50 and p99. Five series run in blocks,
   interleaved (noise on a shared machine hits them alike), after one warm-up block each:

   - read_file on one keep-alive connection (what a browser does), and the server's own
     measure of each of those calls: its ``Server-Timing`` header, from handing the action to
     the worker socket until its outcome is in — *server -> worker -> server*, the figure the
     goal is about;
   - ``GET /api/health`` on the same connection (the HTTP floor);
   - both again with a new TCP connection per request, and their difference, an estimate of
     the same round trip from outside;
   - the baseline: a bare ``websockets`` echo of 1 KiB text frames without compression (as
     on the worker socket), between this process and an echo server in its own process;
   - for information, the same echo with uvloop at both ends (the server runs on uvloop; the
     worker on asyncio's loop unless ``CODEY_EVENT_LOOP=uvloop``).

   Goal: p50 <= 3x the baseline.

b. ``bash -c "head -c N /dev/zero | tr '\\0' a"`` with ``output_cap`` = N (100 MB), so the
   worker streams all of it as ``ActionProgress`` chunks; throughput = N over the time from
   sending the request to its reply (goal >= 100 MB/s), and the growth of the server's RSS
   (``/proc/PID/status`` VmRSS every 50 ms; goal <= 64 MB), which includes whatever
   run_action keeps of the progress for its reply (the worker's RSS is printed too). If the
   server closes the worker socket with 1009 (the result frame over its size cap) the run
   stops there and the throughput up to that close is printed as a lower bound. (The command
   runs in the sandbox, ``workspace-write``, the default.)

c. The sandbox's overhead per command: ``true`` through the worker's run path
   (``codey_worker.shell.run_command``, in this process, on the worker's loop), with
   ``full-access`` (no sandbox) and with ``workspace-write`` and ``read-only`` (bwrap), in
   blocks, interleaved, next to the bare spawn of ``true`` (``asyncio`` subprocess, the floor
   of any command) and to ``bwrap … true`` alone (the floor of the sandbox). Then the same two
   modes through the server and the real worker process (``run_command`` actions over HTTP),
   for information. Goal: p50 overhead (sandboxed minus full access) <= 5 ms.

d. A command step: ``true`` as a ``run_command`` action through the worker's dispatcher
   (``ActionDispatcher.handle`` to the answer frame: the exactly-once record in a real SQLite
   file, the run path, the answer encoded), in this process on the worker's loop (asyncio's;
   ``CODEY_EVENT_LOOP=uvloop`` for uvloop), against the bare
   spawn of the same command: ``true`` for ``full-access``, ``bwrap … true`` for
   ``workspace-write``. In blocks, interleaved, with the same step on records flushed
   before and after every action (``synchronous=FULL``, as before group commit) so the
   record's share shows. Goal: p50 step - bare spawn <= 3 ms, in both modes.

e. ``grep`` over a generated repository of 50,000 files (plus 5,000 in a .gitignored
   folder): the worker's executor (``codey_worker.search.grep``, in this process), against
   ``rg`` run directly on it with the same pattern (its output read to the end), interleaved.
   A pattern in a few dozen files (the goal's figure) and one in every file (capped at 200
   matches, for information); then the same grep through the server and the worker
   process. Goal: p50 grep / rg <= 1.5x.

f. The worker's memory, idle and connected (VmRSS, before any action), against the floor: a
   Python that imports only what the worker cannot do without (asyncio with ssl, msgspec and
   the protocol, the websockets client; uvloop was in it while the worker ran on uvloop).
   Goal <= 30 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from _common import (
    RssSampler,
    baseline_peer,
    figure,
    info,
    percentile,
    start_server_and_worker,
)
from websockets.asyncio.client import connect

from codey_protocol import codec
from codey_protocol.worker import Grep, RunCommand
from codey_testkit.procs import ManagedProcess
from codey_testkit.stack import ServerProcess
from codey_worker.actions import ActionDispatcher
from codey_worker.cli import worker_runner
from codey_worker.git import GitRunner
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords
from codey_worker.sandbox import Sandbox, detect
from codey_worker.search import find_rg, grep
from codey_worker.shell import run_command

RT_GOAL_X = 3.0
THROUGHPUT_GOAL_MBS = 100.0
RSS_GOAL_MB = 64.0
SANDBOX_GOAL_MS = 5.0
STEP_GOAL_MS = 3.0
GREP_GOAL_X = 1.5
IDLE_RSS_GOAL_MB = 30.0
CONTEXT_GIT_GOAL_MS = 10.0  # issue 32: the sandbox may cost a context load this much
KIB = b"x" * 1023 + b"\n"


def _timed(fn: Any, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


class _Echo:
    """The baseline: a bare ``websockets`` client and echo server, 1 KiB text frames, no
    compression (as on the worker socket). One connection, one event loop, kept across blocks;
    each round trip is timed inside the loop, so starting the loop is not counted."""

    def __init__(self, url: str, *, uvloop: bool = False) -> None:
        if uvloop:
            import uvloop as _uvloop

            self._runner = asyncio.Runner(loop_factory=_uvloop.new_event_loop)
        else:
            self._runner = asyncio.Runner()
        self._payload = KIB.decode()
        self._ws = self._runner.run(self._open(url))

    @staticmethod
    async def _open(url: str) -> Any:
        return await connect(url, max_size=None, compression=None)

    async def _block(self, calls: int) -> list[float]:
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await self._ws.send(self._payload)
            await self._ws.recv()
            times.append(time.perf_counter() - t0)
        return times

    def block(self, calls: int) -> list[float]:
        return self._runner.run(self._block(calls))

    def close(self) -> None:
        self._runner.run(self._ws.close())
        self._runner.close()


def _ms(values: list[float], p: float) -> float:
    return percentile(values, p) * 1000


def bench_round_trip(server: ServerProcess, worker_id: str, workdir: Path, logs: Path,
                     calls: int) -> None:
    """Every series runs in blocks, interleaved with the others (noise on this shared machine
    hits them alike); the first block of each is a warm-up and not counted."""
    print(f"a. read_file of 1 KiB, server -> worker -> server ({calls} calls)")
    (workdir / "f.txt").write_bytes(KIB)
    body = {"type": "read_file", "workdir": str(workdir), "path": "f.txt"}
    url = f"/api/workers/{worker_id}/actions"
    inside: list[float] = []  # the server's own measure (Server-Timing), seconds

    def reader(client: httpx.Client, keep: list[float] | None) -> Any:
        def read_once() -> None:
            r = client.post(url, json=body)
            reply = r.json()
            if not reply.get("ok") or len(reply["result"]["content"]) != len(KIB):
                raise RuntimeError(f"read_file failed: {r.status_code} {r.text[:300]}")
            if keep is not None:
                keep.append(float(r.headers["server-timing"].split("dur=")[1]) / 1000)
        return read_once

    def health(client: httpx.Client) -> Any:
        return lambda: client.get("/api/health").raise_for_status()

    # One TCP connection per request: nothing of an earlier response is left unacknowledged,
    # so a server socket without TCP_NODELAY cannot stall on the delayed ACK (see README).
    fresh_client = httpx.Client(base_url=server.url, headers=server.cookie_header(), timeout=30,
                                limits=httpx.Limits(max_keepalive_connections=0))
    names = ["read_file, keep-alive connection", "GET /api/health, keep-alive connection",
             "read_file, new connection each", "GET /api/health, new connection each",
             "baseline: bare websockets echo 1 KiB",
             "(info) the same echo, uvloop at both ends"]
    series: dict[str, list[float]] = {name: [] for name in names}
    with fresh_client, baseline_peer("echo", logs) as echo_url, \
            baseline_peer("echo-uvloop", logs) as uv_echo_url:
        echo, uv_echo = _Echo(echo_url), _Echo(uv_echo_url, uvloop=True)
        try:
            runs: list[tuple[str, Any]] = [
                (names[0], lambda n: _timed(reader(server.http, inside), n)),
                (names[1], lambda n: _timed(health(server.http), n)),
                (names[2], lambda n: _timed(reader(fresh_client, None), n)),
                (names[3], lambda n: _timed(health(fresh_client), n)),
                (names[4], echo.block),
                (names[5], uv_echo.block),
            ]
            block = max(10, calls // 20)
            for _, run in runs:  # warm-up
                run(block)
            inside.clear()
            for i in range(0, calls, block):
                for name, run in runs:
                    series[name] += run(min(block, calls - i))
        finally:
            echo.close()
            uv_echo.close()
    for name in names:
        values = series[name]
        info(name, f"p50 {_ms(values, 50):7.2f} ms   p99 {_ms(values, 99):7.2f} ms")
    info("measured inside the server (Server-Timing)",
         f"p50 {_ms(inside, 50):7.2f} ms   p99 {_ms(inside, 99):7.2f} ms")
    kept, _, fresh, fresh_floor, base, uv_base = (series[n] for n in names)
    est50 = _ms(fresh, 50) - _ms(fresh_floor, 50)
    est99 = _ms(fresh, 99) - _ms(fresh_floor, 99)
    info("estimated server->worker->server", f"p50 {est50:7.2f} ms   p99 {est99:7.2f} ms"
         "   (new-connection read_file minus health)")
    e50, e99 = _ms(base, 50), _ms(base, 99)
    # the goal's figure: server -> worker -> server, as the server measures it
    figure("p50 server->worker->server / echo", _ms(inside, 50) / e50, "x",
           f"<= {RT_GOAL_X:g}", _ms(inside, 50) / e50 <= RT_GOAL_X)
    figure("p99 server->worker->server / echo", _ms(inside, 99) / e99, "x", "", None)
    # for information: with the HTTP request around it (parsing the JSON body, encoding the
    # reply), which the goal does not cover
    for label, p50 in [("(info) p50 HTTP keep-alive / echo", _ms(kept, 50)),
                       ("(info) p50 HTTP new connection / echo", _ms(fresh, 50)),
                       ("(info) p50 estimated from outside / echo", est50)]:
        figure(label, p50 / e50, "x", "", None)
    # The server runs on uvloop; the baseline the goal names is a bare websockets
    # echo, on asyncio's loop. For a like-for-like view, the same echo on uvloop:
    figure("(info) p50 server->worker->server / uv echo",
           _ms(inside, 50) / _ms(uv_base, 50), "x", "", None)
    figure("(info) p99 estimated from outside / echo", est99 / e99, "x", "", None)


def bench_big_output(server: ServerProcess, worker: ManagedProcess, worker_id: str,
                     workdir: Path, size: int, timeout: float) -> None:
    assert server.proc is not None
    print(f"b. a command writing {size / 1e6:,.0f} MB to stdout (output_cap {size:,}), "
          "streamed worker -> server")
    body = {"type": "run_command", "workdir": str(workdir), "timeout_s": timeout,
            "argv": ["bash", "-c", f"head -c {size} /dev/zero | tr '\\0' a"],
            "output_cap": size}
    url = f"/api/workers/{worker_id}/actions"
    outcome: dict[str, Any] = {}

    def request() -> None:
        try:
            r = server.http.post(url, json=body, params={"timeout": timeout},
                                 timeout=timeout + 30)
            outcome["status"], outcome["reply"] = r.status_code, r.json()
        except (httpx.HTTPError, ValueError) as err:
            outcome["error"] = f"{type(err).__name__}: {err}"

    offset = worker.log_offset()
    thread = threading.Thread(target=request, daemon=True)
    rejected = False
    with RssSampler(server.proc.pid, 0.05) as rss, RssSampler(worker.pid, 0.05) as worker_rss:
        t0 = time.perf_counter()
        thread.start()
        while thread.is_alive():
            thread.join(0.01)
            # A worker socket closed with 1009: the server refused a frame over its size cap
            # (the action's result). Streaming ended before that frame was sent.
            if "closed with code 1009" in worker.read_log()[offset:]:
                rejected = True
                break
        elapsed = time.perf_counter() - t0
    reply = outcome.get("reply") or {}
    if reply.get("ok"):
        result = reply["result"]
        kept = sum(len(p["data"]) for p in reply.get("progress", []))
        info("reply", f"exit code {result['exit_code']}, result stdout "
             f"{len(result['stdout']) / 1e6:,.1f} MB, progress repeated in the reply "
             f"{kept / 1e6:,.2f} MB")
        figure("throughput worker -> server (HTTP-inclusive)", size / 1e6 / elapsed,
               "MB/s", f">= {THROUGHPUT_GOAL_MBS:g}", size / 1e6 / elapsed >= THROUGHPUT_GOAL_MBS)
    elif rejected:
        info("the action did not finish", "the server closed the worker socket with 1009 "
             "(frame too large) when the result came: the worker reconnects and re-sends it")
        figure("throughput, up to that close (lower bound)", size / 1e6 / elapsed, "MB/s",
               f">= {THROUGHPUT_GOAL_MBS:g}", None)
    else:
        info("the action did not succeed",
             outcome.get("error") or f"HTTP {outcome.get('status')}: {str(reply)[:300]}")
    growth_mb = rss.growth_mib * 2**20 / 1e6
    figure("server RSS growth (peak - start)", growth_mb, "MB", f"<= {RSS_GOAL_MB:g}",
           growth_mb <= RSS_GOAL_MB)
    info("", f"server RSS start {rss.start_kib / 1024:.0f} MiB, peak "
         f"{rss.peak_kib / 1024:.0f} MiB (includes whatever run_action keeps of the progress)")
    info("worker RSS (for information)", f"start {worker_rss.start_kib / 1024:.0f} MiB, peak "
         f"{worker_rss.peak_kib / 1024:.0f} MiB")


class _RunPath:
    """``true`` through ``run_command`` in one event loop (the worker's: asyncio's, or uvloop
    with ``CODEY_EVENT_LOOP=uvloop``), kept across blocks; each run is timed inside the loop."""

    def __init__(self, workdir: Path, home: Path) -> None:
        self._runner = worker_runner()
        self._workdir = workdir
        self._policy = LocalPolicy(allowed_roots=[workdir])
        self._sandbox = Sandbox(detect(), home)  # warm boxes (the default)
        self._cold = Sandbox(detect(), home, warm=False)  # a bwrap per command
        spec = self._sandbox.spec(mode="workspace-write", network=False, workdir=workdir,
                                  cwd=workdir, tmp=self._sandbox.session_tmp("bench"))
        self.bwrap_true = self._sandbox.wrap(["true"], spec)
        self._n = 0

    async def _block(self, mode: Any, calls: int, cold: bool = False) -> list[float]:
        async def ignore(stream: str, text: str) -> None:
            pass

        times = []
        for _ in range(calls):
            self._n += 1
            action = RunCommand(action_id=f"b{self._n}", session_id="bench", argv=["true"],
                                workdir=str(self._workdir), sandbox=mode)
            t0 = time.perf_counter()
            result = await run_command(action, ignore, self._policy,
                                       sandbox=self._cold if cold else self._sandbox)
            times.append(time.perf_counter() - t0)
            if result.exit_code != 0:
                raise RuntimeError(f"true failed under {mode}: {result}")
        return times

    async def _spawn(self, argv: list[str], calls: int) -> list[float]:
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(*argv)
            if await proc.wait() != 0:
                raise RuntimeError(f"{argv[0]} failed")
            times.append(time.perf_counter() - t0)
        return times

    def block(self, mode: Any, calls: int, cold: bool = False) -> list[float]:
        return self._runner.run(self._block(mode, calls, cold))

    def spawn(self, argv: list[str], calls: int) -> list[float]:
        return self._runner.run(self._spawn(argv, calls))

    def close(self) -> None:
        self._runner.close()


def bench_sandbox(server: ServerProcess, worker_id: str, workdir: Path, home: Path,
                  calls: int) -> None:
    support = detect()
    print(f"c. the sandbox's overhead per command: `true`, {calls} runs per series "
          f"(sandbox: {support.describe()})")
    if not support.available:
        info("skipped", "no working sandbox on this machine")
        return
    path = _RunPath(workdir, home)
    names = ["bare spawn of true (asyncio)", "bwrap ... true (the sandbox alone)",
             "run path, full-access", "run path, workspace-write (warm box)",
             "run path, read-only", "run path, workspace-write, a bwrap each"]
    runs: list[tuple[str, Any]] = [
        (names[0], lambda n: path.spawn(["true"], n)),
        (names[1], lambda n: path.spawn(path.bwrap_true, n)),
        (names[2], lambda n: path.block("full-access", n)),
        (names[3], lambda n: path.block("workspace-write", n)),
        (names[4], lambda n: path.block("read-only", n)),
        (names[5], lambda n: path.block("workspace-write", n, cold=True)),
    ]
    series: dict[str, list[float]] = {name: [] for name in names}
    block = max(10, calls // 20)
    try:
        for _, run in runs:  # warm-up
            run(block)
        for i in range(0, calls, block):
            for name, run in runs:
                series[name] += run(min(block, calls - i))
    finally:
        path.close()
    for name in names:
        values = series[name]
        info(name, f"p50 {_ms(values, 50):7.2f} ms   p99 {_ms(values, 99):7.2f} ms")
    spawn, alone, bare, boxed, read_only, cold = (_ms(series[n], 50) for n in names)
    overhead = boxed - bare
    figure("p50 sandbox overhead (workspace-write - full)", overhead, "ms",
           f"<= {SANDBOX_GOAL_MS:g}", overhead <= SANDBOX_GOAL_MS)
    figure("(info) p50 read-only (a bwrap each) - full", read_only - bare, "ms", "", None)
    # a bwrap per command: how much of it is bwrap (the kernel's namespaces and mounts) and
    # how much the worker's own doing (the argv, the status pipe, waiting for it to be gone)
    figure("(info) p50 a bwrap each - full", cold - bare, "ms", "", None)
    figure("(info) of that, bwrap alone - bare spawn", alone - spawn, "ms", "", None)
    figure("(info) of that, the run path's own (issue 32: <= 3)", (cold - alone)
           - (bare - spawn), "ms", "", None)
    figure("(info) best case: min sandboxed - min full",
           min(series[names[3]]) * 1000 - min(series[names[2]]) * 1000, "ms", "", None)
    figure("(info) p50 workspace-write / full-access", boxed / bare, "x", "", None)
    figure("(info) p50 workspace-write / bare spawn", boxed / spawn, "x", "", None)

    # the same through the server and the worker process (a real session's path)
    url = f"/api/workers/{worker_id}/actions"

    def over_http(mode: str) -> Any:
        body = {"type": "run_command", "session_id": "bench", "workdir": str(workdir),
                "argv": ["true"], "sandbox": mode}

        def once() -> None:
            reply = server.http.post(url, json=body).json()
            if not reply.get("ok") or reply["result"]["exit_code"] != 0:
                raise RuntimeError(f"run_command {mode} failed: {str(reply)[:300]}")
        return once

    http_names = ["server->worker->server, full-access",
                  "server->worker->server, workspace-write"]
    http: dict[str, list[float]] = {name: [] for name in http_names}
    pairs = [(http_names[0], over_http("full-access")),
             (http_names[1], over_http("workspace-write"))]
    for _, once in pairs:
        _timed(once, block)
    for i in range(0, calls, block):
        for name, once in pairs:
            http[name] += _timed(once, min(block, calls - i))
    for name in http_names:
        info(name, f"p50 {_ms(http[name], 50):7.2f} ms   p99 {_ms(http[name], 99):7.2f} ms")
    figure("(info) p50 overhead through the worker process",
           _ms(http[http_names[1]], 50) - _ms(http[http_names[0]], 50), "ms", "", None)


class _FsyncedRecords(ActionRecords):
    """The records as they were before group commit: every commit flushed to the disk
    (``synchronous=FULL``) before ``mark_started`` or ``finish`` returns."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._db.execute("PRAGMA synchronous=FULL")


class _Steps:
    """``true`` as run_command actions through a dispatcher in one event loop (the worker's:
    asyncio's, or uvloop with ``CODEY_EVENT_LOOP=uvloop``), kept across blocks; each step
    timed from ``handle`` to its answer frame."""

    def __init__(self, root: Path, workdir: Path) -> None:
        self._runner = worker_runner()
        self._workdir = workdir
        self._done: dict[str, asyncio.Event] = {}
        home = root / "steps-home"
        sandbox = Sandbox(detect(), home)
        policy = LocalPolicy(allowed_roots=[workdir])
        spec = sandbox.spec(mode="workspace-write", network=False, workdir=workdir,
                            cwd=workdir, tmp=sandbox.session_tmp("steps"))
        self.bwrap_true = sandbox.wrap(["true"], spec) if sandbox.support.available else []

        async def send(frame: bytes) -> None:
            if b'"action_result"' in frame or b'"action_errored"' in frame:
                message = codec.decode_worker_to_server(frame)
                self._done[message.action_id].set()  # type: ignore[union-attr]

        def dispatcher(records: ActionRecords) -> ActionDispatcher:
            return ActionDispatcher(send, records, policy, home=home, sandbox=sandbox)

        self.grouped = self._runner.run(self._make(dispatcher, ActionRecords,
                                                   root / "steps.sqlite3"))
        self.fsynced = self._runner.run(self._make(dispatcher, _FsyncedRecords,
                                                   root / "steps-fsynced.sqlite3"))
        self._n = 0

    @staticmethod
    async def _make(make: Any, kind: Any, path: Path) -> ActionDispatcher:
        return make(kind(path))  # type: ignore[no-any-return]

    async def _block(self, d: ActionDispatcher, mode: Any, calls: int) -> list[float]:
        times = []
        for _ in range(calls):
            self._n += 1
            action_id = f"s{self._n}"
            self._done[action_id] = done = asyncio.Event()
            action = RunCommand(action_id=action_id, session_id="steps", argv=["true"],
                                workdir=str(self._workdir), sandbox=mode)
            t0 = time.perf_counter()
            await d.handle(action)
            await done.wait()
            times.append(time.perf_counter() - t0)
            del self._done[action_id]
        return times

    async def _spawn(self, argv: list[str], calls: int) -> list[float]:
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(*argv)
            if await proc.wait() != 0:
                raise RuntimeError(f"{argv[0]} failed")
            times.append(time.perf_counter() - t0)
        return times

    def block(self, d: ActionDispatcher, mode: Any, calls: int) -> list[float]:
        return self._runner.run(self._block(d, mode, calls))

    def spawn(self, argv: list[str], calls: int) -> list[float]:
        return self._runner.run(self._spawn(argv, calls))

    def close(self) -> None:
        for d in (self.grouped, self.fsynced):
            self._runner.run(d.shutdown())
            d.records.close()
        self._runner.close()


def bench_steps(root: Path, workdir: Path, calls: int) -> None:
    support = detect()
    print(f"d. a command step through the worker's dispatcher, `true`, {calls} per series "
          f"(sandbox: {support.describe()})")
    steps = _Steps(root, workdir)
    names = ["bare spawn of true", "step, full-access", "step, full-access, records fsynced",
             "bwrap ... true alone", "step, workspace-write"]
    runs: list[tuple[str, Any]] = [
        (names[0], lambda n: steps.spawn(["true"], n)),
        (names[1], lambda n: steps.block(steps.grouped, "full-access", n)),
        (names[2], lambda n: steps.block(steps.fsynced, "full-access", n)),
    ]
    if support.available:
        runs += [(names[3], lambda n: steps.spawn(steps.bwrap_true, n)),
                 (names[4], lambda n: steps.block(steps.grouped, "workspace-write", n))]
    series: dict[str, list[float]] = {name: [] for name, _ in runs}
    block = max(10, calls // 20)
    try:
        for _, run in runs:  # warm-up
            run(block)
        for i in range(0, calls, block):
            for name, run in runs:
                series[name] += run(min(block, calls - i))
    finally:
        steps.close()
    for name, values in series.items():
        info(name, f"p50 {_ms(values, 50):7.2f} ms   p99 {_ms(values, 99):7.2f} ms")
    bare, step, fsynced = (_ms(series[n], 50) for n in names[:3])
    figure("p50 step - bare spawn, full-access", step - bare, "ms", f"<= {STEP_GOAL_MS:g}",
           step - bare <= STEP_GOAL_MS)
    if support.available:
        alone, boxed = _ms(series[names[3]], 50), _ms(series[names[4]], 50)
        figure("p50 step - bwrap alone, workspace-write", boxed - alone, "ms",
               f"<= {STEP_GOAL_MS:g}", boxed - alone <= STEP_GOAL_MS)
    figure("(info) p50 the same with fsynced records", fsynced - bare, "ms", "", None)
    figure("(info) p50 the records' flushes, per step", fsynced - step, "ms", "", None)


def make_repository(root: Path, files: int = 50_000, ignored: int = 5_000) -> None:
    """``files`` small source files in folders of 200 (a few dozen name ``frobnicate_N``),
    and ``ignored`` more under a .gitignored ``build/``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / ".gitignore").write_text("/build/\n*.pyc\n")
    body = "".join(f"    value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, 25))
    for i in range(files):
        folder = root / "src" / f"pkg{i // 200:03d}"
        if i % 200 == 0:
            folder.mkdir(parents=True)
        extra = f"    frobnicate_{i}(value_24)\n" if i % 1000 == 7 else ""
        (folder / f"mod{i % 200:03d}.py").write_text(
            f"import os\n\n\ndef function_{i}(value_0):\n{body}{extra}    return value_24\n")
    for i in range(ignored):
        folder = root / "build" / f"out{i // 500}"
        if i % 500 == 0:
            folder.mkdir(parents=True)
        (folder / f"gen{i}.py").write_text("frobnicate_generated()\n")


def bench_grep(server: ServerProcess, worker_id: str, workdir: Path, calls: int) -> None:
    rg = find_rg()
    repo = workdir / "big"
    t0 = time.perf_counter()
    make_repository(repo)
    print(f"e. grep over 50,000 files (made in {time.perf_counter() - t0:.1f} s), "
          f"{calls} per series (rg: {rg or 'none: the pure-Python fallback'})")
    if rg is None:
        info("skipped", "no rg to compare with")
        return
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    policy = LocalPolicy(allowed_roots=[workdir])

    def ours(pattern: str) -> Any:
        async def once(n: int) -> list[float]:
            times = []
            for _ in range(n):
                action = Grep(action_id="g", session_id="bench", workdir=str(repo),
                              pattern=pattern)
                t0 = time.perf_counter()
                result = await grep(action, policy)
                times.append(time.perf_counter() - t0)
                if not result.files:
                    raise RuntimeError(f"grep found nothing for {pattern}")
            return times
        return lambda n: runner.run(once(n))

    def direct(pattern: str) -> Any:
        async def once(n: int) -> list[float]:
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                proc = await asyncio.create_subprocess_exec(
                    rg, "--line-number", "--regexp", pattern, cwd=repo,
                    stdout=asyncio.subprocess.PIPE)
                out, _ = await proc.communicate()
                times.append(time.perf_counter() - t0)
                if proc.returncode != 0 or not out:
                    raise RuntimeError(f"rg found nothing for {pattern}")
            return times
        return lambda n: runner.run(once(n))

    rare, common = r"frobnicate_\d+", r"^import os"
    names = ["rg directly, a rare pattern", "grep executor, a rare pattern",
             "rg directly, in every file", "grep executor, in every file (200 kept)"]
    runs = [(names[0], direct(rare)), (names[1], ours(rare)),
            (names[2], direct(common)), (names[3], ours(common))]
    series: dict[str, list[float]] = {name: [] for name in names}
    block = max(2, calls // 5)
    try:
        for _, run in runs:
            run(1)
        for i in range(0, calls, block):
            for name, run in runs:
                series[name] += run(min(block, calls - i))
    finally:
        runner.close()
    for name in names:
        info(name, f"p50 {_ms(series[name], 50):8.1f} ms   p99 {_ms(series[name], 99):8.1f} ms")
    ratio = _ms(series[names[1]], 50) / _ms(series[names[0]], 50)
    figure("p50 grep / rg, a rare pattern", ratio, "x", f"<= {GREP_GOAL_X:g}",
           ratio <= GREP_GOAL_X)
    figure("(info) p50 grep / rg, in every file", _ms(series[names[3]], 50)
           / _ms(series[names[2]], 50), "x", "", None)
    url = f"/api/workers/{worker_id}/actions"
    body = {"type": "grep", "session_id": "bench", "workdir": str(repo), "pattern": rare}
    through: list[float] = []
    for _ in range(max(3, calls // 2)):
        r = server.http.post(url, json=body, params={"timeout": 120}, timeout=150)
        if not r.json().get("ok"):
            raise RuntimeError(f"grep through the worker failed: {r.text[:300]}")
        through.append(float(r.headers["server-timing"].split("dur=")[1]) / 1000)
    info("(info) server->worker->server grep, rare", f"p50 {_ms(through, 50):8.1f} ms")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


FLOOR = ("import asyncio, msgspec, codey_protocol.codec, codey_protocol.worker, "
         "websockets.asyncio.client\nimport sys\nsys.stdout.write('ready\\n')\n"
         "sys.stdout.flush()\nsys.stdin.read()")


def _idle_kib(pid: int) -> int:
    time.sleep(2)  # settled: connected, hello sent, nothing asked
    samples = []
    for _ in range(5):
        samples.append(_rss_kib(pid))
        time.sleep(0.2)
    return max(samples)


def _floor_kib(env: dict[str, str] | None = None) -> int:
    import subprocess

    floor = subprocess.Popen([sys.executable, "-c", FLOOR], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, **(env or {})})
    try:
        assert floor.stdout is not None and floor.stdout.readline() == "ready\n"
        return _rss_kib(floor.pid)
    finally:
        floor.communicate("")


def _print_idle(label: str, worker_kib: int, floor_kib: int) -> None:
    worker_mb = worker_kib * 1024 / 1e6
    figure(label, worker_mb, "MB", f"<= {IDLE_RSS_GOAL_MB:g}", worker_mb <= IDLE_RSS_GOAL_MB)
    info("  the same in MiB, and the floor", f"{worker_kib / 1024:.1f} MiB; floor "
         f"{floor_kib / 1024:.1f} MiB ({floor_kib * 1024 / 1e6:.1f} MB)")


def bench_idle_rss(worker: ManagedProcess) -> None:
    print("f. an idle, connected worker's memory (VmRSS, before any action)")
    print("   floor: asyncio (with ssl), msgspec, the protocol, the websockets client")
    _print_idle("just paired, as this environment runs it", _idle_kib(worker.pid), _floor_kib())


def bench_idle_rss_installed(root: Path) -> None:
    """The usual case: an installed worker (its modules' bytecode cached, as pip's install or
    the first run leaves it) started again, already paired. ``PYTHONDONTWRITEBYTECODE``, which
    some environments set, is cleared for it and the floor; the cache is this run's own."""
    env = {"PYTHONPYCACHEPREFIX": str(root / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}
    with start_server_and_worker(root, worker_env=env) as (_server, worker, _id, _work):
        argv = list(worker.argv)
        worker.stop()
        for _ in range(2):  # the first start writes the cache, the second runs from it
            with ManagedProcess("worker-again", log_dir=root / "logs") as again:
                again.start(argv, env={"CODEY_HOME": str(root / "home"), **env})
                again.wait_for_line(r"^connected to ", timeout=30)
                kib = _idle_kib(again.pid)
        _floor_kib(env)  # fills the floor's cache
        _print_idle("restarted, bytecode cached (as installed)", kib, _floor_kib(env))


def _old_context_git(repo: Path) -> Any:
    """The context load's ``git status`` as the worker ran it before the one runner (issue
    32): in its own environment, no hardening, no sandbox."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}

    async def run() -> None:
        proc = await asyncio.create_subprocess_exec(
            "git", "status", "--porcelain=v1", "--branch", "--untracked-files=normal",
            cwd=repo, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env=env)
        await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError("git status failed")
    return run


def bench_context_git(root: Path, calls: int) -> None:
    """g. The context load's git (each turn's start): today's runner (hardened, pinned to
    the checked repository, inside the sandbox) against the plain ``git status`` the worker
    ran before, and the runner without a sandbox; interleaved blocks, one event loop."""
    support = detect()
    print(f"g. the context load's git status, {calls} runs per series "
          f"(sandbox: {support.describe()})")
    repo = root / "context-repo"
    repo.mkdir()
    for i in range(200):
        (repo / f"f{i:03}.py").write_text(f"x = {i}\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    for argv in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "x"]):
        subprocess.run(argv, cwd=repo, check=True, env=env, capture_output=True)
    (repo / "f000.py").write_text("dirty\n")
    home = root / "context-home"
    sandboxed = GitRunner(Sandbox(support, home))
    bare = GitRunner(None)
    runner = worker_runner()

    def status(git: GitRunner) -> Any:
        async def run() -> None:
            branch, dirty = await git.status(repo)
            if branch is None or not dirty:
                raise RuntimeError("git status through the runner failed")
        return run

    names = ["before: plain git status (no sandbox)", "the runner without a sandbox",
             "the runner in the sandbox (today)"]
    runs = [(names[0], _old_context_git(repo)), (names[1], status(bare)),
            (names[2], status(sandboxed))]

    async def block(fn: Any, n: int) -> list[float]:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await fn()
            times.append(time.perf_counter() - t0)
        return times

    series: dict[str, list[float]] = {name: [] for name in names}
    size = max(5, calls // 20)
    try:
        for _, fn in runs:  # warm-up
            runner.run(block(fn, size))
        for i in range(0, calls, size):
            for name, fn in runs:
                series[name] += runner.run(block(fn, min(size, calls - i)))
    finally:
        runner.close()
    for name in names:
        info(name, f"p50 {_ms(series[name], 50):7.2f} ms   p99 {_ms(series[name], 99):7.2f} ms")
    cost = _ms(series[names[2]], 50) - _ms(series[names[0]], 50)
    figure("p50 context git, today - before", cost, "ms", f"<= {CONTEXT_GIT_GOAL_MS:g}",
           cost <= CONTEXT_GIT_GOAL_MS)
    figure("(info) of it, the sandbox", _ms(series[names[2]], 50) - _ms(series[names[1]], 50),
           "ms", "", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="read_file calls (default 300)")
    parser.add_argument("--bytes", type=int, default=100_000_000,
                        help="output of the big command (default 100000000)")
    parser.add_argument("--quick", action="store_true", help="10x smaller, for a smoke run")
    parser.add_argument("--timeout", type=float, default=120.0, help="for the big command")
    parser.add_argument("--grep-calls", type=int, default=20,
                        help="grep runs per series (default 20)")
    parser.add_argument("--only", choices=["a", "b", "c", "d", "e", "f", "g"], action="append",
                        help="run only these parts (repeatable)")
    args = parser.parse_args()
    calls = args.calls // 10 if args.quick else args.calls
    size = args.bytes // 10 if args.quick else args.bytes
    parts = args.only or ["a", "b", "c", "d", "e", "f", "g"]
    grep_calls = max(2, args.grep_calls // 4) if args.quick else args.grep_calls
    with tempfile.TemporaryDirectory(prefix="codey-bench-") as tmp:
        root = Path(tmp)
        with start_server_and_worker(root) as (server, worker, worker_id, work):
            workdir = work / "proj"
            workdir.mkdir()
            if "f" in parts:  # first: before any action has grown it
                bench_idle_rss(worker)
                bench_idle_rss_installed(root / "installed")
            if "a" in parts:
                bench_round_trip(server, worker_id, workdir, root / "logs", calls)
            if "b" in parts:
                bench_big_output(server, worker, worker_id, workdir, size, args.timeout)
            if "c" in parts:
                bench_sandbox(server, worker_id, workdir, root / "bench-codey-home", calls)
            if "d" in parts:
                bench_steps(root, workdir, calls)
            if "e" in parts:
                bench_grep(server, worker_id, work, grep_calls)
            if "g" in parts:
                bench_context_git(root, calls)


if __name__ == "__main__":
    main()
