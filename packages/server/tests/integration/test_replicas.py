"""Three codey-servers (replicas) on one real PostgreSQL: the browser on one, the worker on
another, the session's turn on the third; that third one is killed with -9 in the middle of a
command. Another replica takes the session over within 10 s, the command's result comes from
the worker's replica, the session finishes, every replica shows the same state, and the command
ran once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest

from codey_protocol import codec
from codey_protocol.state import State
from codey_server.testing.folding import fold_frames
from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.postgres import PostgresCluster, pg_bin
from codey_testkit.scenarios import provider_config, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until
from codey_testkit.wsclient import BrowserSocket

pytestmark = pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed")

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "count once"},
     "reply": {"calls": [{"name": "shell", "arguments": {"command": [
         "bash", "-c", "echo ran >> counter.txt; echo started; sleep 5; echo finished"]}}]}},
    {"match": {"tool": "shell", "tool_output": "finished"},
     "reply": {"text": "Counted once, whichever server asked."}},
    {"match": {"any": True}, "reply": {"text": "unexpected"}},
]}


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresCluster]:
    with PostgresCluster() as cluster:
        yield cluster


@pytest.fixture
def model(tmp_path: Path) -> Iterator[ModelServerHandle]:
    handle = start_model_server(SCRIPT, tmp_path / "model")
    try:
        yield handle
    finally:
        handle.stop()


def _lease_owner(dsn: str, session_id: str, *, held: bool = True) -> str | None:
    """Who holds the session's lease now; with ``held=False``, who took it last, even if it
    has released it since (a release expires the row and keeps its owner)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT owner FROM codey_leases WHERE name = %s"
                           + (" AND expires > now()" if held else ""),
                           (f"session:{session_id}",)).fetchone()
    return str(row[0]) if row else None


def _fold(client: BrowserSocket) -> State:
    assert client.snapshot is not None
    return fold_frames(client.snapshot["state"], client.envelopes)


def test_killing_the_replica_that_runs_a_session_loses_and_repeats_nothing(
        tmp_path: Path, pg: PostgresCluster, model: ModelServerHandle) -> None:
    dsn = pg.create_database("replicas")
    replicas = [ServerProcess(tmp_path / f"r{n}", config=provider_config(model),
                              extra_args=["--database-url", dsn, "--replica-id", f"r{n}"])
                for n in range(3)]
    owner, worker_side, browser_side = replicas
    try:
        for replica in replicas:
            replica.start()
        # the worker pairs through, and connects to, the second replica only
        worker = WorkerProcess(worker_side, tmp_path / "worker").start()
        wd = Path(worker.workdir("w"))
        wd.mkdir(parents=True)
        browser = BrowserSocket(browser_side, after_seq=0)
        assert browser.recv(10) is not None  # its snapshot
        # every replica knows the worker is there (its events reach them all)
        for replica in replicas:
            wait_for_worker(replica, worker.worker_id)

        # the prompt goes to the first replica, which therefore runs the turn
        r = owner.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": str(wd), "prompt": "count once",
            "policy": "full-auto"})
        assert r.status_code == 201, r.text
        sid = str(r.json()["session_id"])
        wait_for(browser_side, sid, lambda s: tools(s) and "started" in tools(s)[0]["output"],
                 what="the command's output to stream to the browser's replica")
        assert _lease_owner(dsn, sid) == "r0"

        owner.kill9()
        killed_at = time.monotonic()
        # (held or not: when the command has finished before the take-over, the new owner's
        # turn only calls the model and ends, and releases the lease, within one poll)
        taken_by = wait_until(lambda: _lease_owner(dsn, sid, held=False),
                              ok=lambda o: o in ("r1", "r2"),
                              timeout=15, interval=0.1,
                              what="another replica to take the session over")
        took_over_in = time.monotonic() - killed_at
        print(f"session taken over by {taken_by} {took_over_in:.1f} s after the kill")
        assert taken_by in ("r1", "r2"), "nobody took the session over"
        assert took_over_in <= 10, f"the take-over took {took_over_in:.1f} s"

        done = wait_for(browser_side, sid, lambda s: s["status"] == "idle" and
                        s["items"][-1]["kind"] == "assistant_message", timeout=40,
                        what="the session to finish on the surviving replicas")
        assert done["items"][-1]["text"] == "Counted once, whichever server asked."
        call = tools(done)[0]
        # the result is the worker's, recorded by its replica while the session had no owner
        assert call["status"] == "done" and "finished" in call["result"], call
        # nothing runs the command again after the fact. Deliberate: a second run would start
        # from a replica's take-over, which is over by now, and write its line as soon as it
        # is spawned; the worker shows nothing of an action it was sent but has yet to spawn
        time.sleep(1.0)
        assert (wd / "counter.txt").read_text() == "ran\n"

        # both survivors reach the same seq with the same state; the browser's socket got
        # every event once, in order, and its fold is that state too
        views = wait_until(lambda: [replica.http.get("/api/state/bootstrap").json()
                                    for replica in (worker_side, browser_side)],
                           ok=lambda views: views[0]["seq"] == views[1]["seq"], timeout=15,
                           interval=0.2, show=lambda views: [v["seq"] for v in views],
                           what="the two survivors to reach the same seq")
        assert views[0]["seq"] == views[1]["seq"]
        assert views[0]["state"] == views[1]["state"]
        browser.until_seq(views[1]["seq"], timeout=15)
        seqs = [e["seq"] for e in browser.envelopes]
        first = browser.snapshot["seq"] if browser.snapshot else 0
        assert seqs == list(range(first + 1, views[1]["seq"] + 1)), "gap or duplicate"
        assert msgspec.to_builtins(_fold(browser)) == msgspec.to_builtins(
            codec.decode_state(msgspec.json.encode(views[1]["state"])))
        browser.close()
        worker.stop()
    finally:
        for replica in replicas:
            replica.stop()


def wait_for_worker(server: ServerProcess, worker_id: str, timeout: float = 15.0) -> None:
    def connected() -> bool:
        info = server.http.get("/api/state/bootstrap").json()["state"]["workers"].get(worker_id)
        return bool(info and info["connected"])

    wait_until(connected, timeout=timeout, interval=0.1,
               what=f"{server.url} to see worker {worker_id} connected")
