"""Long runs (issue 36): does anything grow while a server, a worker and a browser tab stay up?

    uv run python scripts/bench/soak.py              # a, b (20 minutes) and c: ~30 minutes
    uv run python scripts/bench/soak.py --quick      # a smoke run: ~5 minutes
    uv run python scripts/bench/soak.py --only a     # one part (a, b, c; repeatable)
    uv run python scripts/bench/soak.py --only b --minutes 5

Real processes on loopback only (``codey_testkit``): codey-server (SQLite log), a paired
codey-worker, the scripted model, and for b Debian's Chromium through Playwright.

a. The server over 10,000 tool steps on 20 sessions (full-auto; the scripted model asks for
   ``true`` again and again). The steps run in rounds: every session gets a prompt, makes 50
   calls and answers, and once all are idle the next round starts (20 × 50 = 1,000 steps a
   round). After each round, with nothing running, the server's ``VmRSS`` and open file
   descriptors (``/proc/PID/fd``) are read. The first round is the warm-up; its sample is
   the baseline. Goals: RSS growth from the warm-up to the end ≤ 10 %, no fd growth.
b. A browser tab following 5 streaming sessions (streamed answers and commands that print a
   line every 50 ms, turn after turn, each prompted again as soon as its turn ends) for
   ``--minutes`` (20; 3 with ``--quick``), the tab showing the first session all along (a
   view left open is where the page grew) while it folds all five. Every
   ``--every`` seconds: the tab's JS heap (CDP ``Performance.getMetrics`` ``JSHeapUsedSize``
   after ``HeapProfiler.collectGarbage``), its DOM node count (the ``Nodes`` metric, after the
   same GC, and ``document.getElementsByTagName('*').length``), the items on the page, and
   the size of the folded state as JSON. The sample at the end of the warm-up (the first
   fifth of the run, at least a minute) is the baseline. Goals: heap growth ≤ 20 % after the
   warm-up (printed as measured, and without what the state itself grew, its JSON size as the
   proxy: the tab keeps every event's fold, as the server does), the DOM bounded: at most
   :data:`PAGE_ITEMS` items on the page at any sample (the view drops its oldest while it
   follows the end).
c. The worker over 2,000 commands that print (``seq 1 300``, 1.1 KB each, streamed): its
   ``VmRSS``, open fds and threads after each round of 200 (4 new sessions × 50 calls, in a
   new workdir: what the worker keeps per session shows too, 40 sessions in all); the first
   round is the warm-up. Goal: RSS growth ≤ 10 % after the warm-up; fds and threads printed
   (bounded: a workspace watch for each of the 32 sessions that acted last, a warm sandbox
   for each of at most 32 used in the last minute).

Each figure is printed with its baseline from the same run (the warm-up's sample), every
sample in between too, so a trend shows from a blip. With ``--tracemalloc DIR`` the server
of a. traces its allocations (a ``sitecustomize`` the bench puts on its ``PYTHONPATH`` starts
``tracemalloc`` on the first ``SIGUSR2`` and writes a snapshot on each; nothing in the server
changes): tracing starts after the warm-up, a snapshot is taken after each round, and the
largest growths between the warm-up's and the last one are printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import figure, info

from codey_testkit.model_handle import start_model_server
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


# ---------------------------------------------------------------------------------------------
# /proc


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_parts(pid: int) -> str:
    """``VmRSS`` split: anonymous (the heap, arenas), file-backed (libraries, mapped files),
    shared memory (SQLite's WAL index among them), in MiB."""
    parts = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("RssAnon", "RssFile", "RssShmem"):
                parts[key[3:].lower()] = int(line.split()[1]) / 1024
    return " ".join(f"{k} {v:.1f}" for k, v in parts.items())


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def growth(first: float, last: float) -> float:
    """``last`` over ``first``, in per cent (positive: it grew)."""
    return (last - first) / first * 100 if first else 0.0


def mib(kib: float) -> float:
    return kib / 1024


# ---------------------------------------------------------------------------------------------
# rounds of tool steps


def rounds_script(argv: list[str], per_turn: int, rounds: int) -> dict[str, Any]:
    """A script under which every prompt starts a turn of exactly ``per_turn`` calls of
    ``argv``, for ``rounds`` turns in a row in each session.

    The scripted model counts the tool results in the request (``results_below``), which
    holds the whole conversation: turn ``k`` starts with ``k * per_turn`` of them. So turn
    ``k`` asks for ``argv`` while there are fewer than ``(k + 1) * per_turn``, and answers
    "done" at exactly that many.
    """
    call = {"calls": [{"name": "shell", "arguments": {"command": argv}}]}
    steps: list[dict[str, Any]] = [{"match": {"user": "soak"}, "reply": call}]
    for k in range(rounds):
        steps.append({"match": {"tool": "shell", "results_below": (k + 1) * per_turn},
                      "reply": call})
        steps.append({"match": {"tool": "shell", "results_below": (k + 1) * per_turn + 1},
                      "reply": {"text": f"done with round {k}"}})
    steps.append({"match": {"any": True}, "reply": {"text": "unexpected"}})
    return {"model": "scripted-1", "steps": steps}


def run_rounds(server: ServerProcess, worker: WorkerProcess, *, sessions: int, per_turn: int,
               rounds: int, on_round: Callable[[int], None], fresh: bool = False) -> None:
    """Create ``sessions`` sessions and run ``rounds`` rounds of turns in all of them; after
    each round (every session idle again, with its calls made) call ``on_round(k)``. With
    ``fresh``, each round has new sessions in a new workdir (the previous ones stay)."""

    def create(k: int) -> list[str]:
        workdir = Path(worker.workdir(f"soak-{time.monotonic_ns()}"))
        workdir.mkdir(parents=True)
        sids = []
        for n in range(sessions):
            r = server.http.post("/api/sessions", json={
                "worker_id": worker.worker_id, "workdir": str(workdir),
                "prompt": f"soak {k}.{n}", "policy": "full-auto"})
            assert r.status_code == 201, r.text
            sids.append(r.json()["session_id"])
        return sids

    sids = create(0)
    for k in range(rounds):
        if k and fresh:
            sids = create(k)
        elif k:
            for sid in sids:
                r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": f"soak {k}"})
                assert r.status_code == 202, r.text
        # each turn adds its prompt, per_turn calls and the answer
        want = (1 if fresh else k + 1) * (per_turn + 2)

        def done(want: int = want, sids: list[str] = sids) -> bool:
            listed = {s["session_id"]: s for s in server.http.get("/api/sessions").json()}
            bad = [listed[s] for s in sids if listed[s]["status"] == "error"]
            if bad:
                raise RuntimeError(f"a session stopped on an error: {bad[0]}")
            return all(listed[s]["status"] == "idle" and listed[s]["items"] >= want
                       for s in sids)

        # polling costs the server too: once a second is enough against minutes of work
        wait_until(done, timeout=max(300.0, sessions * per_turn * 0.5), interval=1.0,
                   what=f"round {k} to finish")
        on_round(k)


def tracemalloc_diff(directory: Path, first: int, last: int, top: int = 15) -> None:
    """Print the largest growths between two of the server's snapshots."""
    import tracemalloc

    a = tracemalloc.Snapshot.load(str(directory / f"snapshot-{first}.pickle"))
    b = tracemalloc.Snapshot.load(str(directory / f"snapshot-{last}.pickle"))
    stats = b.compare_to(a, "traceback")
    total = sum(s.size_diff for s in stats)
    info("tracemalloc: traced growth, all", f"{total / 1024:,.0f} KiB")
    for stat in stats[:top]:
        frames = [f"{f.filename.rsplit('/site-packages/', 1)[-1].rsplit('/src/', 1)[-1]}"
                  f":{f.lineno}" for f in list(stat.traceback)[::-1][:6]]  # innermost first
        print(f"    {stat.size_diff / 1024:>9,.1f} KiB {stat.count_diff:>+8,} blocks  "
              + " < ".join(frames), flush=True)


SITECUSTOMIZE = """\
import gc, os, signal, tracemalloc

_dir = os.environ["CODEY_TRACEMALLOC_DIR"]
_n = [0]


def _dump(signum, frame):
    # tracing starts at the first signal (the warm-up's end): started with the process it
    # slows the start ten-fold, and what was allocated before the baseline is not growth
    if not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ.get("CODEY_TRACEMALLOC", "25")))
    gc.collect()  # what is reachable, not garbage a later collection frees
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)])
    path = os.path.join(_dir, f"snapshot-{_n[0]}.pickle")
    snap.dump(path + ".tmp")
    os.replace(path + ".tmp", path)
    _n[0] += 1


signal.signal(signal.SIGUSR2, _dump)
"""


def tracing_env(directory: Path) -> dict[str, str]:
    """The environment under which a Python process traces its allocations (see above)."""
    hook = directory / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "CODEY_TRACEMALLOC": "25",
            "CODEY_TRACEMALLOC_DIR": str(directory)}


