"""Fixtures: real processes on port 0 with temporary homes — a server (seeded with a paired
worker, or wired to the scripted model), a worker, the scripted model server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from codey_protocol import events as ev
from codey_server.eventlog import SqliteEventLog
from codey_server.upgrades.data import mark_current
from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.scenarios import provider_config
from codey_testkit.stack import ServerProcess, WorkerProcess

WORKER_ID = "wrk_test"


def seed_worker(data_dir: Path, worker_id: str = WORKER_ID) -> None:
    """Put a paired worker into a fresh log, as pairing would have (a log of this release:
    marked so, or the server would migrate it as codey 0.1.0's)."""

    async def run() -> None:
        log = SqliteEventLog(data_dir / "events.db")
        await log.open()
        await log.append([(None, ev.WorkerPaired(
            worker_id=worker_id, request_id="req_seed", hostname="seed-host", os="Linux",
            python_version="3.11", worker_version="0.1.0", roots=["/tmp"], public_key="x"))])
        await log.close()

    data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(run())
    mark_current(data_dir)


@pytest.fixture
def seeded_server(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], ServerProcess]]:
    """Start a server with a paired worker in its log and the given config."""
    started: list[ServerProcess] = []

    def make(config: dict[str, Any]) -> ServerProcess:
        data = tmp_path / f"server-{len(started)}"
        seed_worker(data)
        proc = ServerProcess(data, config=config)
        started.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for proc in started:
            proc.stop()


@pytest.fixture
def script() -> dict[str, Any]:
    """The scripted model's script; agent test modules override this fixture."""
    pytest.fail("define a `script` fixture in the test module")


@pytest.fixture
def model(tmp_path: Path, script: dict[str, Any]) -> Iterator[ModelServerHandle]:
    """The scripted model server, replaying the module's ``script``."""
    handle = start_model_server(script, tmp_path / "model")
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def server(tmp_path: Path, model: ModelServerHandle) -> Iterator[ServerProcess]:
    """A server whose only provider is the scripted model."""
    with ServerProcess(tmp_path / "server", config=provider_config(model)) as proc:
        yield proc


@pytest.fixture
def worker(tmp_path: Path, server: ServerProcess) -> Iterator[WorkerProcess]:
    """A worker paired with ``server`` through the HTTP API, connected."""
    with WorkerProcess(server, tmp_path / "worker") as w:
        yield w
