"""Git workspaces: a worktree per session, its whole change, and shipping it (issue 26).

The ``workspace_*`` actions are the worker's own git operations, run on the user's say-so
in the browser, never a model's command. Every git here goes through the one hardened runner
(:mod:`codey_worker.git`): the repository checked before it is used (a symlinked ``.git`` or
a ``.git`` file pointing somewhere else is refused) and git pinned to it, system and global
config ignored, no fsmonitor, hooks, external diff, textconv or submodule recursion, and the
whole run inside the OS sandbox, writable only where that operation writes (a commit: the
``.git``; a merge: the work tree too; a new worktree: its folder), with the network only for
a push. A nested repository the model made is neither added nor entered. Paths are confined
like every action's: the repository, its main checkout and the worktree all lie inside the
allowed roots (the worktrees folder is one of them).

Two halves:

* **pure** — parsing git's machine output (``status --porcelain=v2 -z``, ``diff --numstat
  -z``, ``diff --name-status -z``, ``worktree list --porcelain -z``, ``log -z``), the
  worktree's location, the changed-file list, the cap on the diff. No process, no file.
* **I/O** — :class:`Workspaces`, one method per action; each takes the action and returns
  its result or raises :class:`~codey_worker.confine.ActionRefused` with one of the codes
  ``not_a_repository``, ``dirty``, ``unmerged``, ``no_remote``, ``gh_missing``,
  ``gh_not_logged_in``, ``gh_failed``, ``git_failed`` (git's own words), ``bad_request``,
  ``outside_allowed_roots``, ``protected_path``, ``not_found``. A rebase that conflicts is
  a result (``merged: false`` and the files), not an error; it is always aborted first.

Actions on one repository take turns (a lock per repository): two at once would fight
over git's ``index.lock`` and refs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from codey_protocol.worker import (
    ChangedFile,
    CommitInfo,
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
from codey_worker.confine import ActionRefused, within
from codey_worker.files import Tree
from codey_worker.git import (
    READ,
    Access,
    GitRun,
    GitRunner,
    Repo,
    find_repo,
)
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import Sandbox
from codey_worker.shell import CommandRegistry, run_command

__all__ = [
    "FALLBACK_IDENTITY",
    "SETUP_SCRIPT",
    "NumStat",
    "StatusEntry",
    "Workspaces",
    "WorktreeEntry",
    "branch_slug",
    "cap_diff",
    "changed_files",
    "chosen_paths",
    "parse_log",
    "parse_name_only",
    "parse_name_status",
    "parse_numstat",
    "parse_sizes",
    "parse_status",
    "parse_worktrees",
    "pr_url",
    "status_paths",
    "worktree_location",
]

#: the project's setup script, run in a new worktree (relative to it)
SETUP_SCRIPT = ".codey/setup.sh"

#: who commits when the repository's config names nobody (no ``user.name``/``user.email``
#: anywhere): a commit must not fail for lack of it on a fresh machine, and this impersonates
#: no one
FALLBACK_IDENTITY = ("Codey", "codey@localhost")

PUSH_TIMEOUT_S = 300.0
MAX_COMMITS = 500


# ---------------------------------------------------------------------------------------------
# pure: git's output


def _fields(data: bytes) -> list[str]:
    """NUL-separated fields (the ``-z`` formats), decoded; the trailing empty one dropped."""
    text = data.decode("utf-8", errors="surrogateescape")
    parts = text.split("\0")
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def _text(s: str) -> str:
    """A field as text fit for JSON (a name that is not UTF-8 gets U+FFFD)."""
    return s.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")


@dataclass(frozen=True)
class StatusEntry:
    """One line of ``git status --porcelain=v2 -z``."""

    kind: Literal["changed", "renamed", "unmerged", "untracked", "ignored"]
    path: str
    old_path: str | None = None
    xy: str = ""  # index and work-tree status letters ("M.", ".D", "UU", …)


def parse_status(data: bytes) -> list[StatusEntry]:
    """``git status --porcelain=v2 -z`` (without ``--branch``) as entries.

    Ordinary ``1 XY sub mH mI mW hH hI path``, renamed ``2 XY sub mH mI mW hH hI Xscore
    path`` followed by the old path as its own field, unmerged ``u XY sub m1 m2 m3 mW h1 h2
    h3 path``, untracked ``? path``, ignored ``! path``. Header lines (``#``) are skipped.
    """
    fields = _fields(data)
    entries: list[StatusEntry] = []
    i = 0
    while i < len(fields):
        line = fields[i]
        i += 1
        if line.startswith("1 "):
            parts = line.split(" ", 8)
            entries.append(StatusEntry("changed", _text(parts[8]), xy=parts[1]))
        elif line.startswith("2 "):
            parts = line.split(" ", 9)
            old = fields[i] if i < len(fields) else ""
            i += 1
            entries.append(StatusEntry("renamed", _text(parts[9]), _text(old), xy=parts[1]))
        elif line.startswith("u "):
            parts = line.split(" ", 10)
            entries.append(StatusEntry("unmerged", _text(parts[10]), xy=parts[1]))
        elif line.startswith("? "):
            entries.append(StatusEntry("untracked", _text(line[2:])))
        elif line.startswith("! "):
            entries.append(StatusEntry("ignored", _text(line[2:])))
    return entries


@dataclass(frozen=True)
class NumStat:
    """One file of ``git diff --numstat -z``: lines added and deleted (None: binary)."""

    path: str
    added: int | None
    deleted: int | None
    old_path: str | None = None

    @property
    def binary(self) -> bool:
        return self.added is None


def parse_numstat(data: bytes) -> list[NumStat]:
    """``git diff --numstat -z``: ``added\\tdeleted\\tpath\\0``, or for a rename or copy
    ``added\\tdeleted\\t\\0old\\0new\\0``; a binary file has ``-`` for both counts."""
    fields = _fields(data)
    out: list[NumStat] = []
    i = 0
    while i < len(fields):
        added, deleted, path = fields[i].split("\t", 2)
        i += 1
        old: str | None = None
        if path == "":  # a rename: the two paths follow
            old, path = fields[i], fields[i + 1]
            i += 2
        out.append(NumStat(_text(path), None if added == "-" else int(added),
                           None if deleted == "-" else int(deleted),
                           _text(old) if old is not None else None))
    return out


_STATUS_NAMES: dict[str, Literal["added", "modified", "deleted", "renamed"]] = {
    "A": "added", "M": "modified", "D": "deleted", "R": "renamed", "C": "added",
    "T": "modified", "U": "modified",
}  # fmt: skip


def parse_name_status(
        data: bytes) -> dict[str, tuple[Literal["added", "modified", "deleted", "renamed"],
                                        str | None]]:
    """``git diff --name-status -z``: path → (status, old path for a rename). A letter
    followed by a score (``R100``) is followed by two paths, old then new; a copy (``C``)
    counts as added, a type change (``T``) as modified."""
    fields = _fields(data)
    out: dict[str, tuple[Literal["added", "modified", "deleted", "renamed"], str | None]] = {}
    i = 0
    while i < len(fields):
        letter = fields[i][:1]
        i += 1
        status = _STATUS_NAMES.get(letter, "modified")
        if letter in ("R", "C"):
            old, path = fields[i], fields[i + 1]
            i += 2
            out[_text(path)] = (status, _text(old) if letter == "R" else None)
        else:
            out[_text(fields[i])] = (status, None)
            i += 1
    return out


def parse_name_only(data: bytes) -> list[str]:
    """``git diff --name-only -z`` (and ``ls-files -z``): the paths."""
    return [_text(f) for f in _fields(data)]


@dataclass(frozen=True)
class WorktreeEntry:
    """One worktree of ``git worktree list --porcelain -z`` (the main one comes first)."""

    path: str
    head: str = ""
    branch: str = ""  # "refs/heads/main"; "" when detached (or bare)
    bare: bool = False


def parse_worktrees(data: bytes) -> list[WorktreeEntry]:
    """``git worktree list --porcelain -z``: records of ``key value`` fields, each record
    ended by an empty field."""
    out: list[WorktreeEntry] = []
    record: dict[str, str] = {}
    for field_ in [*_fields(data), ""]:
        if field_ == "":
            if "worktree" in record:
                out.append(WorktreeEntry(record["worktree"], record.get("HEAD", ""),
                                         record.get("branch", ""), "bare" in record))
            record = {}
            continue
        key, _, value = field_.partition(" ")
        record[key] = value
    return out


def parse_log(data: bytes) -> list[CommitInfo]:
    """``git log -z --format=%H%x1f%s``: one commit per field, sha and subject."""
    out = []
    for field_ in _fields(data):
        sha, _, subject = field_.strip("\n").partition("\x1f")
        out.append(CommitInfo(sha=sha, subject=_text(subject)))
    return out


def changed_files(numstat: Sequence[NumStat],
                  statuses: Mapping[str, tuple[Literal["added", "modified", "deleted",
                                                       "renamed"], str | None]],
                  committed: Sequence[str], pending: Collection[str] = ()) -> list[ChangedFile]:
    """The files of the whole change (merge base → working tree), sorted by path:
    ``numstat`` gives the counts, ``statuses`` the kind, and a file is ``committed`` when
    the committed part of the change (merge base → HEAD) touches it or its old name, and
    ``uncommitted`` when ``pending`` (the paths ``git status`` lists) holds it or its old
    name."""
    done = set(committed)
    waiting = set(pending)
    files = []
    for row in numstat:
        status, old = statuses.get(row.path, ("modified", None))
        old = old if old is not None else row.old_path
        if old is not None and status == "modified":
            status = "renamed"
        files.append(ChangedFile(
            path=row.path, status=status, old_path=old, added=row.added or 0,
            deleted=row.deleted or 0, binary=row.binary,
            committed=row.path in done or (old is not None and old in done),
            uncommitted=row.path in waiting or (old is not None and old in waiting)))
    return sorted(files, key=lambda f: f.path)


def status_paths(entries: Sequence[StatusEntry]) -> set[str]:
    """Every path ``git status`` names (a rename's old one too): what has changes a commit
    can take. A nested repository (an untracked folder, ``dir/``) is not one."""
    out: set[str] = set()
    for e in entries:
        if e.kind == "ignored" or e.path.endswith("/"):
            continue
        out.add(e.path)
        if e.old_path:
            out.add(e.old_path)
    return out


def chosen_paths(paths: Sequence[str]) -> list[str]:
    """The paths a commit was asked for, checked: relative, inside the worktree (no ``..``,
    no ``.git``), no NUL; each once, in order. Raises ``bad_request``."""
    out: dict[str, None] = {}
    for path in paths:
        parts = path.split("/")
        if not path or "\0" in path or path.startswith("/") or \
                any(p in ("", ".", "..") for p in parts) or \
                any(p.casefold() == ".git" for p in parts):
            raise ActionRefused("bad_request", f"{path!r} is not a file of the worktree")
        out[path] = None
    return list(out)


def parse_sizes(data: bytes) -> list[int | None]:
    """``git cat-file --batch-check``: ``<object> <type> <size>`` per line, or ``<name>
    missing``: each size, None for a missing one, in order."""
    out: list[int | None] = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        parts = line.rsplit(" ", 2)
        out.append(int(parts[2]) if len(parts) == 3 and parts[2].isdigit()
                   and parts[1] != "missing" else None)
    return out


def cap_diff(data: bytes, cap: int, cut: bool = False) -> tuple[str, bool]:
    """The unified diff's text, at most ``cap`` characters, ended at a line when cut; and
    whether it was cut. ``cut``: the bytes are already a prefix of a longer diff."""
    text = data.decode("utf-8", errors="replace")
    if len(text) <= cap and not cut:
        return text, False
    text = text[:cap]
    end = text.rfind("\n")
    return (text[:end + 1] if end >= 0 else ""), True


_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def branch_slug(branch: str) -> str:
    """A folder name for ``branch``: ``codey/fix-login`` → ``codey-fix-login``."""
    slug = _SLUG.sub("-", branch).strip("-.")
    return slug[:80] or "branch"


def worktree_location(worktrees_dir: Path, repo_root: Path, branch: str) -> Path:
    """Where the worktree of ``branch`` of the repository checked out at ``repo_root``
    goes: ``<worktrees_dir>/<repo-name>-<hash>/<branch-slug>``. The hash (of the main
    checkout's path) keeps two repositories with one name apart; the name keeps the folder
    recognisable to a person."""
    digest = hashlib.sha256(os.fsencode(repo_root)).hexdigest()[:8]
    name = _SLUG.sub("-", repo_root.name).strip("-.") or "repo"
    return worktrees_dir / f"{name}-{digest}" / branch_slug(branch)


_URL = re.compile(r"https?://\S+")


def pr_url(output: str) -> str:
    """The pull request's address in ``gh pr create``'s output (its last URL)."""
    found = _URL.findall(output)
    return found[-1] if found else ""


def setup_exit(exit_code: int | None, signal: int | None) -> int | None:
    """The setup script's exit code as a shell reports it (128 + N for signal N)."""
    if exit_code is not None:
        return exit_code
    return 128 + signal if signal is not None else None


# ---------------------------------------------------------------------------------------------
# I/O: the actions

Emit = Callable[[Literal["stdout", "stderr"], str], Awaitable[None]]


def _writes(*paths: Path) -> Access:
    """Access that writes ``paths`` (each once)."""
    return Access(writes=tuple(dict.fromkeys(paths)))


class Workspaces:
    """The ``workspace_*`` actions (see the module docstring). ``registry`` lets a
    ``cancel`` of a ``workspace_create`` stop its setup script; every git goes through
    ``git`` (the one hardened, sandboxed runner)."""

    def __init__(self, policy: LocalPolicy, sandbox: Sandbox,
                 registry: CommandRegistry | None = None, git: GitRunner | None = None) -> None:
        self.policy = policy
        self.sandbox = sandbox
        self.registry = registry
        self.git = git if git is not None else GitRunner(sandbox)
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, repo: Repo) -> asyncio.Lock:
        return self._locks.setdefault(str(repo.common_dir), asyncio.Lock())

    # -- finding things --------------------------------------------------------------------

    def _worktrees_dir(self) -> Path:
        if self.policy.worktrees_dir is None:
            raise ActionRefused("bad_request", "this worker has no worktrees folder "
                                "(worktrees_dir in worker-config.json)")
        return Path(os.path.realpath(self.policy.worktrees_dir))

    def _folder(self, path: str | Path) -> Path:
        real = self.policy.check_workdir(path)
        if not real.is_dir():
            raise ActionRefused("not_found", f"{path} is not a folder on this machine")
        return real

    def _checkout(self, folder: Path) -> Repo:
        """The checkout ``folder`` is in (:func:`~codey_worker.git.find_repo`: a ``.git``
        the worker's git will not use is refused); ``not_a_repository`` when there is none.
        Its top must lie inside the allowed roots too (it was found by walking up)."""
        repo = find_repo(folder)
        if repo is None:
            raise ActionRefused("not_a_repository",
                                f"{folder} is not in a git repository with a working tree")
        self.policy.check_workdir(repo.top)
        return repo

    def _worktree(self, workdir: str) -> Repo:
        return self._checkout(self._folder(workdir))

    async def _git(self, repo: Repo, *args: str, access: Access = READ,
                   **kw: Any) -> GitRun:
        return await self.git.run(repo.top, *args, repo=repo, access=access, **kw)

    async def _commit_of(self, repo: Repo, rev: str) -> str:
        """The commit ``rev`` names (a branch, tag or sha); ``bad_request`` when none."""
        if not rev or rev.startswith("-") or "\0" in rev:
            raise ActionRefused("bad_request", f"{rev!r} is not a branch, tag or commit")
        done = await self._git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options",
                               f"{rev}^{{commit}}", check=False)
        if done.code != 0:
            raise ActionRefused("bad_request", f"{rev!r} names no commit in this repository")
        return done.text()

    async def _branch(self, repo: Repo) -> str:
        """The branch checked out in ``repo`` ("" when detached)."""
        done = await self._git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return done.text() if done.code == 0 else ""

    async def _status(self, repo: Repo, *, untracked: bool = True) -> list[StatusEntry]:
        done = await self._git(repo, "status", "--porcelain=v2", "-z", "--ignore-submodules=all",
                               "--untracked-files=all" if untracked else "--untracked-files=no",
                               env={"GIT_OPTIONAL_LOCKS": "0"})
        return parse_status(done.out)

    async def _count(self, repo: Repo, revs: str) -> int:
        return int((await self._git(repo, "rev-list", "--count", revs)).text() or 0)

    async def _identity_env(self, repo: Repo) -> dict[str, str]:
        """Who commits: the repository's configured author, else the user's own (their
        global config, read on its own: git ignores it otherwise), else
        :data:`FALLBACK_IDENTITY`."""
        found = await self.git.identity(repo)
        name, email = found if found is not None else FALLBACK_IDENTITY
        env = {}
        for role in ("AUTHOR", "COMMITTER"):
            env[f"GIT_{role}_NAME"] = os.environ.get(f"GIT_{role}_NAME") or name
            env[f"GIT_{role}_EMAIL"] = os.environ.get(f"GIT_{role}_EMAIL") or email
        return env

    # -- workspace_create ------------------------------------------------------------------

    async def create(self, action: WorkspaceCreate, emit: Emit) -> WorkspaceReady:
        """Make the worktree (branch ``action.branch`` from the base), then run the setup
        script in it, its output through ``emit``. A failing script leaves the worktree."""
        worktrees = self._worktrees_dir()
        main = self._checkout(self._folder(action.repo))
        branch = action.branch
        ok = await self._git(main, "check-ref-format", "--branch", branch, check=False)
        if not branch or branch.startswith("-") or ok.code != 0:
            raise ActionRefused("bad_request", f"{branch!r} is not a valid branch name")
        async with self._lock(main):
            if action.base:
                base, base_commit = action.base, await self._commit_of(main, action.base)
            else:
                # the main checkout's current branch; detached: the commit it is on
                base_commit = await self._commit_of(main, "HEAD")
                base = await self._branch(main) or base_commit
            path = worktree_location(worktrees, main.top, branch)
            # through the policy, as a workdir: a symlink planted in the worktrees folder
            # must not lead the new worktree out of the roots
            self.policy.check_workdir(path)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.policy.check_workdir(path)
            if action.existing:
                await self._again(main, branch, path)
            else:
                await self._git(main, "worktree", "add", "-b", branch, str(path), base_commit,
                                access=_writes(main.common_dir, path.parent))
        real = self.policy.check_workdir(path)
        ready = WorkspaceReady(path=str(real), branch=branch, base=base,
                               base_commit=base_commit, repo_root=str(main.top))
        script = real / SETUP_SCRIPT
        if action.setup and script.is_file():
            ready.setup = SETUP_SCRIPT
            ready.setup_exit = await self._setup(action, real, emit)
        return ready

    async def _again(self, main: Repo, branch: str, path: Path) -> None:
        """Check the existing ``branch`` out again at ``path``, its worktree's place (the
        worktree was removed; the branch kept what was committed). ``branch_gone`` when the
        branch is not there any more; ``bad_request`` when it is checked out elsewhere or
        something else is at ``path``. A registration git kept of a worktree folder deleted
        by hand, at ``path``, is cleared first (only that one)."""
        known = await self._git(main, "show-ref", "--verify", "--quiet",
                                f"refs/heads/{branch}", check=False)
        if known.code != 0:
            raise ActionRefused("branch_gone", f"the branch {branch} does not exist any more "
                                "(deleted with its worktree, or by hand): there is nothing to "
                                "make the worktree again from; fork the session into a new "
                                "worktree instead")
        listed = parse_worktrees((await self._git(main, "worktree", "list", "--porcelain",
                                                  "-z")).out)
        for entry in listed:
            if entry.branch != f"refs/heads/{branch}":
                continue
            if os.path.realpath(entry.path) != str(path):
                raise ActionRefused("bad_request", f"the branch {branch} is checked out in "
                                    f"{entry.path}; work there, or leave it there first")
            if os.path.isdir(path):
                return  # made again already (a repeated action)
            await self._git(main, "worktree", "remove", "--force", str(path),
                            access=_writes(main.common_dir))
        if os.path.lexists(path):
            raise ActionRefused("bad_request", f"{path} is there already and is not the "
                                f"worktree of {branch}; it is left alone")
        await self._git(main, "worktree", "add", str(path), branch,
                        access=_writes(main.common_dir, path.parent))

    async def _setup(self, action: WorkspaceCreate, worktree: Path, emit: Emit) -> int | None:
        """Run the setup script as a command of the session (in its sandbox, with its
        network toggle); its exit code, or None when it could not be started (the reason on
        stderr)."""
        script = worktree / SETUP_SCRIPT
        # an executable script picks its interpreter (#!); a plain file is a shell script
        if os.access(script, os.X_OK):
            argv = [f"./{SETUP_SCRIPT}"]
        else:
            argv = ["bash" if shutil.which("bash") else "sh", SETUP_SCRIPT]
        command = RunCommand(action_id=action.action_id, session_id=action.session_id,
                             argv=argv, workdir=str(worktree), sandbox=action.sandbox,
                             network=action.network, timeout_s=action.timeout_s)

        async def on_output(stream: str, data: str) -> None:
            await emit("stderr" if stream == "stderr" else "stdout", data)

        try:
            result = await run_command(command, on_output, self.policy,
                                       registry=self.registry, sandbox=self.sandbox)
        except ActionRefused as exc:
            await emit("stderr", f"{SETUP_SCRIPT} was not run: {exc.message}\n")
            return None
        if result.timed_out:
            await emit("stderr", f"{SETUP_SCRIPT} took longer than {action.timeout_s:.0f} s "
                                 "and was stopped\n")
        return setup_exit(result.exit_code, result.signal)

    # -- workspace_diff ----------------------------------------------------------------------

    async def diff(self, action: WorkspaceDiff) -> WorkspaceChanges:
        """The whole change of the worktree against the merge base of HEAD and the base:
        committed, uncommitted and untracked (as added) files. A nested repository (an
        untracked folder with a ``.git`` of its own) is not entered: it is not this
        repository's, and its config is not the worker's to obey."""
        wt = self._worktree(action.workdir)
        if action.diff_cap < 0:
            raise ActionRefused("bad_request", "diff_cap must be >= 0")
        base_commit = await self._commit_of(wt, action.base)
        head = await self._commit_of(wt, "HEAD")
        done = await self._git(wt, "merge-base", head, base_commit, check=False)
        if done.code != 0:
            raise ActionRefused("git_failed", f"{action.base} and HEAD have no commit in "
                                              f"common: {done.words()}")
        merge_base = done.text()
        status = await self._status(wt)
        untracked = [e.path for e in status
                     if e.kind == "untracked" and not e.path.endswith("/")]
        with tempfile.TemporaryDirectory(prefix="codey-diff-") as tmp:
            # A copy of the index with the untracked files as intent-to-add: diffing the
            # working tree against the merge base then shows them as added, and nothing of
            # the real index (the user's staging) changes.
            index = Path(tmp) / "index"
            real_index = wt.git_dir / "index"
            env = {"GIT_INDEX_FILE": str(index)}
            scratch = _writes(Path(tmp))
            if real_index.is_file():
                shutil.copyfile(real_index, index)
            else:
                await self._git(wt, "read-tree", head, env=env, access=scratch)
            if untracked:
                # (intent-to-add writes one object: the empty blob, for an empty file)
                await self._git(wt, "--literal-pathspecs", "add", "--intent-to-add",
                                "--pathspec-from-file=-", "--pathspec-file-nul",
                                stdin=b"\0".join(os.fsencode(p) for p in untracked),
                                env=env, access=_writes(Path(tmp), wt.common_dir / "objects"))
            opts = ("--no-ext-diff", "--no-textconv", "--no-color", "-M",
                    "--ignore-submodules=all")
            numstat = await self._git(wt, "diff", *opts, "-z", "--numstat", merge_base,
                                      env=env, access=scratch)
            names = await self._git(wt, "diff", *opts, "-z", "--name-status", merge_base,
                                    env=env, access=scratch)
            unified = await self._git(wt, "diff", *opts, merge_base, env=env, access=scratch,
                                      limit=action.diff_cap * 4 + 4)
        committed = await self._git(wt, "diff", "--no-ext-diff", "--no-textconv", "-M", "-z",
                                    "--name-only", merge_base, head)
        log = await self._git(wt, "log", "-z", f"--max-count={MAX_COMMITS}",
                              "--format=%H%x1f%s", f"{base_commit}..{head}")
        text, truncated = cap_diff(unified.out, action.diff_cap, unified.cut)
        files = changed_files(parse_numstat(numstat.out), parse_name_status(names.out),
                              parse_name_only(committed.out), status_paths(status))
        await self._sizes(wt, merge_base, [f for f in files if f.binary])
        return WorkspaceChanges(
            base=action.base, merge_base=merge_base, files=files,
            diff=text, truncated=truncated, commits=parse_log(log.out), dirty=bool(status),
            behind=await self._count(wt, f"{head}..{base_commit}"), can_pick=True)

    async def _sizes(self, wt: Repo, merge_base: str, files: Sequence[ChangedFile]) -> None:
        """Fill in the binary ``files``' sizes: at the merge base from git's objects, in the
        working tree through the confined file API (a folder the model swapped for a symlink
        since git listed it is not followed out of the worktree)."""
        if not files:
            return
        # (a name with a line break cannot be asked for on a line: its old size stays unknown)
        before = [f for f in files if f.status != "added"
                  and "\n" not in (f.old_path or f.path)]
        if before:
            query = "".join(f"{merge_base}:{f.old_path or f.path}\n" for f in before)
            done = await self._git(wt, "cat-file", "--batch-check", stdin=query.encode(),
                                   check=False)
            for f, size in zip(before, parse_sizes(done.out), strict=False):
                f.old_size = size
        after = [f for f in files if f.status != "deleted"]
        if after:
            await asyncio.to_thread(self._tree_sizes, wt.top, after)

    def _tree_sizes(self, top: Path, files: Sequence[ChangedFile]) -> None:
        with Tree.open(top, self.sandbox.boundary) as tree:
            for f in files:
                try:
                    info = tree.lstat(tree.locate(f.path, follow=False))
                except (OSError, ActionRefused):
                    continue
                if stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                    f.new_size = info.st_size

    # -- workspace_remove ------------------------------------------------------------------

    async def remove(self, action: WorkspaceRemove) -> WorkspaceRemoved:
        """``git worktree remove``; refused (``dirty``, ``unmerged``) unless forced. The
        branch goes only when asked, and merged (or forced)."""
        wt = self._worktree(action.workdir)
        worktrees = self._worktrees_dir()
        if not wt.linked or not within(wt.top, worktrees) or wt.top == worktrees:
            raise ActionRefused("bad_request", f"{wt.top} is not a worktree this worker made "
                                f"(they live in {worktrees}); it is left alone")
        async with self._lock(wt):
            main = await self._main(wt)
            branch = await self._branch(wt)
            ahead = 0
            if not action.force:  # (forced, a base that is gone does not stand in the way)
                base = action.base or await self._branch(main) or "HEAD"
                ahead = await self._count(wt, f"{await self._commit_of(main, base)}..HEAD")
                status = await self._status(wt)
                if status:
                    raise ActionRefused("dirty", f"{wt.top} has {len(status)} uncommitted "
                                        f"change(s) ({_names(status)}); commit them, or "
                                        "remove it with force")
                if ahead:
                    raise ActionRefused("unmerged", f"{branch or 'HEAD'} has {ahead} "
                                        f"commit(s) that {base} does not have; merge them, "
                                        "or remove it with force")
            await self._git(main, "worktree", "remove", *(["--force"] if action.force else []),
                            str(wt.top), access=_writes(main.common_dir, wt.top.parent))
            deleted = False
            if action.delete_branch and branch and (action.force or ahead == 0):
                await self._git(main, "branch", "-D", "--end-of-options", branch,
                                access=_writes(main.common_dir))
                deleted = True
        with contextlib.suppress(OSError):  # the repository's folder, once it is empty
            wt.top.parent.rmdir()
        return WorkspaceRemoved(path=str(wt.top), branch_deleted=deleted)

    async def _main(self, wt: Repo) -> Repo:
        """The main checkout of the repository ``wt`` belongs to (the first worktree)."""
        listed = parse_worktrees((await self._git(wt, "worktree", "list", "--porcelain",
                                                  "-z")).out)
        if not listed or listed[0].bare:
            raise ActionRefused("not_a_repository", f"the repository of {wt.top} has no "
                                                    "main checkout (it is bare)")
        main = self._checkout(self._folder(listed[0].path))
        if main.common_dir != wt.common_dir:
            raise ActionRefused("not_a_repository", f"{listed[0].path} is not the main "
                                                    f"checkout of {wt.top}'s repository")
        return main

    # -- workspace_commit ------------------------------------------------------------------

    async def commit(self, action: WorkspaceCommit) -> WorkspaceCommitted:
        """Commit the chosen files (``action.paths``; None: ``git add -A``, everything) with
        ``action.message``, as the repository's configured author, else the user's, else
        :data:`FALLBACK_IDENTITY`.

        Chosen files are staged with ``git add -A`` limited to them and committed with
        ``git commit --only`` on the same paths, so nothing else goes in — not what another
        file has in the index either. The paths go to git in a file, NUL-separated, read
        with ``--literal-pathspecs`` (a name such as ``*.pyc`` or ``:(top)`` is a name, not a
        pattern). A chosen path with nothing to commit is passed over; none left is
        ``git_failed``, as git says it. During a merge (the base merged in, its conflicts
        resolved) the commit concludes the merge, which git takes whole: the chosen files
        are added, and what the merge staged goes in with them."""
        if not action.message.strip():
            raise ActionRefused("bad_request", "a commit needs a message")
        chosen = chosen_paths(action.paths) if action.paths is not None else None
        wt = self._worktree(action.workdir)
        async with self._lock(wt):
            index = _writes(*wt.git_dirs)
            env = await self._identity_env(wt)
            # whitespace only: "strip" would drop a line such as "#123 fixed" as a comment
            commit = ("commit", "--quiet", "--no-verify", "--cleanup=whitespace", "--file=-")
            message = action.message.encode()
            if chosen is None:
                await self._git(wt, "add", "-A", access=index)
                staged = await self._staged(wt)
                await self._git(wt, *commit, stdin=message, env=env, access=index)
            else:
                pending = status_paths(await self._status(wt))
                picked = [p for p in chosen if p in pending]
                if not picked:
                    raise ActionRefused("git_failed", "nothing to commit: none of the "
                                        f"{len(chosen)} chosen file(s) has uncommitted changes")
                merging = (wt.git_dir / "MERGE_HEAD").exists()
                with tempfile.TemporaryDirectory(prefix="codey-commit-") as tmp:
                    spec = Path(tmp) / "pathspec"
                    spec.write_bytes(b"\0".join(os.fsencode(p) for p in picked))
                    paths = (f"--pathspec-from-file={spec}", "--pathspec-file-nul")
                    access = Access(writes=index.writes, reads=(Path(tmp),))
                    await self._git(wt, "--literal-pathspecs", "add", "-A", *paths,
                                    access=access)
                    staged = await self._staged(wt)
                    if not merging:
                        staged = [p for p in staged if p in set(picked)]
                    await self._git(wt, "--literal-pathspecs", *commit,
                                    *(() if merging else ("--only", *paths)),
                                    stdin=message, env=env, access=access)
            sha = await self._commit_of(wt, "HEAD")
        return WorkspaceCommitted(sha=sha, files=len(staged))

    async def _staged(self, wt: Repo) -> list[str]:
        """The paths the index holds changes of (against HEAD)."""
        return parse_name_only((await self._git(wt, "diff", "--cached", "--no-ext-diff",
                                                "--name-only", "-z")).out)

    # -- workspace_merge -------------------------------------------------------------------

    async def merge(self, action: WorkspaceMerge) -> WorkspaceMerged:
        """Fast-forward ``action.base`` to the worktree's branch, after rebasing it onto the
        base (``rebase``). Conflicts abort the rebase and are reported, not raised."""
        wt = self._worktree(action.workdir)
        base = action.base
        if not base or base.startswith("-"):
            raise ActionRefused("bad_request", f"{base!r} is not a branch")
        known = await self._git(wt, "show-ref", "--verify", "--quiet", f"refs/heads/{base}",
                                check=False)
        if known.code != 0:
            raise ActionRefused("bad_request", f"{base!r} is not a local branch: a merge "
                                               "moves a branch")
        branch = await self._branch(wt)
        if not branch:
            raise ActionRefused("bad_request", f"{wt.top} is on no branch (detached HEAD)")
        async with self._lock(wt):
            base_commit = await self._commit_of(wt, f"refs/heads/{base}")
            up_to_date = await self._git(wt, "merge-base", "--is-ancestor", base_commit,
                                         "HEAD", check=False)
            if action.mode == "into_branch":
                if up_to_date.code == 0:
                    return WorkspaceMerged(merged=True, sha=await self._commit_of(wt, "HEAD"),
                                           message=f"{branch} already has {base}")
                return await self._merge_into_branch(wt, base, base_commit, branch)
            if up_to_date.code != 0:
                if action.mode == "ff":
                    behind = await self._count(wt, f"HEAD..{base_commit}")
                    return WorkspaceMerged(merged=False, message=(
                        f"{branch} is not a fast-forward of {base}: {base} has {behind} "
                        f"commit(s) {branch} does not; rebase it first"))
                conflicts = await self._rebase(wt, base_commit)
                if conflicts is not None:
                    return WorkspaceMerged(merged=False, conflicts=conflicts, message=(
                        f"rebasing {branch} onto {base} conflicts in {len(conflicts)} "
                        "file(s); the rebase was undone"))
            head = await self._commit_of(wt, "HEAD")
            sha = await self._fast_forward(wt, base, base_commit, head)
        return WorkspaceMerged(merged=True, sha=sha,
                               message=f"{base} is now at {sha[:12]} ({branch})")

    async def _merge_into_branch(self, wt: Repo, base: str, base_commit: str,
                                 branch: str) -> WorkspaceMerged:
        """Merge ``base`` into the worktree's branch for the agent to resolve: a clean merge
        is committed; a conflicting one stays in progress, its markers in the files, until
        ``workspace_commit`` concludes it (the model's sandbox keeps ``.git`` read-only, so
        the worker does the git part and the agent only edits files)."""
        status = await self._status(wt, untracked=False)
        if status:
            raise ActionRefused("dirty", f"{wt.top} has uncommitted changes "
                                f"({_names(status)}); commit them before merging {base} in")
        env = await self._identity_env(wt)
        tree = _writes(wt.top, *wt.git_dirs)
        done = await self._git(wt, "merge", "--no-ff", "--no-verify", "-m",
                               f"Merge {base} into {branch}", "--end-of-options", base_commit,
                               check=False, env=env, access=tree)
        if done.code == 0:
            sha = await self._commit_of(wt, "HEAD")
            return WorkspaceMerged(merged=True, sha=sha, message=f"merged {base} into {branch}")
        unmerged = await self._git(wt, "diff", "--name-only", "--diff-filter=U", "-z",
                                   check=False)
        conflicts = sorted(set(parse_name_only(unmerged.out)))
        if not conflicts:
            await self._git(wt, "merge", "--abort", check=False, access=tree)
            raise ActionRefused("git_failed", f"git merge: {done.words()}")
        return WorkspaceMerged(merged=False, conflicts=conflicts, message=(
            f"merging {base} into {branch} left conflicts in {len(conflicts)} file(s), "
            "marked in the files; resolve them, then commit"))

    async def _rebase(self, wt: Repo, onto: str) -> list[str] | None:
        """Rebase the worktree's branch onto ``onto``; the conflicting files (the rebase
        aborted) or None when it went through. Never leaves a rebase in progress."""
        status = await self._status(wt, untracked=False)
        if status:
            raise ActionRefused("dirty", f"{wt.top} has uncommitted changes "
                                f"({_names(status)}); commit them before a rebase")
        tree = _writes(wt.top, *wt.git_dirs)
        try:
            done = await self._git(wt, "rebase", "--no-autosquash", "--end-of-options", onto,
                                   check=False, env=await self._identity_env(wt), access=tree)
            if done.code == 0:
                return None
            unmerged = await self._git(wt, "diff", "--name-only", "--diff-filter=U", "-z",
                                       check=False)
            conflicts = sorted(set(parse_name_only(unmerged.out)))
            if not conflicts:
                raise ActionRefused("git_failed", f"git rebase: {done.words()}")
            return conflicts
        finally:
            # whatever happened (a conflict, an error, a cancel): no half-done rebase
            await asyncio.shield(self._abort_rebase(wt, tree))

    async def _abort_rebase(self, wt: Repo, tree: Access) -> None:
        for name in ("rebase-merge", "rebase-apply"):
            if (wt.git_dir / name).exists():
                await self._git(wt, "rebase", "--abort", check=False, access=tree)
                return

    async def _fast_forward(self, wt: Repo, base: str, old: str, new: str) -> str:
        """Move branch ``base`` from ``old`` to ``new``: where it is checked out, by a
        fast-forward merge there (its files follow); elsewhere by its ref alone."""
        listed = parse_worktrees((await self._git(wt, "worktree", "list", "--porcelain",
                                                  "-z")).out)
        where = next((Path(w.path) for w in listed if w.branch == f"refs/heads/{base}"),
                     None)
        if where is None:
            # compare-and-swap: a branch that moved meanwhile is left alone
            await self._git(wt, "update-ref", "-m", "codey: fast-forward",
                            f"refs/heads/{base}", new, old, access=_writes(wt.common_dir))
            return new
        there = self._checkout(self._folder(where))
        dirty = await self._status(there, untracked=False)
        if dirty:
            raise ActionRefused("dirty", f"{base} is checked out in {where} with uncommitted "
                                f"changes ({_names(dirty)}); commit or stash them there, then "
                                "merge again")
        await self._git(there, "merge", "--ff-only", "--no-edit", "--end-of-options", new,
                        access=_writes(there.top, *there.git_dirs))
        return await self._commit_of(there, "HEAD")

    # -- workspace_push --------------------------------------------------------------------

    async def push(self, action: WorkspacePush) -> WorkspacePushed:
        """``git push -u remote branch``, then with ``open_pr`` ``gh pr create``. gh is
        checked before anything is pushed: missing or logged out, nothing happens."""
        wt = self._worktree(action.workdir)
        remote = action.remote
        if not remote or remote.startswith("-"):
            raise ActionRefused("bad_request", f"{remote!r} is not a remote's name")
        branch = await self._branch(wt)
        if not branch:
            raise ActionRefused("bad_request", f"{wt.top} is on no branch (detached HEAD)")
        url = await self._git(wt, "remote", "get-url", remote, check=False)
        if url.code != 0:
            raise ActionRefused("no_remote", f"this repository has no remote {remote!r}: "
                                             f"{url.words()}")
        gh = await self._gh(wt) if action.open_pr else None
        # a remote that is a folder on this machine is written by the push itself
        local = _local_remote(url.text(), wt.top)
        async with self._lock(wt):
            await self._git(wt, "push", "-u", remote,
                            f"refs/heads/{branch}:refs/heads/{branch}", timeout_s=PUSH_TIMEOUT_S,
                            access=Access(writes=(wt.common_dir, *local), network=True,
                                          credentials=True))
        result = WorkspacePushed(remote=remote, branch=branch,
                                 message=f"pushed {branch} to {remote} ({url.text()})")
        if gh is None:
            return result
        args = ["pr", "create", "--head", branch]
        if action.base:
            args += ["--base", action.base]
        args += (["--title", action.title, "--body", action.body] if action.title
                 else ["--fill"])
        done = await self.git.gh(wt.top, gh, *args, repo=wt, timeout_s=PUSH_TIMEOUT_S)
        if done.code != 0:
            raise ActionRefused("gh_failed", f"pushed {branch} to {remote}, but gh pr create "
                                             f"failed: {done.words()}")
        result.pr_url = pr_url(done.out.decode("utf-8", errors="replace"))
        return result

    async def _gh(self, wt: Repo) -> str:
        """gh's path, once it is known to be logged in; ``gh_missing`` /
        ``gh_not_logged_in`` otherwise."""
        gh = shutil.which("gh", path=os.environ.get("PATH", os.defpath))
        if gh is None:
            raise ActionRefused("gh_missing", "opening a pull request needs the GitHub CLI "
                                "(gh) on this machine's PATH: https://cli.github.com")
        done = await self.git.gh(wt.top, gh, "auth", "status", repo=wt)
        if done.code != 0:
            raise ActionRefused("gh_not_logged_in", "gh is not logged in on this machine "
                                f"(run `gh auth login` there): {done.words()}")
        return gh


def _local_remote(url: str, top: Path) -> tuple[Path, ...]:
    """The folder a remote's URL names when it is on this machine (a path or ``file://``),
    else nothing (a push over the network writes nothing here but refs)."""
    if url.startswith("file://"):
        url = url[len("file://"):]
    elif "://" in url or (":" in url.split("/", 1)[0] and not url.startswith("/")):
        return ()  # https://…, ssh://…, git@host:path
    path = Path(os.path.realpath(url if os.path.isabs(url) else top / url))
    return (path,) if path.is_dir() else ()


def _names(entries: Sequence[StatusEntry], shown: int = 5) -> str:
    names = ", ".join(e.path for e in entries[:shown])
    return names + (f" and {len(entries) - shown} more" if len(entries) > shown else "")
