"""Warm sandboxes (issue 34): a session's commands share one bwrap, and each still gets what
a bwrap of its own gave it. (The escape attempts of test_sandbox_hostile.py run through warm
boxes too: that is the default.)"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.worker import CommandResult, RunCommand
from codey_testkit.procs import pids_with as _alive
from codey_testkit.waiting import until
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import Sandbox, SandboxSettings, detect
from codey_worker.shell import run_command

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(detect().kind != "bwrap",
                       reason=f"needs a working bubblewrap: {detect().reason}"),
]


@dataclass
class Box:
    work: Path
    sandbox: Sandbox
    policy: LocalPolicy

    async def run(self, argv: list[str], *, session: str = "s1", network: bool = False,
                  timeout_s: float = 60, **kw: Any) -> CommandResult:
        async def ignore(stream: str, text: str) -> None:
            pass

        return await run_command(RunCommand(action_id="a", session_id=session, argv=argv,
                                            workdir=str(self.work), network=network,
                                            timeout_s=timeout_s), ignore, self.policy,
                                 sandbox=self.sandbox, grace_s=kw.get("grace_s", 1.0))

    @property
    def started(self) -> int:
        assert self.sandbox.boxes is not None
        return self.sandbox.boxes.started


@pytest.fixture
def box(outside_tmp: Path) -> Iterator[Box]:
    work = outside_tmp / "ws"
    work.mkdir()
    sandbox = Sandbox(detect(), outside_tmp / "codey", SandboxSettings(hidden_paths=()))
    try:
        yield Box(work, sandbox, LocalPolicy(allowed_roots=[outside_tmp]))
    finally:
        sandbox.close_boxes()


def test_a_sessions_commands_share_one_box_and_each_its_own(box: Box) -> None:
    async def main() -> None:
        first = await box.run(["sh", "-c", "echo $$ > pid; echo one"])
        second = await box.run(["sh", "-c", "cat pid; echo two >&2; exit 3"])
        assert (first.exit_code, first.stdout) == (0, "one\n")
        assert (second.exit_code, second.stderr) == (3, "two\n")
        other = await box.run(["true"], session="s2")
        assert other.exit_code == 0
        assert box.started == 2  # one per session, not one per command
    asyncio.run(main())


def test_commands_at_once_in_one_box_keep_their_own_output_and_exit(box: Box) -> None:
    async def main() -> list[CommandResult]:
        return list(await asyncio.gather(*(
            box.run(["sh", "-c", f"sleep 0.{i}; echo out-{i}; echo err-{i} >&2; exit {i}"])
            for i in range(8))))

    results = asyncio.run(main())
    for i, result in enumerate(results):
        assert (result.exit_code, result.stdout, result.stderr) == (i, f"out-{i}\n",
                                                                    f"err-{i}\n")
    assert box.started == 1


def test_a_git_folder_made_by_one_command_is_read_only_for_the_next(box: Box) -> None:
    async def main() -> None:
        made = await box.run(["git", "init", "-q"])
        assert made.exit_code == 0, made.stderr
        assert (box.work / ".git").is_dir()
        # the box was made before .git existed: the next command gets a box that protects it
        planted = await box.run(["sh", "-c", "echo '[core] fsmonitor = x' >> .git/config"])
        assert planted.exit_code != 0 and planted.sandbox_denied, planted
        assert "fsmonitor" not in (box.work / ".git" / "config").read_text()
        assert box.started == 2
    asyncio.run(main())


def test_the_network_toggle_gets_a_box_of_its_own(box: Box) -> None:
    async def main() -> None:
        probe = ["python3", "-c", "import socket; print(len(socket.if_nameindex()))"]
        off = await box.run(probe)
        on = await box.run(probe, network=True)
        assert int(off.stdout) == 1  # loopback only: a network namespace of its own
        assert int(on.stdout) >= 1 and box.started == 2
        again = await box.run(probe)
        assert int(again.stdout) == 1 and box.started == 3
    asyncio.run(main())


def test_a_folder_removed_and_made_again_at_its_path_gets_a_box_of_its_own(
        box: Box) -> None:
    """A box binds the folder it was started for: once that folder is removed (the kernel
    then drops the box's mount of it) and a new one made at its path (a worktree made again
    from its branch, issue 33), the old box shows the new one only through its read-only
    view of the whole machine: the session could not write its own folder."""
    async def main() -> None:
        (box.work / "a.txt").write_text("first\n")
        assert (await box.run(["cat", "a.txt"])).stdout == "first\n"
        shutil.rmtree(box.work)
        box.work.mkdir()
        (box.work / "a.txt").write_text("made again\n")
        again = await box.run(["sh", "-c", "echo written > b.txt && cat a.txt"])
        assert (again.exit_code, again.stdout) == (0, "made again\n"), again
        assert (box.work / "b.txt").read_text() == "written\n"
        assert box.started == 2
        assert (await box.run(["true"])).exit_code == 0 and box.started == 2  # kept again
    asyncio.run(main())



def test_what_a_command_leaves_behind_ends_with_it_however_it_left(box: Box) -> None:
    tag = f"codey-warm-{os.getpid()}"
    # each marks its start with a file, and sleeps on
    nap = "python3 -c 'import sys, time; open(sys.argv[1], \"w\"); time.sleep(300)'"
    script = (f"{nap} {tag}-a & nohup {nap} {tag}-b >/dev/null 2>&1 & "
              f"setsid {nap} {tag}-c & ({nap} {tag}-d &) ; "
              f"while [ $(ls {tag}-* 2>/dev/null | wc -l) -lt 4 ]; do sleep 0.05; done; "
              "echo started")

    async def main() -> CommandResult:
        return await box.run(["sh", "-c", script])

    started = asyncio.run(main())
    assert started.exit_code == 0 and "started" in started.stdout, started
    assert _alive(tag) == []


def test_timeout_terms_the_group_then_kills_all_of_it(box: Box) -> None:
    async def main() -> tuple[CommandResult, float]:
        t0 = time.monotonic()
        result = await box.run(["sh", "-c", "trap '' TERM; sleep 60 & wait"], timeout_s=0.5,
                               grace_s=0.5)
        return result, time.monotonic() - t0

    result, took = asyncio.run(main())
    assert result.timed_out and result.signal == signal.SIGKILL and took < 10
    # a command that stops on TERM reports it
    async def polite() -> CommandResult:
        return await box.run(["sleep", "60"], timeout_s=0.3)

    stopped = asyncio.run(polite())
    assert stopped.timed_out and stopped.signal == signal.SIGTERM


def test_a_box_that_dies_under_a_command_says_so_and_the_next_gets_a_new_one(
        box: Box) -> None:
    async def main() -> None:
        running = asyncio.create_task(box.run(["sleep", "30"]))
        boxes = box.sandbox.boxes
        assert boxes is not None
        await until(lambda: boxes._boxes and next(iter(boxes._boxes.values())).runs,
                    interval=0.01, what="the command to run in its box")
        victim = next(iter(boxes._boxes.values()))
        os.kill(victim.proc.pid, signal.SIGKILL)
        result = await running
        assert result.signal == signal.SIGKILL and "sandbox ended" in result.stderr
        after = await box.run(["echo", "fine"])
        assert after.stdout == "fine\n" and box.started == 2
    asyncio.run(main())


def test_idle_boxes_end_and_a_detached_sessions_box_ends(box: Box) -> None:
    async def main() -> None:
        await box.run(["true"], session="a")
        await box.run(["true"], session="b")
        boxes = box.sandbox.boxes
        assert boxes is not None and len(boxes) == 2
        procs = [b.proc for b in boxes._boxes.values()]
        box.sandbox.close_box("a")
        assert len(boxes) == 1
        boxes.sweep(now=time.monotonic() + boxes.idle_s + 1)
        assert len(boxes) == 0
        for proc in procs:
            assert proc.poll() is not None  # bwrap (and all in it) gone
    asyncio.run(main())


def test_the_context_loads_git_status_runs_in_the_sessions_box_and_springs_no_trap(
        box: Box, outside_tmp: Path) -> None:
    from codey_worker.git import GitRunner

    pwned = outside_tmp / "pwned"
    made = asyncio.run(box.run(["sh", "-c", "git init -q && echo x > a.txt && git config "
                                f"core.fsmonitor 'touch {pwned}; false'"]))
    assert made.exit_code == 0, made.stderr
    runner = GitRunner(box.sandbox)
    boxes = box.sandbox.boxes
    assert boxes is not None

    async def main() -> tuple[str | None, bool | None, int]:
        current = boxes.current("s1")
        assert current is not None
        runs_before = next(current._ids)  # the box's next command number, as a counter
        branch, dirty = await runner.status(box.work, "s1")
        return branch, dirty, next(current._ids) - runs_before

    branch, dirty, used = asyncio.run(main())
    assert branch and dirty and used == 2  # one command in between: git status, in the box
    assert not pwned.exists()
