"""A schedule that fires every minute, on a clock the test moves (``--clock-file``), fires
exactly once per minute across two ``kill -9`` restarts: the minute missed while the server
was down runs once at start; after a longer gap only the latest runs, the older ones are
counted as skipped (a due time past the grace period is skipped too: test_schedules.py)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from codey_server.schedules.rules import parse_at
from codey_testkit.scenarios import idle, provider_config, session
from codey_testkit.stack import ServerProcess, WorkerProcess
from codey_testkit.waiting import wait_until

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "scheduled check"}, "reply": {"text": "checked"}},
    {"match": {"any": True}, "reply": {"text": "unexpected"}},
]}


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def test_every_minute_exactly_once_across_kill9_restarts(tmp_path: Path, model: Any) -> None:
    clock = tmp_path / "clock"
    clock.write_text(str(time.time()))
    config = {**provider_config(model), "schedule_grace_s": 120}
    server = ServerProcess(tmp_path / "server", config=config,
                           extra_args=["--clock-file", str(clock)])
    with server, WorkerProcess(server, tmp_path / "worker") as worker:
        wd = Path(worker.workdir("nightly"))
        wd.mkdir(parents=True)
        made = server.http.post("/api/schedules", json={
            "name": "check", "cron": "* * * * *", "worker_id": worker.worker_id,
            "workdir": str(wd), "prompt": "scheduled check", "policy": "full-auto"})
        assert made.status_code == 201, made.text
        sid = made.json()["schedule_id"]
        m0 = math.ceil(time.time() / 60) * 60  # the first due time after the schedule was made

        def runs(of: str = sid) -> list[dict[str, Any]]:
            (info,) = [s for s in server.http.get("/api/schedules").json()
                       if s["spec"]["schedule_id"] == of]
            return info["runs"]  # type: ignore[no-any-return]

        def ticked(now: float) -> None:
            """Two whole ticks of the scheduler at the clock's time ``now`` (already written),
            instead of a guess at how long two ticks take. A tick reads the clock, then looks
            at every schedule; a one-time schedule due at ``now`` made after the clock was
            written fires at the next tick that reads it, and one made after that fired, at a
            later one: by then the tick that fired the first, which looked at ``sid`` at
            ``now`` too, is over."""
            for _ in range(2):
                marker = server.http.post("/api/schedules", json={
                    "name": "tick", "at": now, "worker_id": worker.worker_id,
                    "workdir": str(wd), "prompt": "tick", "policy": "full-auto"})
                assert marker.status_code == 201, marker.text
                mid = marker.json()["schedule_id"]
                wait_until(lambda mid=mid: runs(mid), timeout=30, what="a tick")

        def at(t: float, count: int) -> None:
            clock.write_text(str(t))
            wait_until(lambda: len(runs()) >= count, timeout=30, what=f"{count} runs")

        clock.write_text(str(m0 - 20))
        ticked(m0 - 20)  # two ticks at a time before the first due one: nothing may fire
        assert runs() == []
        at(m0 + 5, 1)

        server.kill9()
        clock.write_text(str(m0 + 60 + 10))  # m0+60 passes while the server is down
        server.start()
        worker.wait_connected()
        wait_until(lambda: len(runs()) >= 2, timeout=30, what="the missed minute")
        at(m0 + 120 + 3, 3)

        server.kill9()
        clock.write_text(str(m0 + 600 + 10))  # eight minutes missed while down
        server.start()
        worker.wait_connected()
        wait_until(lambda: len(runs()) >= 4, timeout=30, what="the latest missed minute")
        ticked(m0 + 600 + 10)  # a few ticks more: nothing else may fire for that gap

        got = runs()
        assert [r["due_at"] for r in got[:3]] == [m0, m0 + 60, m0 + 120]
        assert [r["outcome"] for r in got[:3]] == ["started"] * 3
        assert got[3]["outcome"] == "started" and got[3]["due_at"] == m0 + 600
        assert got[3]["skipped"] == 7 and len(got) == 4  # m0+180 … m0+540, once, as a count
        sessions = [r["session_id"] for r in got]
        assert len(set(sessions)) == 4
        for s in sessions:
            wait_until(lambda s=s: idle(session(server, s)), timeout=30, what="a run's turn")
            done = session(server, s)
            assert done["items"][-1]["text"] == "checked"


def test_at_takes_iso_8601_or_unix_seconds_and_refuses_anything_else_in_words(
        seeded_server: Any) -> None:
    server = seeded_server({})
    base = {"name": "once", "worker_id": "wrk_test", "workdir": "/tmp/w", "prompt": "p"}

    def stored_at(sid: str) -> float:
        (info,) = [s for s in server.http.get("/api/schedules").json()
                   if s["spec"]["schedule_id"] == sid]
        assert info["done"] is False  # its time is still to come
        return float(info["spec"]["at"])

    for at, zone, expected in [
        ("2030-06-01T09:00:00Z", "UTC", 1906534800.0),
        ("2030-06-01T09:00+02:00", "UTC", 1906527600.0),
        # no offset: the schedule's zone (summer time in Paris), not the server's
        ("2030-06-01T09:00", "Europe/Paris", 1906527600.0),
        (1906534800, "UTC", 1906534800.0),
        (1906534800.5, "Asia/Tokyo", 1906534800.5),
    ]:
        made = server.http.post("/api/schedules", json={**base, "at": at, "timezone": zone})
        assert made.status_code == 201, (at, made.text)
        assert stored_at(made.json()["schedule_id"]) == expected == parse_at(at, zone)

    # a change takes the same forms
    made = server.http.post("/api/schedules", json={**base, "at": 1906534800})
    sid = made.json()["schedule_id"]
    changed = server.http.post(f"/api/schedules/{sid}",
                               json={**base, "at": "2030-06-01T10:00:00Z"})
    assert changed.status_code == 200, changed.text
    assert stored_at(sid) == 1906538400.0

    for at, words in [("tomorrow", "neither unix seconds nor an ISO 8601"),
                      ("2030-06-01", "neither unix seconds nor an ISO 8601"),
                      ("2030-02-30T09:00", "neither unix seconds nor an ISO 8601"),
                      (True, "Expected `float | str | null`")]:
        refused = server.http.post("/api/schedules", json={**base, "at": at})
        assert refused.status_code == 400, (at, refused.text)
        assert words in refused.json()["detail"], refused.json()
