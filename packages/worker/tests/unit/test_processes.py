"""Processes that outlive an action: a REPL in a terminal, a dev server polled and killed,
output capped, stdin, the session's ownership (detach, worker exit), cancel, timeouts, gone
ids. Each runs bare (``full-access``) and, where bubblewrap works, in the sandbox."""

from __future__ import annotations

import asyncio
import random
import re
import signal
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from codey_protocol.worker import ExecKill, ExecOutput, ExecStart, ExecWrite
from codey_testkit.procs import pids_with as processes_with
from codey_testkit.waiting import Deadline, wait_until
from codey_worker.confine import ActionRefused
from codey_worker.policy import LocalPolicy
from codey_worker.processes import MAX_PROCESSES, ProcessTable
from codey_worker.sandbox import Sandbox, detect
from codey_worker.shell import CommandRegistry, truncation_marker

T = TypeVar("T")
MODES = [pytest.param("full-access", id="bare"),
         pytest.param("workspace-write", id="sandboxed", marks=pytest.mark.skipif(
             detect().kind != "bwrap", reason=f"no bubblewrap: {detect().reason}"))]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def ws(outside_tmp: Path) -> Path:
    workdir = outside_tmp / "ws"
    workdir.mkdir()
    return workdir


class Rig:
    """A table on a workdir, and helpers that drive it as the dispatcher would."""

    def __init__(self, ws: Path, mode: str, home: Path) -> None:
        self.ws = ws
        self.mode = mode
        self.registry = CommandRegistry()
        self.table = ProcessTable(LocalPolicy(allowed_roots=[ws.parent], denied_commands=["sudo"]),
                                  Sandbox(detect(), home), registry=self.registry, grace_s=2.0)
        self._n = 0

    def _id(self) -> str:
        self._n += 1
        return f"act{self._n}"

    async def start(self, argv: list[str], session_id: str = "s1", **kw: Any) -> ExecOutput:
        kw.setdefault("sandbox", self.mode)
        kw.setdefault("yield_ms", 0)
        return await self.table.start(ExecStart(
            action_id=kw.pop("action_id", None) or self._id(), session_id=session_id,
            argv=argv, workdir=str(self.ws), **kw))

    async def write(self, pid: str, text: str = "", session_id: str = "s1",
                    **kw: Any) -> ExecOutput:
        kw.setdefault("yield_ms", 50)
        return await self.table.write(ExecWrite(action_id=self._id(), session_id=session_id,
                                                process_id=pid, input=text, **kw))

    async def read_until(self, pid: str, check: Callable[[str], bool], *,
                         timeout: float = 20.0, first: str = "") -> tuple[str, ExecOutput]:
        """Poll (empty writes) until ``check`` holds for the output read so far."""
        text = first
        deadline = Deadline(timeout, what="the output to hold what the test waits for")
        out = await self.write(pid, yield_ms=0)
        text += out.output
        while not check(text):
            deadline.left(last=repr(text))
            out = await self.write(pid)
            text += out.output
        return text, out

    async def until_ended(self, pid: str, timeout: float = 20.0) -> tuple[str, ExecOutput]:
        text, deadline = "", Deadline(timeout, what=f"process {pid} to end")
        while True:
            out = await self.write(pid, yield_ms=200)
            text += out.output
            if not out.running:
                return text, out
            deadline.left(last=f"still running; output: {text!r}")


