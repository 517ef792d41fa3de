"""run_command's promises kept inside bubblewrap: exit codes and signals, SIGTERM before
SIGKILL, cancel, a cancelled task, the worker dying — every process of the command gone from
the host afterwards (checked on the host's /proc, by a tag only that command carries). And git
as the model runs it: with the environment the server sends, reading a real repository, and
never running the repository's fsmonitor or hooks, in the sandbox or escalated out of it."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.worker import CommandResult, RunCommand
from codey_testkit.outputs import Sink, arun
from codey_testkit.procs import pids_with as processes_with
from codey_testkit.waiting import until, wait_until
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import Sandbox, SandboxSettings, detect
from codey_worker.shell import CommandRegistry, run_command

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(detect().kind != "bwrap",
                       reason=f"needs a working bubblewrap: {detect().reason}"),
]

@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workdir = tmp_path / "ws"
    workdir.mkdir()
    return workdir


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(detect(), tmp_path / "codey")


def action(ws: Path, argv: list[str], **kw: Any) -> RunCommand:
    return RunCommand(action_id=kw.pop("action_id", "a1"), session_id="s1", argv=argv,
                      workdir=str(ws), **kw)


def run(ws: Path, box: Sandbox, argv: list[str], sink: Sink | None = None,
        **kw: Any) -> CommandResult:
    grace = kw.pop("grace_s", 1.0)
    return arun(run_command(action(ws, argv, **kw), sink or Sink(),
                            LocalPolicy(allowed_roots=[ws.parent]), grace_s=grace,
                            sandbox=box))


def tag() -> str:
    """A sleep duration no other process uses: the tag of one test's processes."""
    return f"{100 + random.random():.7f}"



