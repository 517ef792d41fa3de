"""The cost of a turn's checkpoint (issue 38), as the worker takes it: the hardened git runner
in the OS sandbox (bubblewrap where there is one), a temporary index started from the user's.

Figures (p50 over ``--turns`` turns, each changing one file, then recording):

a. this repository's own tree (a local clone of HEAD, so the refs go to the clone);
b. a generated tree of ``--files`` files (50,000) in a git repository;
c. the same tree in a plain folder (the shadow repository under $CODEY_HOME): the first
   checkpoint hashes every file, the next ones only what changed.

    uv run python scripts/bench/checkpoint.py            # ~2 minutes on 2 cores
    uv run python scripts/bench/checkpoint.py --quick    # 5,000 files, 5 turns
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from codey_worker.checkpoints import Checkpoints
from codey_worker.git import GitRunner
from codey_worker.sandbox import Sandbox, detect

ROOT = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.name=Bench",
                    "-c", "user.email=bench@example.com", *args], check=True,
                   capture_output=True)


def _generate(folder: Path, files: int) -> None:
    per_dir = 100
    for n in range(files):
        sub = folder / f"d{n // per_dir:04d}"
        if n % per_dir == 0:
            sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{n:06d}.txt").write_text(f"file {n}\n" * 8)


async def _turns(keeper: Checkpoints, folder: Path, turns: int, touch: Path
                 ) -> tuple[float, list[float]]:
    """(the first checkpoint's seconds, each later turn's)."""
    start = time.perf_counter()
    await keeper.record(folder, "bench", "t0")
    first = time.perf_counter() - start
    took = []
    for n in range(1, turns + 1):
        with touch.open("a") as f:
            f.write(f"turn {n}\n")
        start = time.perf_counter()
        await keeper.record(folder, "bench", f"t{n}")
        took.append(time.perf_counter() - start)
    return first, took


def _say(name: str, first: float, took: list[float], files: int) -> None:
    print(f"{name:<44} files={files:>6}  first={first * 1000:8.0f} ms  "
          f"p50={statistics.median(took) * 1000:7.0f} ms  max={max(took) * 1000:7.0f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    files, turns = (5_000, 5) if args.quick else (args.files, args.turns)
    support = detect()
    print(f"sandbox: {support.kind} {support.reason}".rstrip())
    base = Path(tempfile.mkdtemp(prefix="codey-bench-ckpt-", dir="/var/tmp"))
    try:
        home = base / "home"
        home.mkdir()
        keeper = Checkpoints(GitRunner(Sandbox(support, home)), home)

        own = base / "own"
        subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(own)], check=True)
        counted = len(subprocess.run(["git", "-C", str(own), "ls-files"], check=True,
                                     capture_output=True, text=True).stdout.splitlines())
        first, took = await _turns(keeper, own, turns, own / "README.md")
        _say("a. this repository's tree", first, took, counted)

        repo = base / "big"
        _generate(repo, files)
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "generated")
        first, took = await _turns(keeper, repo, turns, repo / "d0000" / "f000000.txt")
        _say(f"b. a generated tree, git ({files:,} files)", first, took, files)

        plain = base / "plain"
        _generate(plain, files)
        first, took = await _turns(keeper, plain, turns, plain / "d0000" / "f000000.txt")
        _say("c. the same, plain folder (shadow repository)", first, took, files)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