def arun(make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(make())  # type: ignore[arg-type]


def tag() -> str:
    return f"{400 + random.random():.6f}"  # a sleep no one else runs



def sleeping(seconds: str) -> bool:
    """A ``sleep <seconds>`` runs: the command itself, not bwrap's processes, whose argv
    carries it from before the sandbox is set up (the command has printed nothing then)."""
    exact = b"sleep\0" + seconds.encode() + b"\0"
    for pid in processes_with(seconds):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == exact:
                return True
        except OSError:
            continue
    return False


@pytest.fixture
def rig(ws: Path, mode: str, tmp_path: Path) -> Rig:
    return Rig(ws, mode, tmp_path / "codey-home")


@pytest.fixture(params=["default", "ignored"])
def sigint(request: pytest.FixtureRequest) -> Iterator[str]:
    """The worker's own SIGINT: as usual, or ignored, as for a script's ``codey-worker &``
    (the terminal's programs must get ^C either way)."""
    if request.param == "default":
        yield "default"
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield "ignored"
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_repl_driven_through_its_terminal(rig: Rig, sigint: str) -> None:
    async def scenario() -> None:
        started = await rig.start([sys.executable, "-q", "-i"], tty=True)
        assert started.running and started.process_id.startswith("proc_")
        pid = started.process_id
        await rig.read_until(pid, lambda t: t.endswith(">>> "), first=started.output)
        text, _ = await rig.read_until(pid, lambda t: "42\n>>> " in t, first=(
            await rig.write(pid, "x = 6 * 7\nprint(x)\n")).output)
        assert "print(x)\n42\n" in text  # the input is echoed, as a terminal does
        assert "\r" not in text
        # Ctrl-C reaches the program: the terminal is its controlling terminal
        # ^C once the sleep runs (a loaded machine may take its time to read the line)
        await rig.read_until(pid, lambda t: "zz-sleeping" in t, first=(await rig.write(
            pid, "import time; print('zz-' + 'sleeping'); time.sleep(300)\n")).output)
        interrupted = await rig.write(pid, "\x03", yield_ms=100)
        text, _ = await rig.read_until(pid, lambda t: "KeyboardInterrupt" in t and
                                       t.endswith(">>> "), first=interrupted.output)
        # the terminal's size is what was asked
        _sized, _ = await rig.read_until(pid, lambda t: "(24, 80)" in t, first=(
            await rig.write(pid, "import os; print(tuple(os.get_terminal_size())[::-1])\n"
                            )).output)
        await rig.write(pid, "exit()\n", yield_ms=0)
        _, ended = await rig.until_ended(pid)
        assert (ended.exit_code, ended.signal, ended.stopped_by) == (0, None, "")
        with pytest.raises(ActionRefused) as info:
            await rig.write(pid, "print(1)\n")
        assert info.value.code == "process_ended"
        assert (await rig.write(pid)).running is False  # a poll still answers

    arun(scenario)


def test_a_dev_server_started_polled_hit_and_killed(rig: Rig) -> None:
    async def scenario() -> None:
        # network on: the server must be reachable from here (with it off, the sandbox's
        # loopback is its own)
        started = await rig.start([sys.executable, "-u", "-m", "http.server", "0", "--bind",
                                   "127.0.0.1", "--directory", str(rig.ws)],
                                  network=True, yield_ms=500)
        pid = started.process_id
        text, _ = await rig.read_until(pid, lambda t: re.search(r"port (\d+)", t) is not None,
                                       first=started.output)
        port = re.search(r"port (\d+)", text).group(1)  # type: ignore[union-attr]
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).status)
        assert body == 200
        await rig.read_until(pid, lambda t: '"GET / HTTP/1.1" 200' in t)
        assert processes_with(str(rig.ws))
        killed = await rig.table.kill(ExecKill(action_id="k", session_id="s1", process_id=pid))
        assert (killed.running, killed.stopped_by, killed.signal) == (False, "exec_kill", 15)
        assert processes_with(str(rig.ws)) == []
        listed = rig.table.listing("s1").processes
        assert [(p.process_id, p.running, p.stopped_by) for p in listed] == [
            (pid, False, "exec_kill")]

    arun(scenario)


def test_start_answers_at_once_when_the_process_ends(rig: Rig) -> None:
    async def scenario() -> ExecOutput:
        return await rig.start(["sh", "-c", "echo out; echo err >&2; exit 3"],
                               yield_ms=30_000)

    t0 = time.monotonic()
    out = arun(scenario)
    assert time.monotonic() - t0 < 25  # well before the yield: it ended
    assert (out.running, out.exit_code, out.output) == (False, 3, "out\nerr\n")


def test_unread_output_keeps_its_head_and_tail(rig: Rig) -> None:
    async def scenario() -> None:
        # it writes only once told to, and all of it is read in one answer
        started = await rig.start(["sh", "-c", "read go; seq 1 200000"], output_cap=1000)
        assert started.output == ""
        ended = await rig.write(started.process_id, "go\n", yield_ms=30_000)
        full = "".join(f"{i}\n" for i in range(1, 200001))
        assert (ended.running, ended.exit_code, ended.truncated) == (False, 0, True)
        assert ended.total_bytes == len(full)
        assert ended.output == full[:500] + truncation_marker(len(full) - 1000) + full[-500:]
        # and nothing is kept once read
        assert (await rig.write(started.process_id)).output == ""

    arun(scenario)


