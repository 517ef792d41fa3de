"""run_command with real processes, outside the sandbox (``full-access``): every safety rule
has its own test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.worker import (
    GIT_COMMAND_HARDENING,
    GIT_HARDENING,
    CommandResult,
    RunCommand,
)
from codey_testkit.outputs import Sink, arun
from codey_testkit.waiting import until, wait_until
from codey_worker.confine import ActionRefused
from codey_worker.frames import FRAME_BUDGET
from codey_worker.policy import LocalPolicy
from codey_worker.shell import (
    CHUNK_MAX,
    CommandRegistry,
    build_env,
    merge_git_env,
    run_command,
    truncation_marker,
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workdir = tmp_path / "ws"
    workdir.mkdir()
    return workdir


@pytest.fixture
def policy(tmp_path: Path) -> LocalPolicy:
    return LocalPolicy(allowed_roots=[tmp_path], denied_commands=["rm"])


def action(ws: Path, argv: list[str], **kw: Any) -> RunCommand:
    # the bare run path (as under full access); test_exec_sandboxed.py runs the same
    # machinery inside bwrap
    kw.setdefault("sandbox", "full-access")
    return RunCommand(action_id=kw.pop("action_id", "a1"), session_id="s1", argv=argv,
                      workdir=str(ws), **kw)  # fmt: skip


def run(ws: Path, policy: LocalPolicy, argv: list[str], sink: Sink | None = None,
        **kw: Any) -> CommandResult:  # fmt: skip
    grace = kw.pop("grace_s", 1.0)
    return arun(run_command(action(ws, argv, **kw), sink or Sink(), policy, grace_s=grace))


def group_gone_within(pgid: int, seconds: float) -> bool:
    """True once no process of the group exists (a timeout says so). Orphaned zombies are
    reaped by PID 1, which in some containers takes a second or two, hence the wait."""

    def gone() -> bool:
        # a killed child of this very process stays a zombie once the test's event loop (and
        # its child watcher) is gone: reap it here, as the worker's running loop would
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-pgid, os.WNOHANG)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        return False

    return wait_until(gone, timeout=seconds, interval=0.05,
                      what=f"no process of group {pgid} left")


def live_pids(pids: list[int]) -> list[int]:
    """The pids that still run (a zombie has finished running)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in (b"Z", b"X"):
            alive.append(pid)
    return alive


def none_alive_within(pids: list[int], seconds: float) -> bool:
    """True once none of ``pids`` runs (a timeout says which do); a SIGKILLed process may take
    a moment to finish exiting after it closed its pipes."""
    return not wait_until(lambda: live_pids(pids), ok=lambda alive: not alive, timeout=seconds,
                          what=f"none of {pids} to run")


def vm_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


# --------------------------------------------------------------------------- basics


