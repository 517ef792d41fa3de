"""A web terminal among replicas: the worker's socket on one replica, the browser's terminal
socket on another. The bytes cross through the database both ways, flow control included
(a long output arrives whole), and closing the terminal from a third replica ends the view."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

pytestmark = [
    pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[list[ServerProcess], WorkerProcess]]:
    with PostgresCluster() as pg:
        dsn = pg.create_database("terminals")
        replicas = [ServerProcess(tmp_path / f"r{n}",
                                  extra_args=["--database-url", dsn, "--replica-id", f"r{n}"])
                    for n in range(3)]
        try:
            for replica in replicas:
                replica.start()
            # the worker pairs through, and connects to, the first replica only
            worker = WorkerProcess(replicas[0], tmp_path / "worker", config={"terminal": True})
            with worker:
                try:
                    yield replicas, worker
                finally:
                    subprocess.run(["tmux", "-S", str(worker.codey_home / "tmux.sock"),
                                    "kill-server"], capture_output=True, check=False)
        finally:
            for replica in replicas:
                replica.stop()


class _View:
    def __init__(self, server: ServerProcess, terminal_id: str) -> None:
        url = server.ws_url.replace("/ws/client", f"/ws/terminal/{terminal_id}")
        self.ws: ClientConnection = connect(f"{url}?cols=100&rows=30",
                                            additional_headers=server.cookie_header(),
                                            open_timeout=10)
        self.screen = b""
        self.ended: dict[str, Any] | None = None

    def type(self, text: str) -> None:
        self.ws.send(json.dumps({"type": "input", "data": text}))

    def until(self, needle: bytes, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.screen:
            left = deadline - time.monotonic()
            assert left > 0, f"{needle!r} never appeared: {self.screen[-400:]!r}"
            try:
                frame = self.ws.recv(timeout=left)
            except TimeoutError:
                continue
            if isinstance(frame, bytes):
                self.screen += frame
            else:
                self.ended = json.loads(frame)

    def close_code(self, timeout: float = 20.0) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                frame = self.ws.recv(timeout=deadline - time.monotonic())
            except ConnectionClosed as exc:
                return exc.rcvd.code if exc.rcvd else None
            except TimeoutError:
                break
            if isinstance(frame, str):
                self.ended = json.loads(frame)
        raise AssertionError("the view was not closed")


def _connected_everywhere(replicas: list[ServerProcess], worker_id: str) -> bool:
    for replica in replicas:
        info = replica.http.get("/api/state/bootstrap").json()["state"]["workers"].get(worker_id)
        if not (info and info["connected"]):
            return False
    return True


def test_a_browser_on_one_replica_types_into_a_shell_on_another_replicas_worker(
        cluster: tuple[list[ServerProcess], WorkerProcess]) -> None:
    replicas, worker = cluster
    worker_side, browser_side, third = replicas
    wait_until(lambda: _connected_everywhere(replicas, worker.worker_id), timeout=20,
               what="every replica to see the worker")
    workdir = worker.root / "app"
    workdir.mkdir()
    created = browser_side.http.post("/api/terminals", json={"worker_id": worker.worker_id,
                                                              "workdir": str(workdir)})
    assert created.status_code == 201, created.text
    terminal_id = created.json()["terminal_id"]

    view = _View(browser_side, terminal_id)
    view.type("export MARK=$((6*7)); echo hi-$MARK\r")
    view.until(b"hi-42")
    # ~600 KiB of output: more than the worker's window of unacknowledged bytes, so it only
    # arrives whole if the acknowledgements cross back to the worker's replica
    view.type("seq 1 100000 | tr '\\n' ' ' | fold -w 80; echo; echo end-$MARK\r")
    view.until(b"end-42", timeout=60)
    assert b"99999 100000" in view.screen
    view.ws.send(json.dumps({"type": "resize", "cols": 61, "rows": 17}))
    view.type("echo size-$(tput cols)x$(tput lines)\r")
    view.until(b"size-61x17")
    # a second browser on the worker's own replica watches the same shell
    local = _View(worker_side, terminal_id)
    view.type("echo both-$MARK\r")
    local.until(b"both-42")
    local.ws.close()

    assert third.http.post(f"/api/terminals/{terminal_id}/close").status_code == 200
    assert view.close_code() == 1000
    assert view.ended is not None and view.ended["shell_alive"] is False