def test_input_and_end_of_input(rig: Rig) -> None:
    async def scenario() -> None:
        started = await rig.start(["cat"])
        pid = started.process_id
        _text, _ = await rig.read_until(pid, lambda t: t == "hello\n",
                                       first=(await rig.write(pid, "hello\n")).output)
        closed = await rig.write(pid, "bye\n", close_stdin=True, yield_ms=0)
        rest, ended = await rig.until_ended(pid)
        assert closed.output + rest == "bye\n"
        assert ended.exit_code == 0

    arun(scenario)


def test_ids_of_other_sessions_and_unknown_ids_are_gone(rig: Rig) -> None:
    async def scenario() -> None:
        started = await rig.start(["sleep", tag()])
        for session, pid in (("s2", started.process_id), ("s1", "proc_0123456789abcdef")):
            with pytest.raises(ActionRefused) as info:
                await rig.write(pid, session_id=session)
            assert info.value.code == "process_gone"
            assert "exec_start" in info.value.message
        await rig.table.close()

    arun(scenario)


def test_detach_stops_the_sessions_processes_and_their_children(rig: Rig) -> None:
    mine, theirs = tag(), tag()

    async def scenario() -> None:
        a = await rig.start(["sh", "-c", f"sleep {mine} & sleep {mine}; wait"])
        b = await rig.start(["sleep", theirs], session_id="s2")
        await asyncio.to_thread(wait_until, lambda: len(processes_with(mine)) >= 2
                                and processes_with(theirs), what="the sleeps")
        assert await rig.table.stop_session("s1") == 1
        assert processes_with(mine) == []
        assert processes_with(theirs)  # another session's process runs on
        with pytest.raises(ActionRefused) as info:
            await rig.write(a.process_id)
        assert info.value.code == "process_gone"
        assert [p.process_id for p in rig.table.listing("s2").processes] == [b.process_id]
        await rig.table.close()  # the worker stops: everything goes
        assert processes_with(theirs) == []
        assert rig.table.listing("s2").processes == []

    arun(scenario)


def test_cancelling_the_waiting_action_stops_the_process(rig: Rig) -> None:
    t = tag()

    async def scenario() -> ExecOutput:
        waiting = asyncio.create_task(rig.start(["sh", "-c", f"echo up; sleep {t}"],
                                                action_id="waits", yield_ms=30_000))
        await asyncio.to_thread(wait_until, lambda: sleeping(t), what="the sleep")
        assert rig.registry.cancel("waits")
        return await asyncio.wait_for(waiting, 20)

    out = arun(scenario)
    assert (out.running, out.stopped_by, out.output) == (False, "cancel", "up\n")
    assert processes_with(t) == []


def test_a_cancel_while_the_process_is_being_started_stops_it(rig: Rig) -> None:
    # the cancel is registered before the spawn is awaited: one that arrives meanwhile is
    # not lost (it used to find nothing to cancel, and the process ran its whole yield)
    t = tag()

    async def scenario() -> ExecOutput:
        waiting = asyncio.create_task(rig.start(["sh", "-c", f"sleep {t}"],
                                                action_id="early", yield_ms=30_000))
        await asyncio.sleep(0)  # the start has begun: checked, registered, spawning
        assert rig.registry.cancel("early")
        return await asyncio.wait_for(waiting, 20)

    out = arun(scenario)
    assert (out.running, out.stopped_by) == (False, "cancel")
    assert processes_with(t) == []


def test_timeout_stops_it(rig: Rig) -> None:
    async def scenario() -> ExecOutput:
        started = await rig.start(["sleep", tag()], timeout_s=0.3)
        return (await rig.until_ended(started.process_id))[1]

    out = arun(scenario)
    assert (out.stopped_by, out.signal) == ("timeout", 15)


def test_limits_and_refusals(rig: Rig) -> None:
    async def scenario() -> None:
        missing = await rig.start(["no-such-program-xyz"])
        assert (missing.running, missing.exit_code) == (False, 127)
        assert "not found" in missing.output or "No such file" in missing.output
        for argv, code in ((["sudo", "id"], "denied_command"), ([], "bad_request")):
            with pytest.raises(ActionRefused) as info:
                await rig.start(argv)
            assert info.value.code == code
        with pytest.raises(ActionRefused) as outside:
            await rig.start(["true"], cwd="..")
        assert outside.value.code == "path_outside_workdir"
        t = tag()
        for _ in range(MAX_PROCESSES):
            await rig.start(["sleep", t])
        with pytest.raises(ActionRefused) as many:
            await rig.start(["sleep", t])
        assert many.value.code == "too_many_processes"
        await rig.table.close()
        assert processes_with(t) == []

    arun(scenario)
