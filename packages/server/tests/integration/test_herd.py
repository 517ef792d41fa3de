"""No herd at start (issue 34): sessions started together reach a model server with a small
accept queue within seconds, and reuse their connections.

The model server listens with a backlog of 5 (Python's ``socketserver`` default, as many
self-hosted OpenAI-compatible servers have: its accept queue holds 6). Before the fix the
SDK was imported on the first model call, every session started meanwhile waited for it,
and when it ended all of them opened a connection in the same instant: those past the
queue waited in TCP's retransmission (1 s, 3 s, 7 s, ...), and 100 sessions took up to two
minutes to make their first calls. Now the SDK loads as the server starts and a provider's
new connections are set up a few at a time (``agent/connections.py``).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from codey_testkit.errors import ProcessTimeoutError
from codey_testkit.model_handle import start_model_server
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess

pytestmark = pytest.mark.integration

SESSIONS = 100
#: the most a session's first model call may come after the session was created. Healthy runs
#: on a 2-core machine at a load of 7 to 11 (other suites running): 1.0 to 3.2 s, and 4.9 s
#: once at a load of 17. The herd: a connection dropped from a full accept queue waits 1 s,
#: then 3 s, 7 s, ...; 14 of 100 sessions had not called after 60 s (114 s in another run)
FIRST_CALL_S = 8.0
#: the longest quiet time between two sessions' first calls (a retransmitted SYN: 1 s, then
#: 3 s since the first try; 0.06 to 0.32 s in the healthy runs)
GAP_S = 2.5
PLAN = {"plan": [{"step": "look around", "status": "done"}]}
SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    # a tool the server runs itself, so the second call follows at once
    {"match": {"user": "herd"}, "reply": {"calls": [{"name": "update_plan", "arguments": PLAN}]}},
    {"match": {"tool": "update_plan"}, "reply": {"text": "done"}},
]}


def test_sessions_started_at_once_reach_a_model_with_a_small_accept_queue(
        tmp_path: Path) -> None:
    with start_model_server(SCRIPT, tmp_path / "model", backlog=5) as model, \
            ServerProcess(tmp_path / "server",
                          config=provider_config(model, kind="responses")) as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        try:
            # a server up for a few seconds has its SDK loaded: this test is about the
            # connections (before the fix the line never came, and the sessions waited for
            # the import on their first call)
            assert server.proc is not None
            server.proc.wait_for_line(r"the openai SDK is loaded", timeout=30)
        except ProcessTimeoutError:
            pass
        workdir = worker.root / "herd"
        workdir.mkdir(parents=True)
        created: dict[str, float] = {}

        def create(_: int) -> None:
            r = server.http.post("/api/sessions", json={
                "worker_id": worker.worker_id, "workdir": str(workdir), "prompt": "herd",
                "policy": "full-auto"})
            assert r.status_code == 201, r.text
            created[r.json()["session_id"]] = time.time()  # its turn begins now

        began = time.time()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:  # at once, as far as HTTP goes
            list(pool.map(create, range(SESSIONS)))
        calls: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60 + FIRST_CALL_S  # the herd took minutes: fail sooner
        while time.monotonic() < deadline:
            calls = model.requests("/v1/responses")
            if len(calls) >= 2 * SESSIONS:
                break
            time.sleep(0.2)

    first: dict[str, dict[str, Any]] = {}
    for call in calls:  # the session's id is the call's prompt_cache_key
        first.setdefault(call["body"]["prompt_cache_key"], call)
    missing = set(created) - set(first)
    assert not missing, f"{len(missing)} sessions never called the model in time"
    waits = sorted(first[sid]["ts"] - created[sid] for sid in created)
    arrivals = sorted(call["ts"] - began for call in first.values())
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    said = (f"first calls {arrivals[0]:.2f}–{arrivals[-1]:.2f} s after the sessions began; "
            f"a session's own wait p50 {waits[len(waits) // 2]:.2f} s, max {waits[-1]:.2f} s; "
            f"longest gap {max(gaps):.2f} s")
    print(said)  # shown with -s
    assert waits[-1] <= FIRST_CALL_S, said
    assert max(gaps) <= GAP_S, said
    # every session's second call came right after its first: over a kept-alive connection
    seen: set[str] = set()
    reused = 0
    for call in calls:
        reused += call["peer"] in seen
        seen.add(call["peer"])
    assert reused >= 0.9 * SESSIONS, f"only {reused} of {len(calls)} calls reused a connection"
