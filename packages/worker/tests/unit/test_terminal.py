"""The worker's terminal clients with a real tmux, the server's side recorded: input waits
for tmux to draw, output stops at the window until acknowledged, a detach keeps the shell."""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from codey_protocol import codec
from codey_protocol import worker as wk
from codey_testkit.waiting import until
from codey_worker.policy import LocalPolicy
from codey_worker.terminal import WINDOW, Terminals

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Recorder:
    """Stands where the server's socket is: keeps every frame the terminals send."""

    def __init__(self) -> None:
        self.frames: list[wk.WorkerToServer] = []

    async def __call__(self, frame: bytes) -> None:
        self.frames.append(codec.decode_worker_to_server(frame))

    def output(self, client_id: str) -> bytes:
        return b"".join(base64.b64decode(f.data) for f in self.frames
                        if isinstance(f, wk.TerminalOutput) and f.client_id == client_id)

    def ended(self, client_id: str) -> wk.TerminalEnded | None:
        return next((f for f in self.frames
                     if isinstance(f, wk.TerminalEnded) and f.client_id == client_id), None)


async def _until(check: Callable[[], object], timeout: float = 20.0) -> None:
    await until(check, timeout=timeout, interval=0.05)


def test_output_stops_at_the_window_until_acknowledged_and_detach_keeps_the_shell(
        tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()

    async def main() -> None:
        sent = Recorder()
        terms = Terminals(sent, LocalPolicy(allowed_roots=[work]), home, enabled=True)
        await terms.handle(wk.TerminalOpen(terminal_id="t1", client_id="c1", workdir=str(work)))
        # typed at once: it must not be lost while tmux starts
        await terms.handle(wk.TerminalInput(client_id="c1", data="echo ready-$((1+1))\r"))
        await _until(lambda: b"ready-2" in sent.output("c1"))
        await terms.handle(wk.TerminalInput(client_id="c1", data="yes flood | head -c 20000000\r"))
        await _until(lambda: len(sent.output("c1")) >= WINDOW)
        # nothing acknowledged: the pty is left unread (its reader is off: nothing reads it
        # until an ack turns it on again), and what was read from it has been sent
        client = terms._clients["c1"]
        await until(lambda: not client.reading and len(sent.output("c1")) == client.unacked,
                    what="the pty to be left unread")
        stalled = len(sent.output("c1"))
        assert WINDOW <= stalled < WINDOW + 2 * 65536
        await terms.handle(wk.TerminalAck(client_id="c1", nbytes=stalled))
        await _until(lambda: len(sent.output("c1")) > stalled)

        await terms.handle(wk.TerminalDetach(client_id="c1"))
        await _until(lambda: sent.ended("c1") is not None)
        ended = sent.ended("c1")
        assert ended is not None and ended.code == "detached" and ended.shell_alive
        alive = subprocess.run(["tmux", "-S", str(home / "tmux.sock"), "has-session", "-t",
                                "codey-t1"], check=False)
        assert alive.returncode == 0

        await terms.handle(wk.TerminalKill(terminal_id="t1"))
        await _until(lambda: subprocess.run(
            ["tmux", "-S", str(home / "tmux.sock"), "has-session", "-t", "codey-t1"],
            capture_output=True, check=False).returncode != 0)

    try:
        asyncio.run(main())
    finally:
        subprocess.run(["tmux", "-S", str(home / "tmux.sock"), "kill-server"],
                       capture_output=True, check=False)


def test_refused_when_off_or_outside_the_roots(tmp_path: Path) -> None:
    async def main() -> None:
        sent = Recorder()
        off = Terminals(sent, LocalPolicy(allowed_roots=[tmp_path]), tmp_path, enabled=False)
        await off.handle(wk.TerminalOpen(terminal_id="t1", client_id="c1", workdir=str(tmp_path)))
        on = Terminals(sent, LocalPolicy(allowed_roots=[tmp_path / "x"]), tmp_path, enabled=True)
        await on.handle(wk.TerminalOpen(terminal_id="t2", client_id="c2", workdir="/etc"))
        first, second = sent.ended("c1"), sent.ended("c2")
        assert first is not None and first.code == "terminal_disabled"
        assert second is not None and second.code == "outside_allowed_roots"
        assert not first.shell_alive and not second.shell_alive

    asyncio.run(main())