def snapshot_now(server: ServerProcess, directory: Path, n: int) -> None:
    """Ask the server for a tracemalloc snapshot (``SIGUSR2``) and wait for the file."""
    import signal

    assert server.proc is not None and server.proc.pid is not None
    os.kill(server.proc.pid, signal.SIGUSR2)
    path = directory / f"snapshot-{n}.pickle"
    wait_until(path.exists, timeout=120, interval=0.2, what=f"snapshot {n}")


# ---------------------------------------------------------------------------------------------
# a. the server


def part_a(root: Path, *, sessions: int, steps: int, per_turn: int,
           trace: Path | None) -> None:
    rounds = max(2, steps // (sessions * per_turn))
    print(f"a. the server over {sessions * per_turn * rounds:,} tool steps on {sessions} "
          f"sessions ({rounds} rounds of {per_turn} calls each; the first is the warm-up)",
          flush=True)
    model = start_model_server(rounds_script(["true"], per_turn, rounds), root / "model-a",
                               max_records=20)
    config = {**provider_config(model), "turn_iteration_cap": per_turn + 5}
    env = tracing_env(trace) if trace is not None else {}
    try:
        with ServerProcess(root / "server-a", config=config, env=env) as server, \
                WorkerProcess(server, root / "worker-a") as worker:
            assert server.proc is not None and server.proc.pid is not None
            assert worker.proc is not None and worker.proc.pid is not None
            spid, wpid = server.proc.pid, worker.proc.pid
            start = (rss_kib(spid), fd_count(spid), rss_kib(wpid))
            samples: list[tuple[int, int, int]] = []
            t0 = time.perf_counter()

            def on_round(k: int) -> None:
                if trace is not None:
                    snapshot_now(server, trace, k)
                samples.append((rss_kib(spid), fd_count(spid), rss_kib(wpid)))
                rss, fds, wrss = samples[-1]
                info(f"after {(k + 1) * sessions * per_turn:>6,} steps",
                     f"server {mib(rss):6.1f} MiB ({rss_parts(spid)}), {fds} fds; "
                     f"worker {mib(wrss):5.1f} MiB  ({time.perf_counter() - t0:4.0f} s)")

            run_rounds(server, worker, sessions=sessions, per_turn=per_turn, rounds=rounds,
                       on_round=on_round)
            wall = time.perf_counter() - t0
            total = sessions * per_turn * rounds
            base, end = samples[0], samples[-1]
            figure("tool steps per second", total / wall, "/s", "", None)
            figure("server RSS at start (no session)", mib(start[0]), "MiB", "", None)
            figure("server RSS after the warm-up (baseline)", mib(base[0]), "MiB", "", None)
            figure("server RSS at the end", mib(end[0]), "MiB", "", None)
            g = growth(base[0], end[0])
            figure("server RSS growth after the warm-up", g, "%", "≤ 10 %", g <= 10)
            figure("server open fds: start / warm-up", start[1], f"/ {base[1]}", "", None)
            figure("server open fds at the end", end[1], "", f"≤ {base[1]}", end[1] <= base[1])
            figure("worker RSS after the warm-up", mib(base[2]), "MiB", "", None)
            figure("worker RSS at the end", mib(end[2]), "MiB", "", None)
            if trace is not None:
                tracemalloc_diff(trace, 0, rounds - 1)
    finally:
        model.stop()


# ---------------------------------------------------------------------------------------------
# c. the worker


def part_c(root: Path, *, commands: int, per_turn: int) -> None:
    sessions = 4
    rounds = max(2, commands // (sessions * per_turn))
    argv = ["seq", "1", "300"]
    print(f"c. the worker over {sessions * per_turn * rounds:,} commands ({' '.join(argv)}; "
          f"{rounds} rounds of {sessions} new sessions × {per_turn}; the first is the "
          "warm-up)", flush=True)
    model = start_model_server(rounds_script(argv, per_turn, 1), root / "model-c",
                               max_records=20)
    config = {**provider_config(model), "turn_iteration_cap": per_turn + 5}
    try:
        with ServerProcess(root / "server-c", config=config) as server, \
                WorkerProcess(server, root / "worker-c") as worker:
            assert worker.proc is not None and worker.proc.pid is not None
            wpid = worker.proc.pid
            start = (rss_kib(wpid), fd_count(wpid), threads(wpid))
            samples: list[tuple[int, int, int]] = []

            def on_round(k: int) -> None:
                samples.append((rss_kib(wpid), fd_count(wpid), threads(wpid)))
                info(f"after {(k + 1) * sessions * per_turn:>6,} commands",
                     f"worker {mib(samples[-1][0]):5.1f} MiB, {samples[-1][1]} fds, "
                     f"{samples[-1][2]} threads; {(k + 1) * sessions} sessions attached")

            run_rounds(server, worker, sessions=sessions, per_turn=per_turn, rounds=rounds,
                       on_round=on_round, fresh=True)
            base, end = samples[0], samples[-1]
            figure("worker RSS idle, before any command", mib(start[0]), "MiB", "", None)
            figure("worker RSS after the warm-up (baseline)", mib(base[0]), "MiB", "", None)
            figure("worker RSS at the end", mib(end[0]), "MiB", "", None)
            g = growth(base[0], end[0])
            figure("worker RSS growth after the warm-up", g, "%", "≤ 10 %", g <= 10)
            # each session attached keeps a workspace watch (2 threads, 5 fds) among the 32
            # that acted last, and a warm sandbox (2 fds) for a minute, at most 32 of them
            figure("worker open fds: idle / warm-up / end", start[1],
                   f"/ {base[1]} / {end[1]}", "", None)
            figure("worker threads: idle / warm-up / end", start[2],
                   f"/ {base[2]} / {end[2]}", "", None)
    finally:
        model.stop()



# ---------------------------------------------------------------------------------------------
# b. a browser tab


#: the most items the session view keeps on the page while it follows the end
#: (web/views/session.js: WINDOW + WINDOW_SLACK)
PAGE_ITEMS = 250


def streaming_script(per_turn: int, rounds: int) -> dict[str, Any]:
    """Turns of ``per_turn`` steps, each a streamed sentence or two and a command that prints
    a line every 50 ms for about two seconds."""
    printer = ["bash", "-c", "for i in $(seq 1 40); do echo \"line $i of the build: "
               "compiling module_$i ... ok\"; sleep 0.05; done"]
    call = {"text": "Building the next module, then I look at what the compiler says about "
                    "it. The last one went through; this one touches the parser, so the "
                    "tests of the parser run after it.",
            "calls": [{"name": "shell", "arguments": {"command": printer}}]}
    script = rounds_script(["true"], per_turn, rounds)
    for step in script["steps"]:
        if "calls" in step["reply"]:
            step["reply"] = call
    script["options"] = {"delay_ms": 20, "chunk_size": 16}
    return script


def tab_sample(page: Any, cdp: Any) -> dict[str, float]:
    """The tab's figures after a forced garbage collection."""
    cdp.send("HeapProfiler.collectGarbage")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    elements = page.evaluate("document.getElementsByTagName('*').length")
    shown = page.evaluate("document.querySelectorAll('[data-testid=item]').length")
    store = page.evaluate("JSON.stringify(window.__codey.state()).length")
    return {"heap": metrics["JSHeapUsedSize"], "nodes": metrics["Nodes"],
            "listeners": metrics["JSEventListeners"], "elements": elements, "items": shown,
            "store": store}


def part_b(root: Path, *, minutes: float, every: float, sessions: int = 5,
           per_turn: int = 10) -> None:
    import threading

    from playwright.sync_api import expect, sync_playwright

    print(f"b. a browser tab following {sessions} streaming sessions for {minutes:g} minutes "
          f"(showing the first all along; a sample every {every:g} s)", flush=True)
    model = start_model_server(streaming_script(per_turn, 1000), root / "model-b",
                               max_records=20)
    config = {**provider_config(model), "turn_iteration_cap": per_turn + 5}
    stop = threading.Event()
    problems: list[str] = []
    try:
        with ServerProcess(root / "server-b", config=config) as server, \
                WorkerProcess(server, root / "worker-b") as worker:
            workdir = Path(worker.workdir("soak-b"))
            workdir.mkdir(parents=True)
            sids = []
            for n in range(sessions):
                r = server.http.post("/api/sessions", json={
                    "worker_id": worker.worker_id, "workdir": str(workdir),
                    "prompt": f"soak {n}", "policy": "full-auto"})
                assert r.status_code == 201, r.text
                sids.append(r.json()["session_id"])

            def keep_going() -> None:
                """Prompt each session again as soon as its turn ends (a user who keeps
                them busy)."""
                http = server.http
                turns = dict.fromkeys(sids, 1)
                while not stop.wait(1.0):
                    try:
                        listed = http.get("/api/sessions").json()
                    except Exception as err:  # the run is ending: the server stopped
                        problems.append(f"the feeder stopped: {err!r}")
                        return
                    for s in listed:
                        sid = s["session_id"]
                        if sid not in turns or s["status"] not in ("idle", "error"):
                            continue
                        if s["status"] == "error" and len(problems) < 5:
                            problems.append(f"{sid} stopped on an error")
                        turns[sid] += 1
                        http.post(f"/api/sessions/{sid}/prompt",
                                  json={"text": f"soak {turns[sid]}"})

            feeder = threading.Thread(target=keep_going, daemon=True)
            feeder.start()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
                page.goto(f"{server.url}/?token={server.token}")
                page.goto(f"{server.url}/#/session/{sids[0]}")
                expect(page.get_by_test_id("conn-state")).to_have_text("live", timeout=30_000)
                cdp = page.context.new_cdp_session(page)
                cdp.send("Performance.enable")
                t0 = time.monotonic()
                end = t0 + minutes * 60
                warmup = t0 + max(60.0, minutes * 60 / 5)
                samples: list[tuple[float, dict[str, float]]] = []
                base: dict[str, float] | None = None
                while True:
                    now = time.monotonic()
                    sample = tab_sample(page, cdp)
                    samples.append((now - t0, sample))
                    if base is None and now >= warmup:
                        base = sample
                    info(f"{(now - t0) / 60:5.1f} min" + (" (baseline)" if sample is base
                                                          else ""),
                         f"heap {sample['heap'] / 2**20:6.2f} MiB, {sample['nodes']:>7,.0f} "
                         f"nodes, {sample['elements']:>6,} elements, {sample['items']:>4} "
                         f"items shown, {sample['listeners']:>5,.0f} listeners, "
                         f"state {sample['store'] / 2**20:5.2f} MiB as JSON")
                    if now >= end:
                        break
                    page.wait_for_timeout(max(0.0, min(every, end - time.monotonic())) * 1000)
                # the same tab on the dashboard: what the session view held goes with it
                page.evaluate("location.hash = '#/'")
                page.wait_for_timeout(2000)
                board = tab_sample(page, cdp)
                stop.set()
                items = page.evaluate("(ids) => ids.map((id) => "
                                      "window.__codey.state().sessions[id].items.length)", sids)
                browser.close()
            feeder.join()
            assert base is not None
            last = samples[-1][1]
            info("items in the sessions at the end", ", ".join(f"{n:,}" for n in items))
            figure("tab JS heap after the warm-up (baseline)", base["heap"] / 2**20, "MiB",
                   "", None)
            figure("tab JS heap at the end", last["heap"] / 2**20, "MiB", "", None)
            g = growth(base["heap"], last["heap"])
            figure("tab JS heap growth after the warm-up", g, "%", "≤ 20 %", g <= 20)
            figure("DOM elements after the warm-up / at the end", base["elements"],
                   f"/ {last['elements']:,}", "", None)
            figure("DOM elements, the most at any sample", max(
                sample["elements"] for _, sample in samples), "", "", None)
            shown = max(sample["items"] for _, sample in samples)
            figure("items on the page, the most at any sample", shown, "",
                   f"≤ {PAGE_ITEMS}", shown <= PAGE_ITEMS)
            figure("DOM nodes (CDP) warm-up / end", base["nodes"], f"/ {last['nodes']:,.0f}",
                   "", None)
            figure("JS event listeners warm-up / end", base["listeners"],
                   f"/ {last['listeners']:,.0f}", "", None)
            figure("the state as JSON, warm-up / end", base["store"] / 2**20,
                   f"/ {last['store'] / 2**20:.2f} MiB", "", None)
            # what the heap gained beyond what the folded state did (its JSON a proxy)
            beyond = (last["heap"] - base["heap"] - (last["store"] - base["store"]))
            figure("heap growth beyond the state's", growth(base["heap"], base["heap"] + beyond),
                   "%", "≤ 20 %", growth(base["heap"], base["heap"] + beyond) <= 20)
            figure("tab JS heap at the end, on the dashboard", board["heap"] / 2**20, "MiB", "",
                   None)
            for problem in problems:
                info("problem", problem)
    finally:
        stop.set()
        model.stop()


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 2,000 steps, 3 minutes in the browser, "
                             "500 commands")
    parser.add_argument("--only", action="append", choices=["a", "b", "c"])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--per-turn", type=int, default=50)
    parser.add_argument("--commands", type=int, default=2_000)
    parser.add_argument("--minutes", type=float, default=None,
                        help="how long the tab follows the sessions (20; --quick: 3)")
    parser.add_argument("--every", type=float, default=30.0,
                        help="seconds between the tab's samples")
    parser.add_argument("--tracemalloc", type=Path, default=None,
                        help="the server traces its allocations and writes a snapshot per "
                             "round here; the top growths are printed")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.per_turn, args.commands = 2_000, 25, 500
    minutes = args.minutes if args.minutes is not None else (3.0 if args.quick else 20.0)
    parts = args.only or ["a", "b", "c"]
    with tempfile.TemporaryDirectory(prefix="codey-soak-") as tmp:
        root = Path(tmp)
        if "a" in parts:
            part_a(root, sessions=args.sessions, steps=args.steps, per_turn=args.per_turn,
                   trace=args.tracemalloc)
        if "b" in parts:
            part_b(root, minutes=minutes, every=args.every)
        if "c" in parts:
            part_c(root, commands=args.commands, per_turn=min(args.per_turn, 50))
    return 0


if __name__ == "__main__":
    sys.exit(main())
