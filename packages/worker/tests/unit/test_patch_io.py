"""The patch engine's file I/O: only regular files are read (a FIFO never blocks it), files are
size-capped, new files honour the umask, and writes are fsynced before the rename."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from codey_worker import files
from codey_worker import patch as patch_module
from codey_worker.patch import PatchError, apply_patch


def _apply_with_deadline(text: str, root: Path, seconds: float = 5.0) -> BaseException | None:
    """Run apply_patch in a daemon thread; fail the test if it does not finish in time (a
    blocked open of a FIFO would hang forever)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            apply_patch(text, root)
        except BaseException as exc:  # handed to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "apply_patch blocked"
    return outcome[0]


@pytest.mark.parametrize(
    "patch",
    [
        "*** Begin Patch\n*** Update File: pipe\n@@\n-a\n+b\n*** End Patch",
        "*** Begin Patch\n*** Delete File: pipe\n*** End Patch",
        "*** Begin Patch\n*** Add File: pipe\n+x\n*** End Patch",
        "*** Begin Patch\n*** Update File: f.txt\n*** Move to: pipe\n@@\n-a\n+b\n*** End Patch",
    ],
)
def test_a_fifo_is_refused_at_once_naming_the_file(tmp_path: Path, patch: str) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "f.txt").write_text("a\n")
    error = _apply_with_deadline(patch, tmp_path)
    assert isinstance(error, PatchError)
    assert "pipe" in error.message and "not a regular file" in error.message
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)
    assert (tmp_path / "f.txt").read_text() == "a\n"


def test_a_file_over_the_size_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(patch_module, "MAX_PATCH_FILE_BYTES", 1024)
    (tmp_path / "big.txt").write_text("a\n" * 600)  # 1200 bytes
    (tmp_path / "small.txt").write_text("a\n" * 10)
    with pytest.raises(PatchError, match=r"big\.txt is 1200 bytes.*up to"):
        apply_patch("*** Begin Patch\n*** Delete File: big.txt\n*** End Patch", tmp_path)
    assert (tmp_path / "big.txt").exists()
    apply_patch("*** Begin Patch\n*** Delete File: small.txt\n*** End Patch", tmp_path)
    assert not (tmp_path / "small.txt").exists()


@pytest.fixture()
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("umask_027")
def test_an_added_file_gets_0666_less_the_umask(tmp_path: Path) -> None:
    apply_patch("*** Begin Patch\n*** Add File: sub/new.txt\n+x\n*** End Patch", tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "sub" / "new.txt").st_mode) == 0o640
    # an updated file keeps its own bits, whatever the umask
    (tmp_path / "run.sh").write_text("echo 1\n")
    (tmp_path / "run.sh").chmod(0o755)
    apply_patch("*** Begin Patch\n*** Update File: run.sh\n-echo 1\n+echo 2\n*** End Patch",
                tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "run.sh").st_mode) == 0o755
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".codey-tmp")]


def test_writes_are_fsynced_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        calls.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        real_fsync(fd)

    def rename(src: str, dst: str, **kw: int) -> None:
        calls.append("rename")
        real_rename(src, dst, **kw)

    monkeypatch.setattr(files.os, "fsync", fsync)
    monkeypatch.setattr(files.os, "rename", rename)
    apply_patch("*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch", tmp_path)
    assert calls == ["fsync-file", "rename", "fsync-dir"]
    assert (tmp_path / "a.txt").read_text() == "a\n"
