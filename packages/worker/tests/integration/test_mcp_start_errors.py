"""An MCP server that fails to start says why (issue 39 §6): the first lines of its stderr
(kept in ``mcp-<name>.log``) are in the error, not only "Connection closed"; and one that
cannot start outside a session's folder is reported at hello as starting per session."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from codey_worker.config import McpServerConfig
from codey_worker.confine import ActionRefused
from codey_worker.mcp import McpManager

CONFINED = McpServerConfig(name="confined", command=sys.executable,
                           args=["-m", "codey_testkit.mcp_server", "--needs", ".marker"])
BROKEN = McpServerConfig(name="broken", command=sys.executable, args=[
    "-c", "import sys; print('Traceback (most recent call last):', file=sys.stderr); "
          "print('ImportError: no module named frobnicate', file=sys.stderr); sys.exit(3)"])


def test_a_server_that_fails_to_start_quotes_its_stderr(tmp_path: Path) -> None:
    folder = tmp_path / "wd"
    folder.mkdir()
    logs = tmp_path / "logs"
    (logs).mkdir()
    (logs / "mcp-broken.log").write_text("an older run's line\n")

    async def main() -> None:
        manager = McpManager({"broken": BROKEN}, log_dir=logs)
        try:
            with pytest.raises(ActionRefused) as err:
                await manager.list_tools("broken", folder)
            assert err.value.code == "mcp_unavailable"
            assert "could not start" in err.value.message
            assert err.value.message.endswith(
                "its stderr: Traceback (most recent call last): | ImportError: no module "
                "named frobnicate"), err.value.message
            assert "older run" not in err.value.message  # only this process's lines
        finally:
            await manager.close()

    asyncio.run(main())


def test_a_server_that_cannot_start_outside_a_session_folder_starts_per_session(
        tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".marker").write_text("")

    async def main() -> None:
        manager = McpManager({"confined": CONFINED}, log_dir=tmp_path / "logs")
        try:
            hello, = await manager.list_all()
            assert hello.tools == [] and hello.error is not None
            assert hello.error.startswith("starts per session: its tools are listed in each "
                                          "session's folder (MCP server 'confined' could not "
                                          "start"), hello.error
            assert "has no .marker: not starting" in hello.error
            listed, = await manager.list_all(repo)
            assert listed.error is None and "where" in {t.name for t in listed.tools}
        finally:
            await manager.close()

    asyncio.run(main())