def test_exit_code_stdout_and_stderr_are_separate(ws: Path, policy: LocalPolicy) -> None:
    result = run(ws, policy, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not (result.truncated or result.timed_out or result.cancelled)
    assert result.signal is None


def test_killed_by_signal_reports_signal_not_exit_code(ws: Path, policy: LocalPolicy) -> None:
    result = run(ws, policy, ["sh", "-c", "kill -9 $$"])
    assert result.exit_code is None
    assert result.signal == signal.SIGKILL


def test_command_not_found_is_exit_127_with_message(ws: Path, policy: LocalPolicy) -> None:
    result = run(ws, policy, ["definitely-not-a-command-xyz", "arg"])
    assert result.exit_code == 127
    assert "command not found: definitely-not-a-command-xyz" in result.stderr


def test_not_executable_is_exit_126(ws: Path, policy: LocalPolicy) -> None:
    script = ws / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = run(ws, policy, ["./script.sh"])
    assert result.exit_code == 126
    assert "cannot execute" in result.stderr


def test_argv_is_not_a_shell_string(ws: Path, policy: LocalPolicy) -> None:
    result = run(ws, policy, ["echo", "$HOME; touch pwned", "`id`"])
    assert result.stdout == "$HOME; touch pwned `id`\n"
    assert not (ws / "pwned").exists()


def test_empty_argv_is_a_bad_request(ws: Path, policy: LocalPolicy) -> None:
    with pytest.raises(ActionRefused) as info:
        run(ws, policy, [])
    assert info.value.code == "bad_request"


def test_stdin_is_empty(ws: Path, policy: LocalPolicy) -> None:
    result = run(ws, policy, ["cat"], timeout_s=5)
    assert result.exit_code == 0 and result.stdout == ""


# --------------------------------------------------------------------------- cwd confinement


def test_cwd_inside_is_used_and_realpath(ws: Path, policy: LocalPolicy) -> None:
    (ws / "sub").mkdir()
    result = run(ws, policy, ["sh", "-c", "pwd -P; echo $PWD"], cwd="sub")
    real = os.path.realpath(ws / "sub")
    assert result.stdout == f"{real}\n{real}\n"


def _refused_without_running(ws: Path, policy: LocalPolicy, code: str, **kw: Any) -> None:
    marker = ws.parent / "ran"
    with pytest.raises(ActionRefused) as info:
        run(ws, policy, ["touch", str(marker)], **kw)
    assert info.value.code == code
    assert not marker.exists()


def test_cwd_dotdot_escape_refused(ws: Path, policy: LocalPolicy) -> None:
    _refused_without_running(ws, policy, "path_outside_workdir", cwd="..")


def test_cwd_absolute_outside_refused(ws: Path, policy: LocalPolicy) -> None:
    _refused_without_running(ws, policy, "path_outside_workdir", cwd="/tmp")


def test_cwd_symlink_out_refused(ws: Path, policy: LocalPolicy, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (ws / "out").symlink_to(tmp_path / "elsewhere")
    _refused_without_running(ws, policy, "path_outside_workdir", cwd="out")


def test_cwd_sibling_prefix_refused(ws: Path, policy: LocalPolicy, tmp_path: Path) -> None:
    evil = tmp_path / "ws-evil"
    evil.mkdir()
    _refused_without_running(ws, policy, "path_outside_workdir", cwd=str(evil))


def test_missing_cwd_is_not_found(ws: Path, policy: LocalPolicy) -> None:
    _refused_without_running(ws, policy, "not_found", cwd="missing")


def test_workdir_outside_allowed_roots_refused(ws: Path) -> None:
    narrow = LocalPolicy(allowed_roots=[ws / "only-here"])
    _refused_without_running(ws, narrow, "outside_allowed_roots")


# --------------------------------------------------------------------------- denied commands


def test_denied_command_refused_directly(ws: Path, policy: LocalPolicy) -> None:
    (ws / "keep").write_text("x")
    with pytest.raises(ActionRefused) as info:
        run(ws, policy, ["rm", "keep"])
    assert info.value.code == "denied_command"
    assert (ws / "keep").exists()


def test_denied_command_refused_via_bash_c(ws: Path, policy: LocalPolicy) -> None:
    (ws / "keep").write_text("x")
    with pytest.raises(ActionRefused) as info:
        run(ws, policy, ["bash", "-c", "echo hi; rm keep"])
    assert info.value.code == "denied_command"
    assert (ws / "keep").exists()


# --------------------------------------------------------------------------- environment

SECRETS = {
    "MY_API_KEY": "k1",
    "GH_TOKEN": "t1",
    "db_secret": "s1",
    "OPENAI_API_KEY": "sk-1",
}


def git_settings(env: dict[str, str]) -> list[tuple[str, str]]:
    """The (key, value) pairs ``env`` gives git, in order (as git reads them)."""
    return [(env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"])
            for n in range(int(env.get("GIT_CONFIG_COUNT", "0")))]


def _git_env(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return {"GIT_CONFIG_COUNT": str(len(pairs)),
            **{f"GIT_CONFIG_KEY_{n}": k for n, (k, _) in enumerate(pairs)},
            **{f"GIT_CONFIG_VALUE_{n}": v for n, (_, v) in enumerate(pairs)}}


HARDENING_ENV = _git_env(GIT_HARDENING)  # what the server sends with git
COMMAND_ENV = _git_env(GIT_COMMAND_HARDENING)  # what the worker adds to every command


def test_build_env_allowlist_and_stripping() -> None:
    base = {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "RANDOM_VAR": "x", "GH_TOKEN": "t"}
    extra = {"EXTRA": "1", "aws_secret_access_key": "a", "x_Token_y": "b"}
    env = build_env(extra, base, "/w")
    assert env == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "EXTRA": "1", "PWD": "/w",
                   **COMMAND_ENV}
    assert build_env(extra, base, "/w", harden_git=False) == {
        "PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "EXTRA": "1", "PWD": "/w"}


def test_git_config_keys_pass_the_secret_filter_and_nothing_else_does() -> None:
    # what the server sends with git: its settings, each once, the worker's last
    assert git_settings(build_env(HARDENING_ENV, {})) == [("safe.bareRepository", "explicit"),
                                                         *GIT_COMMAND_HARDENING]
    extra = {"GIT_CONFIG_COUNT": "2",
             "GIT_CONFIG_KEY_0": "http.https://example.com/.extraHeader",
             "GIT_CONFIG_VALUE_0": "X-Trace: 1",
             # not a config key: free text cannot ride on the name
             "GIT_CONFIG_KEY_1": "sk-live secret value", "GIT_CONFIG_VALUE_1": "x",
             # names that only look like git's keep being secrets
             "GIT_CONFIG_KEY_0_TOKEN": "t", "git_config_key_0": "k", "GIT_CONFIG_KEY_X": "k",
             "MY_GIT_CONFIG_KEY_0": "k"}
    env = build_env(extra, {"GIT_CONFIG_KEY_5": "core.sshCommand"})
    assert git_settings(env) == [("http.https://example.com/.extraHeader", "X-Trace: 1"),
                                 *GIT_COMMAND_HARDENING]
    assert not {"GIT_CONFIG_KEY_0_TOKEN", "git_config_key_0", "GIT_CONFIG_KEY_X",
                "MY_GIT_CONFIG_KEY_0", "GIT_CONFIG_KEY_5"} & set(env)
    assert "sk-live secret value" not in env.values()
    # the worker's own environment gives git nothing (not on the allowlist)
    inherited = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                 "GIT_CONFIG_VALUE_0": "Authorization: Bearer t0ken"}
    assert git_settings(build_env({}, inherited)) == list(GIT_COMMAND_HARDENING)


def test_the_actions_git_settings_are_merged_never_replaced() -> None:
    extra = {"GIT_CONFIG_COUNT": "3", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "A",
             "GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": ".git/hooks",
             "GIT_CONFIG_KEY_2": "CORE.FSMONITOR", "GIT_CONFIG_VALUE_2": "./watch.sh"}
    assert git_settings(build_env(extra, {})) == [("user.name", "A"), *GIT_COMMAND_HARDENING]
    # a set git would refuse (a pair missing, a count that is not one) keeps what is whole
    broken = {"GIT_CONFIG_COUNT": "3", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "A",
              "GIT_CONFIG_KEY_2": "user.email", "GIT_CONFIG_VALUE_2": "a@b"}
    assert git_settings(build_env(broken, {})) == [("user.name", "A"), ("user.email", "a@b"),
                                                   *GIT_COMMAND_HARDENING]
    assert git_settings(build_env({"GIT_CONFIG_COUNT": "many", "GIT_CONFIG_KEY_0": "a.b",
                                   "GIT_CONFIG_VALUE_0": "c"}, {})) == list(GIT_COMMAND_HARDENING)
    # an owner's env for an MCP server or an ACP agent comes after, and wins where it says so
    owner = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath",
             "GIT_CONFIG_VALUE_0": ".githooks", "API_KEY": "k"}
    merged = merge_git_env(build_env({}, {}), owner)
    assert git_settings(merged) == [*GIT_COMMAND_HARDENING, ("core.hooksPath", ".githooks")]
    assert merged["API_KEY"] == "k"


def test_secrets_invisible_to_grandchild(
    ws: Path, policy: LocalPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NOT_ALLOWLISTED", "nope")
    extra = {**{k: v + "-from-action" for k, v in SECRETS.items()}, "SAFE_VAR": "visible"}
    result = run(ws, policy, ["sh", "-c", "sh -c env"], env=extra)
    assert result.exit_code == 0
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    for name in SECRETS:
        assert name not in names
        assert name.upper() not in {n.upper() for n in names}
    assert "NOT_ALLOWLISTED" not in names
    assert "PATH" in names and "SAFE_VAR=visible" in result.stdout
    for value in SECRETS.values():
        assert value not in result.stdout


# --------------------------------------------------------------------------- timeout and kill


def test_timeout_terminates(ws: Path, policy: LocalPolicy) -> None:
    started = time.monotonic()
    result = run(ws, policy, ["sleep", "30"], timeout_s=0.3)
    assert time.monotonic() - started < 3
    assert result.timed_out and not result.cancelled
    assert result.exit_code is None and result.signal == signal.SIGTERM


def test_timeout_sends_term_first_and_does_not_wait_the_grace(
    ws: Path, policy: LocalPolicy
) -> None:
    script = 'trap "echo got-term; exit 7" TERM; echo ready; sleep 30 & wait'
    started = time.monotonic()
    result = run(ws, policy, ["sh", "-c", script], timeout_s=0.5, grace_s=10.0)
    assert time.monotonic() - started < 5  # far less than the 10 s grace
    assert result.timed_out
    assert result.stdout == "ready\ngot-term\n"
    assert result.exit_code == 7


def test_term_ignoring_tree_is_killed_after_grace(ws: Path, policy: LocalPolicy) -> None:
    # The trap makes SIGTERM ignored, and an ignored signal stays ignored across fork/exec:
    # the child shell and both sleeps ignore it too.
    script = 'trap "" TERM; echo "$$"; sh -c \'echo "$$"; sleep 100\' & sleep 100 & echo "$!"; wait'
    sink = Sink()
    grace = 1.0
    started = time.monotonic()
    result = run(ws, policy, ["sh", "-c", script], sink, timeout_s=0.5, grace_s=grace)
    took = time.monotonic() - started
    assert result.timed_out and result.signal == signal.SIGKILL
    assert 0.5 + grace - 0.1 <= took < 0.5 + grace + 2.5
    pids = [int(x) for x in result.stdout.split()]
    assert len(pids) == 3
    pgid = pids[0]
    assert none_alive_within(pids, 1.0)
    assert group_gone_within(pgid, 10)


def test_leftover_background_process_holding_output_is_killed(
    ws: Path, policy: LocalPolicy
) -> None:
    started = time.monotonic()
    result = run(ws, policy, ["sh", "-c", 'sleep 100 & echo "$!"'], timeout_s=30)
    assert time.monotonic() - started < 5
    assert result.exit_code == 0 and not result.timed_out
    assert none_alive_within([int(result.stdout)], 1.0)


# --------------------------------------------------------------------------- cancellation


def test_cancel_through_registry(ws: Path, policy: LocalPolicy) -> None:
    async def scenario() -> tuple[CommandResult, list[str], bool, bool]:
        registry = CommandRegistry()
        sink = Sink()
        task = asyncio.create_task(
            run_command(
                action(ws, ["sh", "-c", "echo started; sleep 30"], action_id="c1"),
                sink,
                policy,
                registry=registry,
                grace_s=1.0,
            )
        )
        await until(lambda: "started" in sink.text(), what="the command's first line")
        running = registry.running()
        unknown = registry.cancel("no-such-action")
        asked = registry.cancel("c1")
        result = await asyncio.wait_for(task, 5)
        assert registry.running() == []
        return result, running, unknown, asked

    started = time.monotonic()
    result, running, unknown, asked = arun(scenario())
    assert time.monotonic() - started < 5
    assert running == ["c1"] and asked and not unknown
    assert result.cancelled and not result.timed_out
    assert result.stdout == "started\n"
    assert result.signal == signal.SIGTERM


def test_cancelling_the_task_kills_the_group(ws: Path, policy: LocalPolicy) -> None:
    async def scenario() -> int:
        sink = Sink()
        task = asyncio.create_task(
            run_command(action(ws, ["sh", "-c", 'echo "$$"; sleep 30']), sink, policy)
        )
        await until(lambda: sink.text().strip(), what="the command's pid")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return int(sink.text())

    pgid = arun(scenario())
    assert group_gone_within(pgid, 10)


def test_same_action_id_cannot_run_twice_at_once(ws: Path, policy: LocalPolicy) -> None:
    async def scenario() -> str:
        registry = CommandRegistry()
        first = asyncio.create_task(
            run_command(action(ws, ["sleep", "30"]), Sink(), policy, registry=registry)
        )
        await until(lambda: registry.running() != [], what="the first run to register")
        try:
            await run_command(action(ws, ["echo"]), Sink(), policy, registry=registry)
        except ActionRefused as exc:
            return str(exc.code)
        finally:
            registry.cancel("a1")
            await first
        return "ran"

    assert arun(scenario()) == "bad_request"


# --------------------------------------------------------------------------- output


def test_streaming_is_coalesced(ws: Path, policy: LocalPolicy) -> None:
    lines = 100_000  # 0.6 MB: all of it fits one result frame
    sink = Sink()
    result = run(ws, policy, ["seq", str(lines)], sink, output_cap=8 * 1024 * 1024)
    expected = "".join(f"{i}\n" for i in range(1, lines + 1))
    assert result.stdout == expected and not result.truncated
    assert sink.text() == expected
    assert len(sink.calls) < lines // 100
    assert all(len(text.encode()) <= CHUNK_MAX for _, text in sink.calls)
    assert max(len(text.encode()) for _, text in sink.calls) == CHUNK_MAX  # size-triggered


def test_a_cap_over_one_frame_streams_everything_but_keeps_one_frame(
    ws: Path, policy: LocalPolicy
) -> None:
    size = 3 * 1024 * 1024
    sink = Sink()
    result = run(ws, policy, ["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' a"], sink,
                 output_cap=4 * size)
    assert len(sink.text()) == size  # streamed up to the cap, which is not reached
    assert result.truncated and len(result.stdout) <= FRAME_BUDGET + 200  # + the marker
    assert result.stdout.startswith("a" * 1000) and result.stdout.endswith("a" * 1000)


def test_slow_output_is_flushed_by_time(ws: Path, policy: LocalPolicy) -> None:
    async def scenario() -> float:
        seen: list[float] = []

        async def on_output(stream: str, text: str) -> None:
            seen.append(time.monotonic())

        started = time.monotonic()
        await run_command(action(ws, ["sh", "-c", "echo a; sleep 1; echo b"]), on_output, policy)
        return seen[0] - started

    # The first line arrives long before the command ends: flushed by time, not at the end.
    assert arun(scenario()) < 0.6


def test_utf8_split_across_reads(ws: Path, policy: LocalPolicy) -> None:
    code = (
        "import sys, time\n"
        "o = sys.stdout.buffer\n"
        "o.write(b'price: \\xe2\\x82'); o.flush(); time.sleep(0.3)\n"
        "o.write(b'\\xac end\\n'); o.flush()\n"
    )
    sink = Sink()
    result = run(ws, policy, [sys.executable, "-c", code], sink)
    assert result.stdout == "price: € end\n"
    assert sink.text() == "price: € end\n"
    assert len(sink.calls) >= 2  # really streamed in two parts
    assert all("\ufffd" not in text for _, text in sink.calls)


def test_truncation_keeps_head_and_tail_with_marker(ws: Path, policy: LocalPolicy) -> None:
    cap = 1000
    sink = Sink()
    result = run(ws, policy, ["seq", "100000"], sink, output_cap=cap)
    assert result.truncated
    assert result.stdout.startswith("1\n2\n3\n")
    assert result.stdout.endswith("99999\n100000\n")
    total = sum(len(f"{i}\n") for i in range(1, 100001))
    head, rest = result.stdout.split("\n… [", 1)
    dropped_text, tail = rest.split(" bytes truncated] …\n", 1)
    dropped = int(dropped_text)
    assert len(head.encode()) + dropped + len(tail.encode()) == total  # accounting is exact
    assert len(head.encode()) + len(tail.encode()) <= cap
    assert len(result.stdout.encode()) <= cap + len(truncation_marker(dropped).encode())
    assert len(sink.text().encode()) <= cap + 200  # streaming stops at the cap too


def test_truncation_never_splits_a_multibyte_character(ws: Path, policy: LocalPolicy) -> None:
    result = run(ws, policy, [sys.executable, "-c", "print('€' * 10000)"], output_cap=1001)
    assert result.truncated
    assert "\ufffd" not in result.stdout
    assert result.stdout.startswith("€€€") and result.stdout.endswith("€€€\n")


def test_cap_is_shared_by_stdout_and_stderr(ws: Path, policy: LocalPolicy) -> None:
    script = "seq 20000; seq 20000 >&2"
    cap = 4000
    result = run(ws, policy, ["sh", "-c", script], output_cap=cap)
    marker = len(truncation_marker(10**6).encode())
    assert result.truncated
    assert len(result.stdout.encode()) + len(result.stderr.encode()) <= cap + 2 * marker
    assert result.stdout.endswith("20000\n") and result.stderr.endswith("20000\n")


# as long as the issue asks (a slow leak shows only over time) in the stress run, which runs
# before every stop; a third of it in the everyday run, where these seconds keep both cores busy
# (``yes`` and the reader) while the rest of the suite waits for them
YES_SECONDS = 30.0 if os.environ.get("CODEY_STRESS") else 10.0


@pytest.mark.parametrize("seconds", [YES_SECONDS])
def test_yes_keeps_memory_flat_and_truncates(ws: Path, policy: LocalPolicy, seconds: float) -> None:
    cap = 64 * 1024

    async def scenario() -> tuple[CommandResult, int, int, int]:
        sink_bytes = 0

        async def on_output(stream: str, text: str) -> None:
            nonlocal sink_bytes
            sink_bytes += len(text.encode())

        peak = before = vm_rss_kib()

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, vm_rss_kib())
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        try:
            result = await run_command(
                action(ws, ["yes"], timeout_s=seconds, output_cap=cap), on_output, policy
            )
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        return result, before, max(peak, vm_rss_kib()), sink_bytes

    result, before, peak, streamed = arun(scenario())
    assert result.timed_out and result.truncated
    dropped = int(result.stdout.split("[", 1)[1].split(" ", 1)[0])
    assert dropped > 50 * 1024 * 1024  # yes really wrote a lot
    assert len(result.stdout.encode()) <= cap + len(truncation_marker(dropped).encode())
    assert result.stdout.startswith("y\ny\n") and result.stdout.endswith("y\ny\n")
    assert streamed <= cap + 200
    assert peak - before < 16 * 1024, f"RSS grew by {peak - before} KiB"
