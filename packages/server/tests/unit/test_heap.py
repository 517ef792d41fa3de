"""``core/heap.py``: the C heap's free pages go back to the system after a snapshot."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from codey_server.core.heap import release_free_memory

_FRAGMENTED = """
import sys
from codey_server.core.heap import release_free_memory

def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

# 64 MiB in blocks below glibc's mmap threshold, each followed by a small block that stays:
# once the big ones are freed, their pages are free but in the middle of the heap
big, kept = [], []
for _ in range(1024):
    big.append(bytearray(64 * 1024))
    kept.append(bytearray(1024))
del big
before = rss_mib()
assert release_free_memory()
print(before - rss_mib())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_pages_in_the_middle_of_the_heap_go_back_to_the_system() -> None:
    out = subprocess.run([sys.executable, "-c", _FRAGMENTED], capture_output=True, text=True,
                         check=True, timeout=60)
    released_mib = float(out.stdout)
    assert released_mib > 32, out.stdout  # of the 64 MiB freed


def test_where_there_is_no_malloc_trim_nothing_is_called() -> None:
    assert release_free_memory() is (platform.libc_ver()[0] == "glibc")
