"""Git workspaces: a worktree per session, its whole change, and shipping it (issue 26).

The ``workspace_*`` actions are the worker's own git operations, run on the user's say-so
in the browser, never a model's command. They run git *outside* the sandbox (the sandbox
keeps ``.git`` read-only for the model precisely so that these can be trusted), so:

* every git here runs with :data:`GIT_HARDENING` on its command line — no fsmonitor hook, no
  hooks at all, no bare repository found by walking up, no external diff or textconv, no
  ``ext::`` transport — because a repository's own config must not make the worker run a
  program. (What a config can still name — a filter driver, ``gpg.program`` — is the
  owner's: the sandbox stops a model's command from writing ``.git/config``.)
* its environment is the worker's own minus git's location variables (``GIT_DIR``,
  ``GIT_INDEX_FILE``, …: they would point git elsewhere), with no terminal to prompt on.
* paths are confined like every action's: the repository, its main checkout and the
  worktree all lie inside the allowed roots (the worktrees folder is one of them).

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
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
from codey_worker.exec import CommandRegistry, run_command
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import Sandbox

__all__ = [
    "FALLBACK_IDENTITY",
    "GIT_HARDENING",
    "SETUP_SCRIPT",
    "NumStat",
    "StatusEntry",
    "Workspaces",
    "WorktreeEntry",
    "branch_slug",
    "cap_diff",
    "changed_files",
    "git_argv",
    "parse_log",
    "parse_name_only",
    "parse_name_status",
    "parse_numstat",
    "parse_status",
    "parse_worktrees",
    "pr_url",
    "worktree_location",
]

#: overrides on every git the worker runs (``-c``, above any repository's config): no
#: fsmonitor hook and no hooks (both run programs the repository names), no bare repository
#: found by walking up (a folder laid out as one is not a repository), no untracked cache,
#: no ``ext::`` remote (a command line as a URL), no pager. The server asks the same of the
#: model's read-only git commands (``codey_server/agent/approvals.py``).
GIT_HARDENING: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null"),
    ("safe.bareRepository", "explicit"), ("core.untrackedCache", "false"),
    ("protocol.ext.allow", "never"), ("core.pager", "cat"),
    # a rebase must not stash on its own, nor move other branches along
    ("rebase.autoStash", "false"), ("rebase.updateRefs", "false"),
)  # fmt: skip

#: the project's setup script, run in a new worktree (relative to it)
SETUP_SCRIPT = ".codey/setup.sh"

#: who commits when the repository's config names nobody (no ``user.name``/``user.email``
#: anywhere): a commit must not fail for lack of it on a fresh machine, and this impersonates
#: no one
FALLBACK_IDENTITY = ("Codey", "codey@localhost")

#: git's variables that say where the repository, index or config is: inherited from the
#: worker's environment they would point its git elsewhere
_GIT_ENV_KEPT = frozenset({
    "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_ASKPASS", "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
    # where the user's own (global, system) config is: theirs, and -c overrides it anyway
    "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
})  # fmt: skip

GIT_TIMEOUT_S = 120.0
PUSH_TIMEOUT_S = 300.0
MAX_COMMITS = 500


# ---------------------------------------------------------------------------------------------
# pure: git's output


def git_argv(*args: str) -> list[str]:
    """``git`` with :data:`GIT_HARDENING`, then ``args``."""
    argv = ["git", "--no-pager"]
    for key, value in GIT_HARDENING:
        argv += ["-c", f"{key}={value}"]
    return [*argv, *args]


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
                  committed: Sequence[str]) -> list[ChangedFile]:
    """The files of the whole change (merge base → working tree), sorted by path:
    ``numstat`` gives the counts, ``statuses`` the kind, and a file is ``committed`` when
    the committed part of the change (merge base → HEAD) touches it or its old name."""
    done = set(committed)
    files = []
    for stat in numstat:
        status, old = statuses.get(stat.path, ("modified", None))
        old = old if old is not None else stat.old_path
        if old is not None and status == "modified":
            status = "renamed"
        files.append(ChangedFile(
            path=stat.path, status=status, old_path=old, added=stat.added or 0,
            deleted=stat.deleted or 0, binary=stat.binary,
            committed=stat.path in done or (old is not None and old in done)))
    return sorted(files, key=lambda f: f.path)


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
# I/O: running git


@dataclass(frozen=True)
class _Run:
    code: int
    out: bytes
    err: str
    cut: bool = False  # stdout was stopped at the limit

    def words(self) -> str:
        """What git said, for a ``git_failed`` message."""
        text = self.err.strip() or self.out.decode("utf-8", errors="replace").strip()
        return text[-4000:] or f"exit code {self.code}"


def _git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") or k in _GIT_ENV_KEPT}
    # nobody is at a terminal to answer: fail instead of waiting for a password or an editor
    env.update(GIT_TERMINAL_PROMPT="0", GIT_EDITOR="true", GIT_SEQUENCE_EDITOR="true",
               GIT_PAGER="cat", GH_PROMPT_DISABLED="1")
    env.update(extra or {})
    return env


async def _run(argv: Sequence[str], cwd: Path, *, env: Mapping[str, str],
               stdin: bytes | None = None, timeout_s: float = GIT_TIMEOUT_S,
               limit: int | None = None) -> _Run:
    """Run ``argv`` in ``cwd`` in a session of its own (no controlling terminal: ssh cannot
    ask for a passphrase on the worker's), killed on timeout or when the task is cancelled.
    ``limit``: stop reading stdout past that many bytes (and stop the process)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=dict(env), start_new_session=True,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def talk() -> tuple[bytes, bytes, bool]:
        assert proc.stdout is not None and proc.stderr is not None
        if proc.stdin is not None:
            proc.stdin.write(stdin or b"")
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            proc.stdin.close()
        err_task = asyncio.ensure_future(proc.stderr.read())
        chunks, size, cut = [], 0, False
        while chunk := await proc.stdout.read(65536):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size > limit:
                cut = True
                proc.kill()
                break
        return b"".join(chunks), await err_task, cut

    try:
        out, err, cut = await asyncio.wait_for(talk(), timeout_s)
        code = await proc.wait()
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        if isinstance(exc, TimeoutError):
            raise ActionRefused("git_failed", f"{' '.join(argv[:1])} {_subcommand(argv)} "
                                f"took longer than {timeout_s:.0f} s and was stopped") from None
        raise
    return _Run(code, out, err.decode("utf-8", errors="replace"), cut)


def _subcommand(argv: Sequence[str]) -> str:
    """The git subcommand in a hardened argv (for messages)."""
    rest = [a for a in argv[1:] if not a.startswith("-") and "=" not in a]
    return rest[0] if rest else ""


async def _git(cwd: Path, *args: str, check: bool = True, stdin: bytes | None = None,
               env: Mapping[str, str] | None = None, timeout_s: float = GIT_TIMEOUT_S,
               limit: int | None = None) -> _Run:
    """Hardened git in ``cwd``; ``check``: a non-zero exit raises ``git_failed``."""
    done = await _run(git_argv(*args), cwd, env=_git_env(env), stdin=stdin,
                      timeout_s=timeout_s, limit=limit)
    if check and done.code != 0 and not done.cut:
        raise ActionRefused("git_failed", f"git {_subcommand(['git', *args])}: "
                                          f"{done.words()}")
    return done


def _out(done: _Run) -> str:
    return done.out.decode("utf-8", errors="replace").strip()


# ---------------------------------------------------------------------------------------------
# I/O: the actions

Emit = Callable[[Literal["stdout", "stderr"], str], Awaitable[None]]


@dataclass(frozen=True)
class _Checkout:
    """A checkout (the main one or a worktree) as git sees it."""

    top: Path  # its top folder, real
    git_dir: Path  # its own git dir (a worktree's: .git/worktrees/<name>)
    common_dir: Path  # the repository's (the main .git)

    @property
    def linked(self) -> bool:
        """A worktree added with ``git worktree add``, not the main checkout."""
        return self.git_dir != self.common_dir


class Workspaces:
    """The ``workspace_*`` actions (see the module docstring). ``registry`` lets a
    ``cancel`` of a ``workspace_create`` stop its setup script."""

    def __init__(self, policy: LocalPolicy, sandbox: Sandbox,
                 registry: CommandRegistry | None = None) -> None:
        self.policy = policy
        self.sandbox = sandbox
        self.registry = registry
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, checkout: _Checkout) -> asyncio.Lock:
        return self._locks.setdefault(str(checkout.common_dir), asyncio.Lock())

    # -- finding things --------------------------------------------------------------------

    def _worktrees_dir(self) -> Path:
        if self.policy.worktrees_dir is None:
            raise ActionRefused("bad_request", "this worker has no worktrees folder "
                                "(worktrees_dir in worker-config.json)")
        return Path(os.path.realpath(self.policy.worktrees_dir))

    def _folder(self, path: str) -> Path:
        real = self.policy.check_workdir(path)
        if not real.is_dir():
            raise ActionRefused("not_found", f"{path} is not a folder on this machine")
        return real

    async def _checkout(self, folder: Path) -> _Checkout:
        """The checkout ``folder`` is in; ``not_a_repository`` when there is none. Its top
        must lie inside the allowed roots too (git found it by walking up)."""
        done = await _git(folder, "rev-parse", "--path-format=absolute", "--show-toplevel",
                          "--git-dir", "--git-common-dir", check=False)
        lines = _out(done).splitlines()
        if done.code != 0 or len(lines) != 3:
            raise ActionRefused("not_a_repository",
                                f"{folder} is not in a git repository with a working tree: "
                                f"{done.words()}")
        top = self.policy.check_workdir(lines[0])
        return _Checkout(top, Path(os.path.realpath(lines[1])),
                         Path(os.path.realpath(lines[2])))

    async def _worktree(self, workdir: str) -> _Checkout:
        return await self._checkout(self._folder(workdir))

    @staticmethod
    async def _commit_of(cwd: Path, rev: str) -> str:
        """The commit ``rev`` names (a branch, tag or sha); ``bad_request`` when none."""
        if not rev or rev.startswith("-") or "\0" in rev:
            raise ActionRefused("bad_request", f"{rev!r} is not a branch, tag or commit")
        done = await _git(cwd, "rev-parse", "--verify", "--quiet", "--end-of-options",
                          f"{rev}^{{commit}}", check=False)
        if done.code != 0:
            raise ActionRefused("bad_request", f"{rev!r} names no commit in this repository")
        return _out(done)

    @staticmethod
    async def _branch(cwd: Path) -> str:
        """The branch checked out in ``cwd`` ("" when detached)."""
        done = await _git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return _out(done) if done.code == 0 else ""

    @staticmethod
    async def _status(cwd: Path, *, untracked: bool = True) -> list[StatusEntry]:
        done = await _git(cwd, "status", "--porcelain=v2", "-z",
                          "--untracked-files=all" if untracked else "--untracked-files=no")
        return parse_status(done.out)

    @staticmethod
    async def _count(cwd: Path, revs: str) -> int:
        return int(_out(await _git(cwd, "rev-list", "--count", revs)) or 0)

    # -- workspace_create ------------------------------------------------------------------

    async def create(self, action: WorkspaceCreate, emit: Emit) -> WorkspaceReady:
        """Make the worktree (branch ``action.branch`` from the base), then run the setup
        script in it, its output through ``emit``. A failing script leaves the worktree."""
        worktrees = self._worktrees_dir()
        main = await self._checkout(self._folder(action.repo))
        branch = action.branch
        ok = await _git(main.top, "check-ref-format", "--branch", branch, check=False)
        if not branch or branch.startswith("-") or ok.code != 0:
            raise ActionRefused("bad_request", f"{branch!r} is not a valid branch name")
        async with self._lock(main):
            if action.base:
                base, base_commit = action.base, await self._commit_of(main.top, action.base)
            else:
                # the main checkout's current branch; detached: the commit it is on
                base_commit = await self._commit_of(main.top, "HEAD")
                base = await self._branch(main.top) or base_commit
            path = worktree_location(worktrees, main.top, branch)
            # through the policy, as a workdir: a symlink planted in the worktrees folder
            # must not lead the new worktree out of the roots
            self.policy.check_workdir(path)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.policy.check_workdir(path)
            await _git(main.top, "worktree", "add", "-b", branch, str(path), base_commit)
        real = self.policy.check_workdir(path)
        ready = WorkspaceReady(path=str(real), branch=branch, base=base,
                               base_commit=base_commit, repo_root=str(main.top))
        script = real / SETUP_SCRIPT
        if action.setup and script.is_file():
            ready.setup = SETUP_SCRIPT
            ready.setup_exit = await self._setup(action, real, emit)
        return ready

    async def _setup(self, action: WorkspaceCreate, worktree: Path, emit: Emit) -> int | None:
        """Run the setup script as a command of the session (``action.sandbox``, network
        on); its exit code, or None when it could not be started (the reason on stderr)."""
        script = worktree / SETUP_SCRIPT
        # an executable script picks its interpreter (#!); a plain file is a shell script
        if os.access(script, os.X_OK):
            argv = [f"./{SETUP_SCRIPT}"]
        else:
            argv = ["bash" if shutil.which("bash") else "sh", SETUP_SCRIPT]
        command = RunCommand(action_id=action.action_id, session_id=action.session_id,
                             argv=argv, workdir=str(worktree), sandbox=action.sandbox,
                             network=True, timeout_s=action.timeout_s)

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
        committed, uncommitted and untracked (as added) files."""
        wt = await self._worktree(action.workdir)
        if action.diff_cap < 0:
            raise ActionRefused("bad_request", "diff_cap must be >= 0")
        top = wt.top
        base_commit = await self._commit_of(top, action.base)
        head = await self._commit_of(top, "HEAD")
        done = await _git(top, "merge-base", head, base_commit, check=False)
        if done.code != 0:
            raise ActionRefused("git_failed", f"{action.base} and HEAD have no commit in "
                                              f"common: {done.words()}")
        merge_base = _out(done)
        status = await self._status(top)
        untracked = [e.path for e in status if e.kind == "untracked"]
        with tempfile.TemporaryDirectory(prefix="codey-diff-") as tmp:
            # A copy of the index with the untracked files as intent-to-add: diffing the
            # working tree against the merge base then shows them as added, and nothing of
            # the real index (the user's staging) changes, nor is any blob written.
            index = Path(tmp) / "index"
            real_index = Path(_out(await _git(top, "rev-parse", "--path-format=absolute",
                                              "--git-path", "index")))
            env = {"GIT_INDEX_FILE": str(index)}
            if real_index.is_file():
                shutil.copyfile(real_index, index)
            else:
                await _git(top, "read-tree", head, env=env)
            if untracked:
                await _git(top, "--literal-pathspecs", "add", "--intent-to-add",
                           "--pathspec-from-file=-", "--pathspec-file-nul",
                           stdin=b"\0".join(os.fsencode(p) for p in untracked), env=env)
            opts = ("--no-ext-diff", "--no-textconv", "--no-color", "-M")
            numstat = await _git(top, "diff", *opts, "-z", "--numstat", merge_base, env=env)
            names = await _git(top, "diff", *opts, "-z", "--name-status", merge_base, env=env)
            unified = await _git(top, "diff", *opts, merge_base, env=env,
                                 limit=action.diff_cap * 4 + 4)
        committed = await _git(top, "diff", "--no-ext-diff", "-M", "-z", "--name-only",
                               merge_base, head)
        log = await _git(top, "log", "-z", f"--max-count={MAX_COMMITS}", "--format=%H%x1f%s",
                         f"{base_commit}..{head}")
        text, truncated = cap_diff(unified.out, action.diff_cap, unified.cut)
        return WorkspaceChanges(
            base=action.base, merge_base=merge_base,
            files=changed_files(parse_numstat(numstat.out), parse_name_status(names.out),
                                parse_name_only(committed.out)),
            diff=text, truncated=truncated, commits=parse_log(log.out), dirty=bool(status),
            behind=await self._count(top, f"{head}..{base_commit}"))

    # -- workspace_remove ------------------------------------------------------------------

    async def remove(self, action: WorkspaceRemove) -> WorkspaceRemoved:
        """``git worktree remove``; refused (``dirty``, ``unmerged``) unless forced. The
        branch goes only when asked, and merged (or forced)."""
        wt = await self._worktree(action.workdir)
        worktrees = self._worktrees_dir()
        if not wt.linked or not within(wt.top, worktrees) or wt.top == worktrees:
            raise ActionRefused("bad_request", f"{wt.top} is not a worktree this worker made "
                                f"(they live in {worktrees}); it is left alone")
        async with self._lock(wt):
            main = await self._main(wt)
            branch = await self._branch(wt.top)
            ahead = 0
            if not action.force:  # (forced, a base that is gone does not stand in the way)
                base = action.base or await self._branch(main) or "HEAD"
                ahead = await self._count(wt.top, f"{await self._commit_of(main, base)}..HEAD")
                status = await self._status(wt.top)
                if status:
                    raise ActionRefused("dirty", f"{wt.top} has {len(status)} uncommitted "
                                        f"change(s) ({_names(status)}); commit them, or "
                                        "remove it with force")
                if ahead:
                    raise ActionRefused("unmerged", f"{branch or 'HEAD'} has {ahead} "
                                        f"commit(s) that {base} does not have; merge them, "
                                        "or remove it with force")
            await _git(main, "worktree", "remove", *(["--force"] if action.force else []),
                       str(wt.top))
            deleted = False
            if action.delete_branch and branch and (action.force or ahead == 0):
                await _git(main, "branch", "-D", "--end-of-options", branch)
                deleted = True
        with contextlib.suppress(OSError):  # the repository's folder, once it is empty
            wt.top.parent.rmdir()
        return WorkspaceRemoved(path=str(wt.top), branch_deleted=deleted)

    @staticmethod
    async def _main(wt: _Checkout) -> Path:
        """The main checkout of the repository ``wt`` belongs to (the first worktree)."""
        listed = parse_worktrees((await _git(wt.top, "worktree", "list", "--porcelain",
                                             "-z")).out)
        if not listed or listed[0].bare:
            raise ActionRefused("not_a_repository", f"the repository of {wt.top} has no "
                                                    "main checkout (it is bare)")
        return Path(listed[0].path)

    # -- workspace_commit ------------------------------------------------------------------

    async def commit(self, action: WorkspaceCommit) -> WorkspaceCommitted:
        """``git add -A`` and a commit with ``action.message``, as the repository's
        configured author, else :data:`FALLBACK_IDENTITY`."""
        if not action.message.strip():
            raise ActionRefused("bad_request", "a commit needs a message")
        wt = await self._worktree(action.workdir)
        async with self._lock(wt):
            await _git(wt.top, "add", "-A")
            staged = parse_name_only((await _git(wt.top, "diff", "--cached", "--no-ext-diff",
                                                 "--name-only", "-z")).out)
            env: dict[str, str] = {}
            if not await self._has_identity(wt.top):
                name, email = FALLBACK_IDENTITY
                env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
                       "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
            # whitespace only: "strip" would drop a line such as "#123 fixed" as a comment
            await _git(wt.top, "commit", "--quiet", "--no-verify", "--cleanup=whitespace",
                       "--file=-", stdin=action.message.encode(), env=env)
            sha = await self._commit_of(wt.top, "HEAD")
        return WorkspaceCommitted(sha=sha, files=len(staged))

    @staticmethod
    async def _has_identity(cwd: Path) -> bool:
        for key, var in (("user.name", "GIT_AUTHOR_NAME"), ("user.email", "GIT_AUTHOR_EMAIL")):
            if os.environ.get(var):
                continue
            done = await _git(cwd, "config", "--get", key, check=False)
            if done.code != 0 or not _out(done):
                return False
        return True

    # -- workspace_merge -------------------------------------------------------------------

    async def merge(self, action: WorkspaceMerge) -> WorkspaceMerged:
        """Fast-forward ``action.base`` to the worktree's branch, after rebasing it onto the
        base (``rebase``). Conflicts abort the rebase and are reported, not raised."""
        wt = await self._worktree(action.workdir)
        base = action.base
        if not base or base.startswith("-"):
            raise ActionRefused("bad_request", f"{base!r} is not a branch")
        known = await _git(wt.top, "show-ref", "--verify", "--quiet",
                           f"refs/heads/{base}", check=False)
        if known.code != 0:
            raise ActionRefused("bad_request", f"{base!r} is not a local branch: a merge "
                                               "moves a branch")
        branch = await self._branch(wt.top)
        if not branch:
            raise ActionRefused("bad_request", f"{wt.top} is on no branch (detached HEAD)")
        async with self._lock(wt):
            base_commit = await self._commit_of(wt.top, f"refs/heads/{base}")
            up_to_date = await _git(wt.top, "merge-base", "--is-ancestor", base_commit,
                                    "HEAD", check=False)
            if action.mode == "into_branch":
                if up_to_date.code == 0:
                    return WorkspaceMerged(merged=True, sha=await self._commit_of(
                        wt.top, "HEAD"), message=f"{branch} already has {base}")
                return await self._merge_into_branch(wt, base, base_commit, branch)
            if up_to_date.code != 0:
                if action.mode == "ff":
                    behind = await self._count(wt.top, f"HEAD..{base_commit}")
                    return WorkspaceMerged(merged=False, message=(
                        f"{branch} is not a fast-forward of {base}: {base} has {behind} "
                        f"commit(s) {branch} does not; rebase it first"))
                conflicts = await self._rebase(wt, base_commit)
                if conflicts is not None:
                    return WorkspaceMerged(merged=False, conflicts=conflicts, message=(
                        f"rebasing {branch} onto {base} conflicts in {len(conflicts)} "
                        "file(s); the rebase was undone"))
            head = await self._commit_of(wt.top, "HEAD")
            sha = await self._fast_forward(wt, base, base_commit, head)
        return WorkspaceMerged(merged=True, sha=sha,
                               message=f"{base} is now at {sha[:12]} ({branch})")

    async def _merge_into_branch(self, wt: _Checkout, base: str, base_commit: str,
                                 branch: str) -> WorkspaceMerged:
        """Merge ``base`` into the worktree's branch for the agent to resolve: a clean merge
        is committed; a conflicting one stays in progress, its markers in the files, until
        ``workspace_commit`` concludes it (the model's sandbox keeps ``.git`` read-only, so
        the worker does the git part and the agent only edits files)."""
        status = await self._status(wt.top, untracked=False)
        if status:
            raise ActionRefused("dirty", f"{wt.top} has uncommitted changes "
                                f"({_names(status)}); commit them before merging {base} in")
        env: dict[str, str] = {}
        if not await self._has_identity(wt.top):
            name, email = FALLBACK_IDENTITY
            env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
                   "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
        done = await _git(wt.top, "merge", "--no-ff", "--no-verify", "-m",
                          f"Merge {base} into {branch}", "--end-of-options", base_commit,
                          check=False, env=env)
        if done.code == 0:
            sha = await self._commit_of(wt.top, "HEAD")
            return WorkspaceMerged(merged=True, sha=sha, message=f"merged {base} into {branch}")
        unmerged = await _git(wt.top, "diff", "--name-only", "--diff-filter=U", "-z",
                              check=False)
        conflicts = sorted(set(parse_name_only(unmerged.out)))
        if not conflicts:
            await _git(wt.top, "merge", "--abort", check=False)
            raise ActionRefused("git_failed", f"git merge: {done.words()}")
        return WorkspaceMerged(merged=False, conflicts=conflicts, message=(
            f"merging {base} into {branch} left conflicts in {len(conflicts)} file(s), "
            "marked in the files; resolve them, then commit"))

    async def _rebase(self, wt: _Checkout, onto: str) -> list[str] | None:
        """Rebase the worktree's branch onto ``onto``; the conflicting files (the rebase
        aborted) or None when it went through. Never leaves a rebase in progress."""
        status = await self._status(wt.top, untracked=False)
        if status:
            raise ActionRefused("dirty", f"{wt.top} has uncommitted changes "
                                f"({_names(status)}); commit them before a rebase")
        try:
            done = await _git(wt.top, "rebase", "--no-autosquash", "--end-of-options", onto,
                              check=False)
            if done.code == 0:
                return None
            unmerged = await _git(wt.top, "diff", "--name-only", "--diff-filter=U", "-z",
                                  check=False)
            conflicts = sorted(set(parse_name_only(unmerged.out)))
            if not conflicts:
                raise ActionRefused("git_failed", f"git rebase: {done.words()}")
            return conflicts
        finally:
            # whatever happened (a conflict, an error, a cancel): no half-done rebase
            await asyncio.shield(self._abort_rebase(wt))

    @staticmethod
    async def _abort_rebase(wt: _Checkout) -> None:
        for name in ("rebase-merge", "rebase-apply"):
            if (wt.git_dir / name).exists():
                await _git(wt.top, "rebase", "--abort", check=False)
                return

    async def _fast_forward(self, wt: _Checkout, base: str, old: str, new: str) -> str:
        """Move branch ``base`` from ``old`` to ``new``: where it is checked out, by a
        fast-forward merge there (its files follow); elsewhere by its ref alone."""
        listed = parse_worktrees((await _git(wt.top, "worktree", "list", "--porcelain",
                                             "-z")).out)
        where = next((Path(w.path) for w in listed if w.branch == f"refs/heads/{base}"),
                     None)
        if where is None:
            # compare-and-swap: a branch that moved meanwhile is left alone
            await _git(wt.top, "update-ref", "-m", "codey: fast-forward",
                       f"refs/heads/{base}", new, old)
            return new
        self.policy.check_workdir(where)
        dirty = await self._status(where, untracked=False)
        if dirty:
            raise ActionRefused("dirty", f"{base} is checked out in {where} with uncommitted "
                                f"changes ({_names(dirty)}); commit or stash them there, then "
                                "merge again")
        await _git(where, "merge", "--ff-only", "--no-edit", "--end-of-options", new)
        return await self._commit_of(where, "HEAD")

    # -- workspace_push --------------------------------------------------------------------

    async def push(self, action: WorkspacePush) -> WorkspacePushed:
        """``git push -u remote branch``, then with ``open_pr`` ``gh pr create``. gh is
        checked before anything is pushed: missing or logged out, nothing happens."""
        wt = await self._worktree(action.workdir)
        remote = action.remote
        if not remote or remote.startswith("-"):
            raise ActionRefused("bad_request", f"{remote!r} is not a remote's name")
        branch = await self._branch(wt.top)
        if not branch:
            raise ActionRefused("bad_request", f"{wt.top} is on no branch (detached HEAD)")
        url = await _git(wt.top, "remote", "get-url", remote, check=False)
        if url.code != 0:
            raise ActionRefused("no_remote", f"this repository has no remote {remote!r}: "
                                             f"{url.words()}")
        gh = await self._gh(wt.top) if action.open_pr else None
        async with self._lock(wt):
            await _git(wt.top, "push", "-u", remote,
                       f"refs/heads/{branch}:refs/heads/{branch}", timeout_s=PUSH_TIMEOUT_S)
        result = WorkspacePushed(remote=remote, branch=branch,
                                 message=f"pushed {branch} to {remote} ({_out(url)})")
        if gh is None:
            return result
        argv = [gh, "pr", "create", "--head", branch]
        if action.base:
            argv += ["--base", action.base]
        argv += (["--title", action.title, "--body", action.body] if action.title
                 else ["--fill"])
        done = await _run(argv, wt.top, env=_git_env(), timeout_s=PUSH_TIMEOUT_S)
        if done.code != 0:
            raise ActionRefused("gh_failed", f"pushed {branch} to {remote}, but gh pr create "
                                             f"failed: {done.words()}")
        result.pr_url = pr_url(done.out.decode("utf-8", errors="replace"))
        return result

    @staticmethod
    async def _gh(cwd: Path) -> str:
        """gh's path, once it is known to be logged in; ``gh_missing`` /
        ``gh_not_logged_in`` otherwise."""
        gh = shutil.which("gh", path=os.environ.get("PATH", os.defpath))
        if gh is None:
            raise ActionRefused("gh_missing", "opening a pull request needs the GitHub CLI "
                                "(gh) on this machine's PATH: https://cli.github.com")
        done = await _run([gh, "auth", "status"], cwd, env=_git_env())
        if done.code != 0:
            raise ActionRefused("gh_not_logged_in", "gh is not logged in on this machine "
                                f"(run `gh auth login` there): {done.words()}")
        return gh


def _names(entries: Sequence[StatusEntry], shown: int = 5) -> str:
    names = ", ".join(e.path for e in entries[:shown])
    return names + (f" and {len(entries) - shown} more" if len(entries) > shown else "")
