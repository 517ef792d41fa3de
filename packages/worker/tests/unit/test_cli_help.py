"""Every codey-worker command has help with an example; the offline commands work."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from codey_worker.cli import build_parser, main, run_loop
from codey_worker.config import Identity, save_identity
from codey_worker.sandbox import detect

COMMANDS = [[], ["status"], ["unpair"], ["apply-patch"]]


@pytest.fixture(autouse=True)
def _child_watcher_restored() -> Iterator[None]:
    """``run_loop`` installs a pidfd child watcher for the process (Python 3.11), as the
    worker's CLI should. Left in this test process it is attached to no loop, and a later
    test's subprocess on a loop of its own (Playwright's driver) fails with "child watcher
    is not activated"."""
    policy = asyncio.get_event_loop_policy()
    saved = getattr(policy, "_watcher", None)
    yield
    if sys.version_info < (3, 12):
        policy._watcher = saved  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "run")
def test_each_command_has_help_with_an_example(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out
    assert f"codey-worker {' '.join(command)}".strip() in out.split("example:")[1]


def test_every_subcommand_is_covered() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(c[0] for c in COMMANDS if c)  # type: ignore[arg-type]


def test_version_is_every_codey_packages_one(capsys: pytest.CaptureFixture[str]) -> None:
    from codey_protocol.version import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"codey-worker {__version__}\n"


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CODEY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CODEY_SERVER", raising=False)
    return tmp_path / "home"


def test_status_unpaired_exits_1(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("not paired")
    assert f"allowed roots: {Path.home()}" in out


def test_status_paired_then_unpair(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_identity(home, Identity(worker_id="wrk_9", server="http://127.0.0.1:9",
                                 private_key="k", credential="c"))
    (home / "worker-config.json").write_text(json.dumps(
        {"allowed_roots": ["/srv"], "mcp_servers": {"time": {"command": "t", "args": ["-x"]}}}))
    assert main(["status"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "paired as wrk_9",
        "server: http://127.0.0.1:9",
        "allowed roots: /srv",
        f"worktrees: {Path.home() / '.codey-worktrees'}",
        "mcp server time: t -x",
        f"sandbox: {detect().describe()}",
    ]
    assert main(["unpair"]) == 0
    assert not (home / "worker.json").exists()
    assert main(["status"]) == 1


def test_bad_config_is_exit_2_with_the_reason(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.mkdir(parents=True)
    (home / "worker-config.json").write_text('{"allowed_roots": 3}')
    assert main(["status"]) == 2
    assert "allowed_roots must be a list" in capsys.readouterr().out


def test_run_without_a_server_is_exit_2(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "no server" in capsys.readouterr().out


def test_apply_patch_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"
    assert main(["apply-patch", patch]) == 0
    assert (tmp_path / "hello.txt").read_text() == "hi\n"
    assert capsys.readouterr().out == "A hello.txt (+1 -0)\n"


@pytest.mark.parametrize(("choice", "loop_module"),
                         [("", "asyncio"), ("asyncio", "asyncio"), ("uvloop", "uvloop")])
def test_the_event_loop_is_asyncio_unless_uvloop_is_asked_for(
    monkeypatch: pytest.MonkeyPatch, choice: str, loop_module: str
) -> None:
    monkeypatch.setenv("CODEY_EVENT_LOOP", choice)

    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__.split(".")[0]

    assert run_loop(which()) == loop_module
