"""Web Push: the time from an approval request to its push leaving the server (issue 37).

    uv run python scripts/bench/push_latency.py              # 200 approvals (~1 minute)
    uv run python scripts/bench/push_latency.py --count 50   # fewer

A real server, worker and scripted model, and the test kit's push service (``codey-push-
service``) with one subscribed device, on this machine. One session in ``suggest`` asks for
a command (``touch``, which needs an approval) each step; each approval is pushed, then
approved through the API, and the next one comes. For each, the figure is the push service's
receive time minus the approval's ``requested_at`` (the time of the ``approval_requested``
event in the log, the same clock): folding the event, the notices, VAPID signing, the
payload's encryption (aes128gcm) and the POST over loopback — what the push leaving the server
costs, plus one local hop. Printed: p50 and p99 (nearest rank), mean and max.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import figure, info, percentile

from codey_testkit.model_handle import start_model_server
from codey_testkit.push_service import PushServiceHandle
from codey_testkit.scenarios import create_session, provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200, help="approvals to measure")
    args = parser.parse_args()
    script = {"model": "scripted-1", "steps": [
        {"match": {"any": True},
         "reply": {"calls": [{"name": "shell", "arguments": {"command": ["touch", "x"]}}]}}]}
    with tempfile.TemporaryDirectory(prefix="codey-push-bench-") as tmp:
        root = Path(tmp)
        with start_model_server(script, root / "model") as model, \
                PushServiceHandle(root / "push") as push:
            config = {**provider_config(model), "push": {"allow_http_endpoints": True},
                      "turn_iteration_cap": args.count + 50}
            with ServerProcess(root / "server", config=config, log_dir=root / "logs") as server, \
                    WorkerProcess(server, root / "worker") as worker:
                key = server.http.get("/api/push").json()["public_key"]
                sub = push.subscription(application_server_key=key)
                r = server.http.post("/api/push/devices", json={**sub, "name": "bench"})
                r.raise_for_status()
                workdir = Path(worker.workdir("bench"))
                workdir.mkdir(parents=True)
                sid = create_session(server, worker, str(workdir), "go", policy="suggest")
                delays: list[float] = []
                seen: set[str] = set()
                started = time.monotonic()
                for n in range(args.count + 5):  # the first 5 warm up (imports, connection)
                    message = push.wait_for(
                        lambda m: (m["payload"] or {}).get("kind") == "approval"
                        and m["payload"]["approval_id"] not in seen, sub, timeout=60)
                    approval_id = message["payload"]["approval_id"]
                    seen.add(approval_id)
                    session = server.http.get(f"/api/sessions/{sid}").json()
                    approval = session["approvals"][approval_id]
                    if n >= 5:
                        delays.append(message["received_at"] - approval["requested_at"])
                    server.http.post(f"/api/sessions/{sid}/approvals/{approval_id}",
                                     json={"decision": "approve"}).raise_for_status()
                wait_until(lambda: len(push.messages(sub)) >= len(seen), timeout=30)
                elapsed = time.monotonic() - started
    info("approvals pushed", f"{len(delays)} (after 5 warm-up ones), {elapsed:.1f} s in all")
    ms = [d * 1000 for d in delays]
    figure("approval requested → push at the push service p50", percentile(ms, 50), "ms", "",
           None)
    figure("approval requested → push at the push service p99", percentile(ms, 99), "ms", "",
           None)
    figure("mean", sum(ms) / len(ms), "ms", "", None)
    figure("max", max(ms), "ms", "", None)


if __name__ == "__main__":
    main()
