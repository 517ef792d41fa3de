"""The checkpoint_* actions through the worker's dispatcher, against real git in temp
folders: three turns that write, patch and delete files (a binary, an untracked file, an
ignored one) restored to turn 1; a hand edit found and kept; the same in a folder that is not a
repository (the shadow repository under $CODEY_HOME) and in a linked worktree; diff between
turns, one file restored; a checkpoint whose commit is gone; pruning. Attacks: a hostile
repository (hooks, an fsmonitor, a filter driver, a .git symlink) runs nothing; a restored
path outside the workdir is refused."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codey_protocol import codec
from codey_protocol.worker import (
    ActionErrored,
    ActionMessage,
    ActionResult,
    CheckpointDiff,
    CheckpointPlan,
    CheckpointPreview,
    CheckpointPrune,
    CheckpointRecord,
    CheckpointRestore,
    CheckpointRestored,
    CheckpointsPruned,
    CheckpointTaken,
)
from codey_worker.actions import ActionDispatcher
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords
from codey_worker.sandbox import Sandbox, detect

pytestmark = pytest.mark.integration

GIT = shutil.which("git") or "git"
_ids = itertools.count()
BINARY = bytes(range(256)) * 4


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([GIT, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


@dataclass
class Machine:
    base: Path
    src: Path
    codey: Path

    def act(self, action: ActionMessage) -> Any:
        frames: list[bytes] = []

        async def send(frame: bytes) -> None:
            frames.append(frame)

        async def main() -> None:
            policy = LocalPolicy(allowed_roots=[self.src], worktrees_dir=self.base / "wts")
            records = ActionRecords(self.base / "records.sqlite3")
            dispatcher = ActionDispatcher(send, records, policy, kill_grace_s=1.0,
                                          home=self.codey, sandbox=Sandbox(detect(), self.codey))
            await dispatcher.handle(action)
            await dispatcher.wait_idle()
            records.close()

        asyncio.run(main())
        last = codec.decode_worker_to_server(frames[-1])
        if isinstance(last, ActionErrored):
            return last
        assert isinstance(last, ActionResult), frames
        return last.result

    def record(self, workdir: Path, turn: str, phase: str = "start", **kw: Any
               ) -> CheckpointTaken:
        taken = self.act(CheckpointRecord(action_id=f"r{next(_ids)}", session_id="s1",
                                          workdir=str(workdir), turn=turn, phase=phase,  # type: ignore[arg-type]
                                          **kw))
        assert isinstance(taken, CheckpointTaken), taken
        return taken

    def preview(self, workdir: Path, turn: str) -> Any:
        return self.act(CheckpointPreview(action_id=f"p{next(_ids)}", session_id="s1",
                                          workdir=str(workdir), turn=turn))

    def restore(self, workdir: Path, turn: str, **kw: Any) -> Any:
        return self.act(CheckpointRestore(action_id=f"x{next(_ids)}", session_id="s1",
                                          workdir=str(workdir), turn=turn, **kw))


@pytest.fixture
def machine(outside_tmp: Path, monkeypatch: pytest.MonkeyPatch,
            _codey_home: Path) -> Iterator[Machine]:
    home = outside_tmp / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    src = outside_tmp / "src"
    src.mkdir()
    yield Machine(outside_tmp, src, _codey_home)


def make_repo(folder: Path) -> Path:
    folder.mkdir(parents=True)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "config", "user.name", "Dev")
    git(folder, "config", "user.email", "dev@example.com")
    (folder / ".gitignore").write_text("*.log\n")
    (folder / "a.txt").write_text("one\ntwo\nthree\n")
    (folder / "gone.txt").write_text("to be deleted\n")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", "first")
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if rel == ".git" or rel.startswith(".git/") or not path.is_file():
            continue
        found[rel] = path.read_bytes()
    return found


def three_turns(machine: Machine, work: Path) -> dict[str, bytes]:
    """Turn 1 writes a binary and an untracked file; turn 2 patches a.txt; turn 3 deletes
    gone.txt and writes the ignored log. Returns the files as turn 1's checkpoint holds them."""
    (work / "debug.log").write_text("ignored, before\n")
    before = files_of(work)
    machine.record(work, "t1")
    (work / "pic.bin").write_bytes(BINARY)
    (work / "notes.md").write_text("untracked\n")
    machine.record(work, "t1", "end")
    machine.record(work, "t2")
    (work / "a.txt").write_text("one\nTWO\nthree\n")
    machine.record(work, "t2", "end")
    machine.record(work, "t3")
    (work / "gone.txt").unlink()
    (work / "debug.log").write_text("ignored, after\n")
    (work / "pic.bin").write_bytes(BINARY[::-1])
    machine.record(work, "t3", "end")
    return before