def comm(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/comm").read_bytes()
    except OSError:
        return b""


def test_exit_code_output_and_signal(ws: Path, box: Sandbox) -> None:
    result = run(ws, box, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    killed = run(ws, box, ["sh", "-c", "kill -9 $$"])
    assert (killed.exit_code, killed.signal) == (None, signal.SIGKILL)


def test_missing_and_unexecutable_programs(ws: Path, box: Sandbox) -> None:
    missing = run(ws, box, ["definitely-not-a-command-xyz"])
    assert missing.exit_code == 127
    assert "command not found: definitely-not-a-command-xyz" in missing.stderr
    script = ws / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    assert run(ws, box, ["./script.sh"]).exit_code == 126
    script.chmod(0o755)
    assert run(ws, box, ["./script.sh"]).stdout == "hi\n"


def test_environment_is_the_allowlist_with_a_private_tmpdir(
        ws: Path, box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_KEY", "k1")
    monkeypatch.setenv("NOT_ALLOWLISTED", "nope")
    monkeypatch.setenv("TMPDIR", "/somewhere/else")
    result = run(ws, box, ["sh", "-c", "env"], env={"SAFE_VAR": "visible", "X_TOKEN": "t"})
    names = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert names["SAFE_VAR"] == "visible" and names["TMPDIR"] == "/tmp"
    assert not {"MY_API_KEY", "NOT_ALLOWLISTED", "X_TOKEN"} & set(names)


def test_timeout_sends_term_to_the_command_not_to_bwrap(ws: Path, box: Sandbox) -> None:
    script = 'trap "echo got-term; exit 7" TERM; echo ready; sleep 30 & wait'
    started = time.monotonic()
    result = run(ws, box, ["sh", "-c", script], timeout_s=0.5, grace_s=10.0)
    assert time.monotonic() - started < 5  # far less than the 10 s grace
    assert result.timed_out
    assert result.stdout == "ready\ngot-term\n"  # the trap ran: TERM reached it
    assert result.exit_code == 7


def test_timeout_of_a_plain_command(ws: Path, box: Sandbox) -> None:
    started = time.monotonic()
    result = run(ws, box, ["sleep", "30"], timeout_s=0.3)
    assert time.monotonic() - started < 3
    assert result.timed_out and result.signal == signal.SIGTERM


def test_term_ignoring_tree_is_killed_after_grace_and_gone(ws: Path, box: Sandbox) -> None:
    t = tag()
    script = (f'trap "" TERM; echo up; sh -c "sleep {t}" & setsid sleep {t} '
              f'>/dev/null 2>&1 & sleep {t}; wait')
    sink = Sink()
    grace = 1.0

    async def scenario() -> tuple[CommandResult, list[int]]:
        task = asyncio.ensure_future(run_command(
            action(ws, ["sh", "-c", script], timeout_s=0.5), sink,
            LocalPolicy(allowed_roots=[ws.parent]), grace_s=grace, sandbox=box))
        await until(lambda: [comm(p) for p in processes_with(t)].count(b"sleep\n") >= 3,
                    what="the three sleeps")
        running = processes_with(t)
        return await task, running

    started = time.monotonic()
    result, running = arun(scenario())
    took = time.monotonic() - started
    assert result.timed_out and result.signal == signal.SIGKILL
    assert 0.5 + grace - 0.1 <= took < 0.5 + grace + 5
    assert len(running) >= 4  # bwrap and the shells and sleeps inside
    assert processes_with(t) == []


def test_cancel_through_the_registry(ws: Path, box: Sandbox) -> None:
    t = tag()

    async def scenario() -> CommandResult:
        registry = CommandRegistry()
        sink = Sink()
        task = asyncio.create_task(run_command(
            action(ws, ["sh", "-c", f"echo started; sleep {t}"], action_id="c1"), sink,
            LocalPolicy(allowed_roots=[ws.parent]), registry=registry, grace_s=1.0,
            sandbox=box))
        await until(lambda: "started" in sink.text(), what="the command to start")
        assert registry.cancel("c1")
        return await asyncio.wait_for(task, 5)

    result = arun(scenario())
    assert result.cancelled and result.signal == signal.SIGTERM
    assert result.stdout == "started\n"
    assert processes_with(t) == []


def test_a_cancelled_task_leaves_nothing_behind(ws: Path, box: Sandbox) -> None:
    t = tag()

    async def scenario() -> None:
        sink = Sink()
        task = asyncio.create_task(run_command(
            action(ws, ["sh", "-c", f"echo up; sleep {t} >/dev/null 2>&1 & sleep {t}"]), sink,
            LocalPolicy(allowed_roots=[ws.parent]), sandbox=box))
        await until(lambda: "up" in sink.text() and len(processes_with(t)) >= 3,
                    what="the sleeps")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    arun(scenario())
    # SIGKILL to bwrap: its PID 1 dies with it (--die-with-parent), and the namespace too
    wait_until(lambda: processes_with(t) == [], timeout=10, what="the sandbox to be gone")


WORKER = """
import asyncio, sys
from codey_protocol.worker import RunCommand
from codey_worker.shell import run_command
from codey_worker.policy import LocalPolicy

async def show(stream, text):
    print(text, end="", flush=True)

action = RunCommand(action_id="a", session_id="s", workdir=sys.argv[1],
                    argv=["sh", "-c", f"sleep {sys.argv[2]} & echo up; sleep {sys.argv[2]}"])
asyncio.run(run_command(action, show, LocalPolicy(allowed_roots=[sys.argv[1]])))
"""


def test_the_sandbox_dies_with_the_worker(ws: Path) -> None:
    """kill -9 of the worker: bwrap dies with its parent, and everything inside with it."""
    t = tag()
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(ws), t],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "up\n"
        wait_until(lambda: len(processes_with(t)) >= 4, what="the command's processes")
        worker.kill()
        worker.wait(10)
        wait_until(lambda: processes_with(t) == [], timeout=10,
                   what="the sandbox to die with the worker")
    finally:
        worker.kill()
        for pid in processes_with(t):
            os.kill(pid, signal.SIGKILL)


def test_streaming_and_truncation_are_unchanged(ws: Path, box: Sandbox) -> None:
    sink = Sink()
    result = run(ws, box, ["seq", "100000"], sink, output_cap=8 * 1024 * 1024)
    expected = "".join(f"{i}\n" for i in range(1, 100001))
    assert result.stdout == expected and sink.text() == expected
    cut = run(ws, box, ["seq", "100000"], output_cap=1000)
    assert cut.truncated and cut.stdout.endswith("99999\n100000\n")


# --------------------------------------------------------------------------- git


def server_env(argv: list[str]) -> dict[str, str]:
    """The ``env`` the server's shell tool sends with ``argv`` (its approval rules)."""
    approvals = pytest.importorskip("codey_server.agent.approvals")
    env: dict[str, str] = approvals.hardened_env(argv)
    return env


def git(cwd: Path, *args: str) -> str:
    """The test's own git, on the host, outside the worker."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``ws`` as a git repository with one commit ("first": tracked.txt), its author in its
    own config; HOME (which commands inherit) an empty folder, so no global config of the
    machine's plays a part."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")  # the test's git; commands do not get it
    git(ws, "init", "-q", "-b", "main")
    git(ws, "config", "user.name", "Test")
    git(ws, "config", "user.email", "test@example.com")
    (ws / "tracked.txt").write_text("one\n")
    git(ws, "add", "tracked.txt")
    git(ws, "commit", "-q", "-m", "first")
    return ws


def test_git_reads_in_the_sandbox_with_the_env_the_server_sends(repo: Path,
                                                               box: Sandbox) -> None:
    (repo / "tracked.txt").write_text("one\ntwo\n")
    for argv, shows in ((["git", "status", "--porcelain"], " M tracked.txt\n"),
                        (["git", "diff"], "\n+two\n"),
                        (["git", "log", "--oneline"], " first\n")):
        env = server_env(argv)
        assert env["GIT_CONFIG_COUNT"] == "4" and env["GIT_CONFIG_KEY_0"] == "core.fsmonitor"
        result = run(repo, box, argv, env=env)
        assert (result.exit_code, result.stderr) == (0, ""), f"{argv}: {result.stderr}"
        assert shows in result.stdout, argv
    # (git status could not take the index's lock in the read-only .git: it went on without)
    assert git(repo, "status", "--porcelain") == " M tracked.txt\n"


def test_the_actions_git_settings_are_kept_and_the_hardening_comes_last(
        repo: Path, box: Sandbox) -> None:
    env = {"GIT_CONFIG_COUNT": "2",
           "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "Set By The Action",
           "GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": ".git/hooks"}
    script = "git config user.name; git config core.hooksPath; git config core.fsmonitor"
    result = run(repo, box, ["sh", "-c", script], env=env)
    assert result.stderr == ""
    assert result.stdout.splitlines() == ["Set By The Action", "/dev/null", "false"]


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    """A folder outside the workdir that sandboxed commands may write: a trap that ran, in
    the sandbox or out of it, leaves its mark there."""
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder


def test_a_repositorys_fsmonitor_and_hooks_never_run_in_the_sandbox_or_escalated(
        repo: Path, marks: Path, tmp_path: Path) -> None:
    box = Sandbox(detect(), tmp_path / "codey", SandboxSettings(writable_paths=(str(marks),)))
    git(repo, "config", "core.fsmonitor", f"touch {marks}/fsmonitor; false")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marks}/pre-commit\n")
    hook.chmod(0o755)
    (repo / "tracked.txt").write_text("one\ntwo\n")
    # the traps are armed: a plain git on the host springs both
    git(repo, "status", "--porcelain")
    assert (marks / "fsmonitor").exists()
    probe = repo / "probe.txt"
    probe.write_text("x\n")
    git(repo, "add", "probe.txt")
    git(repo, "commit", "-q", "-m", "probe")
    assert (marks / "pre-commit").exists()
    for mark in marks.iterdir():
        mark.unlink()

    status = ["git", "status", "--porcelain"]
    # with the server's env, with none (an older server; an ACP agent's git), and a git the
    # server cannot see (inside a shell)
    for argv, env in ((status, server_env(status)), (status, {}),
                      (["sh", "-c", "git status --porcelain && git diff --stat"], {})):
        result = run(repo, box, argv, env=env)
        assert (result.exit_code, result.stderr) == (0, ""), f"{argv}: {result.stderr}"
        assert " M tracked.txt" in result.stdout
    assert sorted(marks.iterdir()) == []

    # the model's commit: the sandbox keeps .git read-only, the user lets it out, and it
    # runs out there without the repository's hook or fsmonitor
    commit = ["git", "commit", "-q", "-a", "-m", "second"]
    sandboxed = run(repo, box, commit, env=server_env(commit))
    assert sandboxed.exit_code != 0 and sandboxed.sandbox_denied, sandboxed.stderr
    escalated = run(repo, box, commit, env=server_env(commit), sandbox="full-access")
    assert (escalated.exit_code, escalated.stderr) == (0, "")
    assert git(repo, "log", "-1", "--format=%s") == "second\n"
    (repo / "tracked.txt").write_text("three\n")
    for argv in (status, ["git", "commit", "-q", "-a", "-m", "third"]):
        outside = run(repo, box, argv, env={}, sandbox="full-access")
        assert (outside.exit_code, outside.stderr) == (0, ""), f"{argv}: {outside.stderr}"
    assert git(repo, "log", "-1", "--format=%s") == "third\n"
    assert sorted(marks.iterdir()) == []
