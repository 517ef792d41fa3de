"""MCP executors against the real ``mcp-server-time`` over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from codey_protocol import codec
from codey_protocol.worker import ActionErrored, ActionResult, McpCall, McpList, McpTools
from codey_worker.actions import ActionDispatcher
from codey_worker.config import McpServerConfig
from codey_worker.confine import ActionRefused
from codey_worker.mcp import McpManager
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords

pytestmark = pytest.mark.integration

TIME = McpServerConfig(name="time", command=sys.executable, args=["-m", "mcp_server_time"])
BROKEN = McpServerConfig(name="broken", command="/nonexistent/mcp-server")


def _time_servers() -> list[int]:
    """Pids of mcp_server_time processes started by this test process."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        if ppid == os.getpid() and b"mcp_server_time" in cmdline:
            pids.append(int(entry))
    return pids


def test_list_call_tool_error_crash_and_restart(tmp_path: Path) -> None:
    async def main() -> None:
        manager = McpManager({"time": TIME, "broken": BROKEN}, log_dir=tmp_path / "logs")
        try:
            infos = {i.name: i for i in await manager.list_all()}
            tools = {t.name: t for t in infos["time"].tools}
            assert "get_current_time" in tools
            assert tools["get_current_time"].input_schema["required"] == ["timezone"]
            assert infos["broken"].tools == [] and infos["broken"].error

            result = await manager.call("time", "get_current_time", {"timezone": "UTC"})
            assert not result.is_error
            assert json.loads(result.text)["timezone"] == "UTC"
            assert result.content[0]["type"] == "text"

            # a tool error is a result the model can read, not a failure
            bad = await manager.call("time", "get_current_time", {"timezone": "Nowhere/Land"})
            assert bad.is_error and "Nowhere/Land" in bad.text

            with pytest.raises(ActionRefused) as unknown_tool:
                await manager.call("time", "no_such_tool", {})
            assert unknown_tool.value.code == "mcp_error"
            with pytest.raises(ActionRefused) as unknown_server:
                await manager.call("nope", "x", {})
            assert unknown_server.value.code == "unknown_mcp_server"

            # the server dies: the call that finds it dead fails, the next one restarts it
            pids = _time_servers()
            assert len(pids) == 1
            os.kill(pids[0], signal.SIGKILL)
            await asyncio.sleep(0.3)
            with pytest.raises(ActionRefused) as dead:
                await manager.call("time", "get_current_time", {"timezone": "UTC"})
            assert dead.value.code == "mcp_unavailable"
            again = await manager.call("time", "get_current_time", {"timezone": "UTC"})
            assert not again.is_error
            assert len(_time_servers()) == 1 and _time_servers() != pids
        finally:
            await manager.close()
        assert _time_servers() == []

    asyncio.run(main())


def test_dispatcher_runs_mcp_actions(tmp_path: Path) -> None:
    frames: list[bytes] = []

    async def send(frame: bytes) -> None:
        frames.append(frame)

    async def main() -> None:
        manager = McpManager({"time": TIME})
        d = ActionDispatcher(send, ActionRecords(tmp_path / "r.sqlite3"),
                             LocalPolicy(allowed_roots=[tmp_path]), mcp=manager)
        try:
            await d.handle(McpList(action_id="l1", session_id="s"))
            await d.handle(McpCall(action_id="c1", session_id="s", server="time",
                                   tool="get_current_time", arguments={"timezone": "UTC"}))
            await d.handle(McpCall(action_id="c2", session_id="s", server="time",
                                   tool="missing"))
            await d.wait_idle()
        finally:
            await d.shutdown()

    asyncio.run(main())
    answers = {m.action_id: m for m in map(codec.decode_worker_to_server, frames)
               if isinstance(m, ActionResult | ActionErrored)}
    listed = answers["l1"]
    assert isinstance(listed, ActionResult) and isinstance(listed.result, McpTools)
    assert [s.name for s in listed.result.servers] == ["time"]
    called = answers["c1"]
    assert isinstance(called, ActionResult) and "UTC" in called.result.text  # type: ignore[union-attr]
    missing = answers["c2"]
    assert isinstance(missing, ActionErrored) and missing.code == "mcp_error"
