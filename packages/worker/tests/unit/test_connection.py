"""The reconnect backoff: capped low, so a worker is back soon after its server, and reset by
a good connection. The loop is tenacity's (:data:`codey_worker.connection.RECONNECT_WAIT`);
these tests hand the worker a sleep that records each delay instead of waiting it."""

from __future__ import annotations

import asyncio
import io
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from websockets.asyncio.server import ServerConnection, serve

from codey_protocol import codec
from codey_protocol import worker as wk
from codey_worker.config import Identity, WorkerConfig
from codey_worker.connection import (
    RECONNECT_CAP_S,
    RECONNECT_WAIT,
    Worker,
    release_free_memory,
)
from codey_worker.console import WorkerConsole
from codey_worker.pairing import generate_key
from codey_worker.policy import LocalPolicy


def _reconnects(tmp_path: Path, failures: int, *, welcome: tuple[int, ...] = ()
                ) -> tuple[list[float], list[str]]:
    """Run a worker against a server that closes each connection (1011): before its
    challenge, or — for the connections numbered in ``welcome`` (1: the first) — after a
    full handshake. Returns the delays the worker waited, once ``failures`` were waited, and
    the lines it printed."""
    out = io.StringIO()
    slept: list[float] = []
    connections = 0

    async def server(ws: ServerConnection) -> None:
        nonlocal connections
        connections += 1
        if connections in welcome:
            await ws.send(codec.encode(wk.AuthChallenge(nonce="n", server_time=time.time())))
            auth = codec.decode_worker_to_server(await ws.recv(decode=False))
            assert isinstance(auth, wk.AuthResponse)
            await ws.send(codec.encode(wk.Welcome(worker_id=auth.worker_id)))
            assert isinstance(codec.decode_worker_to_server(await ws.recv(decode=False)),
                              wk.Hello)
        await ws.close(code=1011, reason="down")

    async def main() -> None:
        async with serve(server, "127.0.0.1", 0) as listening:
            port = listening.sockets[0].getsockname()[1]
            home = tmp_path / "codey-home"
            home.mkdir()

            async def sleep(delay: float) -> None:  # records, never waits
                slept.append(delay)
                if len(slept) == failures:
                    worker.stop()

            worker = Worker(
                Identity(worker_id="wrk_t", server="", private_key=generate_key(),
                         credential="cred"),
                f"http://127.0.0.1:{port}",
                WorkerConfig(policy=LocalPolicy(allowed_roots=[tmp_path])), home,
                WorkerConsole(Console(file=out, width=200, force_terminal=False)),
                handle_signals=False, sleep=sleep)
            assert await asyncio.wait_for(worker.run(), 60) == 0

    asyncio.run(main())
    return slept, out.getvalue().splitlines()


def test_the_backoff_never_waits_more_than_its_cap_however_long_the_outage(
        tmp_path: Path) -> None:
    delays, lines = _reconnects(tmp_path, 60)  # 60 failed attempts: a long outage
    assert RECONNECT_CAP_S <= 2.5
    assert max(delays) <= RECONNECT_CAP_S
    # full jitter: the delays spread over the whole range, not all at the cap
    assert min(delays) < RECONNECT_CAP_S / 4 < RECONNECT_CAP_S * 3 / 4 < max(delays)
    # each wait is said first, with the delay then waited
    said = [line for line in lines if line.startswith("reconnecting in")]
    assert said == [f"reconnecting in {d:.1f} s… (closed with code 1011)" for d in delays]


def test_it_doubles_from_half_a_second_and_starts_again_after_a_welcome(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the jitter at the top of its range: each delay is its ceiling
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    delays, lines = _reconnects(tmp_path, 6, welcome=(5,))
    # four failed connects; the fifth connection was welcomed, so its drop waits as after a
    # first failure; then doubling again
    assert delays == [0.5, 1.0, 2.0, 2.0, 0.5, 1.0]
    assert sum(line.startswith("connected to") for line in lines) == 1


def test_a_stop_during_the_wait_ends_it_at_once(tmp_path: Path) -> None:
    """The worker's own sleep waits for the delay or for :meth:`Worker.stop`, whichever
    comes first."""
    home = tmp_path / "codey-home"
    home.mkdir()

    async def main() -> float:
        worker = Worker(
            Identity(worker_id="wrk_t", server="", private_key=generate_key(),
                     credential="cred"),
            "http://127.0.0.1:9", WorkerConfig(policy=LocalPolicy(allowed_roots=[tmp_path])),
            home, WorkerConsole(Console(file=io.StringIO(), width=200, force_terminal=False)),
            handle_signals=False)
        pausing = asyncio.create_task(worker._pause(30.0))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        worker.stop()
        await asyncio.wait_for(pausing, 5)
        return time.monotonic() - started

    assert asyncio.run(main()) < 1


def test_the_policy_is_full_jitter_under_a_doubling_ceiling() -> None:
    """What tenacity's wait gives after the n-th failure: anywhere up to 0.5 s * 2**(n-1),
    at most the cap."""
    from tenacity import RetryCallState, Retrying

    state = RetryCallState(Retrying(), fn=None, args=(), kwargs={})
    for n, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 2.0), (500, 2.0)]:
        state.attempt_number = n
        delays = [RECONNECT_WAIT(state) for _ in range(200)]
        assert 0 <= min(delays) < ceiling / 4 and ceiling * 3 / 4 < max(delays) <= ceiling


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
