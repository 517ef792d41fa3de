"""The workspace_* actions through the worker's dispatcher, against real git in temp
folders: worktrees made from a base, the setup script in the sandbox, each worktree's own
change, remove's refusals, merges (fast-forward, rebase, a conflict undone), a push to a
local bare remote, and ``gh`` faked by a script on PATH that records its arguments. No
network. A repository whose config sets traps (an fsmonitor, hooks, an external diff) never
gets them run."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from codey_protocol import codec
from codey_protocol.worker import (
    ActionErrored,
    ActionMessage,
    ActionProgress,
    ActionResult,
    Attached,
    AttachSession,
    RunCommand,
    WorkspaceChanges,
    WorkspaceCommit,
    WorkspaceCommitted,
    WorkspaceCreate,
    WorkspaceDiff,
    WorkspaceMerge,
    WorkspaceMerged,
    WorkspacePush,
    WorkspacePushed,
    WorkspaceReady,
    WorkspaceRemove,
    WorkspaceRemoved,
)
from codey_worker.actions import ActionDispatcher
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords
from codey_worker.sandbox import Sandbox, detect

pytestmark = pytest.mark.integration

needs_bwrap = pytest.mark.skipif(detect().kind != "bwrap",
                                 reason=f"needs a working bubblewrap: {detect().reason}")

GIT = shutil.which("git") or "git"
_ids = itertools.count()


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([GIT, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_file(repo: Path, name: str, text: str, message: str = "") -> str:
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(text)
    git(repo, "add", "--", name)
    git(repo, "commit", "-qm", message or f"write {name}")
    return git(repo, "rev-parse", "HEAD")


@dataclass
class Machine:
    """A temp machine: ``src`` the allowed root with the repository ``src/app`` (``main``,
    ``a.txt`` committed), ``worktrees`` the worker's worktrees folder, ``codey`` its home."""

    base: Path
    src: Path
    repo: Path
    worktrees: Path
    codey: Path
    progress: list[ActionProgress] = field(default_factory=list)

    def act(self, action: ActionMessage) -> Any:
        """Run one action through a dispatcher; its result, or the ActionErrored."""
        frames: list[bytes] = []

        async def send(frame: bytes) -> None:
            frames.append(frame)

        async def main() -> None:
            policy = LocalPolicy(allowed_roots=[self.src], worktrees_dir=self.worktrees)
            records = ActionRecords(self.base / "records.sqlite3")
            dispatcher = ActionDispatcher(send, records, policy, kill_grace_s=1.0,
                                          home=self.codey, sandbox=Sandbox(detect(), self.codey))
            await dispatcher.handle(action)
            await dispatcher.wait_idle()
            records.close()

        asyncio.run(main())
        messages = [codec.decode_worker_to_server(f) for f in frames]
        self.progress = [m for m in messages if isinstance(m, ActionProgress)]
        last = messages[-1]
        if isinstance(last, ActionErrored):
            return last
        assert isinstance(last, ActionResult), messages
        return last.result

    def create(self, branch: str, **kw: Any) -> WorkspaceReady:
        ready = self.act(WorkspaceCreate(action_id=f"c{next(_ids)}", session_id="s1",
                                         repo=str(kw.pop("repo", self.repo)), branch=branch,
                                         **kw))
        assert isinstance(ready, WorkspaceReady), ready
        return ready

    def diff(self, path: str, base: str = "main", **kw: Any) -> WorkspaceChanges:
        changes = self.act(WorkspaceDiff(action_id=f"d{next(_ids)}", session_id="s1",
                                         workdir=path, base=base, **kw))
        assert isinstance(changes, WorkspaceChanges), changes
        return changes

    def commit(self, path: str, message: str = "work") -> Any:
        return self.act(WorkspaceCommit(action_id=f"k{next(_ids)}", session_id="s1",
                                        workdir=path, message=message))

    def merge(self, path: str, mode: Any = "rebase", base: str = "main") -> Any:
        return self.act(WorkspaceMerge(action_id=f"m{next(_ids)}", session_id="s1",
                                       workdir=path, base=base, mode=mode))

    def remove(self, path: str, **kw: Any) -> Any:
        return self.act(WorkspaceRemove(action_id=f"r{next(_ids)}", session_id="s1",
                                        workdir=path, **kw))

    def push(self, path: str, **kw: Any) -> Any:
        return self.act(WorkspacePush(action_id=f"p{next(_ids)}", session_id="s1",
                                      workdir=path, **kw))


