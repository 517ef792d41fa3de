"""What a server's start does with the pairing requests of the log: alone, it expires them all
(their secrets were in its memory); among replicas, only the lapsed ones (the others may be a
live replica's)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from codey_protocol import events as ev
from codey_server.core.engine import Engine
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES
from codey_server.testing.writes import record
from codey_server.workers.keys import FileWorkerKeys
from codey_server.workers.pairing import Pairing


def _requested(request_id: str, expires_at: float) -> ev.WorkerPairRequested:
    return ev.WorkerPairRequested(request_id=request_id, hostname="box", os="linux",
                                  python_version="3.11", worker_version="0.1", roots=["/src"],
                                  fingerprint="ab:cd", expires_at=expires_at)


async def _pending_after_start(tmp_path: Path, *, shared: bool) -> set[str]:
    engine = Engine(MemoryEventLog(), RULES)
    await engine.start()
    now = time.time()
    await record(engine, [(None, _requested("req_old", now - 5)),
                         (None, _requested("req_live", now + 600))])
    await Pairing(engine, FileWorkerKeys(tmp_path / "workers.json")).start(shared=shared)
    return set(engine.state.pair_requests)


def test_alone_every_request_from_before_the_start_expires(tmp_path: Path) -> None:
    assert asyncio.run(_pending_after_start(tmp_path, shared=False)) == set()


def test_among_replicas_only_the_lapsed_ones_expire(tmp_path: Path) -> None:
    assert asyncio.run(_pending_after_start(tmp_path, shared=True)) == {"req_live"}
