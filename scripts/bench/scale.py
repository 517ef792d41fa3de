"""One server under many sessions (issue 12): S sessions of N tool calls on W workers.

    uv run python scripts/bench/scale.py                 # W=50; S=100, then S=500; N=10
    uv run python scripts/bench/scale.py --quick         # W=5, S=20, N=5: a smoke run
    uv run python scripts/bench/scale.py --profile DIR   # py-spy of the server per phase
    uv run python scripts/bench/scale.py --sandbox --workers 10 --sessions 100   # issue 34

Real processes on loopback only: codey-server (SQLite log), W paired codey-workers and the
scripted model, whose every call answers at once with a cheap command (``true`` as argv)
until the session has made N calls, then with a short answer. All S sessions are created at
once, in full-auto. Per phase it prints:

- wall time, tool steps per second, the server's CPU per tool step (from /proc, goal ≤ 5 ms);
- the action round trip p50/p99 from the log (``action_requested`` → ``action_finished``
  commit times; goal p99 ≤ 100 ms at S=100), and as a ratio to the baseline measured in the
  same run: spawning ``true`` and waiting for it from this process (the floor of an action);
- the server's peak RSS (goal ≤ 1 GB at S=500) and every worker's RSS;
- whether every session finished, with exactly N calls.

Before the sessions start it prints an idle worker's RSS (goal ≤ 40 MB): the mean over the
W workers, connected and waiting.

With ``--postgres`` it first measures what fencing (issue 23) costs the log: the append rate
of 50 concurrent appenders, one event per append as a turn's steps, each appender with the
fence of its own session lease, next to the same without fences — interleaved blocks on a
database of their own, before the server starts — and prints both and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import io
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import figure, info, median, percentile

from codey_protocol import codec
from codey_protocol import events as ev
from codey_testkit.model_handle import start_model_server
from codey_testkit.postgres import PostgresCluster
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess

TICK = 100.0  # os.sysconf("SC_CLK_TCK") on Linux


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_cpu_seconds() -> float:
    """CPU time spent on the whole machine (every process, the kernel's work included)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: all but idle and iowait
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK


def tree_cpu_seconds(pid: int) -> float:
    """A process's CPU and its reaped children's (cutime, cstime): a worker's own work and
    that of the commands and sandboxes it started and waited for."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICK


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def script(calls: int) -> dict[str, Any]:
    true = {"calls": [{"name": "shell", "arguments": {"command": ["true"]}}]}
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "scale"}, "reply": true},
        {"match": {"tool": "shell", "results_below": calls}, "reply": true},
        {"match": {"tool": "shell"}, "reply": {"text": "done"}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]}


def spawn_baseline(n: int = 200) -> list[float]:
    """Seconds to spawn ``true`` and reap it, from an asyncio loop (as the worker does)."""
    async def run() -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec("true")
            await proc.wait()
            out.append(time.perf_counter() - t0)
        return out

    return asyncio.run(run())


def round_trips(db: Path, after_seq: int, dsn: str | None = None) -> list[float]:
    """Seconds from each action's ``action_requested`` to its ``action_finished``, read from
    the SQLite file ``db`` or, with ``dsn``, from PostgreSQL."""
    if dsn:
        import psycopg

        with psycopg.connect(dsn) as pg:
            rows = pg.execute(
                "SELECT envelope FROM codey_events WHERE seq > %s AND type IN "
                "('action_requested', 'action_finished') ORDER BY seq", (after_seq,)).fetchall()
    else:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = conn.execute(
                "SELECT envelope FROM events WHERE seq > ? AND type IN "
                "('action_requested', 'action_finished') ORDER BY seq", (after_seq,)).fetchall()
        finally:
            conn.close()
    started: dict[str, float] = {}
    out = []
    for (raw,) in rows:
        env = codec.decode_envelope(bytes(raw))
        e = env.event
        if isinstance(e, ev.ActionRequested):
            started.setdefault(e.action_id, env.ts)
        elif isinstance(e, ev.ActionFinished) and e.action_id in started:
            out.append(env.ts - started.pop(e.action_id))
    return out


def fencing_rates(dsn: str, *, tasks: int = 50, per_block: int = 100,
                  blocks: int = 16) -> tuple[list[float], list[float]]:
    """Events per second (fenced, unfenced), one figure per block: ``tasks`` appenders each
    appending ``per_block`` one-event groups to :class:`PostgresEventLog`, each with the
    fence of its own ``session:`` lease (held through :class:`Leases`) or with none. The
    blocks alternate (ABBA), so drift hits both alike."""
    from codey_server.cluster.replicas import Cluster, Leases
    from codey_server.eventlog.postgres import PostgresEventLog

    async def run() -> tuple[list[float], list[float]]:
        cluster = Cluster(dsn, "bench")
        await cluster.open()
        log = PostgresEventLog(dsn, name="bench")
        await log.open()
        leases = Leases(cluster)
        fences = []
        for t in range(tasks):
            assert await leases.acquire(f"session:bench-{t}")
            fences.append(leases.fence(f"session:bench-{t}"))
        fenced: list[float] = []
        plain: list[float] = []
        try:
            for block in range(blocks):
                with_fence = block % 4 in (1, 2)

                async def appender(t: int, with_fence: bool = with_fence) -> None:
                    fence = fences[t] if with_fence else None
                    for i in range(per_block):
                        await log.append([(f"bench-{t}", ev.SessionItemUpdated(
                            item_id=f"itm-{t}", output_delta=f"line {i} of output\n"))],
                            fence=fence)

                t0 = time.perf_counter()
                await asyncio.gather(*(appender(t) for t in range(tasks)))
                rate = tasks * per_block / (time.perf_counter() - t0)
                (fenced if with_fence else plain).append(rate)
        finally:
            await log.close()
            await cluster.close()
        return fenced, plain

    return asyncio.run(run())


def phase(server: ServerProcess, workers: list[WorkerProcess], sessions: int, calls: int,
          dsn: str | None, root: Path, profile: Path | None,
          sandbox: str = "workspace-write") -> dict[str, float]:
    """One phase; prints its figures and returns the ones ``--sandbox`` compares."""
    print(f"S={sessions} sessions × N={calls} calls on W={len(workers)} workers "
          f"(sandbox: {sandbox})", flush=True)
    assert server.proc is not None
    pid = server.proc.pid
    seq0 = int(server.http.get("/api/health").json()["seq"])
    spy = None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        spy = subprocess.Popen(["py-spy", "record", "-p", str(pid), "-r", "200", "-f", "raw",
                                "-o", str(profile / f"server-S{sessions}.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workdirs = []
    for w in workers:
        wd = Path(w.workdir(f"scale-{sessions}-{seq0}"))
        wd.mkdir(parents=True, exist_ok=True)
        workdirs.append((w.worker_id, str(wd)))
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    machine0 = machine_cpu_seconds()
    workers0 = sum(tree_cpu_seconds(w.proc.pid) for w in workers if w.proc is not None)

    def create(n: int) -> str:
        worker_id, wd = workdirs[n % len(workdirs)]
        r = server.http.post("/api/sessions", json={
            "worker_id": worker_id, "workdir": wd, "prompt": "scale", "policy": "full-auto",
            "sandbox": sandbox})
        assert r.status_code == 201, r.text
        return str(r.json()["session_id"])

    # httpx.Client is thread-safe; a few threads so creating is not the bottleneck
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        sids = set(pool.map(create, range(sessions)))
    deadline = time.monotonic() + max(600.0, sessions * calls * 0.2)
    finished: dict[str, dict[str, Any]] = {}
    while len(finished) < len(sids) and time.monotonic() < deadline:
        # polling costs the server too: rarely (one list for all), but often enough that the
        # wall time of a short phase is not mostly the poll's
        time.sleep(min(1.0, max(0.1, sessions / 200)))
        for s in server.http.get("/api/sessions").json():
            if s["session_id"] in sids and s["status"] in ("idle", "error") and s["items"] > 1:
                finished[s["session_id"]] = s
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    machine = machine_cpu_seconds() - machine0
    workers_cpu = sum(tree_cpu_seconds(w.proc.pid) for w in workers
                      if w.proc is not None) - workers0
    if spy is not None:
        spy.send_signal(2)
        spy.wait()
    peak = rss_mb(pid, "VmHWM")
    steps = sessions * calls
    # every session: idle with exactly N tool calls (its items: prompt, N calls, the answer)
    complete = [s for s in finished.values() if s["status"] == "idle"]
    exact = 0
    for sid in list(sids)[:50]:  # the full items of a sample (the list has only counts)
        items = server.http.get(f"/api/sessions/{sid}").json()["items"]
        exact += sum(1 for i in items if i["kind"] == "tool_call") == calls
    trips = round_trips(server.data_dir / "events.db", seq0, dsn)
    base = spawn_baseline()
    out = {"steps_s": steps / wall, "p50": median(trips) * 1000 if trips else 0.0,
           "p99": percentile(trips, 99) * 1000 if trips else 0.0, "wall": wall,
           "cpu_ms": cpu / steps * 1000, "machine_ms": machine / steps * 1000,
           "workers_ms": workers_cpu / steps * 1000}
    figure("sessions finished", len(complete), f"/{sessions}", "all", len(complete) == sessions)
    info("sample with exactly N calls", f"{exact}/{min(50, sessions)}")
    figure("wall time", wall, "s", "", None)
    figure("tool steps per second", steps / wall, "/s", "", None)
    cpu_ms = cpu / steps * 1000
    figure("server CPU per tool step", cpu_ms, "ms", "≤ 5 ms", round(cpu_ms, 3) <= 5)
    # where the rest goes: the workers with their commands and sandboxes (those reaped), and
    # the machine as a whole (the scripted model, bwrap's namespaces, the kernel)
    figure("workers' CPU per step, with what they ran", out["workers_ms"], "ms", "", None)
    figure("the machine's CPU per step", out["machine_ms"], "ms", "", None)
    if trips:
        p50, p99 = median(trips) * 1000, percentile(trips, 99) * 1000
        figure("action round trip p50", p50, "ms", "", None)
        figure("action round trip p99", p99, "ms", "≤ 100 ms" if sessions <= 100 else "",
               p99 <= 100 if sessions <= 100 else None)
        figure("baseline: spawn and reap `true`, p50", median(base) * 1000, "ms", "", None)
        figure("round trip p50 / baseline", p50 / (median(base) * 1000), "x", "", None)
    figure("server peak RSS", peak, "MB", "≤ 1024 MB" if sessions >= 500 else "",
           peak <= 1024 if sessions >= 500 else None)
    rss = [rss_mb(w.proc.pid) for w in workers if w.proc is not None]
    figure("worker RSS, mean (max)", sum(rss) / len(rss), "MB", f"(max {max(rss):.0f})", None)
    return out


def compare(boxed: list[dict[str, float]], bare: list[dict[str, float]]) -> None:
    """``--sandbox``: the sandbox's runs beside full-access's (each the median of its
    rounds, which alternated), and the issue-34 goals."""
    def med(runs: list[dict[str, float]], key: str) -> float:
        return median([r[key] for r in runs])

    print("the sandbox on (workspace-write) beside full-access, "
          f"median of {len(boxed)} alternating rounds", flush=True)
    for key, label in (("steps_s", "tool steps per second"), ("p50", "round trip p50 (ms)"),
                       ("p99", "round trip p99 (ms)"), ("cpu_ms", "server CPU per step (ms)"),
                       ("workers_ms", "workers' CPU per step (ms)"),
                       ("machine_ms", "machine's CPU per step (ms)")):
        info(label, f"sandbox {med(boxed, key):8.1f}   full-access {med(bare, key):8.1f}")
    steps = med(boxed, "steps_s") / med(bare, "steps_s")
    p99 = med(boxed, "p99") / med(bare, "p99")
    figure("steps/s, sandbox / full-access", steps, "x", "≥ 0.9", steps >= 0.9)
    figure("p99, sandbox / full-access", p99, "x", "≤ 1.3", p99 <= 1.3)
    figure("steps/s with the sandbox", med(boxed, "steps_s"), "/s", "≥ 90",
           med(boxed, "steps_s") >= 90)
    figure("p99 with the sandbox", med(boxed, "p99"), "ms", "≤ 600", med(boxed, "p99") <= 600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--sessions", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="W=5, S=20, N=5")
    parser.add_argument("--postgres", action="store_true",
                        help="the log in a throwaway PostgreSQL (a single server on it is a "
                             "one-replica cluster: every action goes through the database)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="write a py-spy profile of the server per phase here")
    parser.add_argument("--sandbox", action="store_true",
                        help="each phase with the sandbox on and with full-access, in "
                             "alternating rounds, side by side (issue 34)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --sandbox: rounds of each (default 3)")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.sessions, args.calls = 5, [20], 5
    with tempfile.TemporaryDirectory(prefix="codey-scale-") as tmp, \
            contextlib.ExitStack() as stack:
        root = Path(tmp)
        pg = stack.enter_context(PostgresCluster()) if args.postgres else None
        dsn = pg.create_database("scale") if pg is not None else None
        if pg is not None:
            fenced, plain = fencing_rates(pg.create_database("fencing"))
            figure("log appends/s, fenced (50 appenders)", median(fenced), "/s", "", None)
            figure("log appends/s, not fenced", median(plain), "/s", "", None)
            figure("fenced / not fenced", median(fenced) / median(plain), "x", "", None)
            info("blocks' spread (a busy machine widens it)",
                 f"fenced {min(fenced):,.0f}–{max(fenced):,.0f}, not fenced "
                 f"{min(plain):,.0f}–{max(plain):,.0f} /s")
        extra = ["--database-url", dsn] if dsn else []
        with start_model_server(script(args.calls), root / "model") as model:
            config = {**provider_config(model), "turn_iteration_cap": args.calls + 5}
            with ServerProcess(root / "server", config=config, extra_args=extra) as server:
                workers: list[WorkerProcess] = []
                try:
                    t0 = time.perf_counter()
                    for n in range(args.workers):
                        workers.append(WorkerProcess(server, root / f"w{n}",
                                                     name=f"w{n}").start())
                    info("workers paired and connected", f"{len(workers)} in "
                                                         f"{time.perf_counter() - t0:.0f} s")
                    time.sleep(2.0)  # settled: nothing imported on the way is counted twice
                    idle = [rss_mb(w.proc.pid) for w in workers if w.proc is not None]
                    figure("idle worker RSS (mean)", sum(idle) / len(idle), "MB", "≤ 40 MB",
                           sum(idle) / len(idle) <= 40)
                    # a warm-up session: the server's SDK may still be loading (it starts as
                    # the server does: about a second of CPU) and each worker's first attach
                    # starts its watcher
                    with contextlib.redirect_stdout(io.StringIO()):
                        phase(server, workers, len(workers), args.calls, dsn, root, None)
                    for sessions in args.sessions:
                        if not args.sandbox:
                            phase(server, workers, sessions, args.calls, dsn, root,
                                  args.profile)
                            continue
                        boxed: list[dict[str, float]] = []
                        bare: list[dict[str, float]] = []
                        for n in range(args.rounds):  # ABBA: drift hits both alike
                            order = ("workspace-write", "full-access") if n % 2 == 0 else (
                                "full-access", "workspace-write")
                            for mode in order:
                                got = phase(server, workers, sessions, args.calls, dsn, root,
                                            None, sandbox=mode)
                                (boxed if mode == "workspace-write" else bare).append(got)
                        compare(boxed, bare)
                finally:
                    for w in workers:
                        w.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
