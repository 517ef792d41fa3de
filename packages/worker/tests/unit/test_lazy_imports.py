"""An idle worker stays small: the MCP SDK, watchfiles and PyYAML are imported when an MCP
server, a watched session or a skill needs them, not when the worker starts (issue 12: an
idle worker's RSS ≤ 40 MB; the MCP SDK alone was ~30 MB and 1.5 s)."""

from __future__ import annotations

import subprocess
import sys

LAZY = ("mcp", "watchfiles", "yaml", "pydantic")


def test_starting_the_worker_imports_none_of_the_heavy_optional_libraries() -> None:
    code = ("import sys, codey_worker.cli, codey_worker.connection\n"
            f"print(sorted(m for m in {LAZY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
