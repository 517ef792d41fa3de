"""The worker waits for its commands on its loop, not with a thread per command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CODE = """
import asyncio, threading
from codey_worker.cli import run_loop

async def main():
    procs = [await asyncio.create_subprocess_exec("sleep", "0.3") for _ in range(3)]
    during = threading.active_count()
    codes = [await p.wait() for p in procs]
    fail = await asyncio.create_subprocess_exec("sh", "-c", "exit 7")
    return during, codes, await fail.wait()

print(run_loop(main()))
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfds on this platform")
def test_three_running_commands_add_no_thread_and_their_exit_codes_arrive() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CODEY_EVENT_LOOP"}
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         check=True, env=env, timeout=60)
    assert out.stdout.strip() == "(1, [0, 0, 0], 7)", out.stderr
