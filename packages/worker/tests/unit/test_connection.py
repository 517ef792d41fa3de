"""The reconnect backoff: capped low, so a worker is back soon after its server, and reset by
a good connection."""

from __future__ import annotations

import platform
import random
import subprocess
import sys

from codey_worker.connection import RECONNECT_CAP_S, Backoff, release_free_memory


def test_the_backoff_never_waits_more_than_its_cap_however_long_the_outage() -> None:
    backoff = Backoff(rand=random.Random(7))
    delays = [backoff.next() for _ in range(500)]  # 500 failed attempts: a long outage
    assert RECONNECT_CAP_S <= 2.5
    assert max(delays) <= RECONNECT_CAP_S
    assert backoff.ceiling() == RECONNECT_CAP_S
    # full jitter: the delays spread over the whole range, not all at the cap
    assert min(delays) < RECONNECT_CAP_S / 4 < RECONNECT_CAP_S * 3 / 4 < max(delays)


def test_it_doubles_from_half_a_second_and_starts_again_after_a_reset() -> None:
    backoff = Backoff(rand=random.Random(1))
    ceilings = []
    for _ in range(4):
        ceilings.append(backoff.ceiling())
        backoff.next()
    assert ceilings == [0.5, 1.0, 2.0, 2.0]
    backoff.reset()
    assert backoff.ceiling() == 0.5
    assert backoff.next() <= 0.5


def test_free_heap_pages_go_back_to_the_system_where_glibc_can() -> None:
    assert release_free_memory() is (platform.libc_ver()[0] == "glibc")


def test_only_a_worker_that_compiled_its_modules_trims_its_heap(tmp_path: object) -> None:
    """With a bytecode cache there is next to nothing to return, and ctypes costs 0.3 MiB."""
    code = ("import sys\nfrom codey_worker.connection import compiled_from_source\n"
            "print(compiled_from_source(), 'ctypes' in sys.modules)")
    env = {"PYTHONPYCACHEPREFIX": str(tmp_path), "PATH": ""}
    runs = [subprocess.run([sys.executable, *flag, "-c", code], env=env, capture_output=True,
                           text=True, check=True, timeout=120).stdout.split()
            for flag in (["-B"], [], [])]  # -B: no cache written; then written; then read
    assert runs == [["True", "False"], ["False", "False"], ["False", "False"]]
