"""The worker's own git: one hardened runner, inside the sandbox.

Every git the worker runs for a session — the context load's ``status``, the worktrees' change
count, diff, commit, merge, rebase, ``worktree add`` and ``remove``, push — and ``gh`` for a
pull request start here, and nowhere else (a test greps for it). A repository is something the
model can shape (a ``git init`` in a plain folder, a nested repository, a ``.gitattributes``),
so each run is confined in three ways:

* **what git reads** — system and global config are ignored (``GIT_CONFIG_NOSYSTEM``,
  ``GIT_CONFIG_GLOBAL=/dev/null``), and :data:`GIT_HARDENING` overrides the repository's own
  on the command line: no fsmonitor, no hooks, no submodule recursion, no signing programs,
  no automatic gc, no ``ext::`` transport; diffs run with ``--no-ext-diff --no-textconv``.
* **which repository** — :func:`find_repo` discovers it in Python, like git, and refuses a
  ``.git`` that is a symlink (the link is an entry of the workdir, which the sandbox cannot
  protect) or a ``.git`` file that does not point into a real repository's ``worktrees/`` or
  ``modules/`` folder (and back); git then runs with ``GIT_DIR`` and ``GIT_WORK_TREE`` pinned
  to what was checked, so it never walks into anything else.
* **where it runs** — inside the OS sandbox: ``$CODEY_HOME`` and the hidden list invisible,
  the whole machine read-only except what that operation writes (:class:`Access`: a
  ``.git`` for a commit, the work tree for a merge, a new worktree's folder), no network
  except for a push the user asked for. A filter or merge driver a repository still names
  (in its own config, which the model's sandbox cannot write) runs there too, not on the
  worker. A machine without a sandbox runs its git bare, hardened all the same: such a
  machine runs only ``full-access`` sessions, whose commands could do anything anyway.

A push (and ``gh``) needs the user's credentials: it runs with the network, the user's global
git config (credential helpers, ``insteadOf``), ``~/.ssh``, git's and gh's credential files
and the ssh agent's socket visible — still without ``$CODEY_HOME``, hooks or a writable tree.

Raises :class:`~codey_worker.confine.ActionRefused`: ``not_a_repository`` (none, or one the
runner will not use, with the reason), ``git_failed`` (git's own words; also a timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from codey_worker.confine import ActionRefused, within
from codey_worker.sandbox import Sandbox
from codey_worker.warm import WarmError

__all__ = [
    "GIT_HARDENING",
    "READ",
    "Access",
    "GitRun",
    "GitRunner",
    "Repo",
    "find_repo",
    "git_argv",
    "parse_status_branch",
    "repo_root",
]

#: overrides on every git the worker runs (``-c``, above any repository's config); the
#: server asks the model's read-only git commands for the first four too
#: (``codey_server/agent/approvals.py``)
GIT_HARDENING: tuple[tuple[str, str], ...] = (
    # programs a repository names
    ("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null"),
    ("safe.bareRepository", "explicit"), ("core.untrackedCache", "false"),
    ("protocol.ext.allow", "never"), ("core.pager", "cat"),
    ("commit.gpgSign", "false"), ("tag.gpgSign", "false"), ("core.attributesFile", "/dev/null"),
    # a nested repository is not entered: its config, hooks and filters are not ours
    ("submodule.recurse", "false"), ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"), ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
    # nothing left running after the command (gc --auto would detach)
    ("gc.auto", "0"), ("maintenance.auto", "false"),
    # a rebase must not stash on its own, nor move other branches along
    ("rebase.autoStash", "false"), ("rebase.updateRefs", "false"),
)  # fmt: skip

#: the worker's environment variables git and gh may see (the rest is not theirs)
_ENV_KEPT = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TERM"})
#: and, for a push or gh, what carries the user's credentials
_CREDENTIAL_ENV = frozenset({
    "SSH_AUTH_SOCK", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_ASKPASS",
    "SSH_ASKPASS", "GH_TOKEN", "GITHUB_TOKEN", "GH_HOST", "GH_ENTERPRISE_TOKEN",
    "GITHUB_ENTERPRISE_TOKEN", "GH_CONFIG_DIR", "XDG_CONFIG_HOME", "HTTPS_PROXY",
    "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
})  # fmt: skip
#: what a push or gh reads of the hidden list: the user's own keys, for the user's own push
CREDENTIAL_PATHS = ("~/.ssh", "~/.git-credentials", "~/.config/git/credentials", "~/.netrc",
                    "~/.config/gh", "~/.config/hub")

GIT_TIMEOUT_S = 120.0


def git_argv(*args: str) -> list[str]:
    """``git`` with :data:`GIT_HARDENING`, then ``args``."""
    argv = ["git", "--no-pager"]
    for key, value in GIT_HARDENING:
        argv += ["-c", f"{key}={value}"]
    return [*argv, *args]


# ---------------------------------------------------------------------------------------------
# which repository


@dataclass(frozen=True)
class Repo:
    """A checkout (the main one or a linked worktree), as checked by :func:`find_repo`."""

    top: Path  # its work tree's top folder, real
    git_dir: Path  # its own git dir (a worktree's: <common>/worktrees/<name>), real
    common_dir: Path  # the repository's (the main .git), real

    @property
    def linked(self) -> bool:
        """A worktree added with ``git worktree add``, not the main checkout."""
        return self.git_dir != self.common_dir

    def env(self) -> dict[str, str]:
        """git pinned to this repository: it discovers nothing on its own."""
        return {"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.top)}

    @property
    def git_dirs(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((self.git_dir, self.common_dir)))

    @property
    def main_top(self) -> Path | None:
        """The folder of the repository's main checkout: this one's, or for a linked
        worktree the one whose ``.git`` holds it (None: a bare repository has none)."""
        if not self.linked:
            return self.top
        return self.common_dir.parent if self.common_dir.name == ".git" else None


def _refuse(folder: Path, why: str) -> ActionRefused:
    return ActionRefused("not_a_repository", f"{folder}: {why}; the worker's git does not use it")


def _is_git_dir(path: Path) -> bool:
    return ((path / "HEAD").is_file() and (path / "objects").is_dir()) or (
        (path / "HEAD").is_file() and (path / "commondir").is_file())


def _read_line(path: Path, prefix: str = "") -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, 4096).decode("utf-8", errors="replace")
    finally:
        os.close(fd)
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return None


def _linked_git_dir(dotgit: Path) -> tuple[Path, Path]:
    """The (git dir, common dir) a ``.git`` file names, once checked: it must lead into a
    real repository's ``worktrees/<name>`` (a worktree) or ``modules/<path>`` (a
    submodule), and that folder must name this checkout back (``gitdir``, for a worktree)."""
    folder = dotgit.parent
    target = _read_line(dotgit, "gitdir:")
    if not target:
        raise _refuse(folder, "its .git file names no gitdir")
    gitdir = Path(os.path.realpath(target if os.path.isabs(target) else folder / target))
    if not _is_git_dir(gitdir):
        raise _refuse(folder, f"its .git file points at {gitdir}, which is not a git dir")
    kind, owner = gitdir.parent.name, gitdir.parent.parent
    if (kind == "worktrees" and owner.name == ".git") or (kind == "worktrees" and _is_bare(owner)):
        common = _read_line(gitdir / "commondir")
        common_dir = Path(os.path.realpath(gitdir / common)) if common else owner
        back = _read_line(gitdir / "gitdir")
        if common_dir != Path(os.path.realpath(owner)) or not back or \
                Path(os.path.realpath(back)) != Path(os.path.realpath(dotgit)):
            raise _refuse(folder, f"its .git file points at {gitdir}, a worktree's git dir "
                                  "that does not name this folder back")
        _real_dir(owner, folder)
        return gitdir, common_dir
    # a submodule: <super>/.git/modules/<path...>/ ; its checkout lies inside the superproject
    parts = gitdir.parts
    if "modules" in parts:
        at = len(parts) - 1 - parts[::-1].index("modules")
        owner = Path(*parts[:at])
        if owner.name == ".git" and (folder == owner.parent or owner.parent in folder.parents):
            _real_dir(owner, folder)
            return gitdir, gitdir
    raise _refuse(folder, f"its .git file points at {gitdir}, outside any repository's "
                          "worktrees or modules")


def _is_bare(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "worktrees").is_dir()


def _real_dir(path: Path, folder: Path) -> None:
    """``path`` (a repository's .git) must be a folder, not a link to one."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        raise _refuse(folder, f"{path} is missing") from None
    if not stat.S_ISDIR(mode):
        raise _refuse(folder, f"{path} is not a folder (a symlink can be swapped)")


def find_repo(folder: Path) -> Repo | None:
    """The checkout holding ``folder`` (real), found as git finds it — the nearest ``.git``
    up the tree — and checked (see the module docstring); None when there is none.
    Raises ``not_a_repository`` for a ``.git`` the runner will not use."""
    here = folder
    while True:
        dotgit = here / ".git"
        try:
            mode: int | None = os.lstat(dotgit).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise _refuse(here, f"its .git cannot be read ({exc.strerror or exc})") from None
        if mode is not None:
            if stat.S_ISLNK(mode):
                raise _refuse(here, "its .git is a symlink (it can be swapped from inside the "
                                    "sandbox)")
            if stat.S_ISDIR(mode):
                if not _is_git_dir(dotgit):
                    raise _refuse(here, "its .git folder is not a git dir")
                common = _read_line(dotgit / "commondir")
                if common:  # a git dir that says it belongs elsewhere: not a plain checkout
                    raise _refuse(here, "its .git folder names another repository")
                return Repo(here, dotgit, dotgit)
            if stat.S_ISREG(mode):
                git_dir, common_dir = _linked_git_dir(dotgit)
                return Repo(here, git_dir, common_dir)
            raise _refuse(here, "its .git is neither a folder nor a file")
        if here.parent == here:
            return None
        here = here.parent


# ---------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True)
class Access:
    """What one git run may touch beyond reading: ``writes`` (folders made writable: a
    ``.git``, a work tree, a new worktree's parent), ``reads`` (folders of the worker's own
    shown read-only where the sandbox's private /tmp would cover them: a pathspec file),
    ``network`` and ``credentials`` (a push: see the module docstring)."""

    writes: tuple[Path, ...] = ()
    network: bool = False
    credentials: bool = False
    reads: tuple[Path, ...] = ()
    #: folders of the worker's own under ``$CODEY_HOME`` (hidden from every sandboxed run)
    #: shown, writable, to this one: a shadow repository of the worker's (a move's)
    own: tuple[Path, ...] = ()


READ = Access()


@dataclass(frozen=True)
class GitRun:
    code: int
    out: bytes
    err: str
    cut: bool = False  # stdout was stopped at the limit

    def words(self) -> str:
        """What git said, for a ``git_failed`` message."""
        text = self.err.strip() or self.out.decode("utf-8", errors="replace").strip()
        return text[-4000:] or f"exit code {self.code}"

    def text(self) -> str:
        return self.out.decode("utf-8", errors="replace").strip()


def _subcommand(args: Sequence[str]) -> str:
    rest = [a for a in args if not a.startswith("-") and "=" not in a]
    return rest[0] if rest else ""


@dataclass
class GitRunner:
    """Runs git (and gh) for the worker's own operations; see the module docstring."""

    sandbox: Sandbox | None
    #: where the user's global git config is read from for an identity or a push (tests)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    # -- the one place git and gh start ------------------------------------------------------

    def _env(self, access: Access, repo: Repo | None, extra: Mapping[str, str] | None,
             user_config: bool) -> dict[str, str]:
        keep = _ENV_KEPT | (_CREDENTIAL_ENV if access.credentials else frozenset())
        env = {k: v for k, v in self.environ.items() if k in keep or k.startswith("LC_")}
        env.setdefault("PATH", os.defpath)
        env.update(GIT_TERMINAL_PROMPT="0", GIT_EDITOR="true", GIT_SEQUENCE_EDITOR="true",
                   GIT_PAGER="cat", GH_PROMPT_DISABLED="1", GIT_CONFIG_NOSYSTEM="1",
                   GIT_ATTR_NOSYSTEM="1", GCM_INTERACTIVE="never")
        if not (user_config or access.credentials):
            env["GIT_CONFIG_GLOBAL"] = "/dev/null"
        if repo is not None:
            env.update(repo.env())
        env.update(extra or {})
        return env

    def _wrap(self, argv: list[str], cwd: Path, access: Access, repo: Repo | None,
              env: dict[str, str], also: tuple[Path, ...] = ()
              ) -> tuple[list[str], dict[str, str]]:
        box = self.sandbox
        if box is None or not box.support.available:
            return argv, env
        # (``also``: gh's own folder, in case it lies under /tmp, which the sandbox replaces)
        readable: list[Path] = [cwd, *access.reads, *also]
        if repo is not None:
            readable += [repo.top, *repo.git_dirs]
        exposed: list[Path] = list(access.own)
        if access.credentials:
            sock = self.environ.get("SSH_AUTH_SOCK")
            if sock and os.path.isabs(sock):
                exposed.append(Path(sock))
        spec = box.spec(mode="read-only", network=access.network, workdir=cwd, cwd=cwd,
                        tmp=None, readable=tuple(readable), own_writes=access.writes,
                        unhide=CREDENTIAL_PATHS if access.credentials else (),
                        exposed=tuple(exposed))
        return box.wrap(argv, spec), box.env(env, spec)

    async def _spawn(self, argv: list[str], cwd: Path, env: dict[str, str], *,
                     stdin: bytes | None, timeout_s: float, limit: int | None) -> GitRun:
        """Run ``argv`` in ``cwd`` in a session of its own (no controlling terminal: ssh
        cannot ask for a passphrase on the worker's), killed on timeout or when the task is
        cancelled. ``limit``: stop reading stdout past that many bytes (and stop it)."""
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, start_new_session=True,
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
                raise ActionRefused("git_failed", f"{os.path.basename(argv[0])} took longer "
                                    f"than {timeout_s:.0f} s and was stopped") from None
            raise
        return GitRun(code, out, err.decode("utf-8", errors="replace"), cut)

    # -- git ---------------------------------------------------------------------------------

    async def run(self, cwd: Path, *args: str, repo: Repo | None = None,
                  access: Access = READ, check: bool = True, stdin: bytes | None = None,
                  env: Mapping[str, str] | None = None, timeout_s: float = GIT_TIMEOUT_S,
                  limit: int | None = None, user_config: bool = False) -> GitRun:
        """Hardened git in ``cwd``, pinned to ``repo`` when given, sandboxed with ``access``;
        ``check``: a non-zero exit raises ``git_failed``. ``user_config``: the user's global
        config is read (an identity; never for a command that runs programs)."""
        full = self._env(access, repo, env, user_config)
        argv, full = self._wrap(git_argv(*args), cwd, access, repo, full)
        done = await self._spawn(argv, cwd, full, stdin=stdin, timeout_s=timeout_s,
                                 limit=limit)
        if check and done.code != 0 and not done.cut:
            raise ActionRefused("git_failed", f"git {_subcommand(args)}: {done.words()}")
        return done

    async def gh(self, cwd: Path, gh: str, *args: str, repo: Repo | None = None,
                 timeout_s: float = GIT_TIMEOUT_S) -> GitRun:
        """The GitHub CLI at ``gh`` with the user's credentials and the network (it pushes
        nothing: the branch was pushed by :meth:`run`)."""
        # gh keeps its state (a refreshed token, a cache) in its own folders
        home = Path(self.environ.get("HOME") or os.path.expanduser("~"))
        places = [home / ".config" / "gh", home / ".local" / "state" / "gh",
                  home / ".cache" / "gh"]
        if self.environ.get("GH_CONFIG_DIR"):
            places.append(Path(self.environ["GH_CONFIG_DIR"]))
        state = tuple(p for p in places if p.is_dir())
        access = Access(writes=state, network=True, credentials=True)
        # and the git it runs itself (to find the branch and the remote) is hardened too
        hardening = {"GIT_CONFIG_COUNT": str(len(GIT_HARDENING))}
        for n, (key, value) in enumerate(GIT_HARDENING):
            hardening[f"GIT_CONFIG_KEY_{n}"] = key
            hardening[f"GIT_CONFIG_VALUE_{n}"] = value
        full = self._env(access, repo, hardening, True)
        argv, full = self._wrap([gh, *args], cwd, access, repo, full,
                                also=(Path(gh).parent,))
        return await self._spawn(argv, cwd, full, stdin=None, timeout_s=timeout_s, limit=None)

    async def identity(self, repo: Repo) -> tuple[str, str] | None:
        """(name, email) the repository's config names, else the user's global config,
        else None (read, never run: ``git config --get``)."""
        found: list[str] = []
        for key in ("user.name", "user.email"):
            done = await self.run(repo.top, "config", "--get", key, repo=repo, check=False)
            if done.code != 0 or not done.text():
                done = await self.run(repo.top, "config", "--global", "--get", key,
                                      check=False, user_config=True)
            if done.code != 0 or not done.text():
                return None
            found.append(done.text())
        return found[0], found[1]

    async def status(self, folder: Path,
                     session_id: str | None = None) -> tuple[str | None, bool | None]:
        """(branch, dirty) of the checkout holding ``folder`` (a session's context); (None,
        None) outside a repository, for one the runner will not use, or without git.

        A read with no lock taken (``GIT_OPTIONAL_LOCKS=0``) that writes nothing, so it may
        run in the session's warm box when it has one (the same hidden list, ``.git``
        read-only, no network): that spares the context load, at each turn's start, a bwrap
        of its own."""
        try:
            repo = find_repo(folder)
        except ActionRefused:
            return None, None
        if repo is None:
            return None, None
        args = ("status", "--porcelain=v1", "--branch", "--untracked-files=normal",
                "--ignore-submodules=all")
        env = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
        try:
            warm = await self._in_box(session_id, folder, repo, args, env)
            if warm is not None:
                return parse_status_branch(warm) if warm else (None, None)
            done = await self.run(folder, *args, repo=repo, check=False, timeout_s=3.0,
                                  env=env)
        except (OSError, ActionRefused):
            return None, None
        if done.code != 0:
            return None, None
        return parse_status_branch(done.out)

    async def _in_box(self, session_id: str | None, folder: Path, repo: Repo,
                      args: Sequence[str], extra: Mapping[str, str]) -> bytes | None:
        """git's stdout from the session's warm box (b"" when git failed there); None when
        there is no box to run it in, or the repository's git dirs would not be seen there
        (under /tmp and outside the workdir: the box has a /tmp of its own)."""
        boxes = self.sandbox.boxes if self.sandbox is not None else None
        box = boxes.current(session_id) if boxes is not None and session_id else None
        if box is None or not all(within(p, folder) or not within(p, "/tmp")
                                  for p in (repo.top, *repo.git_dirs)):
            return None
        env = self._env(READ, repo, extra, False)
        if self.sandbox is not None:
            env["TMPDIR"] = "/tmp"
        try:
            code, out, _ = await box.capture(git_argv(*args), str(folder), env, 3.0)
        except (WarmError, TimeoutError):
            return None
        return out if code == 0 else b""


def repo_root(folder: Path) -> Path | None:
    """The main checkout's folder of the repository holding ``folder`` (see
    :attr:`Repo.main_top`); None outside a repository or for one the runner will not use.
    Found in Python: nothing runs."""
    try:
        repo = find_repo(folder)
    except ActionRefused:
        return None
    return repo.main_top if repo is not None else None


def parse_status_branch(out: bytes) -> tuple[str | None, bool]:
    """(branch, dirty) from ``git status --porcelain=v1 --branch``."""
    lines = out.decode(errors="replace").splitlines()
    branch = None
    if lines and lines[0].startswith("## "):
        head = lines[0][3:]
        if head.startswith("No commits yet on "):
            branch = head[len("No commits yet on "):]
        elif head.startswith("HEAD (no branch)"):
            branch = "(detached HEAD)"
        else:
            branch = head.split("...", 1)[0].split(" ", 1)[0]
    return branch, any(line and not line.startswith("## ") for line in lines)

