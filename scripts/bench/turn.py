"""The model path: server CPU per tool step of a real turn, memory of resident sessions, and
the time to build a request body over a long history (issue 10's figures).

    uv run python scripts/bench/turn.py            # ~6 minutes on 2 cores
    uv run python scripts/bench/turn.py --quick    # a smoke run (~1.5 minutes)
    uv run python scripts/bench/turn.py --only d   # one part (a, b, c, d; repeatable)

a. A 20-step turn through the real server and worker, against the scripted model answering
   at once (each step: a model call that asks for ``true``, the action, its result). Printed:
   the server's CPU per tool step (from /proc/PID/stat, over whole turns), the wall time per
   step, and the wall time per step as a ratio to the baseline: one bare streamed HTTP call
   to the same scripted server from this process (httpx, keep-alive), measured in the same
   run, interleaved with the turns. Goal: CPU per step ≤ 1 ms (issue 27). Two floors are
   printed under it: the CPU of one such model call (the turn's last body, answered with a
   tool call) made in this process through the server's own ``ModelProvider``, and made as a
   bare aiohttp POST: each step makes one model call, so its CPU cannot be below them.
b. 200 sessions of 200 items each, resident in the server (written into its log, then each
   session answers one prompt so its encoded history is built too): the server's RSS growth
   over the same server with an empty log. Goal ≤ 300 MB.
c. Building one request body over a 2,000-item history: the call after a new item is added
   (what every step pays), against encoding the same body afresh with msgspec (baseline, in
   process). Goal ≤ 2 ms.
d. A session right after a server start (issue 34): a fresh server, a worker paired with it,
   and at once a 10-step turn; then the same turn a minute later (``--later``), the
   baseline. Printed: how long its first model call waited for the SDK's import (the
   server says so in its log when a call had to wait; goal ≤ 0.2 s), and the turn's wall
   time against the baseline's (goal ≤ 1.2×), with how long after its creation the first
   call reached the model, against the baseline (that includes the fresh worker's first
   actions). Median over ``--starts`` starts, run both as this environment runs Python
   (``PYTHONDONTWRITEBYTECODE`` set: every start compiles what it imports) and with a
   bytecode cache (as an installed server runs), interleaved; the SDK's import time (the
   server's log line) and the head start it had (server ready → session) are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import figure, info, mark_current

from codey_protocol import events as ev
from codey_server.agent.history import History
from codey_server.agent.tools import BUILTIN_TOOLS
from codey_server.agent.wire import CallOptions, responses
from codey_server.eventlog import SqliteEventLog
from codey_server.settings import ProviderConfig
from codey_testkit.credentials import FixedCredentials
from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.scenarios import create_session, provider_config, session
from codey_testkit.stack import ServerProcess, WorkerProcess

TICK = os.sysconf("SC_CLK_TCK")


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def cpu_seconds(pid: int) -> float:
    return sum(cpu_times(pid))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _profile(pid: int, kind: str) -> subprocess.Popen[bytes] | None:
    """With CODEY_BENCH_PROFILE=DIR, py-spy records the server during the turns."""
    out = os.environ.get("CODEY_BENCH_PROFILE")
    if not out:
        return None
    Path(out).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(["py-spy", "record", "--gil", "-p", str(pid), "-r", "500", "-f", "raw",
                             "-o", str(Path(out) / f"server-{kind}.txt")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def turn_script(steps: int) -> dict[str, Any]:
    call = {"calls": [{"name": "shell", "arguments": {"command": ["true"]}}]}
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "bench"}, "times": 1, "reply": call},
        {"match": {"tool": "shell"}, "times": steps - 1, "reply": call},
        {"match": {"tool": "shell"}, "reply": {"text": "done"}},
        {"match": {"any": True}, "reply": {"text": "ok"}},
    ]}


def bare_call(http: httpx.Client, model: ModelServerHandle) -> float:
    body = {"model": "scripted-1", "stream": True, "store": False,
            "input": [{"role": "user", "content": "bench"}]}
    t0 = time.perf_counter()
    with http.stream("POST", f"{model.base_url}/responses", json=body) as r:
        for _ in r.iter_bytes():
            pass
    return time.perf_counter() - t0


def bench_turns(root: Path, kind: str, turns: int, steps: int) -> None:
    print(f"a. a {steps}-step turn, {kind} wire ({turns} turns)", flush=True)
    with start_model_server(turn_script(steps), root / f"model-{kind}") as model:
        config = provider_config(model, kind=kind)
        with ServerProcess(root / f"server-{kind}", config=config) as server, \
                WorkerProcess(server, root / f"worker-{kind}") as worker, \
                httpx.Client(timeout=30) as http:
            project = Path(worker.workdir("bench"))
            project.mkdir(parents=True)
            assert server.proc is not None
            pid = server.proc.pid
            profiler = None
            cpu: list[float] = []
            system: list[float] = []
            wall: list[float] = []
            bare: list[float] = []
            for n in range(turns + 1):  # the first turn warms up (imports, first client)
                model.set_script(turn_script(steps))
                bare_before = [bare_call(http, model) for _ in range(steps)]
                model.set_script(turn_script(steps))
                if n == 1:  # after the warm-up: imports are not the steady state
                    profiler = _profile(pid, kind)
                (u0, s0), t0 = cpu_times(pid), time.perf_counter()
                sid = create_session(server, worker, str(project), "bench")
                while True:
                    s = session(server, sid)
                    if s["status"] in ("idle", "error") and len(s["items"]) > 1:
                        break
                    time.sleep(0.25)  # polling costs the server CPU too: rarely
                t1, (u1, s1) = time.perf_counter(), cpu_times(pid)
                done = sum(1 for i in s["items"] if i["kind"] == "tool_call")
                assert s["status"] == "idle" and done == steps, (s["status"], done)
                if n:
                    cpu.append((u1 - u0 + s1 - s0) / steps)
                    system.append((s1 - s0) / steps)
                    wall.append((t1 - t0) / steps)
                    bare.extend(bare_before)
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                profiler.wait()
            # the clock ticks at 10 ms: the mean over every measured step is the honest figure
            cpu_ms = statistics.fmean(cpu) * 1000
            wall_ms = statistics.median(wall) * 1000
            bare_ms = statistics.median(bare) * 1000
            body = model.requests()[-1]["body"]  # the turn's last call, as the server sent it
            floor_sdk, floor_bare = model_call_cpu(model, kind, body)
            figure("server CPU per tool step", cpu_ms, "ms", "≤ 1 ms", cpu_ms <= 1)
            figure("… of which in the kernel (system time)", statistics.fmean(system) * 1000,
                   "ms", "", None)
            figure("wall time per tool step", wall_ms, "ms", "", None)
            figure("bare streamed call to the model (baseline)", bare_ms, "ms", "", None)
            figure("wall per step / baseline", wall_ms / bare_ms, "x", "", None)
            figure("(floor) CPU of a model call via ModelProvider", floor_sdk, "ms", "", None)
            figure("(floor) CPU of the same call, bare aiohttp", floor_bare, "ms", "", None)


def model_call_cpu(model: ModelServerHandle, kind: str, body: dict[str, Any],
                   calls: int = 200) -> tuple[float, float]:
    """CPU ms of one model call answering with a tool call, in this process on uvloop (as the
    server runs): through the server's own ``ModelProvider`` (the SDK's client on aiohttp,
    our event decoder, the wire's collector), and as a bare aiohttp POST whose answer is read
    to the end. Each step of a turn makes one such call, so these are floors for its CPU:
    the first with the SDK the server uses, the second with no SDK at all. Median of five
    interleaved blocks."""
    import aiohttp
    import uvloop

    from codey_server.agent.models import ModelProvider

    call = {"calls": [{"name": "shell", "arguments": {"command": ["true"]}}]}
    model.set_script({"model": "scripted-1", "steps": [{"match": {"any": True}, "reply": call}]})
    config = ProviderConfig(name="scripted", kind=kind, base_url=model.base_url,
                            models=["scripted-1"])
    raw = msgspec.json.encode(body)
    url = model.base_url.rstrip("/") + ("/responses" if kind == "responses"
                                        else "/chat/completions")

    async def run() -> tuple[float, float]:
        provider = ModelProvider(config, FixedCredentials("none"))
        async with aiohttp.ClientSession() as http:
            async def sdk() -> None:
                async for _ in provider.stream(model="scripted-1", body=raw):
                    pass

            async def bare() -> None:
                async with http.post(url, data=raw,
                                     headers={"Content-Type": "application/json"}) as r:
                    async for _ in r.content.iter_any():
                        pass

            for _ in range(20):  # warm: the SDK's import, both connections
                await sdk()
                await bare()
            through: list[float] = []
            alone: list[float] = []
            for _ in range(5):
                for fn, out in ((sdk, through), (bare, alone)):
                    c0 = time.process_time()
                    for _ in range(calls // 5):
                        await fn()
                    out.append((time.process_time() - c0) / (calls // 5) * 1000)
        await provider.aclose()
        return statistics.median(through), statistics.median(alone)

    return uvloop.run(run())


def fill_sessions(db: Path, sessions: int, items: int) -> None:
    async def run() -> None:
        log = SqliteEventLog(db)
        await log.open()
        await log.append([(None, ev.WorkerPaired(
            worker_id="wrk_bench", request_id="r", hostname="bench", os="Linux",
            python_version="3.11", worker_version="0", roots=["/tmp"], public_key="x"))])
        for n in range(sessions):
            sid = f"ses_{n:04d}"
            batch: list[tuple[str | None, ev.Event]] = [(sid, ev.SessionCreated(
                title=f"session {n}", worker_id="wrk_bench", workdir="/tmp/w",
                provider="scripted", model="scripted-1", policy="full-auto"))]
            batch.append((sid, ev.SessionItemAppended(item=ev.UserMessage(
                id=f"{sid}-u", ts=0.0, text="please fix the failing tests in the project"))))
            for k in range(items - 1):
                if k % 4 == 3:
                    item: ev.Item = ev.AssistantMessage(
                        id=f"{sid}-{k}", ts=0.0, text="Looked at it; next I run the tests. " * 4)
                else:
                    item = ev.ToolCall(
                        id=f"{sid}-{k}", ts=0.0, call_id=f"call_{n}_{k}", name="shell",
                        arguments='{"command": ["pytest", "-q", "tests/test_app.py"]}',
                        command=["pytest", "-q", "tests/test_app.py"], status="done",
                        output="." * 60 + "\n1 passed in 0.02s\n" * 8, exit_code=0,
                        result="exit code: 0\n" + "1 passed in 0.02s\n" * 8,
                        response_id=f"rsp_{n}_{k}")
                batch.append((sid, ev.SessionItemAppended(item=item)))
            await log.append(batch)
        await log.close()

    asyncio.run(run())


def bench_memory(root: Path, sessions: int, items: int) -> None:
    print(f"b. {sessions} sessions of {items} items resident", flush=True)
    script = {"model": "scripted-1", "steps": [{"match": {"any": True},
                                                "reply": {"text": "ok"}}]}
    with start_model_server(script, root / "model-mem") as model:
        config = provider_config(model, kind="responses")
        empty = ServerProcess(root / "server-empty", config=config)
        with empty:
            assert empty.proc is not None
            time.sleep(1.0)
            base = rss_mib(empty.proc.pid)
        data = root / "server-full"
        data.mkdir()
        fill_sessions(data / "events.db", sessions, items)
        mark_current(data / "events.db")
        with ServerProcess(data, config=config) as full:
            assert full.proc is not None
            loaded = rss_mib(full.proc.pid)
            for n in range(sessions):  # each builds its encoded history with one model call
                r = full.http.post(f"/api/sessions/ses_{n:04d}/prompt", json={"text": "go on"})
                r.raise_for_status()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                state = full.http.get("/api/state/bootstrap").json()["state"]
                if all(s["status"] != "running" and s["items"][-1]["kind"] != "user_message"
                       for s in state["sessions"].values()):
                    break
                time.sleep(0.5)
            time.sleep(0.5)
            after = rss_mib(full.proc.pid)
        figure("server RSS, empty log (baseline)", base, "MiB", "", None)
        figure("… with the sessions loaded", loaded - base, "MiB+", "", None)
        figure("… and their histories built", after - base, "MiB+", "≤ 300 MB", after - base <= 300)


def bench_body(items: int, rounds: int) -> None:
    print(f"c. a request body over a {items}-item history", flush=True)
    history_items: list[ev.Item] = [ev.UserMessage(id="u", ts=0, text="fix the tests")]
    for k in range(items - 1):
        history_items.append(ev.ToolCall(
            id=f"t{k}", ts=0, call_id=f"call_{k}", name="shell",
            arguments='{"command": ["pytest", "-q"]}', result="exit code: 0\n1 passed\n" * 4,
            response_id=f"r{k}"))
    wire = responses.WIRE
    tools = wire.encode_tools(BUILTIN_TOOLS)
    config = ProviderConfig(name="p", base_url="http://x")
    history = History(wire)
    t0 = time.perf_counter()
    history.messages(history_items)
    cold = time.perf_counter() - t0
    step: list[float] = []
    fresh: list[float] = []
    for k in range(rounds):
        history_items.append(ev.ToolCall(
            id=f"new{k}", ts=0, call_id=f"new_{k}", name="shell", arguments="{}",
            result="ok", response_id=f"rn{k}"))
        t0 = time.perf_counter()
        body = wire.body(model="m", instructions="x" * 600, messages=history.messages(
            history_items), tools=tools, session_id="ses",
            options=CallOptions(reasoning_summary=config.reasoning_summary))
        step.append(time.perf_counter() - t0)
        plain = json.loads(body)
        t0 = time.perf_counter()
        msgspec.json.encode(plain)
        fresh.append(time.perf_counter() - t0)
    step_ms = statistics.median(step) * 1000
    base_ms = statistics.median(fresh) * 1000
    figure("body build per call (a new item each)", step_ms, "ms", "≤ 2 ms", step_ms <= 2)
    figure("msgspec encode of the same body (baseline)", base_ms, "ms", "", None)
    figure("build / baseline", step_ms / base_ms, "x", "", None)
    figure("first build (cold cache)", cold * 1000, "ms", "", None)
    info("body size", f"{len(body) / 1024:.0f} KiB")


def _sdk_load_s(server: ServerProcess) -> float | None:
    """Seconds the server's SDK import took, from its log line (None before it is loaded)."""
    found = re.findall(r"the openai SDK is loaded \((\d+\.\d+) s", server.log_text())
    return float(found[-1]) if found else None


