"""The worker stops cleanly — running commands included — on SIGHUP and SIGQUIT as on SIGTERM,
and protects its own directory from the moment it is built."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
from pathlib import Path

import pytest
from rich.console import Console

from codey_worker.config import Identity, WorkerConfig
from codey_worker.confine import ActionRefused, protected_paths, resolve_inside
from codey_worker.connection import Worker
from codey_worker.console import WorkerConsole
from codey_worker.pairing import generate_key
from codey_worker.policy import LocalPolicy


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(tmp_path: Path, out: io.StringIO) -> Worker:
    home = tmp_path / "codey-home"
    home.mkdir()
    identity = Identity(worker_id="wrk_t", server="", private_key=generate_key(),
                        credential="cred")
    config = WorkerConfig(policy=LocalPolicy(allowed_roots=[tmp_path]))
    console = WorkerConsole(Console(file=out, width=200, force_terminal=False))
    return Worker(identity, f"http://127.0.0.1:{_closed_port()}", config, home, console)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM])
def test_hangup_and_quit_stop_the_worker_like_sigterm(
    tmp_path: Path, sig: signal.Signals
) -> None:
    out = io.StringIO()
    worker = _worker(tmp_path, out)
    stopped_commands: list[bool] = []
    real_cancel_all = worker.dispatcher.registry.cancel_all

    def cancel_all() -> int:
        stopped_commands.append(True)
        return real_cancel_all()

    worker.dispatcher.registry.cancel_all = cancel_all  # type: ignore[method-assign]

    async def main() -> int:
        loop = asyncio.get_running_loop()
        # while it is failing to connect and waiting to retry
        loop.call_later(0.3, os.kill, os.getpid(), sig)
        return await asyncio.wait_for(worker.run(), 10)

    # as a terminal starts it (under nohup, SIGHUP is ignored: see the test below)
    before = signal.signal(sig, signal.SIG_DFL)
    try:
        assert asyncio.run(main()) == 0
    finally:
        after = signal.signal(sig, before)
    assert f"stopping (signal {sig.name})" in out.getvalue()
    assert stopped_commands == [True]  # dispatcher.shutdown stopped the running commands
    assert after == signal.SIG_DFL  # the handler was removed again


def test_building_a_worker_protects_its_home(tmp_path: Path) -> None:
    worker = _worker(tmp_path, io.StringIO())
    assert os.path.realpath(worker.home) in protected_paths()
    with pytest.raises(ActionRefused) as info:
        resolve_inside(tmp_path, "codey-home/worker.json")
    assert info.value.code == "protected_path"
    assert resolve_inside(tmp_path, "other.txt") == tmp_path.resolve() / "other.txt"


def test_a_worker_started_under_nohup_outlives_its_terminals_hangup(tmp_path: Path) -> None:
    out = io.StringIO()
    worker = _worker(tmp_path, out)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, os.kill, os.getpid(), signal.SIGHUP)  # ignored, as nohup wants
        loop.call_later(0.6, os.kill, os.getpid(), signal.SIGTERM)  # this one stops it
        return await asyncio.wait_for(worker.run(), 10)

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert asyncio.run(main()) == 0
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
    assert "stopping (signal SIGTERM)" in out.getvalue()
    assert "SIGHUP" not in out.getvalue()