@pytest.fixture
def machine(outside_tmp: Path, monkeypatch: pytest.MonkeyPatch,
            _codey_home: Path) -> Iterator[Machine]:
    home = outside_tmp / "home"
    home.mkdir()
    # git reads this home's config, not the machine's: no identity unless a test sets one
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    src = outside_tmp / "src"
    repo = src / "app"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Dev")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "commit.gpgsign", "false")
    commit_file(repo, "a.txt", "one\ntwo\nthree\n", "first")
    yield Machine(outside_tmp, src, repo, outside_tmp / "worktrees", _codey_home)


def code(errored: Any) -> str:
    assert isinstance(errored, ActionErrored), errored
    return errored.code


# ---------------------------------------------------------------------------------------------
# workspace_create


def test_create_from_the_current_branch_a_named_base_and_a_detached_head(
        machine: Machine) -> None:
    main_head = git(machine.repo, "rev-parse", "HEAD")
    ready = machine.create("codey/first")
    path = Path(ready.path)
    assert (ready.branch, ready.base, ready.base_commit) == ("codey/first", "main", main_head)
    assert ready.repo_root == str(machine.repo)
    assert path.parent.parent == machine.worktrees and path.name == "codey-first"
    assert git(path, "branch", "--show-current") == "codey/first"
    assert (path / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert (ready.setup, ready.setup_exit) == ("", None)  # no script in this repository

    git(machine.repo, "switch", "-qc", "dev")
    dev = commit_file(machine.repo, "dev.txt", "dev\n")
    git(machine.repo, "switch", "-q", "main")
    from_dev = machine.create("codey/from-dev", base="dev")
    assert (from_dev.base, from_dev.base_commit) == ("dev", dev)
    assert (Path(from_dev.path) / "dev.txt").exists()

    git(machine.repo, "switch", "-q", "--detach", "HEAD")
    detached = machine.create("codey/detached")
    assert detached.base == detached.base_commit == main_head


def test_create_from_a_folder_inside_the_repository(machine: Machine) -> None:
    commit_file(machine.repo, "pkg/mod.py", "x = 1\n")
    ready = machine.create("codey/inner", repo=machine.repo / "pkg")
    assert ready.repo_root == str(machine.repo)
    assert (Path(ready.path) / "pkg" / "mod.py").exists()


def test_create_refuses_what_it_should(machine: Machine) -> None:
    outside = machine.base / "elsewhere"
    outside.mkdir()
    git(outside, "init", "-q")
    assert code(machine.act(WorkspaceCreate(action_id="x1", session_id="s1",
                                            repo=str(outside), branch="codey/x"))) \
        == "outside_allowed_roots"
    plain = machine.src / "plain"
    plain.mkdir()
    errored = machine.act(WorkspaceCreate(action_id="x2", session_id="s1", repo=str(plain),
                                          branch="codey/x"))
    assert code(errored) == "not_a_repository"
    for bad in ("-x", "a..b", "has space", ""):
        assert code(machine.act(WorkspaceCreate(action_id=f"x3{bad}", session_id="s1",
                                                repo=str(machine.repo), branch=bad))) \
            == "bad_request"
    assert code(machine.act(WorkspaceCreate(action_id="x4", session_id="s1",
                                            repo=str(machine.repo), branch="codey/y",
                                            base="no-such-branch"))) == "bad_request"
    machine.create("codey/twice")
    again = machine.act(WorkspaceCreate(action_id="x5", session_id="s1",
                                        repo=str(machine.repo), branch="codey/twice"))
    assert code(again) == "git_failed" and "already exists" in again.message


@needs_bwrap
def test_setup_script_runs_sandboxed_its_output_streamed_and_its_exit_code_kept(
        machine: Machine) -> None:
    (machine.codey / "worker.json").write_text('{"private_key": "SECRET-KEY"}')
    leak = machine.codey / "worker.json"
    commit_file(machine.repo, ".codey/setup.sh",
                "echo installing\n"
                "echo a warning >&2\n"
                "touch made-by-setup\n"
                f"cat {leak} 2>/dev/null && echo LEAKED\n"
                "touch ../outside-the-worktree 2>/dev/null && echo ESCAPED\n"
                "exit 3\n")
    ready = machine.create("codey/setup")
    assert (ready.setup, ready.setup_exit) == (".codey/setup.sh", 3)
    out = "".join(p.data for p in machine.progress if p.stream == "stdout")
    err = "".join(p.data for p in machine.progress if p.stream == "stderr")
    assert out == "installing\n" and err == "a warning\n"
    # it ran in the worktree, could write it, and saw neither the worker's secrets nor
    # anywhere else to write
    assert (Path(ready.path) / "made-by-setup").exists()
    assert not (Path(ready.path).parent / "outside-the-worktree").exists()

    # a failing script still leaves the worktree; without setup it does not run
    skipped = machine.create("codey/no-setup", setup=False)
    assert (skipped.setup, skipped.setup_exit) == ("", None)
    assert not (Path(skipped.path) / "made-by-setup").exists()


@needs_bwrap
def test_a_setup_script_the_worker_will_not_start_leaves_the_worktree_and_says_why(
        machine: Machine) -> None:
    commit_file(machine.repo, ".codey/setup.sh", "echo hi\n")
    ready = machine.act(WorkspaceCreate(
        action_id="sd", session_id="s1", repo=str(machine.repo), branch="codey/t",
        timeout_s=0.0))  # a timeout of 0: the command is refused before it starts
    assert isinstance(ready, WorkspaceReady) and Path(ready.path).is_dir()
    assert (ready.setup, ready.setup_exit) == (".codey/setup.sh", None)
    assert "was not run" in "".join(p.data for p in machine.progress if p.stream == "stderr")


def test_three_creates_at_once_on_one_repository(machine: Machine) -> None:
    frames: list[bytes] = []

    async def send(frame: bytes) -> None:
        frames.append(frame)

    async def main() -> None:
        policy = LocalPolicy(allowed_roots=[machine.src], worktrees_dir=machine.worktrees)
        records = ActionRecords(machine.base / "records.sqlite3")
        dispatcher = ActionDispatcher(send, records, policy, home=machine.codey,
                                      sandbox=Sandbox(detect(), machine.codey))
        for i in range(3):  # all running before any has answered
            await dispatcher.handle(WorkspaceCreate(action_id=f"at-once-{i}", session_id=f"s{i}",
                                                    repo=str(machine.repo), branch=f"codey/{i}"))
        await dispatcher.wait_idle()
        records.close()

    asyncio.run(main())
    results = [m.result for m in map(codec.decode_worker_to_server, frames)
               if isinstance(m, ActionResult)]
    assert sorted(r.branch for r in results) == ["codey/0", "codey/1", "codey/2"]
    assert len(git(machine.repo, "worktree", "list").splitlines()) == 4


@needs_bwrap
def test_the_models_commands_in_a_worktree_read_git_but_cannot_write_it(
        machine: Machine) -> None:
    wt = machine.create("codey/model").path
    (Path(wt) / "a.txt").write_text("edited by the model\n")
    status = machine.act(RunCommand(action_id="st", session_id="s1", workdir=wt,
                                    argv=["git", "status", "--porcelain"]))
    assert (status.exit_code, status.stdout) == (0, " M a.txt\n")
    add = machine.act(RunCommand(action_id="add", session_id="s1", workdir=wt,
                                 argv=["git", "add", "a.txt"]))
    assert add.exit_code != 0 and add.sandbox_denied  # the worker commits, on the user's say
    assert git(Path(wt), "diff", "--cached", "--name-only") == ""


# ---------------------------------------------------------------------------------------------
# git run by the worker obeys no trap a repository's config sets


def test_a_hostile_repository_config_runs_nothing(machine: Machine) -> None:
    pwned = machine.base / "pwned"
    trap = f"touch {pwned}; false"
    hooks = machine.base / "hooks"
    hooks.mkdir()
    for name in ("post-checkout", "pre-commit", "commit-msg", "post-commit", "pre-rebase",
                 "post-rewrite", "post-merge", "pre-push", "reference-transaction",
                 "pre-auto-gc", "post-index-change"):
        for where in (hooks / name, machine.repo / ".git" / "hooks" / name):
            where.write_text(f"#!/bin/sh\ntouch {pwned}\n")
            where.chmod(where.stat().st_mode | stat.S_IXUSR)
    git(machine.repo, "config", "core.fsmonitor", trap)
    git(machine.repo, "config", "core.hooksPath", str(hooks))
    git(machine.repo, "config", "diff.external", str(hooks / "post-checkout"))
    git(machine.repo, "config", "core.pager", trap)

    ready = machine.create("codey/trap")
    wt = ready.path
    (Path(wt) / "a.txt").write_text("changed\n")
    assert machine.diff(wt).files
    assert isinstance(machine.commit(wt), WorkspaceCommitted)
    assert not pwned.exists()
    commit_file(machine.repo, "b.txt", "b\n")  # the test's own git obeys the traps…
    assert pwned.exists()
    pwned.unlink()  # …and the worker's, rebasing and merging onto it, still does not
    assert isinstance(machine.merge(wt), WorkspaceMerged)
    assert isinstance(machine.remove(wt), WorkspaceRemoved)
    assert not pwned.exists()


# ---------------------------------------------------------------------------------------------
# workspace_diff


def test_three_worktrees_editing_one_file_each_see_only_their_own_change(
        machine: Machine) -> None:
    paths = [Path(machine.create(f"codey/w{i}").path) for i in range(3)]
    for i, path in enumerate(paths):
        (path / "a.txt").write_text(f"one\ntwo by {i}\nthree\n")
    machine.commit(str(paths[0]), "committed by 0")  # one committed, two not
    (paths[2] / "notes.txt").write_text("only in 2\n")  # and an untracked file
    for i, path in enumerate(paths):
        changes = machine.diff(str(path))
        assert f"+two by {i}" in changes.diff
        assert not any(f"by {j}" in changes.diff for j in range(3) if j != i)
        a = next(f for f in changes.files if f.path == "a.txt")
        assert (a.status, a.added, a.deleted, a.committed) == ("modified", 1, 1, i == 0)
        assert changes.dirty == (i != 0)
    assert [f.path for f in machine.diff(str(paths[1])).files] == ["a.txt"]
    notes = machine.diff(str(paths[2]))
    assert [(f.path, f.status, f.committed) for f in notes.files] == [
        ("a.txt", "modified", False), ("notes.txt", "added", False)]
    assert "+only in 2" in notes.diff
    # the main checkout has none of it
    assert git(machine.repo, "status", "--porcelain") == ""


def test_diff_in_detail(machine: Machine) -> None:
    commit_file(machine.repo, "old.txt", "".join(f"line {i}\n" for i in range(20)))
    commit_file(machine.repo, "gone.txt", "bye\n")
    wt = Path(machine.create("codey/detail").path)
    git(wt, "mv", "old.txt", "new.txt")
    (wt / "bin.dat").write_bytes(b"\x00\x01\x02")
    git(wt, "add", "bin.dat")
    git(wt, "commit", "-qm", "rename and a binary")
    git(wt, "rm", "-q", "gone.txt")
    (wt / "a.txt").write_text("one\n")
    (wt / "ignored.log").write_text("x\n")
    (wt / ".gitignore").write_text("*.log\n")
    git(wt, "add", ".gitignore")  # staged, not committed
    main_moved = commit_file(machine.repo, "main.txt", "main moved on\n")

    changes = machine.diff(str(wt))
    by_path = {f.path: f for f in changes.files}
    assert sorted(by_path) == [".gitignore", "a.txt", "bin.dat", "gone.txt", "new.txt"]
    assert (by_path["new.txt"].status, by_path["new.txt"].old_path) == ("renamed", "old.txt")
    assert by_path["new.txt"].committed and by_path["bin.dat"].committed
    assert by_path["bin.dat"].binary and by_path["bin.dat"].status == "added"
    assert (by_path["gone.txt"].status, by_path["gone.txt"].deleted) == ("deleted", 1)
    assert (by_path["a.txt"].added, by_path["a.txt"].deleted) == (0, 2)
    assert not by_path[".gitignore"].committed
    # what a commit can still take: the staged, deleted and modified files, not the
    # committed rename and binary
    assert [f.path for f in changes.files if f.uncommitted] == [".gitignore", "a.txt",
                                                                 "gone.txt"]
    # a binary file's sizes instead of line counts (it is new: nothing at the merge base)
    assert (by_path["bin.dat"].old_size, by_path["bin.dat"].new_size) == (None, 3)
    assert by_path["a.txt"].new_size is None  # (text: its lines say it)
    assert [c.subject for c in changes.commits] == ["rename and a binary"]
    assert changes.dirty and changes.behind == 1 and not changes.truncated
    assert changes.can_pick  # (its commit takes only the files it is given)
    assert changes.merge_base == git(machine.repo, "rev-parse", f"{main_moved}~1")
    assert "main moved on" not in changes.diff and "ignored.log" not in changes.diff
    # the user's staging is as it was: the untracked file was never added for real
    assert git(wt, "diff", "--cached", "--name-only") == ".gitignore\ngone.txt"

    cut = machine.diff(str(wt), diff_cap=200)
    assert cut.truncated and len(cut.diff) <= 200 and cut.diff.endswith("\n")
    assert cut.files == changes.files


def test_diff_refuses_a_base_that_names_nothing(machine: Machine) -> None:
    wt = machine.create("codey/nob").path
    errored = machine.act(WorkspaceDiff(action_id="nb", session_id="s1", workdir=wt,
                                        base="nope"))
    assert code(errored) == "bad_request"


# ---------------------------------------------------------------------------------------------
# workspace_remove


def test_remove_refuses_dirty_and_unmerged_unless_forced(machine: Machine) -> None:
    dirty = machine.create("codey/dirty").path
    (Path(dirty) / "new.txt").write_text("untracked\n")
    assert code(machine.remove(dirty)) == "dirty"
    committed = machine.create("codey/unmerged").path
    commit_file(Path(committed), "b.txt", "b\n")
    refused = machine.remove(committed, delete_branch=True)
    assert code(refused) == "unmerged" and "1 commit" in refused.message
    assert Path(dirty).exists() and Path(committed).exists()

    forced = machine.remove(dirty, force=True)
    assert forced == WorkspaceRemoved(path=dirty, branch_deleted=False)
    assert not Path(dirty).exists()
    assert git(machine.repo, "branch", "--list", "codey/dirty")  # the branch stays
    git(machine.repo, "branch", "-m", "main", "trunk")  # forced, a base gone is no matter
    assert machine.remove(committed, force=True, delete_branch=True).branch_deleted
    assert not git(machine.repo, "branch", "--list", "codey/unmerged")
    assert not machine.worktrees.joinpath(Path(dirty).parent.name).exists()  # emptied


def test_remove_keeps_ignored_files_from_blocking_and_deletes_a_merged_branch(
        machine: Machine) -> None:
    commit_file(machine.repo, ".gitignore", "node_modules/\n")
    wt = machine.create("codey/clean").path
    (Path(wt) / "node_modules").mkdir()
    (Path(wt) / "node_modules" / "x.js").write_text("x\n")
    removed = machine.remove(wt, delete_branch=True)
    assert removed.branch_deleted and not Path(wt).exists()


def test_a_removed_worktree_is_not_made_again_as_an_empty_folder_but_from_its_branch(
        machine: Machine) -> None:
    wt = machine.create("codey/gone").path
    commit_file(Path(wt), "work.txt", "kept on the branch\n")
    assert isinstance(machine.remove(wt, force=True), WorkspaceRemoved)
    # a session that goes on there: no empty folder, nothing run (issue 33, item 2)
    attach = machine.act(AttachSession(action_id="at1", session_id="s1", workdir=wt))
    assert code(attach) == "worktree_gone" and "removed since" in attach.message
    ran = machine.act(RunCommand(action_id="rc1", session_id="s1", workdir=wt,
                                 argv=["python3", "-m", "unittest"], sandbox="full-access"))
    assert code(ran) == "worktree_gone"
    assert not Path(wt).exists()
    # a folder elsewhere is made as before (a new project's folder)
    fresh = machine.src / "new-project"
    made = machine.act(AttachSession(action_id="at2", session_id="s2", workdir=str(fresh)))
    assert isinstance(made, Attached) and made.created and fresh.is_dir()

    # made again from the branch, at its old place, with what was committed there
    again = machine.create("codey/gone", existing=True)
    assert again.path == wt and (Path(wt) / "work.txt").read_text() == "kept on the branch\n"
    assert git(Path(wt), "symbolic-ref", "--short", "HEAD") == "codey/gone"
    assert again.base == "main" and again.base_commit == git(machine.repo, "rev-parse", "main")
    assert machine.create("codey/gone", existing=True).path == wt  # once there: nothing to do
    # deleted by hand: git's note of it is cleared, and it is made again
    shutil.rmtree(wt)
    assert code(machine.act(AttachSession(action_id="at3", session_id="s1",
                                          workdir=wt))) == "worktree_gone"
    assert machine.create("codey/gone", existing=True).path == wt
    # the branch deleted with it: nothing to make it from
    assert machine.remove(wt, force=True, delete_branch=True).branch_deleted
    gone = machine.act(WorkspaceCreate(action_id="c-gone", session_id="s1",
                                       repo=str(machine.repo), branch="codey/gone",
                                       existing=True))
    assert code(gone) == "branch_gone" and not Path(wt).exists()
    # a branch checked out elsewhere is not checked out twice
    git(machine.repo, "branch", "codey/twice")
    git(machine.repo, "worktree", "add", "-q", str(machine.src / "mine"), "codey/twice")
    twice = machine.act(WorkspaceCreate(action_id="c-twice", session_id="s1",
                                        repo=str(machine.repo), branch="codey/twice",
                                        existing=True))
    assert code(twice) == "bad_request" and "checked out in" in twice.message


def test_remove_touches_only_worktrees_it_made(machine: Machine) -> None:
    assert code(machine.remove(str(machine.repo), force=True)) == "bad_request"
    own = machine.src / "own-worktree"
    git(machine.repo, "worktree", "add", "-q", "-b", "mine", str(own))
    assert code(machine.remove(str(own), force=True)) == "bad_request"
    assert own.exists()


# ---------------------------------------------------------------------------------------------
# workspace_commit


def test_commit_adds_everything_as_the_configured_author(machine: Machine) -> None:
    wt = Path(machine.create("codey/commit").path)
    (wt / "a.txt").write_text("edited\n")
    (wt / "new.txt").write_text("new\n")
    done = machine.commit(str(wt), "Edit a, add new\n\n#12 is fixed by it.\n")
    assert isinstance(done, WorkspaceCommitted) and done.files == 2
    assert done.sha == git(wt, "rev-parse", "HEAD")
    assert git(wt, "log", "-1", "--format=%an <%ae>|%s|%b") == \
        "Dev <dev@example.com>|Edit a, add new|#12 is fixed by it."
    assert git(wt, "status", "--porcelain") == ""
    nothing = machine.commit(str(wt), "again")
    assert code(nothing) == "git_failed" and "nothing to commit" in nothing.message
    assert code(machine.commit(str(wt), "  ")) == "bad_request"


def test_commit_takes_exactly_the_chosen_files(machine: Machine) -> None:
    commit_file(machine.repo, "logo.png", "\x89PNG\x00" + "x" * 100)
    commit_file(machine.repo, "gone.txt", "bye\n")
    wt = Path(machine.create("codey/pick").path)
    (wt / "a.txt").write_text("edited\n")
    (wt / "*.txt").write_text("a name that is a pattern\n")
    (wt / "__pycache__").mkdir()
    (wt / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00\x01")
    (wt / "logo.png").write_bytes(b"\x89PNG\x00" + b"y" * 150)
    (wt / "gone.txt").unlink()
    (wt / "keep.txt").write_text("left for later\n")
    changes = machine.diff(str(wt))
    logo = next(f for f in changes.files if f.path == "logo.png")
    assert logo.binary and (logo.old_size, logo.new_size) == (106, 155)  # (\x89: 2 bytes in UTF-8)

    # a literal "*.txt" (not a pattern: a.txt and keep.txt stay out), the deletion, a path
    # without changes (passed over); the cache, the image and keep.txt are not chosen
    done = machine.act(WorkspaceCommit(action_id="pick1", session_id="s1", workdir=str(wt),
                                       message="Pick", paths=["*.txt", "gone.txt", "b/none"]))
    assert isinstance(done, WorkspaceCommitted) and done.files == 2, done
    assert git(wt, "show", "--name-status", "--format=", "HEAD").splitlines() == [
        "A\t*.txt", "D\tgone.txt"]
    # (git() strips the output, and with it the first line's leading blank: "M" is " M")
    left = git(wt, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(line.strip() for line in left) == [
        "?? __pycache__/a.cpython-311.pyc", "?? keep.txt", "M a.txt", "M logo.png"]
    assert git(wt, "diff", "--cached", "--name-only") == ""  # nothing left staged

    # something staged before is not taken along with a chosen file
    git(wt, "add", "logo.png")
    done = machine.act(WorkspaceCommit(action_id="pick2", session_id="s1", workdir=str(wt),
                                       message="Only a", paths=["a.txt"]))
    assert isinstance(done, WorkspaceCommitted) and done.files == 1, done
    assert git(wt, "show", "--name-only", "--format=", "HEAD") == "a.txt"
    assert git(wt, "diff", "--cached", "--name-only") == "logo.png"

    nothing = machine.act(WorkspaceCommit(action_id="pick3", session_id="s1", workdir=str(wt),
                                          message="x", paths=["a.txt"]))
    assert code(nothing) == "git_failed" and "nothing to commit" in nothing.message
    for bad in (["../a.txt"], ["/etc/passwd"], [".git/config"], ["a/./b"], [""]):
        refused = machine.act(WorkspaceCommit(action_id=f"bad{bad}", session_id="s1",
                                              workdir=str(wt), message="x", paths=bad))
        assert code(refused) == "bad_request", bad


def test_commit_without_any_identity_uses_codeys(machine: Machine) -> None:
    git(machine.repo, "config", "--unset", "user.name")
    git(machine.repo, "config", "--unset", "user.email")
    wt = Path(machine.create("codey/anon").path)
    (wt / "a.txt").write_text("edited\n")
    assert isinstance(machine.commit(str(wt)), WorkspaceCommitted)
    assert git(wt, "log", "-1", "--format=%an <%ae>") == "Codey <codey@localhost>"


# ---------------------------------------------------------------------------------------------
# workspace_merge


def test_merge_fast_forward_moves_main_and_its_files(machine: Machine) -> None:
    wt = machine.create("codey/ff").path
    head = commit_file(Path(wt), "ff.txt", "ff\n")
    merged = machine.merge(wt, mode="ff")
    assert merged.merged and merged.sha == head and merged.conflicts == []
    assert git(machine.repo, "rev-parse", "main") == head
    assert (machine.repo / "ff.txt").read_text() == "ff\n"  # the main checkout followed


def test_merge_ff_refuses_a_branch_behind_and_rebase_catches_up(machine: Machine) -> None:
    wt = machine.create("codey/behind").path
    commit_file(Path(wt), "mine.txt", "mine\n")
    theirs = commit_file(machine.repo, "theirs.txt", "theirs\n")
    not_ff = machine.merge(wt, mode="ff")
    assert not not_ff.merged and "not a fast-forward" in not_ff.message
    assert git(machine.repo, "rev-parse", "main") == theirs

    merged = machine.merge(wt, mode="rebase")
    assert merged.merged and merged.sha == git(Path(wt), "rev-parse", "HEAD")
    assert git(machine.repo, "rev-parse", "main") == merged.sha
    assert git(machine.repo, "rev-parse", "main~1") == theirs
    assert (machine.repo / "mine.txt").exists() and (machine.repo / "theirs.txt").exists()


def test_merge_refuses_a_main_checkout_with_uncommitted_changes(machine: Machine) -> None:
    wt = machine.create("codey/wait").path
    commit_file(Path(wt), "w.txt", "w\n")
    (machine.repo / "a.txt").write_text("the user is editing\n")
    refused = machine.merge(wt, mode="ff")
    assert code(refused) == "dirty" and str(machine.repo) in refused.message
    assert (machine.repo / "a.txt").read_text() == "the user is editing\n"


def test_merge_into_a_branch_checked_out_nowhere_moves_only_the_ref(machine: Machine) -> None:
    git(machine.repo, "branch", "release")
    wt = machine.create("codey/rel", base="release").path
    head = commit_file(Path(wt), "r.txt", "r\n")
    assert machine.merge(wt, mode="ff", base="release").merged
    assert git(machine.repo, "rev-parse", "release") == head
    assert not (machine.repo / "r.txt").exists()


def test_a_conflicting_rebase_names_the_files_and_leaves_nothing_half_done(
        machine: Machine) -> None:
    first = machine.create("codey/first").path
    second = machine.create("codey/second").path
    commit_file(Path(first), "a.txt", "one\nFIRST\nthree\n")
    commit_file(Path(first), "f.txt", "f\n")
    commit_file(Path(second), "a.txt", "one\nSECOND\nthree\n")
    before = git(Path(second), "rev-parse", "HEAD")
    assert machine.merge(first).merged

    conflicted = machine.merge(second)
    assert isinstance(conflicted, WorkspaceMerged) and not conflicted.merged
    assert conflicted.conflicts == ["a.txt"] and "undone" in conflicted.message
    gitdir = Path(git(Path(second), "rev-parse", "--absolute-git-dir"))
    assert not (gitdir / "rebase-merge").exists() and not (gitdir / "rebase-apply").exists()
    assert git(Path(second), "rev-parse", "HEAD") == before
    assert git(Path(second), "status", "--porcelain") == ""
    assert (Path(second) / "a.txt").read_text() == "one\nSECOND\nthree\n"
    assert "FIRST" in (machine.repo / "a.txt").read_text()


def test_a_conflict_handed_to_the_agent_stays_in_the_files_until_a_commit_concludes_it(
        machine: Machine) -> None:
    first = machine.create("codey/first").path
    second = machine.create("codey/second").path
    commit_file(Path(first), "a.txt", "one\nFIRST\nthree\n")
    commit_file(Path(second), "a.txt", "one\nSECOND\nthree\n")
    assert machine.merge(first).merged

    # main into the branch: the conflict is left for the agent, with its markers
    left = machine.merge(second, mode="into_branch")
    assert isinstance(left, WorkspaceMerged) and not left.merged
    assert left.conflicts == ["a.txt"]
    marked = (Path(second) / "a.txt").read_text()
    assert "<<<<<<<" in marked and "FIRST" in marked and "SECOND" in marked
    # the agent resolves the file (it edits files only); the worker's commit concludes it
    (Path(second) / "a.txt").write_text("one\nFIRST and SECOND\nthree\n")
    machine.commit(second, "Merge main, both lines kept")
    gitdir = Path(git(Path(second), "rev-parse", "--absolute-git-dir"))
    assert not (gitdir / "MERGE_HEAD").exists()
    assert len(git(Path(second), "rev-list", "--parents", "-n1", "HEAD").split()) == 3
    # now a fast-forward of main, and main has both
    assert machine.merge(second, mode="ff").merged
    assert (machine.repo / "a.txt").read_text() == "one\nFIRST and SECOND\nthree\n"
    # a branch that already has main: nothing to merge
    assert machine.merge(second, mode="into_branch").merged


# ---------------------------------------------------------------------------------------------
# workspace_push


@pytest.fixture
def remote(machine: Machine) -> Path:
    bare = machine.base / "remote.git"
    git(machine.base, "init", "-q", "--bare", str(bare))
    git(machine.repo, "remote", "add", "origin", str(bare))
    return bare


def fake_gh(machine: Machine, monkeypatch: pytest.MonkeyPatch, *, logged_in: bool) -> Path:
    """A ``gh`` on PATH that records its arguments, one call a line."""
    bin_dir = machine.base / "bin"
    bin_dir.mkdir(exist_ok=True)
    # gh runs in the sandbox, where what it may write is its own state folder
    state = machine.base / "home" / ".config" / "gh"
    state.mkdir(parents=True, exist_ok=True)
    calls = state / "calls"
    gh = bin_dir / "gh"
    gh.write_text(f"""#!/bin/sh
printf '%s\\n' "$*" >> {calls}
if [ "$1 $2" = "auth status" ]; then
  {'exit 0' if logged_in else 'echo "You are not logged into any GitHub hosts." >&2; exit 1'}
fi
echo "https://github.com/dev/app/pull/42"
""")
    gh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_push_to_a_bare_remote_sets_the_upstream(machine: Machine, remote: Path) -> None:
    wt = machine.create("codey/push").path
    head = commit_file(Path(wt), "p.txt", "p\n")
    pushed = machine.push(wt)
    assert isinstance(pushed, WorkspacePushed)
    assert (pushed.remote, pushed.branch, pushed.pr_url) == ("origin", "codey/push", "")
    assert git(remote, "rev-parse", "refs/heads/codey/push") == head
    assert git(Path(wt), "rev-parse", "--abbrev-ref", "@{upstream}") == "origin/codey/push"
    assert code(machine.push(wt, remote="upstream")) == "no_remote"


def test_push_and_open_a_pull_request_with_gh(machine: Machine, remote: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_gh(machine, monkeypatch, logged_in=True)
    wt = machine.create("codey/pr").path
    commit_file(Path(wt), "p.txt", "p\n")
    pushed = machine.push(wt, open_pr=True, base="main", title="Fix the login",
                          body="It failed.\nNow it does not.")
    assert pushed.pr_url == "https://github.com/dev/app/pull/42"
    assert calls.read_text().splitlines() == [
        "auth status",
        "pr create --head codey/pr --base main --title Fix the login --body It failed.",
        "Now it does not.",
    ]
    assert git(remote, "rev-parse", "refs/heads/codey/pr")


def test_gh_logged_out_or_missing_is_said_and_nothing_is_pushed(
        machine: Machine, remote: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wt = machine.create("codey/nogh").path
    commit_file(Path(wt), "p.txt", "p\n")
    calls = fake_gh(machine, monkeypatch, logged_in=False)
    refused = machine.push(wt, open_pr=True)
    assert code(refused) == "gh_not_logged_in" and "gh auth login" in refused.message
    assert calls.read_text().splitlines() == ["auth status"]

    only_git = machine.base / "only-git"
    only_git.mkdir()
    (only_git / "git").symlink_to(GIT)
    monkeypatch.setenv("PATH", str(only_git))
    assert code(machine.push(wt, open_pr=True)) == "gh_missing"
    assert not git(remote, "branch", "--list")  # nothing was pushed