def check_restored_to_turn_1(machine: Machine, work: Path, before: dict[str, bytes]) -> None:
    plan = machine.preview(work, "t1")
    assert isinstance(plan, CheckpointPlan), plan
    by_path = {f.path: f for f in plan.files}
    assert by_path["a.txt"].status == "modified" and "-TWO" in by_path["a.txt"].diff
    assert by_path["gone.txt"].status == "added"
    assert by_path["pic.bin"].status == "deleted" and by_path["notes.md"].status == "deleted"
    assert "debug.log" not in by_path
    assert plan.hand_edited == []
    done = machine.restore(work, "t1")
    assert isinstance(done, CheckpointRestored), done
    assert set(done.restored) == {"a.txt", "gone.txt", "pic.bin", "notes.md"}
    after = files_of(work)
    # the ignored file is untouched (as turn 3 left it); everything else is as at turn 1
    assert after.pop("debug.log") == b"ignored, after\n"
    before.pop("debug.log")
    assert after == before


def test_three_turns_restored_to_the_first_in_a_repository(machine: Machine) -> None:
    work = make_repo(machine.src / "app")
    head = git(work, "rev-parse", "HEAD")
    index = (work / ".git" / "index").read_bytes()
    taken = machine.record(work, "t0")
    assert taken.files == 3 and not taken.shadow
    assert any("debug.log" in s or "ignored" in s for s in taken.skipped) or taken.skipped == []
    before = three_turns(machine, work)
    check_restored_to_turn_1(machine, work, before)
    # the user's HEAD, index, branches and stash are untouched; the refs are private
    assert git(work, "rev-parse", "HEAD") == head
    assert (work / ".git" / "index").read_bytes() == index
    assert git(work, "branch", "--format=%(refname)") == "refs/heads/main"
    assert git(work, "stash", "list") == ""
    refs = git(work, "for-each-ref", "--format=%(refname)", "refs/codey/").splitlines()
    assert "refs/codey/checkpoints/s1/t1" in refs and "refs/codey/checkpoint-ends/s1/t3" in refs


