"""Benchmark the event log end to end: append rate, browser catch-up, cold start.

    uv run python scripts/bench/eventlog.py            # 100k appends/catch-up, 1M cold start
    uv run python scripts/bench/eventlog.py --quick    # 10x smaller: a smoke run

Every figure is printed next to its goal and against a baseline measured in the same run:

a. durable append rate of :class:`SqliteEventLog` (one event per append, 100 concurrent tasks)
   over raw ``sqlite3`` batched inserts with the same pragmas (``eventlog_append.py``'s
   measurement); goal >= 0.5. Printed too: the same appends each carrying the position it
   was decided on (``expected``, as the engine's appends do), and that rate over raw.
b. catch-up: a log of N realistic events is written BEFORE the server starts; a ``websockets``
   client subscribes with ``after_seq=1`` and is timed from sending ``subscribe`` until the
   frame holding seq N is received and ``json.loads``-parsed; goal <= 1 s for 100k. Baseline:
   the very same frames (recorded from the server) sent by a bare ``websockets`` server in its
   own process to the same client code.
c. cold start with 10N events (1M) in the log: the first start replays them all and writes a
   snapshot (printed), SIGTERM (snapshots again if needed), then a second start is timed from
   process launch until ``GET /api/health`` answers 200; goal <= 0.5 s. Baseline: the time of
   ``python -c "import codey_server.app"`` (the import floor). The server runs with a bytecode
   cache of its own (``PYTHONPYCACHEPREFIX`` in the temp dir), which its first start writes, as
   any installed server's first start (or its installer) does; when this environment forbids
   bytecode files (``PYTHONDONTWRITEBYTECODE``), every start compiles every module it imports,
   and the second start and the floor are printed that way too, for information. The same
   second start with a model provider configured is printed below it, interleaved: its SDK
   then starts loading in a thread as the start ends (issue 34), which must not delay the
   first answer.

All data lives in a temp dir that is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import eventlog_append
import httpx
from _common import baseline_peer, figure, fill_log, fill_log_fast, info, median, write_frames
from websockets.asyncio.client import connect

from codey_testkit.procs import ManagedProcess, free_port
from codey_testkit.stack import ServerProcess

APPEND_GOAL = 0.5
CATCHUP_GOAL_S = 1.0
COLD_START_GOAL_S = 0.5


# ---------------------------------------------------------------------------------------------
# a. append rate


def bench_append(root: Path, events: int, tasks: int) -> None:
    print(f"a. durable append rate ({events:,} events, one per append, {tasks} tasks)")
    log_s, commits, _, _ = asyncio.run(eventlog_append.bench_log(root / "a-log.db", events,
                                                                 tasks))
    raw_s = eventlog_append.bench_raw(root / "a-raw.db", events, tasks)
    info("SqliteEventLog.append", f"{events / log_s:,.0f} ev/s ({commits:,} commits)")
    info("baseline: raw sqlite3 executemany", f"{events / raw_s:,.0f} ev/s "
         f"(transactions of {tasks})")
    figure("ratio eventlog / raw", raw_s / log_s, "x", f">= {APPEND_GOAL}",
           raw_s / log_s >= APPEND_GOAL)
    checked_s, commits, _, _ = asyncio.run(eventlog_append.bench_log(
        root / "a-checked.db", events, tasks, expected=True))
    info("  … each append with its expected position", f"{events / checked_s:,.0f} ev/s "
         f"({commits:,} commits)")
    figure("  ratio eventlog (expected) / raw", raw_s / checked_s, "x", f">= {APPEND_GOAL}",
           raw_s / checked_s >= APPEND_GOAL)


# ---------------------------------------------------------------------------------------------
# b. catch-up


async def _catch_up(url: str, headers: dict[str, str], after_seq: int,
                    last_seq: int) -> tuple[float, list[bytes], int, str | None]:
    """Subscribe and read until ``last_seq``; return (seconds, raw frames, events, extensions)."""
    frames: list[bytes] = []
    received = 0
    async with connect(url, additional_headers=headers, max_size=None,
                       open_timeout=20) as ws:
        ext = ws.response.headers.get("Sec-WebSocket-Extensions") if ws.response else None
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "subscribe", "after_seq": after_seq}))
        while True:
            raw = await ws.recv()
            msg = json.loads(raw)
            frames.append(raw.encode() if isinstance(raw, str) else raw)
            if msg["type"] == "snapshot":
                raise RuntimeError("got a snapshot: this is not a catch-up")
            if msg["type"] == "events":
                received += len(msg["events"])
                if msg["events"][-1]["seq"] >= last_seq:
                    break
        elapsed = time.perf_counter() - t0
    return elapsed, frames, received, ext


def bench_catch_up(root: Path, events: int, rounds: int) -> None:
    print(f"b. catch-up of {events - 1:,} missed events to a websockets client "
          f"(after_seq=1, median of {rounds})")
    data = root / "b-server"
    data.mkdir()
    t0 = time.perf_counter()
    asyncio.run(fill_log(data / "events.db", events))
    info("(setup) log filled via SqliteEventLog", f"{time.perf_counter() - t0:.1f} s")
    times: list[float] = []
    frames: list[bytes] = []
    with ServerProcess(data, log_dir=root / "logs") as server:
        headers = server.cookie_header()
        for _ in range(rounds):
            elapsed, frames, received, ext = asyncio.run(
                _catch_up(server.ws_url, headers, 1, events))
            times.append(elapsed)
    mib = sum(len(f) for f in frames) / 2**20
    info("frames / bytes / events",
         f"{len(frames)} frames, {mib:.1f} MiB of JSON, {received:,} events"
         f" (extensions: {ext or 'none'})")
    frames_file = root / "b-frames.bin"
    write_frames(frames_file, frames)
    base: list[float] = []
    with baseline_peer("send", root / "logs", str(frames_file)) as url:
        for _ in range(rounds):
            base.append(asyncio.run(_catch_up(url, {}, 1, events))[0])
    server_s, base_s = median(times), median(base)
    goal = CATCHUP_GOAL_S * events / 100_000  # the goal is 1 s per 100k events
    figure("catch-up via codey-server", server_s, "s", f"<= {goal:g}", server_s <= goal)
    figure("baseline: same frames, bare websockets", base_s, "s", "", None)
    figure("ratio server / baseline", server_s / base_s, "x", "", None)


# ---------------------------------------------------------------------------------------------
# c. cold start


def _python_envs(root: Path) -> dict[str, dict[str, str]]:
    """How the server's Python runs: ``cached``, with a bytecode cache of its own (written by
    the first start, read by the next ones); ``inherited``, exactly as this environment runs
    Python (with ``PYTHONDONTWRITEBYTECODE`` set, nothing is cached: every start compiles)."""
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    return {"cached": cached, "inherited": dict(os.environ)}


def _time_import(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import codey_server.app"], check=True, env=env)
    return time.perf_counter() - t0


def _start_until_healthy(data: Path, logs: Path, name: str, env: dict[str, str],
                         timeout: float = 120.0,
                         config: Path | None = None) -> tuple[float, ManagedProcess]:
    """Launch a server on a known free port; seconds from launch to the first 200 on health.
    ``config``: a config file to start it with."""
    port = free_port()
    proc = ManagedProcess(name, log_dir=logs)
    url = f"http://127.0.0.1:{port}/api/health"
    extra = ["--config", str(config)] if config is not None else []
    with httpx.Client(timeout=2.0) as client:
        t0 = time.perf_counter()
        proc.start([sys.executable, "-m", "codey_server.cli", "serve", "--port", str(port),
                    "--data-dir", str(data), *extra], env=env, inherit_env=False)
        while True:
            try:
                if client.get(url).status_code == 200:
                    return time.perf_counter() - t0, proc
            except httpx.TransportError:
                pass
            if not proc.running:
                raise RuntimeError(f"server exited:\n{proc.log_tail()}")
            if time.perf_counter() - t0 > timeout:
                proc.stop()
                raise RuntimeError(f"server not healthy in {timeout} s:\n{proc.log_tail()}")
            time.sleep(0.005)


def _replay_line(proc: ManagedProcess) -> str:
    found = re.findall(r"state at seq .*", proc.read_log())
    return found[-1] if found else "(no replay line in the log)"


def bench_cold_start(root: Path, events: int, rounds: int) -> None:
    print(f"c. cold start with {events:,} events in the log (median of {rounds})")
    data, logs = root / "c-server", root / "logs"
    data.mkdir()
    envs = _python_envs(root)
    # both ways only when they differ: this environment forbids bytecode files
    modes = ["cached", "inherited"] if os.environ.get("PYTHONDONTWRITEBYTECODE") else ["cached"]
    t0 = time.perf_counter()
    fill_log_fast(data / "events.db", events)
    info("(setup) log written with sqlite3", f"{time.perf_counter() - t0:.1f} s, "
         f"{(data / 'events.db').stat().st_size / 2**20:.0f} MiB")
    first_s, proc = _start_until_healthy(data, logs, "cold-first", envs["cached"], timeout=600)
    replay = _replay_line(proc)
    t0 = time.perf_counter()
    proc.stop(timeout=120)
    stop_s = time.perf_counter() - t0
    info("first start (full replay + snapshot)", f"{first_s:.2f} s to healthy; {replay}")
    info("stop (SIGTERM, final snapshot)", f"{stop_s:.2f} s")
    with sqlite3.connect(data / "events.db") as conn:
        snaps = conn.execute("SELECT seq, length(data) FROM snapshots ORDER BY seq").fetchall()
    info("snapshots stored (seq: bytes)",
         ", ".join(f"{seq:,}: {size / 2**20:.1f} MiB" for seq, size in snaps) or "none")
    # a provider nobody answers for: no call is made, its SDK only loads
    provider = root / "c-provider.json"
    provider.write_text(json.dumps({"providers": [{
        "name": "p", "kind": "responses", "base_url": "http://127.0.0.1:9/v1",
        "models": ["m"]}]}))
    starts: dict[str, list[float]] = {mode: [] for mode in modes}
    floors: dict[str, list[float]] = {mode: [] for mode in modes}
    with_sdk: dict[str, list[float]] = {mode: [] for mode in modes}
    for i in range(rounds):  # the ways interleaved, so that load on the machine hits them alike
        for mode in modes:
            elapsed, proc = _start_until_healthy(data, logs, f"cold-{mode}-{i}", envs[mode])
            replay = _replay_line(proc)
            proc.stop(timeout=60)
            starts[mode].append(elapsed)
            floors[mode].append(_time_import(envs[mode]))
            elapsed, proc = _start_until_healthy(data, logs, f"cold-{mode}-p-{i}", envs[mode],
                                                 config=provider)
            proc.stop(timeout=60)
            with_sdk[mode].append(elapsed)
    info("server's own account of the last start", replay)
    start_s, floor = median(starts["cached"]), median(floors["cached"])
    figure("second start: launch -> health 200", start_s, "s", f"<= {COLD_START_GOAL_S}",
           start_s <= COLD_START_GOAL_S)
    figure("baseline: python -c 'import codey_server.app'", floor, "s", "", None)
    figure("ratio start / import floor", start_s / floor, "x", "", None)
    with_s = median(with_sdk["cached"])
    figure("  … a provider configured (its SDK loads)", with_s, "s",
           f"<= {COLD_START_GOAL_S}", with_s <= COLD_START_GOAL_S)
    if "inherited" in starts:
        info("with PYTHONDONTWRITEBYTECODE, as set here", "every start compiles what it imports")
        figure("  second start, no bytecode cache", median(starts["inherited"]), "s", "", None)
        figure("  … a provider configured", median(with_sdk["inherited"]), "s", "", None)
        figure("  import floor, no bytecode cache", median(floors["inherited"]), "s", "", None)


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000,
                        help="events for (a) and (b); (c) uses 10x as many (default 100000)")
    parser.add_argument("--quick", action="store_true", help="10x smaller, for a smoke run")
    parser.add_argument("--rounds", type=int, default=3, help="repeats for (b) and (c)")
    parser.add_argument("--only", choices=["a", "b", "c"], action="append",
                        help="run only these parts (repeatable)")
    parser.add_argument("--dir", default=None, help="parent of the temp dir")
    args = parser.parse_args()
    n = args.events // 10 if args.quick else args.events
    parts = args.only or ["a", "b", "c"]
    with tempfile.TemporaryDirectory(prefix="codey-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        (root / "logs").mkdir()
        if "a" in parts:
            bench_append(root, n, 100)
        if "b" in parts:
            bench_catch_up(root, n, args.rounds)
        if "c" in parts:
            bench_cold_start(root, 10 * n, args.rounds)


if __name__ == "__main__":
    main()
