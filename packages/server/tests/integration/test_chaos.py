"""One round of each kill loop of scripts/chaos.py (which runs them many times)."""

from __future__ import annotations

from pathlib import Path

from codey_testkit.chaos import server_kills, worker_kills


def test_a_server_kill_mid_stream_loses_and_repeats_nothing(tmp_path: Path) -> None:
    result = server_kills(tmp_path, 1)
    assert result.rounds == 1 and result.events > 0
    assert result.ok, result


def test_a_worker_kill_mid_command_runs_nothing_twice(tmp_path: Path) -> None:
    result = worker_kills(tmp_path, 1)
    assert result.rounds == 1
    assert result.ok, result