def test_a_hand_edit_since_the_turns_is_named_and_kept(machine: Machine) -> None:
    work = make_repo(machine.src / "app")
    machine.record(work, "t1")
    (work / "a.txt").write_text("by the model\n")
    (work / "b.txt").write_text("by the model\n")
    machine.record(work, "t1", "end")
    (work / "b.txt").write_text("by hand\n")  # after the turn: the user's own edit
    plan = machine.preview(work, "t1")
    assert plan.hand_edited == ["b.txt"]
    done = machine.restore(work, "t1")
    assert done.restored == ["a.txt"] and done.kept == ["b.txt"]
    assert (work / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert (work / "b.txt").read_text() == "by hand\n"
    # ticked: the hand edit goes too
    done = machine.restore(work, "t1", keep=[])
    assert done.restored == ["b.txt"] and not (work / "b.txt").exists()


def test_a_folder_that_is_not_a_repository_uses_a_shadow_repository(machine: Machine) -> None:
    work = machine.src / "plain"
    work.mkdir()
    (work / "a.txt").write_text("one\ntwo\nthree\n")
    (work / "gone.txt").write_text("to be deleted\n")
    (work / ".gitignore").write_text("*.log\n")
    taken = machine.record(work, "t0")
    assert taken.shadow
    assert not (work / ".git").exists()
    assert (machine.codey / "checkpoints" / "s1.git" / "HEAD").is_file()
    before = three_turns(machine, work)
    check_restored_to_turn_1(machine, work, before)
    assert not (work / ".git").exists()
    pruned = machine.act(CheckpointPrune(action_id="pr", session_id="s1", workdir=str(work)))
    assert isinstance(pruned, CheckpointsPruned) and pruned.removed == 7
    assert not (machine.codey / "checkpoints" / "s1.git").exists()


def test_a_worktree_session(machine: Machine) -> None:
    repo = make_repo(machine.src / "app")
    work = machine.src / "wt"
    git(repo, "worktree", "add", "-q", "-b", "codey/x", str(work))
    (work / "debug.log").write_text("x\n")
    before = three_turns(machine, work)
    check_restored_to_turn_1(machine, work, before)
    assert "refs/codey/checkpoints/s1/t1" in git(repo, "for-each-ref", "refs/codey/")


def test_diff_between_turns_and_one_file_restored(machine: Machine) -> None:
    work = make_repo(machine.src / "app")
    three_turns(machine, work)
    plan = machine.act(CheckpointDiff(action_id="d1", session_id="s1", workdir=str(work),
                                      from_turn="t2", to_turn="t3"))
    assert isinstance(plan, CheckpointPlan), plan
    assert {f.path: f.status for f in plan.files} == {"a.txt": "modified"}
    assert "+TWO" in plan.files[0].diff
    now = machine.act(CheckpointDiff(action_id="d2", session_id="s1", workdir=str(work),
                                     from_turn="t3"))
    assert {f.path: f.status for f in now.files} == {"gone.txt": "deleted",
                                                     "pic.bin": "modified"}
    done = machine.restore(work, "t2", path="gone.txt")
    assert done.restored == ["gone.txt"] and (work / "gone.txt").read_text() == "to be deleted\n"
    assert (work / "pic.bin").read_bytes() == BINARY[::-1]  # nothing else


def test_a_checkpoint_whose_commit_is_gone_is_refused(machine: Machine) -> None:
    work = make_repo(machine.src / "app")
    machine.record(work, "t1")
    missing = machine.restore(work, "t9")
    assert isinstance(missing, ActionErrored) and missing.code == "checkpoint_gone"
    git(work, "update-ref", "-d", "refs/codey/checkpoints/s1/t1")
    gone = machine.preview(work, "t1")
    assert isinstance(gone, ActionErrored) and gone.code == "checkpoint_gone"


def test_big_files_are_skipped_and_listed_and_left_alone(machine: Machine) -> None:
    work = make_repo(machine.src / "app")
    (work / "big.dat").write_bytes(b"x" * 5000)
    taken = machine.record(work, "t1", max_file_bytes=1000)
    assert any(s.startswith("big.dat (over") for s in taken.skipped), taken.skipped
    (work / "big.dat").write_bytes(b"y" * 6000)
    (work / "a.txt").write_text("changed\n")
    done = machine.restore(work, "t1")
    assert done.restored == ["a.txt"]
    assert (work / "big.dat").read_bytes() == b"y" * 6000


def test_keep_prunes_the_oldest_turns(machine: Machine) -> None:
    work = make_repo(machine.src / "app")
    for turn in ("t1", "t2", "t3"):
        machine.record(work, turn, keep=2)
    refs = git(work, "for-each-ref", "--format=%(refname)", "refs/codey/").splitlines()
    assert refs == ["refs/codey/checkpoints/s1/t2", "refs/codey/checkpoints/s1/t3"]


# ---------------------------------------------------------------------------------------------
# attacks


def test_a_hostile_repository_runs_nothing(machine: Machine) -> None:
    work = make_repo(machine.src / "app")
    pwned = machine.base / "pwned"
    trap = f"touch {pwned}; cat"
    for name in ("pre-commit", "post-commit", "reference-transaction", "post-checkout",
                 "post-index-change"):
        hook = work / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\ntouch {pwned}\n")
        hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    git(work, "config", "core.fsmonitor", trap)
    git(work, "config", "filter.evil.clean", trap)
    git(work, "config", "filter.evil.smudge", trap)
    git(work, "config", "filter.evil.process", trap)
    git(work, "config", "filter.evil.required", "true")
    (work / ".gitattributes").write_text("*.txt filter=evil\n")
    (work / ".git" / "info" / "attributes").write_text("* filter=evil\n")
    machine.record(work, "t1")
    (work / "a.txt").write_text("changed\n")
    (work / "new.txt").write_text("new\n")
    machine.record(work, "t1", "end")
    assert isinstance(machine.preview(work, "t1"), CheckpointPlan)
    done = machine.restore(work, "t1")
    assert isinstance(done, CheckpointRestored), done
    assert done.restored == ["a.txt", "new.txt"], done
    assert (work / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert not pwned.exists()
    # the test's own git obeys the traps: they were armed
    subprocess.run([GIT, "status"], cwd=work, capture_output=True, check=False)
    assert pwned.exists()


def test_a_dot_git_symlink_is_refused(machine: Machine) -> None:
    real = make_repo(machine.base / "elsewhere")
    work = machine.src / "linked"
    work.mkdir()
    os.symlink(real / ".git", work / ".git")
    taken = machine.act(CheckpointRecord(action_id="l1", session_id="s1", workdir=str(work),
                                         turn="t1"))
    assert isinstance(taken, ActionErrored) and taken.code == "not_a_repository"
    assert git(real, "for-each-ref", "refs/codey/") == ""


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "link/x.txt",
                                  "sub/../../outside.txt", ".git/config"])
def test_restore_file_refuses_a_path_outside_the_workdir(machine: Machine, path: str) -> None:
    work = make_repo(machine.src / "app")
    outside = machine.src / "outside.txt"
    outside.write_text("theirs\n")
    target = machine.base / "target"
    target.mkdir()
    os.symlink(target, work / "link")
    machine.record(work, "t1")
    refused = machine.restore(work, "t1", path=path)
    assert isinstance(refused, ActionErrored), refused
    assert refused.code == "path_outside_workdir"
    assert outside.read_text() == "theirs\n" and list(target.iterdir()) == []


def test_a_restore_does_not_write_through_a_symlink_made_since(machine: Machine) -> None:
    work = make_repo(machine.src / "app")
    (work / "sub").mkdir()
    (work / "sub" / "f.txt").write_text("kept\n")
    machine.record(work, "t1")
    shutil.rmtree(work / "sub")
    target = machine.base / "target"
    target.mkdir()
    os.symlink(target, work / "sub")  # the model swapped the folder for a link
    machine.record(work, "t1", "end")
    done = machine.restore(work, "t1")
    assert isinstance(done, CheckpointRestored), done
    assert list(target.iterdir()) == []
