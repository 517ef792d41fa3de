"""MCP executors against the real ``mcp-server-time`` over stdio, and the test kit's server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from codey_protocol import codec
from codey_protocol.worker import (
    ActionErrored,
    ActionResult,
    Attached,
    AttachSession,
    McpCall,
    McpList,
    McpTools,
)
from codey_testkit.waiting import until
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

            result = await manager.call("time", "get_current_time", {"timezone": "UTC"},
                                        workdir=tmp_path)
            assert not result.is_error
            assert json.loads(result.text)["timezone"] == "UTC"
            assert result.content[0]["type"] == "text"

            # a tool error is a result the model can read, not a failure
            bad = await manager.call("time", "get_current_time", {"timezone": "Nowhere/Land"},
                                     workdir=tmp_path)
            assert bad.is_error and "Nowhere/Land" in bad.text

            with pytest.raises(ActionRefused) as unknown_tool:
                await manager.call("time", "no_such_tool", {}, workdir=tmp_path)
            assert unknown_tool.value.code == "mcp_error"
            with pytest.raises(ActionRefused) as unknown_server:
                await manager.call("nope", "x", {}, workdir=tmp_path)
            assert unknown_server.value.code == "unknown_mcp_server"

            # the server dies: the call that finds it dead fails, the next one restarts it
            pids = _time_servers()
            assert len(pids) == 1
            os.kill(pids[0], signal.SIGKILL)
            await until(lambda: pids[0] not in _time_servers(), what="the MCP server to die")
            with pytest.raises(ActionRefused) as dead:
                await manager.call("time", "get_current_time", {"timezone": "UTC"},
                                   workdir=tmp_path)
            assert dead.value.code == "mcp_unavailable"
            again = await manager.call("time", "get_current_time", {"timezone": "UTC"},
                                       workdir=tmp_path)
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
                                   tool="get_current_time", arguments={"timezone": "UTC"},
                                   workdir=str(tmp_path)))
            await d.handle(McpCall(action_id="c2", session_id="s", server="time",
                                   tool="missing", workdir=str(tmp_path)))
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


# --- confinement and annotations, with the test kit's own MCP server ------------------------

KIT = McpServerConfig(name="kit", command=sys.executable, args=["-m", "codey_testkit.mcp_server"],
                      env={"KIT_SETTING": "on", "KIT_API_TOKEN": "the-owner-put-it-here"})


def _kit_servers() -> list[int]:
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
        if ppid == os.getpid() and b"codey_testkit.mcp_server" in cmdline:
            pids.append(int(entry))
    return pids


def test_mcp_server_runs_in_the_workdir_with_it_as_root_and_a_stripped_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_SIDE_SECRET_TOKEN", "must-not-leak")
    monkeypatch.setenv("SOME_UNLISTED_VARIABLE", "not-allowlisted")
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()

    async def main() -> None:
        manager = McpManager({"kit": KIT}, log_dir=tmp_path / "logs")
        try:
            tools = {t.name: t for t in await manager.list_tools("kit")}
            assert _kit_servers() == []  # the listing process is stopped once it answered
            seen = json.loads((await manager.call("kit", "where", {}, workdir=one)).text)
            assert seen["cwd"] == str(one.resolve())
            assert seen["roots"] == [one.resolve().as_uri()]
            env = set(seen["env"])
            assert "WORKER_SIDE_SECRET_TOKEN" not in env
            assert "SOME_UNLISTED_VARIABLE" not in env
            assert {"KIT_SETTING", "KIT_API_TOKEN", "PATH", "HOME", "PWD"} <= env
            # another workdir gets its own process, cwd and root
            other = json.loads((await manager.call("kit", "where", {}, workdir=two)).text)
            assert other["cwd"] == str(two.resolve())
            assert other["roots"] == [two.resolve().as_uri()]
            assert len(_kit_servers()) == 2
            await manager.call("kit", "note", {"text": "hello"}, workdir=two)
            assert (two / "notes.txt").read_text() == "hello\n"
            assert not (one / "notes.txt").exists()
        finally:
            await manager.close()
        assert _kit_servers() == []
        assert tools["where"].read_only_hint is True
        assert tools["note"].read_only_hint is False and tools["note"].destructive_hint is False
        assert tools["wipe"].destructive_hint is True and tools["wipe"].read_only_hint is None

    asyncio.run(main())


def test_at_most_max_instances_run_per_server(tmp_path: Path) -> None:
    dirs = [tmp_path / f"w{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()

    async def main() -> None:
        manager = McpManager({"kit": KIT}, max_instances=2)
        try:
            for d in dirs:
                await manager.call("kit", "note", {"text": d.name}, workdir=d)
            assert len(_kit_servers()) == 2  # the least recently used one was stopped
            await manager.call("kit", "note", {"text": "again"}, workdir=dirs[0])
            assert (dirs[0] / "notes.txt").read_text() == "w0\nagain\n"
        finally:
            await manager.close()

    asyncio.run(main())


def test_policy_hides_and_refuses_denied_mcp_tools(tmp_path: Path) -> None:
    policy = LocalPolicy(allowed_roots=[tmp_path], denied_mcp_tools=["kit.wipe", "note"])
    frames: list[bytes] = []

    async def send(frame: bytes) -> None:
        frames.append(frame)

    async def main() -> None:
        manager = McpManager({"kit": KIT}, policy=policy)
        d = ActionDispatcher(send, ActionRecords(tmp_path / "r.sqlite3"), policy, mcp=manager)
        try:
            assert [t.name for t in await manager.list_tools("kit")] == ["where"]
            assert [t.name for t in manager.cached()[0].tools] == ["where"]
            with pytest.raises(ActionRefused) as denied:
                await manager.call("kit", "wipe", {}, workdir=tmp_path)
            assert denied.value.code == "denied_mcp_tool"
            await d.handle(McpCall(action_id="n1", session_id="s", server="kit", tool="note",
                                   arguments={"text": "x"}, workdir=str(tmp_path)))
            await d.wait_idle()
        finally:
            await d.shutdown()

    asyncio.run(main())
    answer = codec.decode_worker_to_server(frames[-1])
    assert isinstance(answer, ActionErrored) and answer.code == "denied_mcp_tool"
    assert not (tmp_path / "notes.txt").exists()


def test_mcp_call_runs_in_the_attached_workdir_and_only_inside_the_roots(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    frames: list[bytes] = []

    async def send(frame: bytes) -> None:
        frames.append(frame)

    async def main() -> None:
        manager = McpManager({"kit": KIT})
        d = ActionDispatcher(send, ActionRecords(tmp_path / "r.sqlite3"),
                             LocalPolicy(allowed_roots=[root]), mcp=manager)
        try:
            await d.handle(McpCall(action_id="c0", session_id="s", server="kit", tool="where"))
            await d.handle(AttachSession(action_id="a1", session_id="s",
                                         workdir=str(root / "ws")))
            await d.wait_idle()
            await d.handle(McpCall(action_id="c1", session_id="s", server="kit", tool="where"))
            await d.handle(McpCall(action_id="c2", session_id="s", server="kit", tool="where",
                                   workdir=str(outside)))
            await d.wait_idle()
        finally:
            await d.shutdown()

    asyncio.run(main())
    answers = {m.action_id: m for m in map(codec.decode_worker_to_server, frames)
               if isinstance(m, ActionResult | ActionErrored)}
    unattached = answers["c0"]
    assert isinstance(unattached, ActionErrored) and unattached.code == "bad_request"
    attached = answers["c1"]
    assert isinstance(attached, ActionResult)
    assert json.loads(attached.result.text)["cwd"] == str((root / "ws").resolve())  # type: ignore[union-attr]
    refused = answers["c2"]
    assert isinstance(refused, ActionErrored) and refused.code == "outside_allowed_roots"


# a server that starts only in a folder that has its marker, as mcp-server-git --repository .
# starts only in a repository (issue 24)
CONFINED = McpServerConfig(name="confined", command=sys.executable,
                           args=["-m", "codey_testkit.mcp_server", "--needs", ".marker"])


def test_a_server_confined_to_its_folder_lists_its_tools_in_the_session_workdir(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    repo = root / "repo"
    repo.mkdir(parents=True)
    (repo / ".marker").write_text("")
    frames: list[bytes] = []

    async def send(frame: bytes) -> None:
        frames.append(frame)

    async def main() -> None:
        manager = McpManager({"confined": CONFINED}, log_dir=tmp_path / "logs")
        d = ActionDispatcher(send, ActionRecords(tmp_path / "r.sqlite3"),
                             LocalPolicy(allowed_roots=[root]), mcp=manager)
        try:
            # hello's list, from an empty scratch directory: the server does not start there
            scratch, = await manager.list_all()
            assert scratch.tools == [] and "could not start" in (scratch.error or ""), scratch
            assert _kit_servers() == []
            await d.handle(AttachSession(action_id="a1", session_id="s", workdir=str(repo)))
            await d.wait_idle()
            # the listing's process is left running in the workdir, for the session's calls
            listing = _kit_servers()
            assert len(listing) == 1
            await d.handle(McpList(action_id="l1", session_id="s", workdir=str(repo)))
            await d.handle(McpCall(action_id="c1", session_id="s", server="confined",
                                   tool="where"))
            await d.wait_idle()
            assert _kit_servers() == listing  # the call went to that same process
            # and the list it gave is what the next hello reports
            cached, = manager.cached()
            assert cached.error is None and "where" in {t.name for t in cached.tools}
        finally:
            await d.shutdown()
        assert _kit_servers() == []

    asyncio.run(main())
    answers = {m.action_id: m for m in map(codec.decode_worker_to_server, frames)
               if isinstance(m, ActionResult | ActionErrored)}
    attached = answers["a1"]
    assert isinstance(attached, ActionResult) and isinstance(attached.result, Attached)
    server, = attached.result.mcp_servers
    assert server.error is None and {t.name for t in server.tools} == {"where", "note", "wipe"}
    listed = answers["l1"]
    assert isinstance(listed, ActionResult) and isinstance(listed.result, McpTools)
    assert [t.name for t in listed.result.servers[0].tools] == [t.name for t in server.tools]
    called = answers["c1"]
    assert isinstance(called, ActionResult)
    assert json.loads(called.result.text)["cwd"] == str(repo.resolve())  # type: ignore[union-attr]
