"""read_file, write_file, list_dir: confined, capped, atomic."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.worker import (
    DirListing,
    FileContent,
    ListDir,
    ReadFile,
    WriteFile,
    WriteResult,
)
from codey_worker import files, fs
from codey_worker.confine import ActionRefused
from codey_worker.fs import list_dir as _list_dir
from codey_worker.fs import read_file as _read_file
from codey_worker.fs import write_file as _write_file
from codey_worker.policy import LocalPolicy

# Allows every workdir: these tests are about confinement *inside* a workdir; the allowed-roots
# check has its own test at the end.
OPEN = LocalPolicy(allowed_roots=[Path("/")])


def read_file(action: ReadFile, max_bytes: int = fs.MAX_READ_BYTES) -> FileContent:
    return _read_file(action, OPEN, max_bytes)


def write_file(action: WriteFile) -> WriteResult:
    return _write_file(action, OPEN)


def list_dir(action: ListDir, max_entries: int = fs.MAX_ENTRIES) -> DirListing:
    return _list_dir(action, OPEN, max_entries)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workdir = tmp_path / "ws"
    workdir.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return workdir


def rf(ws: Path, path: str, **kw: Any) -> ReadFile:
    return ReadFile(action_id="a", session_id="s", workdir=str(ws), path=path, **kw)


def wf(ws: Path, path: str, content: str, **kw: Any) -> WriteFile:
    return WriteFile(action_id="a", session_id="s", workdir=str(ws), path=path, content=content,
                     **kw)  # fmt: skip


def ld(ws: Path, path: str = ".", depth: int = 1) -> ListDir:
    return ListDir(action_id="a", session_id="s", workdir=str(ws), path=path, depth=depth)


def code_of(fn: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(ActionRefused) as info:
        fn(*args, **kw)
    return str(info.value.code)


# --------------------------------------------------------------------------- read_file


def test_read_whole_file(ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    got = read_file(rf(ws, "a.txt"))
    assert (got.path, got.content, got.total_lines, got.size) == (
        "a.txt",
        "one\ntwo\nthree\n",
        3,
        14,
    )
    assert not got.binary and not got.truncated


def test_read_offset_and_limit_in_lines(ws: Path) -> None:
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(10)) + "last, no newline")
    got = read_file(rf(ws, "a.txt", offset=3, limit=2))
    assert got.content == "line 3\nline 4\n"
    assert got.total_lines == 11
    assert read_file(rf(ws, "a.txt", offset=10)).content == "last, no newline"
    assert read_file(rf(ws, "a.txt", offset=50)).content == ""
    assert read_file(rf(ws, "a.txt", limit=0)).content == ""


def test_read_counts_lines_longer_than_a_read_piece(ws: Path) -> None:
    long_line = "x" * (200 * 1024) + "\n"
    (ws / "a.txt").write_text(long_line + "second\n")
    got = read_file(rf(ws, "a.txt", offset=1))
    assert got.content == "second\n" and got.total_lines == 2


@pytest.mark.parametrize(("name", "data"), [
    ("empty", b""), ("lines", b"a\nbb\n\nccc"), ("crlf", b"a\r\nb\r\n"),
    ("long", b"x" * (70 * 1024) + b"\ny\n"), ("nul", b"text" + b"\x00" + b"more"),
    ("late-nul", b"a" * 9000 + b"\x00\n"), ("euro", "€\n".encode() * 600),
])  # fmt: skip
def test_small_files_read_whole_give_what_reading_in_pieces_gives(
        ws: Path, monkeypatch: pytest.MonkeyPatch, name: str, data: bytes) -> None:
    (ws / name).write_bytes(data)
    actions = [rf(ws, name), rf(ws, name, offset=1), rf(ws, name, offset=1, limit=1),
               rf(ws, name, limit=0)]
    whole = [read_file(a, max_bytes=1000) for a in actions]
    monkeypatch.setattr(fs, "WHOLE_READ_BYTES", -1)
    assert [read_file(a, max_bytes=1000) for a in actions] == whole


def test_read_binary_file(ws: Path) -> None:
    (ws / "img.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\xff" * 100)
    got = read_file(rf(ws, "img.bin"))
    assert got.binary and got.content == "" and got.size == 116


def test_nul_after_the_first_8k_is_not_binary(ws: Path) -> None:
    (ws / "late.txt").write_bytes(b"a" * 9000 + b"\x00")
    assert not read_file(rf(ws, "late.txt")).binary


def test_read_size_cap_truncates_at_a_character_boundary(ws: Path) -> None:
    (ws / "big.txt").write_text("€" * 1000)  # 3000 bytes
    got = read_file(rf(ws, "big.txt"), max_bytes=1000)
    assert got.truncated
    assert got.content == "€" * 333  # 999 bytes: the cut character is dropped, not mangled
    assert got.size == 3000


def test_invalid_utf8_is_replaced(ws: Path) -> None:
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    assert read_file(rf(ws, "latin1.txt")).content == "caf\ufffd\n"


def test_read_refusals(ws: Path) -> None:
    (ws / "dir").mkdir()
    (ws / "link").symlink_to(ws.parent / "outside" / "secret.txt")
    assert code_of(read_file, rf(ws, "missing.txt")) == "not_found"
    assert code_of(read_file, rf(ws, "dir")) == "is_directory"
    assert code_of(read_file, rf(ws, "../outside/secret.txt")) == "path_outside_workdir"
    assert code_of(read_file, rf(ws, str(ws.parent / "outside" / "secret.txt"))) == (
        "path_outside_workdir"
    )
    assert code_of(read_file, rf(ws, "link")) == "path_outside_workdir"
    assert code_of(read_file, rf(ws, "dir", offset=-1)) == "bad_request"


def test_reading_a_fifo_is_refused_without_waiting_for_a_writer(ws: Path) -> None:
    # a plain open() of a FIFO blocks until someone writes: on the worker's loop, forever
    os.mkfifo(ws / "pipe")
    started = time.monotonic()
    assert code_of(read_file, rf(ws, "pipe")) == "not_a_regular_file"
    assert time.monotonic() - started < 2


# --------------------------------------------------------------------------- write_file


def test_write_creates_file_and_dirs(ws: Path) -> None:
    got = write_file(wf(ws, "a/b/c.txt", "héllo\n"))
    assert (ws / "a" / "b" / "c.txt").read_text() == "héllo\n"
    assert got.path == "a/b/c.txt" and got.created and got.bytes_written == len("héllo\n".encode())


def test_write_without_create_dirs_needs_the_parent(ws: Path) -> None:
    assert code_of(write_file, wf(ws, "nope/x.txt", "x", create_dirs=False)) == "not_found"
    assert not (ws / "nope").exists()
    assert write_file(wf(ws, "x.txt", "x", create_dirs=False)).created


def test_write_replaces_atomically_and_keeps_mode(ws: Path) -> None:
    target = ws / "f.txt"
    target.write_text("old\n")
    target.chmod(0o640)
    old_inode = target.stat().st_ino
    old_view = ws / "old-view"
    os.link(target, old_view)  # a hard link keeps seeing the old inode
    got = write_file(wf(ws, "f.txt", "new\n"))
    assert not got.created
    assert target.read_text() == "new\n"
    assert target.stat().st_ino != old_inode  # a new file was renamed over, not rewritten
    assert old_view.read_text() == "old\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in ws.iterdir()) == ["f.txt", "old-view"]  # no temp left


def test_failed_write_leaves_the_old_file_and_no_temp(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "f.txt").write_text("old\n")

    def broken_rename(src: object, dst: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "rename", broken_rename)
    assert code_of(write_file, wf(ws, "f.txt", "new\n")) == "io_error"
    assert (ws / "f.txt").read_text() == "old\n"
    assert [p.name for p in ws.iterdir()] == ["f.txt"]


def test_new_file_mode_follows_umask(ws: Path) -> None:
    old = os.umask(0o027)
    try:
        write_file(wf(ws, "u.txt", "x"))
    finally:
        os.umask(old)
    assert (ws / "u.txt").stat().st_mode & 0o777 == 0o640


def test_write_through_inside_symlink_replaces_its_target(ws: Path) -> None:
    (ws / "real.txt").write_text("old")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    got = write_file(wf(ws, "alias.txt", "new"))
    assert got.path == "real.txt"
    assert (ws / "real.txt").read_text() == "new"
    assert (ws / "alias.txt").is_symlink()


def test_write_refusals(ws: Path) -> None:
    (ws / "dir").mkdir()
    (ws / "out").symlink_to(ws.parent / "outside")
    assert code_of(write_file, wf(ws, "dir", "x")) == "is_directory"
    assert code_of(write_file, wf(ws, ".", "x")) == "is_directory"
    assert code_of(write_file, wf(ws, "../evil.txt", "x")) == "path_outside_workdir"
    assert code_of(write_file, wf(ws, "out/secret.txt", "x")) == "path_outside_workdir"
    assert code_of(write_file, wf(ws, "out/new/dir/f.txt", "x")) == "path_outside_workdir"
    assert (ws.parent / "outside" / "secret.txt").read_text() == "secret\n"
    assert not (ws.parent / "evil.txt").exists()
    assert not (ws.parent / "outside" / "new").exists()


# --------------------------------------------------------------------------- list_dir


@pytest.fixture
def tree(ws: Path) -> Path:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (ws / "src" / "main.py").write_text("print()\n")
    (ws / "README.md").write_text("# hi\n")
    (ws / ".git" / "objects").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "sub" / ".git").mkdir(parents=True)
    (ws / "link").symlink_to(ws.parent / "outside")
    return ws


def test_list_depth_one(tree: Path) -> None:
    got = list_dir(ld(tree))
    assert [(e.path, e.kind) for e in got.entries] == [
        ("README.md", "file"),
        ("link", "symlink"),
        ("src", "dir"),
        ("sub", "dir"),
    ]
    assert got.entries[0].size == 5 and got.path == "." and not got.truncated


def test_list_depth_two_sorted_and_git_skipped(tree: Path) -> None:
    got = list_dir(ld(tree, depth=3))
    assert [e.path for e in got.entries] == [
        "README.md",
        "link",
        "src",
        "src/main.py",
        "src/pkg",
        "src/pkg/mod.py",
        "sub",
    ]
    assert not any(".git" in e.path for e in got.entries)
    assert not any(e.path.startswith("link/") for e in got.entries)  # symlinks not followed


def test_list_subdirectory(tree: Path) -> None:
    got = list_dir(ld(tree, "src", depth=1))
    assert got.path == "src"
    assert [e.path for e in got.entries] == ["main.py", "pkg"]


def test_list_entry_cap_keeps_the_shallowest(ws: Path) -> None:
    (ws / "deep").mkdir()
    for i in range(30):
        (ws / "deep" / f"f{i:02}").write_text("")
    for i in range(5):
        (ws / f"top{i}").write_text("")
    got = list_dir(ld(ws, depth=2), max_entries=10)
    assert got.truncated and len(got.entries) == 10
    assert {f"top{i}" for i in range(5)} | {"deep"} <= {e.path for e in got.entries}


def test_list_refusals(tree: Path) -> None:
    assert code_of(list_dir, ld(tree, "README.md")) == "not_a_directory"
    assert code_of(list_dir, ld(tree, "missing")) == "not_found"
    assert code_of(list_dir, ld(tree, "..")) == "path_outside_workdir"
    assert code_of(list_dir, ld(tree, "link")) == "path_outside_workdir"
    assert code_of(list_dir, ld(tree, depth=0)) == "bad_request"


# --------------------------------------------------------------------------- local policy


def test_workdir_outside_allowed_roots_is_refused_for_every_operation(tmp_path: Path) -> None:
    # The server names the workdir: "/etc" with path "passwd" is inside its own workdir, but
    # not inside what the worker's owner allowed.
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0\n")
    narrow = LocalPolicy(allowed_roots=[tmp_path / "projects"])
    with pytest.raises(ActionRefused) as info:
        _read_file(rf(etc, "passwd"), narrow)
    assert info.value.code == "outside_allowed_roots"
    with pytest.raises(ActionRefused) as info:
        _write_file(wf(etc, "passwd", "owned"), narrow)
    assert info.value.code == "outside_allowed_roots"
    with pytest.raises(ActionRefused) as info:
        _list_dir(ld(etc), narrow)
    assert info.value.code == "outside_allowed_roots"
    assert (etc / "passwd").read_text() == "root:x:0:0\n"


def test_missing_workdir_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "not-attached"
    assert code_of(write_file, wf(missing, "f.txt", "x")) == "not_found"
    assert not missing.exists()


def test_read_small_file_leaves_bigger_files_but_refuses_like_read_file(ws: Path) -> None:
    (ws / "small.txt").write_text("a\n")
    (ws / "big.txt").write_text("b" * 101)
    assert fs.read_small_file(rf(ws, "small.txt"), OPEN, 100) == read_file(rf(ws, "small.txt"))
    assert fs.read_small_file(rf(ws, "big.txt"), OPEN, 100) is None
    assert code_of(fs.read_small_file, rf(ws, "../outside/secret.txt"), OPEN, 100) == (
        "path_outside_workdir")
    assert code_of(fs.read_small_file, rf(ws, "missing.txt"), OPEN, 100) == "not_found"


def test_a_file_growing_while_read_is_left_to_a_thread_not_read_to_its_end(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "log.txt").write_text("line\n")
    real_read = fs._read_upto

    def grown(fd: int, n: int) -> bytes:  # the writer appended between fstat and read
        return real_read(fd, n) + b"more\n"

    monkeypatch.setattr(fs, "_read_upto", grown)
    assert fs.read_small_file(rf(ws, "log.txt"), OPEN, 1024) is None
    assert read_file(rf(ws, "log.txt")).content == "line\n"  # a thread reads it in pieces


def test_the_users_own_skills_are_readable_from_any_workdir_and_nothing_else_there(
        ws: Path, tmp_path: Path) -> None:
    """``$CODEY_HOME`` is protected, but the model is given its skills' SKILL.md paths."""
    from codey_worker import confine

    home = tmp_path / "codey-home"
    skill = home / "skills" / "deploy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: deploy\n---\nsteps\n")
    (home / "worker.json").write_text('{"key": "secret"}')
    (skill / "key").symlink_to(home / "worker.json")
    confine.protect(home)
    assert code_of(read_file, rf(ws, str(skill / "SKILL.md"))) == "path_outside_workdir"

    confine.allow_reading(home / "skills")
    got = read_file(rf(ws, str(skill / "SKILL.md")))
    assert got.content.endswith("steps\n") and got.path == str(skill / "SKILL.md")
    # a link out of the skills folder, the rest of the home, writing: all still refused
    for refused in (skill / "key", home / "worker.json", tmp_path / "outside" / "secret.txt"):
        assert code_of(read_file, rf(ws, str(refused))) == "path_outside_workdir", refused
    assert code_of(write_file, wf(ws, str(skill / "SKILL.md"), "x")) == "path_outside_workdir"
    # from a workdir that holds the home, the home is still protected, skills still readable
    assert code_of(read_file, rf(tmp_path, str(home / "worker.json"))) == "protected_path"
    assert code_of(read_file, rf(tmp_path, str(skill / "key"))) == "protected_path"
    assert read_file(rf(tmp_path, str(skill / "SKILL.md"))).content.endswith("steps\n")
