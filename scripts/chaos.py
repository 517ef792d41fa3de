"""Kill loops (not run in CI beyond one round each, see test_chaos.py): kill -9 the server while
sessions stream and the worker mid-command, and check nothing is lost, repeated or run twice.

    uv run python scripts/chaos.py                  # 50 server kills, 20 worker kills
    uv run python scripts/chaos.py --server-kills 5 --worker-kills 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from codey_testkit.chaos import server_kills, worker_kills


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-kills", type=int, default=50)
    parser.add_argument("--worker-kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="codey-chaos-") as tmp:
        if args.server_kills:
            t0 = time.monotonic()
            r = server_kills(Path(tmp) / "server", args.server_kills, seed=args.seed)
            print(f"server kill -9: {r.rounds} rounds in {time.monotonic() - t0:.0f} s; "
                  f"{r.events} events followed; gaps {len(r.gaps)}, duplicates "
                  f"{len(r.duplicates)}, browser state differs: {r.state_differs}, "
                  f"unfinished sessions: {len(r.unfinished)}", flush=True)
            ok &= r.ok
        if args.worker_kills:
            t0 = time.monotonic()
            r = worker_kills(Path(tmp) / "worker", args.worker_kills, seed=args.seed)
            print(f"worker kill -9: {r.rounds} rounds in {time.monotonic() - t0:.0f} s; "
                  f"commands run twice: {len(r.ran_twice)} {r.ran_twice}; never started: "
                  f"{len(r.never_ran)}; unfinished "
                  f"sessions: {len(r.unfinished)}", flush=True)
            ok &= r.ok
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
