"""ActionRecords: an action is recorded once, its answer survives restarts, old ones are pruned."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from codey_testkit.waiting import wait_until
from codey_worker.records import ActionRecords, Record


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "actions.sqlite3"


def test_new_action_is_started_once(db: Path) -> None:
    with ActionRecords(db) as records:
        assert records.get("a1") is None
        assert records.mark_started("a1", b'{"type":"run_command"}') is None
        again = records.mark_started("a1", b"different")
        assert again == Record("a1", "started", b'{"type":"run_command"}', None, live=True)


def test_finish_stores_the_response_and_blocks_reruns(db: Path) -> None:
    with ActionRecords(db) as records:
        records.mark_started("a1", b"action")
        records.finish("a1", b"result-frame")
        got = records.get("a1")
        assert got == Record("a1", "finished", b"action", b"result-frame", live=False)
        assert records.mark_started("a1", b"action") == got


def test_finish_twice_keeps_the_first_response(db: Path) -> None:
    with ActionRecords(db) as records:
        records.mark_started("a1", b"action")
        records.finish("a1", b"first")
        records.finish("a1", b"second")
        assert records.get("a1") == Record("a1", "finished", b"action", b"first")


def test_finish_without_start_is_recorded(db: Path) -> None:
    with ActionRecords(db) as records:
        records.finish("refused", b"error-frame")
        got = records.get("refused")
        assert got is not None and got.status == "finished" and got.response == b"error-frame"


def test_records_survive_reopening(db: Path) -> None:
    with ActionRecords(db) as records:
        records.mark_started("done", b"a")
        records.finish("done", b"r")
        records.mark_started("midway", b"b")  # the worker "dies" before finishing
        assert records.interrupted() == []  # still live in this process
    with ActionRecords(db) as reopened:
        assert reopened.get("done") == Record("done", "finished", b"a", b"r")
        midway = reopened.get("midway")
        assert midway == Record("midway", "started", b"b", None, live=False)
        assert reopened.interrupted() == ["midway"]
        assert reopened.mark_started("midway", b"b") == midway  # never run again
        reopened.finish("midway", b"interrupted-frame")
        assert reopened.interrupted() == []


def test_prunes_to_the_newest_keep(db: Path) -> None:
    with ActionRecords(db, keep=3) as records:
        for i in range(6):
            records.mark_started(f"a{i}", b"x")
            records.finish(f"a{i}", b"r")
        assert len(records) == 3
        assert [records.get(f"a{i}") is not None for i in range(6)] == [False] * 3 + [True] * 3
    with ActionRecords(db, keep=3) as reopened:
        assert len(reopened) == 3


def test_prune_spares_actions_still_running(db: Path) -> None:
    with ActionRecords(db, keep=2) as records:
        records.mark_started("long", b"x")  # a command that runs a long time
        for i in range(5):
            records.mark_started(f"q{i}", b"x")
            records.finish(f"q{i}", b"r")
        long = records.get("long")
        assert long is not None and long.live
        assert len(records) == 3  # the two newest plus the running one
        records.finish("long", b"done")
        # Just finished, so among the freshest: its answer must survive for a re-send.
        assert records.get("long") == Record("long", "finished", b"x", b"done")
        assert len(records) == 2
        assert records.get("q4") is not None and records.get("q3") is None


def test_file_is_private(db: Path) -> None:
    with ActionRecords(db) as records:
        records.mark_started("a", b"x")
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_keep_must_be_positive(db: Path) -> None:
    with pytest.raises(ValueError):
        ActionRecords(db, keep=0)


def test_concurrent_writes_share_one_flush(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Group commit: the writes made while a flush runs are flushed together by the next."""
    with ActionRecords(db) as records:
        calls: list[int] = []
        gate = threading.Event()
        real = os.fdatasync

        def held(fd: int) -> None:
            calls.append(fd)
            if len(calls) == 1:
                gate.wait(10)
            real(fd)

        monkeypatch.setattr(os, "fdatasync", held)
        records.mark_started("a0", b"x")
        wait_until(lambda: len(calls) == 1, what="the first flush to start")
        for i in range(1, 10):  # ten actions at once, say: started and finished
            records.mark_started(f"a{i}", b"x")
            records.finish(f"a{i}", b"r")
        gate.set()
        assert records.sync(timeout=10)
        assert len(calls) == 2 and records.flushes == 2


def test_a_write_survives_kill_9_before_any_flush(db: Path) -> None:
    """What never-run-twice rests on: a returned mark_started is in the WAL, so a worker
    killed before the syncer flushed anything still finds it (the disk flush protects
    against a power cut, not against the process dying)."""
    child = (
        "import os, signal, sys, threading\n"
        "from codey_worker.records import ActionRecords\n"
        "r = ActionRecords(sys.argv[1])\n"
        "os.fdatasync = lambda fd: threading.Event().wait()  # the syncer never flushes\n"
        "r.mark_started('running', b'a')\n"
        "r.mark_started('done', b'b'); r.finish('done', b'answer')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", child, str(db)], timeout=60)
    assert done.returncode == -signal.SIGKILL
    with ActionRecords(db) as reopened:
        assert reopened.get("done") == Record("done", "finished", b"b", b"answer")
        assert reopened.interrupted() == ["running"]


def test_sync_and_close_flush_everything(db: Path) -> None:
    records = ActionRecords(db)
    records.mark_started("a", b"x")
    assert records.sync(timeout=10) and records.flushes >= 1
    records.finish("a", b"r")
    records.close()  # flushes, then stops the syncer
    with ActionRecords(db) as reopened:
        assert reopened.get("a") == Record("a", "finished", b"x", b"r")


def test_the_database_opens_with_the_first_record_not_before(db: Path) -> None:
    """An idle worker holds no SQLite connection and no syncer thread (issue 27); the file
    exists, 0600, from the start, and the first call finds what an earlier process wrote."""
    with ActionRecords(db) as first:
        first.mark_started("a", b"x")
    records = ActionRecords(db)
    try:
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        assert records._conn is None and records._syncer is None
        assert records.sync(timeout=1)  # nothing written: nothing to wait for
        assert records.mark_started("a", b"y") == Record("a", "started", b"x", None)
        assert records._conn is not None and records._syncer is not None
    finally:
        records.close()
    never_used = ActionRecords(db)
    never_used.close()  # closes what was never opened
    with pytest.raises(RuntimeError):
        never_used.get("a")
