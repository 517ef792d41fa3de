"""edit: an exact string replaced once (or everywhere), atomically, with a diff; refused with
codes the model can act on when the string is missing or not unique, or the path is not one
the model may change."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codey_protocol.worker import Edit, EditResult
from codey_worker.confine import ActionRefused, protect
from codey_worker.edit import edit_file
from codey_worker.policy import LocalPolicy

OPEN = LocalPolicy(allowed_roots=[Path("/")])


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workdir = tmp_path / "ws"
    workdir.mkdir()
    (tmp_path / "outside.txt").write_text("keep me\n")
    return workdir


def edit(ws: Path, path: str, old: str, new: str, **kw: Any) -> EditResult:
    return edit_file(Edit(action_id="a", session_id="s", workdir=str(ws), path=path,
                          old_string=old, new_string=new, **kw), OPEN)


def refused(ws: Path, path: str, old: str, new: str, **kw: Any) -> ActionRefused:
    with pytest.raises(ActionRefused) as info:
        edit(ws, path, old, new, **kw)
    return info.value


def test_replaces_a_unique_string_and_answers_with_a_diff(ws: Path) -> None:
    lines = [f"line {i}\n" for i in range(1, 21)]
    (ws / "a.py").write_text("".join(lines))
    result = edit(ws, "a.py", "line 10\n", "line ten\nand more\n")
    assert (ws / "a.py").read_text() == "".join(
        [*lines[:9], "line ten\n", "and more\n", *lines[10:]])
    assert (result.path, result.replacements, result.added, result.removed) == ("a.py", 1, 2, 1)
    # the same diff `diff -u` would print
    expected = subprocess.run(
        ["diff", "-u", "--label", "a/a.py", "--label", "b/a.py", "-", str(ws / "a.py")],
        input="".join(lines), capture_output=True, text=True).stdout
    assert result.diff == expected


def test_a_string_inside_a_line_and_unchanged_lines_are_context(ws: Path) -> None:
    (ws / "m.py").write_text("def f():\n    x = 1\n    return x\n")
    result = edit(ws, "m.py", "def f():\n    x = 1\n    return x", "def f():\n    x = 2\n"
                                                                     "    return x")
    assert (ws / "m.py").read_text() == "def f():\n    x = 2\n    return x\n"
    assert (result.added, result.removed) == (1, 1)
    assert "-    x = 1\n+    x = 2\n" in result.diff and " def f():\n" in result.diff


def test_not_found_says_so_and_where_a_near_match_is(ws: Path) -> None:
    (ws / "b.py").write_text("def f():\n\treturn 1\n")
    missing = refused(ws, "b.py", "def f():\n    return 1", "def f():\n    return 2")
    assert missing.code == "edit_no_match"
    assert "not found in b.py" in missing.message and "on line 1" in missing.message
    nothing = refused(ws, "b.py", "class C:", "class D:")
    assert nothing.code == "edit_no_match" and "line" not in nothing.message.split(":")[-1]
    assert (ws / "b.py").read_text() == "def f():\n\treturn 1\n"


def test_not_unique_names_the_lines_unless_replace_all(ws: Path) -> None:
    (ws / "c.txt").write_text("a = 1\nb = 2\na = 1\nc = 3\na = 1\n")
    err = refused(ws, "c.txt", "a = 1", "a = 9")
    assert err.code == "edit_not_unique"
    assert "3 times" in err.message and "lines 1, 3, 5" in err.message
    assert "replace_all" in err.message
    assert (ws / "c.txt").read_text() == "a = 1\nb = 2\na = 1\nc = 3\na = 1\n"
    result = edit(ws, "c.txt", "a = 1", "a = 9", replace_all=True)
    assert result.replacements == 3
    assert (ws / "c.txt").read_text() == "a = 9\nb = 2\na = 9\nc = 3\na = 9\n"
    assert result.diff.count("\n-a = 1") == 3 and result.diff.count("\n+a = 9") == 3


def test_bad_requests(ws: Path) -> None:
    (ws / "a.txt").write_text("x\n")
    assert refused(ws, "a.txt", "", "y").code == "bad_request"
    assert refused(ws, "a.txt", "x", "x").code == "bad_request"
    assert refused(ws, "nope.txt", "x", "y").code == "not_found"
    (ws / "dir").mkdir()
    assert refused(ws, "dir", "x", "y").code == "is_directory"
    os.mkfifo(ws / "fifo")
    assert refused(ws, "fifo", "x", "y").code == "not_a_regular_file"


def test_crlf_files_keep_their_line_endings(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = edit(ws, "w.txt", "one\ntwo\n", "one\n2\n")
    assert (ws / "w.txt").read_bytes() == b"one\r\n2\r\nthree\r\n"
    assert result.replacements == 1


def test_no_final_newline_and_non_utf8_bytes_are_kept(ws: Path) -> None:
    (ws / "n.txt").write_bytes(b"caf\xe9 = 1\nlast")
    result = edit(ws, "n.txt", "last", "final")
    assert (ws / "n.txt").read_bytes() == b"caf\xe9 = 1\nfinal"
    assert "-last\n\\ No newline at end of file\n+final\n" in result.diff
    edit(ws, "n.txt", "final", "final\n")
    assert (ws / "n.txt").read_bytes() == b"caf\xe9 = 1\nfinal\n"


def test_joining_lines_shows_the_line_it_took(ws: Path) -> None:
    (ws / "j.txt").write_text("a\nb\nc\n")
    result = edit(ws, "j.txt", "a\n", "a ")
    assert (ws / "j.txt").read_text() == "a b\nc\n"
    assert "-a\n-b\n+a b\n" in result.diff


def test_mode_is_kept_and_the_write_is_atomic(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o750)
    inode = script.stat().st_ino
    edit(ws, "run.sh", "old", "new")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert script.stat().st_ino != inode  # replaced by a rename, never rewritten in place
    assert [p.name for p in ws.iterdir()] == ["run.sh"]  # no temp file left


def test_confined_to_the_workdir(ws: Path, tmp_path: Path) -> None:
    assert refused(ws, "../outside.txt", "keep", "lost").code == "path_outside_workdir"
    (ws / "link").symlink_to(tmp_path / "outside.txt")
    assert refused(ws, "link", "keep", "lost").code == "path_outside_workdir"
    assert (tmp_path / "outside.txt").read_text() == "keep me\n"


def test_git_and_codey_folders_and_the_worker_home_are_refused(ws: Path,
                                                               tmp_path: Path) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (ws / ".codey").mkdir()
    (ws / ".codey" / "settings.json").write_text("{}\n")
    for path, old in ((".git/config", "bare = false"), (".codey/settings.json", "{}")):
        err = refused(ws, path, old, "x")
        assert err.code == "protected_path", err
    assert (ws / ".git" / "config").read_text() == "[core]\n\tbare = false\n"
    # a worktree's .git file: the gitdir it names is protected too
    gitdir = tmp_path / "main-repo" / ".git" / "worktrees" / "w"
    gitdir.mkdir(parents=True)
    (gitdir / "HEAD").write_text("ref: refs/heads/w\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {gitdir}\n")
    (tree / "file.txt").write_text("ok\n")
    assert edit(tree, "file.txt", "ok", "fine").replacements == 1
    assert refused(tree, ".git", "gitdir", "x").code == "protected_path"
    home = ws / "home"
    home.mkdir()
    (home / "worker-config.json").write_text('{"allowed_roots": []}')
    protect(home)
    assert refused(ws, "home/worker-config.json", "[]", '["/"]').code == "protected_path"
