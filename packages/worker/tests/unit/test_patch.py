"""Tests of the patch engine: scenario folders, then the API piece by piece."""

from __future__ import annotations

import io
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from codey_worker import files
from codey_worker.errors import WorkerError
from codey_worker.files import Tree
from codey_worker.patch import (
    AddFile,
    Chunk,
    DeleteFile,
    FileResult,
    PatchError,
    UpdateFile,
    apply_patch,
    apply_patch_cli,
    compute_changes,
    parse_patch,
    patch_target,
    render_diff,
    seek_sequence,
)

CASES = Path(__file__).parent / "patch_cases"


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every file (as bytes) and symlink (as ``"-> target"``) under ``root``, minus ``.keep``."""
    found: dict[str, bytes | str] = {}

    def walk(directory: Path) -> None:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            path = Path(entry.path)
            rel = path.relative_to(root).as_posix()
            if entry.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif entry.is_dir():
                walk(path)
            elif entry.name != ".keep":
                found[rel] = path.read_bytes()

    walk(root)
    return found


def _make_links(case: Path, root: Path) -> None:
    """Create the symlinks listed in ``case/links.txt`` (``name -> target`` a line) under root.

    An absolute symlink cannot live in the repository: an sdist refuses it (and hatchling
    would pack what it points at), so such cases list their links here instead.
    """
    listing = case / "links.txt"
    if not listing.exists():
        return
    for line in listing.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, target = line.partition(" -> ")
            (root / name.strip()).symlink_to(target.strip())


def _case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir())


def test_there_are_enough_scenarios() -> None:
    cases = _case_dirs()
    assert len(cases) >= 25
    for case in cases:
        assert (case / "input").is_dir(), case
        assert (case / "patch.txt").is_file(), case
        assert (case / "expected").is_dir() != (case / "error.txt").is_file(), case


@pytest.mark.parametrize("case", _case_dirs(), ids=lambda p: p.name)
def test_scenario(case: Path, tmp_path: Path) -> None:
    # The workdir is tmp/ws and a sibling tmp/ws-evil exists, so symlinks such as
    # "../ws-evil" in a scenario's input point at a real directory sharing the root's prefix.
    root = tmp_path / "ws"
    shutil.copytree(case / "input", root, symlinks=True)
    _make_links(case, root)
    evil = tmp_path / "ws-evil"
    evil.mkdir()
    patch_text = (case / "patch.txt").read_bytes().decode("utf-8")
    before = _tree(root)

    if (case / "error.txt").exists():
        wanted = (case / "error.txt").read_bytes().decode("utf-8")
        with pytest.raises(PatchError) as info:
            apply_patch(patch_text, root)
        assert wanted in str(info.value)
        assert _tree(root) == before, "a failed patch must leave the tree unchanged"
    else:
        outcome = apply_patch(patch_text, root)
        assert _tree(root) == _tree(case / "expected")
        assert outcome.files, "a successful patch reports its files"
        assert outcome.diff.startswith("--- ")
    assert list(evil.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# parse_patch


def test_parse_every_operation() -> None:
    text = (
        "*** Begin Patch\n"
        "*** Add File: new.txt\n+a\n+\n+b\n"
        "*** Delete File: old.txt\n"
        "*** Update File: src/x.py\n*** Move to: src/y.py\n"
        " keep\n-drop\n+put\n"
        "@@ def f():\n-    pass\n+    return 1\n*** End of File\n"
        "*** End Patch\n"
    )
    assert parse_patch(text) == [
        AddFile("new.txt", ("a", "", "b")),
        DeleteFile("old.txt"),
        UpdateFile(
            "src/x.py",
            (
                Chunk(((" ", "keep"), ("-", "drop"), ("+", "put"))),
                Chunk((("-", "    pass"), ("+", "    return 1")), "def f():", at_eof=True),
            ),
            "src/y.py",
        ),
    ]


def test_chunk_old_and_new_lines() -> None:
    chunk = Chunk(((" ", "a"), ("-", "b"), ("+", "c"), (" ", "d")))
    assert chunk.old_lines == ["a", "b", "d"]
    assert chunk.new_lines == ["a", "c", "d"]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("", 1, "empty patch"),
        ("*** Begin Patch\n*** End Patch\n", 2, "no file operations"),
        ("hello\n*** End Patch", 1, "must start with '*** Begin Patch'"),
        ("*** Begin Patch\n*** Add File: a\n+x\n", 3, "must end with '*** End Patch'"),
        ("*** Begin Patch\nstray\n*** End Patch", 2, "expected '*** Add File:'"),
        ("*** Begin Patch\n*** Add File:   \n*** End Patch", 2, "names no file"),
        ("*** Begin Patch\n*** Delete File: a\n+x\n*** End Patch", 3, "takes no lines"),
        ("*** Begin Patch\n*** Update File: a\n@@ f\n@@ g\n-x\n*** End Patch", 3, "has no lines"),
        (
            "*** Begin Patch\n*** Update File: a\n-x\n*** End of File\n-y\n*** End Patch",
            5,
            "expected '@@' to start the next chunk",
        ),
        ("*** Begin Patch\n*** Update File: a\n-x\n*** Move to: b\n*** End Patch", 4, "unexpected"),
    ],
)
def test_parse_errors_name_the_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(PatchError) as info:
        parse_patch(text)
    assert info.value.line == line
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"line {line}:")


def test_patch_error_is_a_worker_error_and_carries_the_path() -> None:
    with pytest.raises(WorkerError) as info:
        parse_patch("*** Begin Patch\n*** Update File: a.txt\n?x\n*** End Patch")
    assert isinstance(info.value, PatchError)
    assert info.value.path == "a.txt"
    assert info.value.message == str(info.value)


def test_context_line_that_starts_with_stars_is_content() -> None:
    ops = parse_patch("*** Begin Patch\n*** Update File: a.md\n ** bold\n+*** rule\n*** End Patch")
    assert ops == [UpdateFile("a.md", (Chunk(((" ", "** bold"), ("+", "*** rule"))),))]


# ---------------------------------------------------------------------------------------------
# seek_sequence and compute_changes (pure)


def test_seek_prefers_stricter_level_over_earlier_position() -> None:
    lines = ["x  ", "y", "x"]
    # "x" matches line 0 only after rstrip, but line 2 exactly: exact wins.
    assert seek_sequence(lines, ["x"], 0) == 2
    assert seek_sequence(lines, ["x"], 0, at_eof=True) == 2
    assert seek_sequence(lines, ["y", "x"], 2) is None
    assert seek_sequence(lines, ["\u201cq\u201d"], 0) is None
    assert seek_sequence(['say "q"'], ["say \u201cq\u201d"], 0) == 0


def _reader(files: dict[str, str]) -> tuple[Callable[[str], str | None], list[str]]:
    calls: list[str] = []

    def read(path: str) -> str | None:
        calls.append(path)
        return files.get(path)

    return read, calls


def test_compute_changes_is_pure_and_counts_lines() -> None:
    files = {"a.txt": "1\n2\n3\n", "gone.txt": "x\ny\n"}
    read, calls = _reader(files)
    ops = parse_patch(
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n 1\n-2\n+two\n+2.5\n"
        "*** Delete File: gone.txt\n*** Add File: c.txt\n+c\n*** End Patch"
    )
    changes = compute_changes(ops, read)
    assert files == {"a.txt": "1\n2\n3\n", "gone.txt": "x\ny\n"}
    assert [(c.path, c.op, c.moved_to, c.added, c.removed) for c in changes] == [
        ("a.txt", "move", "b.txt", 2, 1),
        ("gone.txt", "delete", None, 0, 2),
        ("c.txt", "add", None, 1, 0),
    ]
    assert changes[0].new_content == "1\ntwo\n2.5\n3\n"
    assert changes[1].new_content is None
    assert set(calls) == {"a.txt", "b.txt", "gone.txt", "c.txt"}


def test_operations_see_earlier_operations_on_the_same_file() -> None:
    read, _ = _reader({"a.txt": "a\n"})
    ops = parse_patch(
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n-a\n+b\n"
        "*** Add File: ./a.txt\n+again\n*** Update File: b.txt\n-b\n+bb\n*** End Patch"
    )
    changes = compute_changes(ops, read)
    assert [c.new_content for c in changes] == ["b\n", "again\n", "bb\n"]


def test_context_lines_keep_the_files_own_text() -> None:
    read, _ = _reader({"q.txt": "\u201chi\u201d  \nold\n"})
    ops = parse_patch('*** Begin Patch\n*** Update File: q.txt\n "hi"\n-old\n+new\n*** End Patch')
    assert compute_changes(ops, read)[0].new_content == "\u201chi\u201d  \nnew\n"


def test_not_found_message_names_file_and_lines() -> None:
    read, _ = _reader({"m.py": "a\nb\nc\n"})
    ops = parse_patch(
        "*** Begin Patch\n*** Update File: m.py\n@@\n-a\n+A\n@@\n a\n-b\n+B\n*** End Patch"
    )
    with pytest.raises(PatchError) as info:
        compute_changes(ops, read)
    # The second chunk searches after the first, where "a" no longer is.
    assert str(info.value) == (
        "m.py: chunk 2 of 2 did not match; could not find these lines after line 1:\n    a\n    b"
    )
    assert info.value.path == "m.py"


def test_pure_insertion_without_header_appends() -> None:
    read, _ = _reader({"a.txt": "x\n", "n.txt": "x"})
    ops = parse_patch(
        "*** Begin Patch\n*** Update File: a.txt\n+y\n*** Update File: n.txt\n+y\n*** End Patch"
    )
    assert [c.new_content for c in compute_changes(ops, read)] == ["x\ny\n", "x\ny"]


def test_deleting_everything_leaves_an_empty_file() -> None:
    read, _ = _reader({"a.txt": "x\ny\n"})
    ops = parse_patch("*** Begin Patch\n*** Update File: a.txt\n-x\n-y\n*** End Patch")
    assert compute_changes(ops, read)[0].new_content == ""


def test_mixed_line_endings_follow_the_first_line() -> None:
    read, _ = _reader({"a.txt": "1\r\n2\n3\r\n"})
    ops = parse_patch("*** Begin Patch\n*** Update File: a.txt\n-3\n+three\n*** End Patch")
    assert compute_changes(ops, read)[0].new_content == "1\r\n2\r\nthree\r\n"


# ---------------------------------------------------------------------------------------------
# diff


def test_diff_of_update_add_delete_and_rename() -> None:
    read, _ = _reader({"a.txt": "1\n2\n", "d.txt": "bye", "r.txt": "same\n"})
    ops = parse_patch(
        "*** Begin Patch\n*** Update File: a.txt\n 1\n-2\n+two\n*** Add File: n.txt\n+new\n"
        "*** Delete File: d.txt\n*** Update File: r.txt\n*** Move to: s.txt\n*** End Patch"
    )
    assert render_diff(compute_changes(ops, read)) == (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n 1\n-2\n+two\n"
        "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+new\n"
        "--- a/d.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n\\ No newline at end of file\n"
        "--- a/r.txt\n+++ b/s.txt\n"
    )


# ---------------------------------------------------------------------------------------------
# confined_resolver


def _target(root: Path, path: str) -> str:
    with Tree.open(os.path.realpath(root)) as tree:
        return patch_target(tree, path).rel


def test_patch_paths_inside_resolve_to_real_paths(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "real").mkdir(parents=True)
    (root / "alias").symlink_to("real")
    assert _target(root, "a/b.txt") == "a/b.txt"
    assert _target(root, "alias/x.txt") == "real/x.txt"
    assert _target(root, "./c.txt") == "c.txt"


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("../ws-evil/x", "'..' is not allowed"),
        ("a/../../x", "'..' is not allowed"),
        ("/etc/passwd", "absolute paths are not allowed"),
        ("~/x", "absolute paths are not allowed"),
        ("", "invalid path"),
        ("a\x00b", "invalid path"),
        (".", "outside the workdir"),
        ("out/x", "outside the workdir"),
        ("dangling/x", "outside the workdir"),
        ("sib/x", "outside the workdir"),
    ],
)
def test_patch_paths_outside_are_refused(tmp_path: Path, path: str, fragment: str) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "ws-evil").mkdir()
    (root / "out").symlink_to(tmp_path)
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    (root / "sib").symlink_to(tmp_path / "ws-evil")  # shares the string prefix "…/ws"
    with pytest.raises(PatchError) as info:
        _target(root, path)
    assert fragment in str(info.value)
    assert info.value.path == path


def test_root_given_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    apply_patch("*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch", tmp_path / "link")
    assert (tmp_path / "real" / "a.txt").read_text() == "a\n"


# ---------------------------------------------------------------------------------------------
# apply_patch


def test_apply_reports_files_and_diff(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("1\n2\n")
    outcome = apply_patch(
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b/a.txt\n-2\n+3\n+4\n"
        "*** Add File: c.txt\n+c\n*** End Patch",
        tmp_path,
    )
    assert outcome.files == [
        FileResult("a.txt", "move", "b/a.txt", 2, 1),
        FileResult("c.txt", "add", None, 1, 0),
    ]
    assert "--- a/a.txt\n+++ b/b/a.txt\n" in outcome.diff
    assert not (tmp_path / "a.txt").exists()
    assert (tmp_path / "b" / "a.txt").read_text() == "1\n3\n4\n"


def test_apply_keeps_permission_bits(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho 1\n")
    script.chmod(0o751)
    apply_patch(
        "*** Begin Patch\n*** Update File: run.sh\n-echo 1\n+echo 2\n*** End Patch", tmp_path
    )
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert script.read_text() == "#!/bin/sh\necho 2\n"


def test_a_path_through_a_file_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old\n")
    (tmp_path / "blocker").write_text("a file where a directory is needed\n")
    with pytest.raises(PatchError, match=r"blocker/x\.txt: a folder on its way is a file"):
        apply_patch(
            "*** Begin Patch\n*** Update File: a.txt\n-old\n+new\n*** Add File: n/m.txt\n+m\n"
            "*** Add File: blocker/x.txt\n+x\n*** End Patch",
            tmp_path,
        )
    assert (tmp_path / "a.txt").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "blocker"]


def test_failed_write_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("old\n")
    renames = 0
    real_rename = os.rename

    def rename(src: str, dst: str, **kw: int) -> None:
        nonlocal renames
        renames += 1
        if renames == 3:  # the third file: the disk is full
            raise OSError(28, "No space left on device")
        real_rename(src, dst, **kw)

    monkeypatch.setattr(files.os, "rename", rename)
    with pytest.raises(PatchError, match=r"cannot write z\.txt") as info:
        apply_patch(
            "*** Begin Patch\n*** Update File: a.txt\n-old\n+new\n*** Add File: n/m.txt\n+m\n"
            "*** Add File: z.txt\n+x\n*** End Patch",
            tmp_path,
        )
    monkeypatch.undo()
    assert "no file was changed" in str(info.value)
    assert (tmp_path / "a.txt").read_text() == "old\n"
    assert not (tmp_path / "n").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ("*** Begin Patch\n*** Update File: d\n-x\n*** End Patch", "d is a directory"),
        ("*** Begin Patch\n*** Update File: bin.dat\n-x\n*** End Patch", "not UTF-8"),
    ],
)
def test_unreadable_targets(tmp_path: Path, patch: str, fragment: str) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "bin.dat").write_bytes(b"\xff\xfe\x00x")
    with pytest.raises(PatchError, match=fragment):
        apply_patch(patch, tmp_path)


# ---------------------------------------------------------------------------------------------
# apply_patch_cli


def test_cli_applies_inline_patch_and_summarises(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    (tmp_path / "old.txt").write_text("o\n")
    (tmp_path / "mv.txt").write_text("m\n")
    out = io.StringIO()
    code = apply_patch_cli(
        "*** Begin Patch\n*** Update File: a.py\n-x = 1\n+x = 10\n+z = 3\n+w = 4\n"
        "*** Add File: n.txt\n+n\n*** Delete File: old.txt\n"
        "*** Update File: mv.txt\n*** Move to: moved.txt\n*** End Patch\n",
        tmp_path,
        out,
    )
    assert code == 0
    assert out.getvalue() == (
        "M a.py (+3 -1)\nA n.txt (+1 -0)\nD old.txt (+0 -1)\nR mv.txt -> moved.txt (+0 -0)\n"
    )
    assert (tmp_path / "a.py").read_text() == "x = 10\nz = 3\nw = 4\ny = 2\n"


def test_cli_reads_patch_from_file(tmp_path: Path) -> None:
    (tmp_path / "fix.patch").write_text("*** Begin Patch\n*** Add File: f.txt\n+f\n*** End Patch")
    out = io.StringIO()
    assert apply_patch_cli("fix.patch", tmp_path, out) == 0
    assert out.getvalue() == "A f.txt (+1 -0)\n"
    assert (tmp_path / "f.txt").read_text() == "f\n"


def test_cli_reads_patch_from_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = io.StringIO("*** Begin Patch\n*** Add File: s.txt\n+s\n*** End Patch\n")
    monkeypatch.setattr(sys, "stdin", stdin)
    out = io.StringIO()
    assert apply_patch_cli("-", tmp_path, out) == 0
    assert out.getvalue() == "A s.txt (+1 -0)\n"


def test_cli_failure_prints_reason_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    out = io.StringIO()
    code = apply_patch_cli(
        "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Update File: a.txt\n-zzz\n+y\n*** End Patch",
        tmp_path,
        out,
    )
    assert code == 1
    assert out.getvalue().startswith("error: a.txt: chunk 1 of 1 did not match")
    assert "    zzz" in out.getvalue()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_cli_bare_word_that_is_no_file_is_treated_as_patch_text(tmp_path: Path) -> None:
    out = io.StringIO()
    assert apply_patch_cli("missing.patch", tmp_path, out) == 1
    assert out.getvalue() == (
        "error: line 1: a patch must start with '*** Begin Patch', got 'missing.patch'\n"
    )


def test_end_of_file_marker_after_an_added_file_is_tolerated() -> None:
    ops = parse_patch("*** Begin Patch\n*** Add File: a\n+x\n*** End of File\n*** End Patch")
    assert ops == [AddFile("a", ("x",))]


def test_seek_with_an_empty_pattern() -> None:
    assert seek_sequence(["a", "b"], [], 1) == 1
    assert seek_sequence(["a", "b"], [], 0, at_eof=True) == 2


def test_large_file_applies_quickly(tmp_path: Path) -> None:
    lines = [f"line {i % 500}" for i in range(60_000)]
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    apply_patch(
        "*** Begin Patch\n*** Update File: big.txt\n@@ line 7\n+x\n"
        "@@\n line 497\n-line 498\n+LAST\n line 499\n*** End of File\n*** End Patch",
        tmp_path,
    )
    assert time.perf_counter() - start < 5
    text = (tmp_path / "big.txt").read_text().split("\n")
    assert text[-4:] == ["line 497", "LAST", "line 499", ""]
    assert text[7:10] == ["line 7", "x", "line 8"]
