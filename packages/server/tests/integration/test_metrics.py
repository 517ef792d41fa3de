"""/metrics after a real turn: the figures count what happened, in the Prometheus format,
behind the access rules; --log-format json writes one parseable object per line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from codey_testkit.scenarios import create_session, idle, provider_config, tools, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "count"}, "reply": {"calls": [
        {"name": "shell", "arguments": {"command": ["true"]}}]}},
    {"match": {"tool": "shell"}, "reply": {"text": "counted"}},
    {"match": {"any": True}, "reply": {"text": "ok"}},
]}


@pytest.fixture
def script() -> dict[str, Any]:
    return SCRIPT


def _value(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    assert match is not None, f"{name}{labels} missing from\n{text}"
    return float(match.group(1))


def test_metrics_count_a_real_turn_and_need_the_login(tmp_path: Path, model: Any) -> None:
    config = provider_config(model)
    with ServerProcess(tmp_path / "server", config=config,
                       extra_args=["--log-format", "json"]) as server, \
            WorkerProcess(server, tmp_path / "worker") as worker:
        assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 401
        wd = Path(worker.workdir("m"))
        wd.mkdir(parents=True)
        sid = create_session(server, worker, str(wd), "count")
        wait_for(server, sid, lambda s: idle(s) and tools(s), what="the turn")
        r = httpx.get(f"{server.url}/metrics", timeout=10,
                      headers={"Authorization": f"Bearer {server.token}"})
        assert r.status_code == 200
        # the Prometheus text format's type, its charset once
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = r.text
        assert _value(text, "codey_workers_connected") == 1
        assert _value(text, "codey_sessions", '{status="idle"}') == 1
        assert _value(text, "codey_actions_total", '{outcome="result"}') == 1  # the shell call
        assert _value(text, "codey_action_seconds_count") == 1
        assert _value(text, "codey_model_call_seconds_count", '{provider="scripted"}') == 2
        assert _value(text, "codey_event_log_append_seconds_count") > 5
        assert _value(text, "codey_event_log_append_conflicts_total") >= 0
        assert not re.search(r"^codey_model_errors_total\{", text, re.M)  # none failed
        # the log: one JSON object per line, the access token masked
        lines = [line for line in server.log_text().splitlines() if line.startswith("{")]
        assert lines
        records = [json.loads(line) for line in lines]
        assert {"ts", "level", "logger", "message"} <= set(records[0])
        assert server.token and not any(server.token in line for line in lines)
        assert not any(r["logger"].startswith("httpx") for r in records)  # only at debug