def _sdk_wait_s(server: ServerProcess) -> float:
    """Seconds the first model call that had to wait for the SDK waited (its log line; none:
    no call waited)."""
    found = re.findall(r"a model call waited (\d+\.\d+) s for the openai SDK",
                       server.log_text())
    return float(found[-1]) if found else 0.0


def first_turn(server: ServerProcess, worker: WorkerProcess, model: ModelServerHandle,
               steps: int) -> tuple[float, float]:
    """One ``steps``-step turn in a new session: (seconds from the session's creation to its
    first model call reaching the model, seconds from its creation until it is idle)."""
    model.set_script(turn_script(steps))
    model.clear_requests()
    project = Path(worker.workdir("first"))
    project.mkdir(parents=True, exist_ok=True)
    sid = create_session(server, worker, str(project), "bench")
    created = time.time()
    while True:
        s = session(server, sid)
        if s["status"] in ("idle", "error") and len(s["items"]) > 1:
            break
        time.sleep(0.02)
    done = time.time()
    calls = sum(1 for i in s["items"] if i["kind"] == "tool_call")
    assert s["status"] == "idle" and calls == steps, (s["status"], calls)
    return model.requests()[0]["ts"] - created, done - created


def bench_first_session(root: Path, starts: int, later_s: float, steps: int = 10) -> None:
    print(f"d. a session right after a server start: {steps} steps, then the same "
          f"{later_s:.0f} s later (median of {starts} starts)", flush=True)
    cache = root / "pycache"
    modes = {"bytecode cached": {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX":
                                 str(cache)}}
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        modes["no bytecode cache (as run here)"] = {}
    # fill the cache: as pip does at install (or a first run)
    subprocess.run([sys.executable, "-c", "import codey_server.cli, codey_server.app, openai"],
                   env={**os.environ, **modes["bytecode cached"]}, check=True)
    got: dict[str, dict[str, list[float]]] = {
        mode: {k: [] for k in ("first", "wall", "first_later", "wall_later", "sdk", "head",
                               "wait")}
        for mode in modes}
    with start_model_server(turn_script(steps), root / "model-first") as model:
        for n in range(starts):
            for mode, env in modes.items():  # interleaved: load on the machine hits both
                tag = f"{n}-{len(got[mode]['first'])}-{mode.split()[0]}"
                server = ServerProcess(root / f"first-{tag}", env=env,
                                       config=provider_config(model, kind="responses"))
                with server:
                    ready = time.time()  # listening: the SDK's import has begun
                    with WorkerProcess(server, root / f"first-w-{tag}") as worker:  # pairs
                        first, wall = first_turn(server, worker, model, steps)
                        got[mode]["head"].append(time.time() - wall - ready)
                        got[mode]["sdk"].append(_sdk_load_s(server) or float("nan"))
                        got[mode]["wait"].append(_sdk_wait_s(server))
                        time.sleep(later_s)
                        first_later, wall_later = first_turn(server, worker, model, steps)
                for key, value in (("first", first), ("wall", wall),
                                   ("first_later", first_later), ("wall_later", wall_later)):
                    got[mode][key].append(value)
    for mode, g in got.items():
        info(f"{mode}:", "")
        first, later = statistics.median(g["first"]), statistics.median(g["first_later"])
        wait = statistics.median(g["wait"])
        ratio = statistics.median([a / b for a, b in zip(g["wall"], g["wall_later"],
                                                         strict=True)])
        figure("  first model call's wait for the SDK", wait * 1000, "ms", "≤ 200 ms",
               wait <= 0.2)
        info("  … each start", ", ".join(f"{w * 1000:.0f}" for w in g["wait"]) + " ms")
        figure("  creation → first call, after the start", first * 1000, "ms", "", None)
        figure("  … the same later (baseline)", later * 1000, "ms", "", None)
        figure(f"  {steps} steps after the start / later", ratio, "x", "≤ 1.2x", ratio <= 1.2)
        info("  … each start", ", ".join(f"{a / b:.2f}" for a, b in zip(
            g["wall"], g["wall_later"], strict=True)) + " x")
        figure(f"  … {steps} steps after the start", statistics.median(g["wall"]), "s", "", None)
        figure("  … the same later (baseline)", statistics.median(g["wall_later"]), "s", "",
               None)
        figure("  the SDK's import in the server (its log)", statistics.median(g["sdk"]), "s",
               "", None)
        figure("  head start: server ready → session", statistics.median(g["head"]), "s", "",
               None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--starts", type=int, default=None,
                        help="d: server starts per way of running (default 3; 1 with --quick)")
    parser.add_argument("--later", type=float, default=None,
                        help="d: seconds until the baseline turn (default 60; 8 with --quick, "
                             "still past the 5 s a kept-alive connection lasts)")
    parser.add_argument("--only", choices=["a", "b", "c", "d"], action="append",
                        help="run only these parts (repeatable)")
    args = parser.parse_args()
    turns = 2 if args.quick else args.turns
    parts = args.only or ["a", "b", "c", "d"]
    with tempfile.TemporaryDirectory(prefix="codey-bench-turn-") as tmp:
        root = Path(tmp)
        if "c" in parts:
            bench_body(2000, 50 if args.quick else 200)
        if "a" in parts:
            bench_turns(root, "responses", turns, 20)
            bench_turns(root, "chat", turns, 20)
        if "b" in parts:
            bench_memory(root, 40 if args.quick else 200, 200)
        if "d" in parts:
            bench_first_session(root, args.starts or (1 if args.quick else 3),
                                args.later if args.later is not None else
                                (8.0 if args.quick else 60.0))


if __name__ == "__main__":
    main()
