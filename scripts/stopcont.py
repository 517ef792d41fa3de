"""STOP/CONT loop (issue 23; CI runs one round of each kind, see test_fencing.py): the replica
running a session is paused with kill -STOP past its lease, another takes the session over,
the paused one is resumed with kill -CONT; it must append nothing more for the session.

    uv run python scripts/stopcont.py                 # 20 rounds, streaming and commands
    uv run python scripts/stopcont.py --rounds 4 --pause 12

Three codey-server replicas on a throwaway PostgreSQL, the scripted model and a worker
(codey_testkit.stopcont). Per round and in total: stale appends (must be 0) and take-over
times (pause → another replica holds the lease, goal ≤ 10 s); and whether each session
finished on its new owner, its command ran once and its output is whole and not repeated.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from codey_testkit.stopcont import KINDS, PAUSE_S, TAKE_OVER_GOAL_S, Round, StopContCluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pause", type=float, default=PAUSE_S,
                        help="seconds each owner stays paused (its lease is 6 s)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="run in this directory and keep it (the processes' logs)")
    args = parser.parse_args()
    results: list[Round] = []
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="codey-stopcont-")))
        cluster = stack.enter_context(StopContCluster(root, rounds=args.rounds,
                                                      pause_s=args.pause))
        print(f"3 replicas up in {time.monotonic() - t0:.0f} s; {args.rounds} rounds of a "
              f"{args.pause:.0f} s pause", flush=True)
        for n in range(args.rounds):
            result = cluster.round(n, KINDS[n % len(KINDS)])
            results.append(result)
            print(result.line(), flush=True)
    stale = sum(len(r.stale) for r in results)
    took = [r.took_over_s for r in results if r.took_over_s is not None]
    failed = [r for r in results if not r.ok]
    print(f"{len(results)} rounds in {time.monotonic() - t0:.0f} s: stale appends {stale} "
          f"(goal 0); take-over {min(took):.1f} / {statistics.median(took):.1f} / "
          f"{max(took):.1f} s min / median / max (goal ≤ {TAKE_OVER_GOAL_S:.0f} s, "
          f"{len(took)} of {len(results)} taken over); rounds with a problem: {len(failed)}"
          if took else f"{len(results)} rounds: never taken over")
    for r in failed:
        print(f"  round {r.number}: {'; '.join(r.problems)}")
    print("ok" if not failed and stale == 0 else "FAILED")
    return 0 if not failed and stale == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
