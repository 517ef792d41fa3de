"""The reviewer's added latency (issue 37): what asking a reviewer model before a command
costs a turn, with the scripted model answering at once as agent and as reviewer.

    uv run python scripts/bench/reviewer.py             # 40 turns each way (~2 minutes)
    uv run python scripts/bench/reviewer.py --turns 10  # a smoke run

A real server and worker. Each turn is one prompt whose model call asks for a command that
is not known-safe (``head -n1 notes.txt``), then a final answer. Under ``reviewer`` the
command goes to the reviewer (the same scripted server, model ``reviewer-1``, which approves
at risk 5), then runs; under ``full-auto`` (the baseline, interleaved) it runs at once.
Printed, p50 and p99:

- the approval's wait: from ``approval_requested`` to ``approval_resolved`` (the log's times),
  i.e. the whole of what the reviewer adds inside the server;
- the reviewer's own call (``approval_reviewed.latency_s``: body built, stream read, verdict
  parsed);
- the turn's wall time under each policy (prompt sent → session idle), and their difference
  of medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import figure, info, percentile

from codey_testkit.model_handle import start_model_server
from codey_testkit.scenarios import create_session, provider_config, session
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

AGENT, REVIEWER = "scripted-1", "reviewer-1"
SCRIPT: dict[str, Any] = {"model": [AGENT, REVIEWER], "steps": [
    {"match": {"model": REVIEWER, "any": True},
     "reply": {"text": json.dumps({"decision": "approve", "risk": 5,
                                   "reason": "reads a file inside the workdir"})}},
    {"match": {"user": "read it"},
     "reply": {"calls": [{"name": "shell",
                          "arguments": {"command": ["head", "-n1", "notes.txt"]}}]}},
    {"match": {"any": True}, "reply": {"text": "done"}},
]}


def _turn(server: ServerProcess, worker: WorkerProcess, wd: Path, policy: str) -> tuple[
        float, list[dict[str, Any]]]:
    started = time.perf_counter()
    sid = create_session(server, worker, str(wd), "read it", policy=policy)
    wait_until(lambda: session(server, sid), ok=lambda s: s["status"] == "idle"
               and any(i["kind"] == "assistant_message" for i in s["items"]),
               timeout=60, interval=0.005, what="the turn")
    took = time.perf_counter() - started
    r = server.http.get(f"/api/sessions/{sid}/log")
    return took, [json.loads(line) for line in r.text.splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="codey-bench-reviewer-") as tmp:
        root = Path(tmp)
        model = start_model_server(SCRIPT, root / "model")
        try:
            config = {**provider_config(model), "reviewer": {"model": REVIEWER}}
            config["providers"][0]["models"] = [AGENT, REVIEWER]
            with ServerProcess(root / "server", config=config) as server, \
                    WorkerProcess(server, root / "worker") as worker:
                wd = Path(worker.workdir("bench"))
                wd.mkdir(parents=True, exist_ok=True)
                (wd / "notes.txt").write_text("first line\n")
                _turn(server, worker, wd, "reviewer")  # warm-up: SDK, attach, first calls
                _turn(server, worker, wd, "full-auto")
                waits, calls, reviewed, plain = [], [], [], []
                for _ in range(args.turns):
                    took, envs = _turn(server, worker, wd, "reviewer")
                    reviewed.append(took)
                    asked = next(e["ts"] for e in envs
                                 if e["event"]["type"] == "approval_requested")
                    done = next(e["ts"] for e in envs
                                if e["event"]["type"] == "approval_resolved")
                    verdict = next(e["event"] for e in envs
                                   if e["event"]["type"] == "approval_reviewed")
                    assert verdict["approved"], verdict
                    waits.append(done - asked)
                    calls.append(verdict["latency_s"])
                    plain.append(_turn(server, worker, wd, "full-auto")[0])
        finally:
            model.stop()
    ms = 1000.0
    print(f"reviewer latency, {args.turns} turns each way (scripted model, answers at once)")
    figure("approval wait (requested → resolved) p50", percentile(waits, 50) * ms, "ms", "",
           None)
    figure("approval wait (requested → resolved) p99", percentile(waits, 99) * ms, "ms", "",
           None)
    figure("reviewer call (latency_s) p50", percentile(calls, 50) * ms, "ms", "", None)
    figure("reviewer call (latency_s) p99", percentile(calls, 99) * ms, "ms", "", None)
    figure("turn wall time, reviewer, p50", percentile(reviewed, 50) * ms, "ms", "", None)
    figure("turn wall time, full-auto (baseline), p50", percentile(plain, 50) * ms, "ms", "",
           None)
    info("added per reviewed action (median diff)",
         f"{(statistics.median(reviewed) - statistics.median(plain)) * ms:,.1f} ms")


if __name__ == "__main__":
    main()
