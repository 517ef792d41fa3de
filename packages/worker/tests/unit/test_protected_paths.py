"""The worker's own directory ($CODEY_HOME) is out of reach of every action, even when it lies
inside an allowed root and inside the workdir (the home directory is a normal workdir)."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from pathlib import Path

import pytest

from codey_protocol.worker import ListDir, ReadFile, RunCommand, WriteFile
from codey_worker import fs
from codey_worker.confine import (
    ActionRefused,
    check_protected,
    check_root,
    protect,
    protected_paths,
    resolve_inside,
)
from codey_worker.patch import apply_patch, apply_patch_cli
from codey_worker.policy import LocalPolicy
from codey_worker.shell import run_command
from codey_worker.watch import relevant


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    """A fake home directory with a protected ``.codey`` holding a secret and a config."""
    home = tmp_path / "home"
    codey = home / ".codey"
    codey.mkdir(parents=True)
    (codey / "worker.json").write_text('{"private_key": "SECRET"}')
    (codey / "worker-config.json").write_text('{"allowed_roots": ["~/src"]}')
    (home / "notes.txt").write_text("mine\n")
    protect(codey)
    return home


def _refused(call: object) -> ActionRefused:
    assert callable(call)
    with pytest.raises(ActionRefused) as info:
        call()
    assert info.value.code == "protected_path", info.value
    return info.value


def test_protect_registers_the_real_path_once(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    protect(link)
    protect(real)
    assert protected_paths().count(str(real.resolve())) == 1
    _refused(lambda: check_protected(str(real / "x")))
    check_protected(str(tmp_path / "real-sibling"))  # a common prefix is not "inside"


def test_paths_into_the_protected_dir_are_refused_however_spelled(home: Path) -> None:
    for path in (".codey", ".codey/worker.json", "./.codey/../.codey/worker.json",
                 str(home / ".codey" / "worker-config.json"), ".codey/new-file"):
        error = _refused(lambda p=path: resolve_inside(home, p))
        assert ".codey" in error.message


def test_a_symlink_into_the_protected_dir_is_refused(home: Path) -> None:
    (home / "innocent").symlink_to(home / ".codey" / "worker.json")
    _refused(lambda: resolve_inside(home, "innocent"))


def test_the_home_dir_itself_stays_usable(home: Path) -> None:
    assert resolve_inside(home, "notes.txt") == (home / "notes.txt").resolve()
    assert check_root(home, [home.parent]) == home.resolve()
    # a file merely named like the protected dir elsewhere is fine
    assert resolve_inside(home, "src/.codey").name == ".codey"


def test_a_workdir_inside_the_protected_dir_is_refused(home: Path) -> None:
    _refused(lambda: check_root(home / ".codey", [home]))
    _refused(lambda: LocalPolicy(allowed_roots=[home]).check_workdir(str(home / ".codey")))


def test_read_write_and_list_actions_are_refused(home: Path) -> None:
    policy = LocalPolicy(allowed_roots=[home])
    common = {"action_id": "a", "session_id": "s", "workdir": str(home)}
    _refused(lambda: fs.read_file(ReadFile(path=".codey/worker.json", **common), policy))
    # read_small_file is the on-loop path: it refuses too
    _refused(lambda: fs.read_small_file(ReadFile(path=".codey/worker.json", **common), policy,
                                        64 * 1024))
    config = home / ".codey" / "worker-config.json"
    before = config.read_text()
    _refused(lambda: fs.write_file(
        WriteFile(path=".codey/worker-config.json", content='{"allowed_roots": ["/"]}', **common),
        policy))
    assert config.read_text() == before
    _refused(lambda: fs.list_dir(ListDir(path=".codey", **common), policy))
    # home itself: read, write and list as usual (listing shows the name, nothing inside)
    assert fs.read_file(ReadFile(path="notes.txt", **common), policy).content == "mine\n"
    fs.write_file(WriteFile(path="new.txt", content="x", **common), policy)
    listing = fs.list_dir(ListDir(path=".", **common), policy)
    assert {"notes.txt", "new.txt", ".codey"} <= {e.path for e in listing.entries}
    deep = fs.list_dir(ListDir(path=".", depth=5, **common), policy)
    assert ".codey" in {e.path for e in deep.entries}
    assert not [e.path for e in deep.entries if e.path.startswith(".codey/")]


def test_apply_patch_into_the_protected_dir_is_refused_and_changes_nothing(home: Path) -> None:
    config = home / ".codey" / "worker-config.json"
    before = config.read_text()
    patches = [
        "*** Begin Patch\n*** Add File: .codey/evil.json\n+{}\n*** End Patch",
        "*** Begin Patch\n*** Update File: .codey/worker-config.json\n"
        '-{"allowed_roots": ["~/src"]}\n+{"allowed_roots": ["/"]}\n*** End Patch',
        "*** Begin Patch\n*** Delete File: .codey/worker.json\n*** End Patch",
        "*** Begin Patch\n*** Update File: notes.txt\n*** Move to: .codey/notes.txt\n"
        "@@\n-mine\n+moved\n*** End Patch",
    ]
    for patch in patches:
        _refused(lambda p=patch: apply_patch(p, home))
    assert config.read_text() == before
    assert (home / ".codey" / "worker.json").exists()
    assert not (home / ".codey" / "evil.json").exists()
    assert (home / "notes.txt").read_text() == "mine\n"
    # the same patch machinery still works in home itself
    apply_patch("*** Begin Patch\n*** Add File: ok.txt\n+ok\n*** End Patch", home)
    assert (home / "ok.txt").read_text() == "ok\n"


def test_apply_patch_cli_reports_a_protected_path_as_an_error(home: Path) -> None:
    out = io.StringIO()
    code = apply_patch_cli("*** Begin Patch\n*** Add File: .codey/x\n+x\n*** End Patch", home, out)
    assert code == 1 and out.getvalue().startswith("error: ") and ".codey" in out.getvalue()


def test_run_command_cannot_use_the_protected_dir_as_cwd(home: Path) -> None:
    policy = LocalPolicy(allowed_roots=[home])

    async def noop(stream: str, data: str) -> None:
        pass

    def run(cwd: str | None, workdir: Path) -> object:
        action = RunCommand(action_id="a", session_id="s", workdir=str(workdir), cwd=cwd,
                            argv=[sys.executable, "-c", "import os; print(os.getcwd())"])
        return asyncio.run(run_command(action, noop, policy))

    _refused(lambda: run(".codey", home))
    _refused(lambda: run(None, home / ".codey"))
    result = run(None, home)
    assert result.stdout.strip() == os.path.realpath(home)  # type: ignore[attr-defined]


def test_changes_in_the_protected_dir_are_not_reported_by_the_watcher(home: Path) -> None:
    real = home.resolve()
    assert relevant(real, str(real / ".codey" / "actions" / "records.sqlite3")) is None
    assert relevant(real, str(real / ".codey")) is None
    assert relevant(real, str(real / "notes.txt")) == "notes.txt"
    assert relevant(real, str(real / ".codey-other" / "x")) == ".codey-other/x"
