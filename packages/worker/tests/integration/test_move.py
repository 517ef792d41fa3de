"""session_bundle / session_bundle_read / session_unpack through two real dispatchers (two
machines: their own roots and homes), with real git in folders outside /tmp so the sandbox's
walls are the real ones: the work (uncommitted, untracked, binary) arrives as it was, the
source is untouched, and hostile folders and bundles are refused."""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import shutil
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
    BundleChunk,
    SessionBundle,
    SessionBundled,
    SessionBundleRead,
    SessionUnpack,
    SessionUnpacked,
)
from codey_worker.actions import ActionDispatcher
from codey_worker.policy import LocalPolicy
from codey_worker.records import ActionRecords
from codey_worker.sandbox import Sandbox, detect

pytestmark = pytest.mark.integration

GIT = shutil.which("git") or "git"
_ids = itertools.count()


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([GIT, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but ``.git``'s, with its bytes (a link: its target)."""
    out: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if path.is_symlink():
            out[rel] = b"-> " + os.readlink(path).encode()
        elif path.is_file():
            out[rel] = path.read_bytes()
    return out


@dataclass
class Machine:
    root: Path
    home: Path

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.dispatcher: ActionDispatcher | None = None
        self.records: ActionRecords | None = None
        self.frames: list[bytes] = []

    def close(self) -> None:
        # the records' syncer thread must stop before the test's folders go (it opened the
        # WAL of a deleted folder otherwise, as a warning from another test)
        if self.records is not None:
            self.records.close()

    async def act(self, action: ActionMessage) -> Any:
        if self.dispatcher is None:
            async def send(frame: bytes) -> None:
                self.frames.append(frame)
            policy = LocalPolicy(allowed_roots=[self.root])
            records = self.records = ActionRecords(self.home / "records.sqlite3")
            self.dispatcher = ActionDispatcher(send, records, policy, kill_grace_s=1.0,
                                               home=self.home,
                                               sandbox=Sandbox(detect(), self.home))
        self.frames.clear()
        await self.dispatcher.handle(action)
        await self.dispatcher.wait_idle()
        last = codec.decode_worker_to_server(self.frames[-1])
        if isinstance(last, ActionErrored):
            return last
        assert isinstance(last, ActionResult), last
        return last.result


def move(source: Machine, workdir: Path, target: Machine, to: Path,
         session: str = "ses_1") -> tuple[SessionBundled | ActionErrored, Any]:
    async def main() -> tuple[Any, Any]:
        made = await source.act(SessionBundle(action_id=f"b{next(_ids)}", session_id=session,
                                              workdir=str(workdir)))
        if not isinstance(made, SessionBundled):
            return made, None
        data, offset = b"", 0
        while True:
            chunk = await source.act(SessionBundleRead(
                action_id=f"r{next(_ids)}", session_id=session, bundle_id=made.bundle_id,
                offset=offset, length=300_000))
            assert isinstance(chunk, BundleChunk), chunk
            part = base64.b64decode(chunk.data_b64)
            data += part
            offset += len(part)
            if chunk.eof:
                break
        assert len(data) == made.size
        unpacked = await target.act(SessionUnpack(
            action_id=f"u{next(_ids)}", session_id=session, workdir=str(to),
            bundle_b64=base64.b64encode(data).decode(), source=made.source,
            branch=made.branch, head=made.head, snapshot=made.snapshot))
        return made, unpacked
    return asyncio.run(main())


@pytest.fixture
def machines(outside_tmp: Path, monkeypatch: pytest.MonkeyPatch,
             _codey_home: Path) -> Iterator[tuple[Machine, Machine]]:
    home = outside_tmp / "userhome"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    pair = (Machine(outside_tmp / "laptop", outside_tmp / "laptop-codey"),
            Machine(outside_tmp / "server", outside_tmp / "server-codey"))
    yield pair
    for machine in pair:
        machine.close()


def _repo(root: Path) -> Path:
    repo = root / "app"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "feature")
    git(repo, "config", "user.email", "u@example.com")
    git(repo, "config", "user.name", "U")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "a.txt").write_text("one\n")
    (repo / "gone.txt").write_text("to delete\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    (repo / "a.txt").write_text("one\ntwo, uncommitted\n")  # modified
    (repo / "gone.txt").unlink()  # deleted
    (repo / "new.txt").write_text("untracked\n")  # untracked
    (repo / "img.bin").write_bytes(bytes(range(256)) * 4)  # binary, untracked
    (repo / "debug.log").write_text("ignored\n")  # ignored: stays behind
    git(repo, "update-ref", "refs/codey/checkpoints/ses_1/itm_1", "HEAD")
    return repo


def test_a_repository_with_uncommitted_work_arrives_as_it_was(
        machines: tuple[Machine, Machine]) -> None:
    laptop, server = machines
    repo = _repo(laptop.root)
    before = tree(repo)
    status_before = git(repo, "status", "--porcelain")
    index_before = (repo / ".git" / "index").read_bytes()
    refs_before = git(repo, "for-each-ref")
    made, unpacked = move(laptop, repo, server, server.root / "work" / "app")
    assert isinstance(made, SessionBundled), made
    assert made.source == "git" and made.branch == "feature" and made.files == 4
    assert isinstance(unpacked, SessionUnpacked), unpacked
    there = Path(unpacked.path)
    # the files as they were, but the ignored one
    expected = {k: v for k, v in before.items() if k != "debug.log"}
    assert tree(there) == expected
    # uncommitted changes are uncommitted there, on the same branch at the same commit
    assert git(there, "status", "--porcelain") == git(repo, "status", "--porcelain",
                                                      "--", ".", ":!debug.log")
    assert git(there, "symbolic-ref", "--short", "HEAD") == "feature"
    assert git(there, "rev-parse", "HEAD") == git(repo, "rev-parse", "HEAD")
    assert git(there, "for-each-ref", "--format=%(refname)",
               "refs/codey/") == "refs/codey/checkpoints/ses_1/itm_1"
    # the source: its files, status, index and refs untouched
    assert tree(repo) == before
    assert git(repo, "status", "--porcelain") == status_before
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert git(repo, "for-each-ref") == refs_before
    assert git(repo, "stash", "list") == ""


def test_a_plain_folder_moves_without_a_repository_anywhere(
        machines: tuple[Machine, Machine]) -> None:
    laptop, server = machines
    folder = laptop.root / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("hello\n")
    (folder / "sub" / "b.bin").write_bytes(b"\0\1\2")
    before = tree(folder)
    made, unpacked = move(laptop, folder, server, server.root / "notes")
    assert isinstance(made, SessionBundled) and made.source == "plain", made
    assert isinstance(unpacked, SessionUnpacked), unpacked
    assert tree(Path(unpacked.path)) == before
    assert not (folder / ".git").exists()
    assert not (Path(unpacked.path) / ".git").exists()
    # the shadow repositories are gone from both homes
    assert not any((laptop.home / "moves").iterdir())
    assert not any((server.home / "moves").iterdir())


@pytest.mark.parametrize("where", ["dotdot", "symlink", "not_empty"])
def test_a_hostile_target_folder_is_refused(machines: tuple[Machine, Machine],
                                            where: str) -> None:
    """The attack: a target folder that leaves the target's roots (``..``, a symlink that
    points out), or one that holds files already."""
    laptop, server = machines
    repo = _repo(laptop.root)
    outside = server.root.parent / "outside"
    outside.mkdir()
    if where == "dotdot":
        to = server.root / ".." / "outside" / "app"
    elif where == "symlink":
        (server.root / "link").symlink_to(outside)
        to = server.root / "link" / "app"
    else:
        to = server.root / "full"
        to.mkdir()
        (to / "mine.txt").write_text("the user's\n")
    _, unpacked = move(laptop, repo, server, to)
    assert isinstance(unpacked, ActionErrored), unpacked
    assert unpacked.code == ("conflict" if where == "not_empty" else "outside_allowed_roots")
    assert list(outside.iterdir()) == []
    if where == "not_empty":
        assert tree(to) == {"mine.txt": b"the user's\n"}


def _unpack(server: Machine, data: bytes, to: Path, snapshot: str,
            source: str = "git") -> Any:
    return asyncio.run(server.act(SessionUnpack(
        action_id=f"u{next(_ids)}", session_id="ses_1", workdir=str(to),
        bundle_b64=base64.b64encode(data).decode(), snapshot=snapshot,
        source=source)))  # type: ignore[arg-type]


def test_a_bundle_with_refs_outside_the_sessions_namespace_is_refused(
        machines: tuple[Machine, Machine], outside_tmp: Path) -> None:
    """The attack: a bundle that would set the target's branches (or another session's
    refs) is refused before anything is fetched, and nothing is left behind."""
    laptop, server = machines
    repo = _repo(laptop.root)
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/codey/move/ses_1/snapshot", head)
    git(repo, "update-ref", "refs/codey/move/ses_2/snapshot", head)
    for refs in (["refs/codey/move/ses_1/snapshot", "refs/heads/feature"],
                 ["refs/codey/move/ses_1/snapshot", "refs/codey/move/ses_2/snapshot"]):
        bundle = outside_tmp / "hostile.bundle"
        git(repo, "bundle", "create", "-q", str(bundle), *refs)
        to = server.root / "hostile"
        out = _unpack(server, bundle.read_bytes(), to, head)
        assert isinstance(out, ActionErrored) and out.code == "bad_bundle", out
        assert not to.exists()


def test_a_bundle_whose_tree_climbs_out_of_the_folder_writes_nothing_outside(
        machines: tuple[Machine, Machine], outside_tmp: Path) -> None:
    """The attack: a snapshot whose tree holds ``..`` (made with ``hash-object
    --literally``, which git's own tools would never write): git refuses the path before
    writing any file, nothing lands outside the target folder (which the sandbox keeps git
    inside anyway), and the half-made folder is removed."""
    laptop, server = machines
    evil = laptop.root / "evil"
    evil.mkdir()
    git(evil, "init", "-q")
    blob = subprocess.run([GIT, "hash-object", "-w", "--stdin"], cwd=evil, check=True,
                          input=b"pwned\n", capture_output=True).stdout.decode().strip()
    inner = subprocess.run(
        [GIT, "hash-object", "-w", "-t", "tree", "--literally", "--stdin"], cwd=evil,
        check=True, capture_output=True,
        input=b"100644 pwned\0" + bytes.fromhex(blob)).stdout.decode().strip()
    top = subprocess.run(
        [GIT, "hash-object", "-w", "-t", "tree", "--literally", "--stdin"], cwd=evil,
        check=True, capture_output=True,
        input=b"40000 ..\0" + bytes.fromhex(inner)).stdout.decode().strip()
    commit = subprocess.run(
        [GIT, "-c", "user.name=x", "-c", "user.email=y", "commit-tree", top, "-m", "evil"],
        cwd=evil, check=True, capture_output=True, text=True).stdout.strip()
    git(evil, "update-ref", "refs/codey/move/ses_1/snapshot", commit)
    bundle = outside_tmp / "evil.bundle"
    git(evil, "bundle", "create", "-q", str(bundle), "refs/codey/move/ses_1/snapshot")
    to = server.root / "deep" / "app"
    out = _unpack(server, bundle.read_bytes(), to, commit)
    assert isinstance(out, ActionErrored), out
    assert out.code == "git_failed" and "invalid path" in out.message, out
    assert not (server.root / "deep" / "pwned").exists()
    assert not to.exists()
