"""The pure half of ``codey_worker.workspaces``: git's machine output parsed, the worktree's
place, the changed-file list and the diff's cap. git's output here is as git 2.39 prints it
(the integration tests run the real thing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codey_protocol.worker import ChangedFile, CommitInfo
from codey_worker.confine import ActionRefused
from codey_worker.git import GIT_HARDENING, git_argv
from codey_worker.policy import LocalPolicy
from codey_worker.workspaces import (
    NumStat,
    StatusEntry,
    WorktreeEntry,
    branch_slug,
    cap_diff,
    changed_files,
    chosen_paths,
    parse_log,
    parse_name_only,
    parse_name_status,
    parse_numstat,
    parse_sizes,
    parse_status,
    parse_worktrees,
    pr_url,
    setup_exit,
    status_paths,
    worktree_location,
)

SHA = "78981922613b2afb6025042ff6bd878ac1994e85"


def test_every_git_runs_without_hooks_fsmonitor_or_a_bare_repository_found_by_walking() -> None:
    argv = git_argv("status")
    pairs = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-c")
    assert pairs["core.fsmonitor"] == "false" and pairs["core.hooksPath"] == "/dev/null"
    assert pairs["safe.bareRepository"] == "explicit"
    assert pairs["protocol.ext.allow"] == "never"
    assert argv[-1] == "status" and len(pairs) == len(GIT_HARDENING)


def test_status_v2_entries_of_every_kind() -> None:
    data = (f"1 .M N... 100644 100644 100644 {SHA} {SHA} a file.txt\0"
            f"2 R. N... 100644 100644 100644 {SHA} {SHA} R100 new.txt\0old.txt\0"
            f"u UU N... 100644 100644 100644 100644 {SHA} {SHA} {SHA} both.txt\0"
            "? new dir/x.txt\0! ignored.log\0").encode()
    assert parse_status(data) == [
        StatusEntry("changed", "a file.txt", xy=".M"),
        StatusEntry("renamed", "new.txt", "old.txt", xy="R."),
        StatusEntry("unmerged", "both.txt", xy="UU"),
        StatusEntry("untracked", "new dir/x.txt"),
        StatusEntry("ignored", "ignored.log"),
    ]
    assert parse_status(b"") == []


def test_numstat_counts_renames_and_binaries() -> None:
    data = b"1\t0\t.gitignore\x002\t1\ta.txt\x00-\t-\tbin\x000\t0\t\x00old.py\x00new.py\x00"
    assert parse_numstat(data) == [
        NumStat(".gitignore", 1, 0), NumStat("a.txt", 2, 1), NumStat("bin", None, None),
        NumStat("new.py", 0, 0, "old.py"),
    ]
    assert NumStat("bin", None, None).binary


def test_name_status_letters() -> None:
    data = (b"A\x00n.txt\x00M\x00m.txt\x00D\x00d.txt\x00R097\x00o.py\x00r.py\x00"
            b"T\x00t\x00C100\x00a\x00c\x00")
    assert parse_name_status(data) == {
        "n.txt": ("added", None), "m.txt": ("modified", None), "d.txt": ("deleted", None),
        "r.py": ("renamed", "o.py"), "t": ("modified", None), "c": ("added", None),
    }


def test_names_with_newlines_tabs_and_bytes_that_are_not_utf8() -> None:
    assert parse_name_only(b"a\nb\x00c\td\x00\xff.txt\x00") == ["a\nb", "c\td", "\ufffd.txt"]
    assert parse_numstat(b"1\t2\tx\ty\x00") == [NumStat("x\ty", 1, 2)]


def test_worktree_list() -> None:
    data = (b"worktree /r\x00HEAD " + SHA.encode() + b"\x00branch refs/heads/main\x00\x00"
            b"worktree /w/a\x00HEAD " + SHA.encode() + b"\x00detached\x00\x00"
            b"worktree /w/b\x00HEAD " + SHA.encode() + b"\x00branch refs/heads/codey/b\x00"
            b"locked\x00\x00")
    assert parse_worktrees(data) == [
        WorktreeEntry("/r", SHA, "refs/heads/main"), WorktreeEntry("/w/a", SHA, ""),
        WorktreeEntry("/w/b", SHA, "refs/heads/codey/b"),
    ]
    assert parse_worktrees(b"worktree /bare\x00bare\x00\x00") == [
        WorktreeEntry("/bare", bare=True)]


def test_log() -> None:
    data = f"{SHA}\x1ffix: the login\x00\n{SHA[::-1]}\x1fsubject \x1f with a separator\x00"
    assert parse_log(data.encode()) == [
        CommitInfo(sha=SHA, subject="fix: the login"),
        CommitInfo(sha=SHA[::-1], subject="subject \x1f with a separator"),
    ]


def test_changed_files_mark_what_is_committed_and_sort() -> None:
    numstat = [NumStat("z.txt", 1, 0), NumStat("a.txt", 3, 2), NumStat("bin", None, None),
               NumStat("new.py", 0, 0, "old.py")]
    statuses = {"z.txt": ("added", None), "a.txt": ("modified", None),
                "bin": ("added", None), "new.py": ("renamed", "old.py")}
    files = changed_files(numstat, statuses, committed=["a.txt", "old.py"])  # type: ignore[arg-type]
    assert files == [
        ChangedFile(path="a.txt", status="modified", added=3, deleted=2, committed=True),
        ChangedFile(path="bin", status="added", binary=True, committed=False),
        ChangedFile(path="new.py", status="renamed", old_path="old.py", committed=True),
        ChangedFile(path="z.txt", status="added", added=1, committed=False),
    ]


def test_what_a_commit_can_take_is_what_git_status_lists() -> None:
    entries = [StatusEntry("changed", "a.txt", xy=".M"),
               StatusEntry("renamed", "new.py", "old.py", xy="R."),
               StatusEntry("untracked", "__pycache__/a.pyc"), StatusEntry("untracked", "nested/"),
               StatusEntry("ignored", "build/out.o"), StatusEntry("unmerged", "c.txt", xy="UU")]
    assert status_paths(entries) == {"a.txt", "new.py", "old.py", "__pycache__/a.pyc", "c.txt"}
    numstat = [NumStat("a.txt", 1, 1), NumStat("new.py", 0, 0, "old.py"), NumStat("z", 1, 0)]
    files = changed_files(numstat, {}, committed=["z"], pending={"a.txt", "old.py"})
    assert [(f.path, f.uncommitted) for f in files] == [("a.txt", True), ("new.py", True),
                                                        ("z", False)]


def test_chosen_paths_are_files_of_the_worktree_each_once() -> None:
    assert chosen_paths(["b.txt", "*.py", ":(top)x", "b.txt", "dir/é"]) == [
        "b.txt", "*.py", ":(top)x", "dir/é"]
    for bad in ("", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a/", ".git/config",
                "sub/.GIT/hooks/pre-commit", "a\0b"):
        with pytest.raises(ActionRefused) as refused:
            chosen_paths([bad])
        assert refused.value.code == "bad_request", bad


def test_batch_check_sizes_in_order_a_missing_one_none() -> None:
    out = (f"{SHA} blob 1234\nHEAD:gone missing\n{SHA} blob 0\n").encode()
    assert parse_sizes(out) == [1234, None, 0]


def test_diff_cap_cuts_at_a_line_end() -> None:
    text = "line one\nline two\nline three\n"
    assert cap_diff(text.encode(), 100) == (text, False)
    assert cap_diff(text.encode(), 20) == ("line one\nline two\n", True)
    assert cap_diff(text.encode(), 5) == ("", True)
    # a prefix of a longer output is cut even when it fits
    assert cap_diff(b"a\nb", 100, cut=True) == ("a\n", True)
    # characters, not bytes: a cut never splits one
    assert cap_diff("é\né\n".encode(), 3) == ("é\n", True)


def test_worktree_location_is_per_repository_and_branch() -> None:
    root = Path("/home/me/.codey-worktrees")
    a = worktree_location(root, Path("/home/me/src/app"), "codey/fix-login-3f2a")
    b = worktree_location(root, Path("/home/me/old/app"), "codey/fix-login-3f2a")
    assert a.parent.parent == root and a.name == "codey-fix-login-3f2a"
    assert a.parent.name.startswith("app-") and a.parent != b.parent
    assert worktree_location(root, Path("/x/app"), "a") == \
        worktree_location(root, Path("/x/app"), "a")


def test_branch_slug() -> None:
    assert branch_slug("codey/fix login") == "codey-fix-login"
    assert branch_slug("../..") == "branch"
    assert branch_slug("-a-") == "a"


def test_pr_url_and_setup_exit() -> None:
    out = "Creating pull request for codey/x into main\n\nhttps://github.com/o/r/pull/7\n"
    assert pr_url(out) == "https://github.com/o/r/pull/7" and pr_url("nothing") == ""
    assert setup_exit(0, None) == 0 and setup_exit(None, 15) == 143
    assert setup_exit(None, None) is None


def test_the_worktrees_folder_is_an_allowed_root(tmp_path: Path) -> None:
    policy = LocalPolicy(allowed_roots=[tmp_path / "src"], worktrees_dir=tmp_path / "wt")
    (tmp_path / "wt" / "app-1" / "b").mkdir(parents=True)
    assert policy.check_workdir(str(tmp_path / "wt" / "app-1" / "b")) == \
        (tmp_path / "wt" / "app-1" / "b").resolve()
    assert LocalPolicy.from_config({}).worktrees_dir == Path.home() / ".codey-worktrees"
