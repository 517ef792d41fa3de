"""A web terminal among replicas: the worker's socket on one replica, the browser's terminal
socket on another. The bytes cross through the database both ways, flow control included
(a long output arrives whole), and closing the terminal from a third replica ends the view."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.wsclient import TerminalView

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

    view = TerminalView(browser_side, terminal_id)
    view.type("export MARK=$((6*7)); echo hi-$MARK\r")
    view.until(b"hi-42")
    # ~600 KiB of output: more than the worker's window of unacknowledged bytes, so it only
    # arrives whole if the acknowledgements cross back to the worker's replica
    view.type("seq 1 100000 | tr '\\n' ' ' | fold -w 80; echo; echo end-$MARK\r")
    view.until(b"end-42", timeout=60)
    assert b"99999 100000" in view.screen
    view.resize_and_see(61, 17)
    # a second browser on the worker's own replica watches the same shell
    local = TerminalView(worker_side, terminal_id)
    view.type("echo both-$MARK\r")
    local.until(b"both-42")
    local.ws.close()

    assert third.http.post(f"/api/terminals/{terminal_id}/close").status_code == 200
    assert view.close_code() == 1000
    assert view.ended is not None and view.ended["shell_alive"] is False
