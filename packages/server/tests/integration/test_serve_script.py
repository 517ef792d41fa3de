"""``./scripts/serve`` is the server: SIGTERM to the script's PID stops it within 5 s."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from codey_testkit.procs import ManagedProcess
from codey_testkit.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_sigterm_to_the_script_pid_stops_the_server_and_frees_the_port(tmp_path: Path) -> None:
    proc = ManagedProcess("serve-script", log_dir=tmp_path / "logs")
    proc.start([str(REPO / "scripts" / "serve")], cwd=tmp_path, env={
        "CODEY_DATA_DIR": str(tmp_path / "data"), "PORT": "0", "HOST": "127.0.0.1"})
    try:
        # the first run of the script syncs the workspace (a no-op when it is synced)
        url = proc.wait_for_line(r"codey-server listening on (http://127\.0\.0\.1:\d+)",
                                 timeout=120).group(1)
        token = re.search(r"token=(\S+)", proc.wait_for_line(r"Open \S+ in your browser",
                                                             timeout=30).group(0))
        port = int(url.rsplit(":", 1)[1])
        assert _listening(port)
        # no `uv run` (or shell) left in between: the script's PID is the server, a Python
        # running the codey-server entry point (`uv run` would be uv, relaying signals or not)
        exe = Path(f"/proc/{proc.pid}/exe").resolve()
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert exe.name.startswith("python"), (exe, cmdline)
        assert cmdline[1].endswith(b"/bin/codey-server") and cmdline[2] == b"serve", cmdline

        # a browser is connected: shutdown must not wait for it to go away
        assert token is not None
        browser = connect(url.replace("http", "ws") + "/ws/client", open_timeout=10,
                          additional_headers={"Origin": url,
                                              "Authorization": f"Bearer {token.group(1)}"},
                          legacy=True)
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        wait_until(lambda: not _listening(port), timeout=5.0, interval=0.05,
                   what="the port to be let go after SIGTERM")
        assert proc.wait(timeout=5.0 - (time.monotonic() - started) + 0.5) == 0
        with pytest.raises(ProcessLookupError):  # nothing of it is left in its group
            os.killpg(proc.pid, 0)
        browser.close()
    finally:
        proc.stop()
