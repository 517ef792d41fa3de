"""The web terminal through the real stack: a shell in tmux on a real worker, bytes over the
server's sockets, the same shell after the browser left and came back."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.wsclient import TerminalView

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[ServerProcess, WorkerProcess, WorkerProcess]]:
    with ServerProcess(tmp_path / "server") as server:
        on = WorkerProcess(server, tmp_path / "on", config={"terminal": True}, name="on")
        off = WorkerProcess(server, tmp_path / "off", name="off")
        with on, off:  # (entering starts them)
            try:
                yield server, on, off
            finally:  # no shell outlives the test
                subprocess.run(["tmux", "-S", str(on.codey_home / "tmux.sock"), "kill-server"],
                               capture_output=True, check=False)


def _terminal(server: ServerProcess) -> dict[str, Any]:
    terminals: dict[str, Any] = server.http.get("/api/state/bootstrap").json()["state"][
        "terminals"]
    (only,) = terminals.values()
    return only


def test_a_shell_survives_its_browser_and_two_browsers_share_it(
        stack: tuple[ServerProcess, WorkerProcess, WorkerProcess]) -> None:
    server, on, off = stack
    workdir = on.root / "app"
    workdir.mkdir()
    refused = server.http.post("/api/terminals", json={"worker_id": off.worker_id,
                                                        "workdir": str(off.root)})
    assert refused.status_code == 403 and "terminal" in refused.json()["detail"]
    created = server.http.post("/api/terminals", json={"worker_id": on.worker_id,
                                                        "workdir": str(workdir)})
    assert created.status_code == 201, created.text
    terminal_id = created.json()["terminal_id"]

    first = TerminalView(server, terminal_id)
    first.type("export MARK=$((6*7)); pwd; echo hi-$MARK\r")
    first.until(b"hi-42")
    assert str(workdir).encode() in first.screen  # started in the workdir
    second = TerminalView(server, terminal_id)  # a second browser watches the same shell
    first.type("echo both-$MARK\r")
    second.until(b"both-42")
    assert _terminal(server)["viewers"] == 2
    first.ws.close()
    second.ws.close()
    wait_until(lambda: not _terminal(server)["viewers"], timeout=15, interval=0.1,
               what="the views to be detached")
    assert not _terminal(server)["closed"]

    again = TerminalView(server, terminal_id)  # the tab reopened: the same shell, its variable kept
    again.type("echo again-$MARK; echo secret-never-logged\r")
    again.until(b"again-42")
    again.resize_and_see(61, 17)
    assert server.http.post(f"/api/terminals/{terminal_id}/close").status_code == 200
    assert again.close_code() == 1000
    assert again.ended is not None and again.ended["shell_alive"] is False
    closed = _terminal(server)
    assert closed["closed"] and closed["closed_reason"] == "closed"
    assert closed["created_by"].startswith("browser ")
    # who opened and closed it is in the log; what was typed and printed is not
    def stored() -> bytes:
        db = sqlite3.connect(server.data_dir / "events.db")
        try:
            return b"\n".join(bytes(row[0]) for row in db.execute("SELECT envelope FROM events"))
        finally:
            db.close()

    log = wait_until(stored, ok=lambda log: log.count(b"terminal_detached") >= 3, timeout=15,
                     interval=0.1, show=lambda log: log.count(b"terminal_detached"),
                     what="the last view's end in the log (it is the last event)")
    assert log.count(b"terminal_attached") == 3 and log.count(b"terminal_detached") == 3
    assert b"secret-never-logged" not in log and b"hi-" not in log

    gone = TerminalView(server, terminal_id)
    assert gone.close_code() == 4404


def test_a_terminal_outside_the_allowed_roots_is_refused_by_the_worker(
        stack: tuple[ServerProcess, WorkerProcess, WorkerProcess]) -> None:
    server, on, _ = stack
    created = server.http.post("/api/terminals", json={"worker_id": on.worker_id,
                                                        "workdir": "/etc"})
    assert created.status_code == 201
    terminal_id = created.json()["terminal_id"]
    view = TerminalView(server, terminal_id)
    assert view.close_code() == 1000
    assert view.ended is not None and view.ended["code"] == "outside_allowed_roots"
    wait_until(lambda: _terminal(server)["closed"], timeout=15, interval=0.1,
               what="the terminal to be closed")
    assert _terminal(server)["closed_reason"] == "outside_allowed_roots"


def test_logging_out_closes_the_browsers_terminal_views_too(
        stack: tuple[ServerProcess, WorkerProcess, WorkerProcess]) -> None:
    """The audit logged a browser out: its own socket closed, but its terminal socket stayed
    open and the shell kept answering it."""
    server, on, _ = stack
    created = server.http.post("/api/terminals", json={"worker_id": on.worker_id,
                                                        "workdir": str(on.root)})
    terminal_id = created.json()["terminal_id"]
    view = TerminalView(server, terminal_id)
    view.type("echo before-$((6*7))\r")
    view.until(b"before-42")
    assert server.http.post("/api/logout").status_code == 200
    assert view.close_code() == 4401
    with pytest.raises(ConnectionClosed):  # nothing typed reaches the shell any more
        view.type("echo after\r")
        view.until(b"after", timeout=2)
