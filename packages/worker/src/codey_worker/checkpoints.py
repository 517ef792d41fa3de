"""Checkpoints: the session's workdir as it was, kept as git commits (issue 38).

Before a turn's first change the server asks for a checkpoint (``checkpoint_record``, phase
``start``) and at the turn's end for its end state (phase ``end``); both are commit objects of
the workdir — tracked files and untracked ones not ignored — made with a **temporary index**
(``GIT_INDEX_FILE`` in a folder of its own inside the git dir: never the user's index, HEAD,
stash or branches; the user's index is *copied* as a start, so unchanged files are not hashed
again), kept on private refs:

* ``refs/codey/checkpoints/<session>/<turn>`` (the start) and
  ``refs/codey/checkpoint-ends/<session>/<turn>`` (the end), in the repository holding the
  workdir (a linked worktree's refs are its repository's);
* in a folder that is not a repository, in a **shadow repository**
  ``$CODEY_HOME/checkpoints/<session>.git`` whose work tree is the folder: nothing is written
  inside the user's folder.

Files over ``max_file_bytes`` are skipped (the checkpoint keeps what the index had for a
tracked one, and a restore leaves it alone); ignored files are never taken. Both are listed.

Every git runs through the hardened runner (:mod:`codey_worker.git`), in the sandbox: the
repository's own writes only (a shadow repository, hidden from commands in ``$CODEY_HOME``,
is exposed to that one run), the work tree writable only for a restore. The filter drivers a
repository's config names are switched off on the command line (``filter.<name>.clean=`` &
co.): a checkpoint holds the bytes of the files, and a restore writes them back as they were.

A restore (:meth:`Checkpoints.restore`) makes the workdir equal the checkpoint, but for the
files skipped and the ones in ``keep``: by default those changed by hand since the session's
turns left them — found by comparing each turn's end state with the next turn's start, and the
last end state with the workdir now.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from codey_worker.confine import ActionRefused
from codey_worker.git import Access, GitRunner, Repo, find_repo

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "CheckpointInfo",
    "Checkpoints",
    "FileDelta",
    "Snapshot",
    "Store",
    "checkpoint_message",
    "end_ref",
    "parse_message",
    "parse_name_status",
    "safe_relative",
    "start_ref",
]

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
START_REFS = "refs/codey/checkpoints"
END_REFS = "refs/codey/checkpoint-ends"
#: a session or turn id, as it goes into a ref name (item ids are of this kind)
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
#: what is named of the ignored (and skipped) files, at most
LIST_CAP = 200
DIFF_CAP = 256 * 1024
IDENTITY = {"GIT_AUTHOR_NAME": "Codey", "GIT_AUTHOR_EMAIL": "codey@localhost",
            "GIT_COMMITTER_NAME": "Codey", "GIT_COMMITTER_EMAIL": "codey@localhost"}


# ---------------------------------------------------------------------------------------------
# pure parts


def check_id(value: str, what: str) -> str:
    if not _ID.match(value):
        raise ActionRefused("bad_request", f"{what} {value!r} cannot name a checkpoint")
    return value


def start_ref(session: str, turn: str) -> str:
    return f"{START_REFS}/{check_id(session, 'session')}/{check_id(turn, 'turn')}"


def end_ref(session: str, turn: str) -> str:
    return f"{END_REFS}/{check_id(session, 'session')}/{check_id(turn, 'turn')}"


def checkpoint_message(session: str, turn: str, phase: str, at_ns: int, files: int,
                       skipped: list[str]) -> str:
    """The commit message: a subject, then what a restore needs to know, as JSON."""
    body = json.dumps({"session": session, "turn": turn, "phase": phase, "at_ns": at_ns,
                       "files": files, "skipped": skipped}, sort_keys=True)
    return f"codey checkpoint {turn} ({phase})\n\n{body}\n"


@dataclass(frozen=True)
class CheckpointInfo:
    ref: str
    commit: str
    tree: str
    session: str
    turn: str
    phase: str
    at_ns: int
    files: int
    skipped: tuple[str, ...]


def parse_message(text: str) -> dict[str, object]:
    """The JSON body of :func:`checkpoint_message` ({} when there is none)."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                data = json.loads(line)
                return data if isinstance(data, dict) else {}
    return {}


@dataclass(frozen=True)
class FileDelta:
    """One path that differs between two trees: ``status`` as git says it, from ``a`` to
    ``b`` (``A``: only in b, ``D``: only in a, ``M``, ``T``: its kind changed)."""

    path: str
    status: str


def parse_name_status(out: bytes) -> list[FileDelta]:
    """``git diff-tree -r -z --name-status --no-renames``."""
    parts = out.split(b"\0")
    found: list[FileDelta] = []
    i = 0
    while i + 1 < len(parts):
        status = parts[i].decode(errors="replace")
        if not status:
            i += 1
            continue
        found.append(FileDelta(os.fsdecode(parts[i + 1]), status[:1]))
        i += 2
    return found


def safe_relative(path: str) -> str:
    """A path relative to the work tree's top, as a model or a request may give it: refused
    (``path_outside_workdir``) when absolute, with ``..``, or empty."""
    if not path or "\0" in path or path.startswith("/") or os.path.isabs(path):
        raise ActionRefused("path_outside_workdir", f"{path!r} is not a path inside the workdir")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or parts[0] == ".git":
        raise ActionRefused("path_outside_workdir", f"{path!r} is not a path inside the workdir")
    return "/".join(parts)


def under(path: str, prefix: str) -> bool:
    return not prefix or path == prefix or path.startswith(prefix + "/")


# ---------------------------------------------------------------------------------------------
# where a workdir's checkpoints live


@dataclass(frozen=True)
class Store:
    """The repository a session's checkpoints go to: the checkout holding the workdir, or the
    shadow repository (``shadow``) whose work tree is the workdir."""

    repo: Repo
    shadow: bool
    prefix: str  # the workdir relative to the work tree's top ("" : the top itself)

    @property
    def scratch_parent(self) -> Path:
        """Where a temporary index goes: the repository's own git dir (it is written
        anyway; the sandbox gives the run nothing else to write)."""
        return self.repo.common_dir

    def access(self, work_tree: bool = False, extra: Iterable[Path] = ()) -> Access:
        writes = (*self.repo.git_dirs, *((self.repo.top,) if work_tree else ()), *extra)
        if self.shadow:  # under $CODEY_HOME, which the sandbox hides: exposed, after that
            return Access(writes=(*((self.repo.top,) if work_tree else ()), *extra),
                          exposed=self.repo.git_dirs)
        return Access(writes=tuple(dict.fromkeys(writes)))


def shadow_dir(home: Path, session: str) -> Path:
    return home / "checkpoints" / f"{check_id(session, 'session')}.git"


def locate(workdir: Path, home: Path, session: str, *, create: bool) -> Store | None:
    """The :class:`Store` of ``workdir`` (real); None when it is not in a repository and its
    shadow repository does not exist (and ``create`` is False)."""
    repo = find_repo(workdir)
    if repo is not None:
        prefix = os.path.relpath(workdir, repo.top)
        return Store(repo, False, "" if prefix == "." else prefix.replace(os.sep, "/"))
    shadow = shadow_dir(home, session)
    if not (shadow / "HEAD").is_file():
        if not create:
            return None
        shadow.mkdir(parents=True, exist_ok=True)
        (shadow / "objects").mkdir(exist_ok=True)
        (shadow / "refs").mkdir(exist_ok=True)
        (shadow / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
        (shadow / "HEAD").write_text("ref: refs/heads/main\n")
        # the folder's own .git, if one appears there, is never a file of the checkpoint
        (shadow / "info").mkdir(exist_ok=True)
        (shadow / "info" / "exclude").write_text(".git\n")
    real = Path(os.path.realpath(shadow))
    return Store(Repo(workdir, real, real), True, "")


# ---------------------------------------------------------------------------------------------
# snapshots


@dataclass
class Snapshot:
    tree: str
    files: int
    skipped: list[str] = field(default_factory=list)  # over the size, then ignored (named)
    commit: str = ""


class Checkpoints:
    """The ``checkpoint_*`` actions over one :class:`GitRunner` (see the module docstring)."""

    def __init__(self, git: GitRunner, home: Path) -> None:
        self.git = git
        self.home = home
        #: each repository's filter drivers, switched off (:meth:`_neutral`), by its git dir
        self._neutral_flags: dict[Path, tuple[str, ...]] = {}
        self._neutral_seen: dict[Path, tuple[int, tuple[str, ...]]] = {}

    async def _git(self, store: Store, *args: str, access: Access | None = None,
                   **kw: object) -> bytes:
        neutral = self._neutral_flags.get(store.repo.common_dir, ())
        done = await self.git.run(store.repo.top, *neutral, *args, repo=store.repo,
                                  access=access or Access(), **kw)  # type: ignore[arg-type]
        return done.out

    async def _neutral(self, store: Store) -> tuple[str, ...]:
        """``-c`` settings that switch off every filter driver the repository's config
        names (an empty command is no filter: git writes and reads the bytes as they are)."""
        if store.shadow:
            return ()
        config = store.repo.common_dir / "config"
        with contextlib.suppress(OSError):
            # read again only when the config changed (a git run in the sandbox costs)
            stamp = os.stat(config).st_mtime_ns
            seen = self._neutral_seen.get(store.repo.common_dir)
            if seen is not None and seen[0] == stamp:
                return seen[1]
        done = await self.git.run(store.repo.top, "config", "--null", "--get-regexp",
                                  r"^filter\.", repo=store.repo, check=False)
        names: set[str] = set()
        for entry in done.out.split(b"\0"):
            key = entry.split(b"\n", 1)[0].decode(errors="replace")
            if key.startswith("filter.") and key.count(".") >= 2:
                names.add(key[len("filter."):].rsplit(".", 1)[0])
        flags: list[str] = []
        for name in sorted(names):
            for part in ("clean", "smudge", "process"):
                flags += ["-c", f"filter.{name}.{part}="]
            flags += ["-c", f"filter.{name}.required=false"]
        self._neutral_flags[store.repo.common_dir] = tuple(flags)
        with contextlib.suppress(OSError):
            self._neutral_seen[store.repo.common_dir] = (os.stat(config).st_mtime_ns,
                                                         tuple(flags))
        return tuple(flags)

    @contextlib.contextmanager
    def _scratch(self, store: Store) -> Iterator[Path]:
        folder = Path(tempfile.mkdtemp(prefix="codey-checkpoint-", dir=store.scratch_parent))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def take(self, store: Store, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
                   ) -> Snapshot:
        """The workdir's tree now, written as git objects (no commit, no ref)."""
        await self._neutral(store)
        with self._scratch(store) as scratch:
            index = scratch / "index"
            own = store.repo.git_dir / "index"
            if own.is_file():
                # a start: unchanged files are not hashed again. With its mtime (copy2): git
                # trusts an entry's stat only when the file is older than the index, so a copy
                # stamped now would pass a file rewritten in the second it was added (same
                # size, same whole-second mtime) as unchanged, and the checkpoint miss it
                shutil.copy2(own, index)
            env = {"GIT_INDEX_FILE": str(index)}
            access = store.access()
            spec = store.prefix or "."
            listed = await self._git(store, "ls-files", "-z", "-c", "-o",
                                     "--exclude-standard", "--", spec, env=env, access=access)
            top = store.repo.top
            big: list[str] = []
            count = 0  # the files the checkpoint holds: those there now, but the big ones
            for raw in dict.fromkeys(listed.split(b"\0")):
                if not raw:
                    continue
                with contextlib.suppress(OSError):
                    info = os.lstat(os.path.join(top, os.fsdecode(raw)))
                    if stat.S_ISREG(info.st_mode) and info.st_size > max_file_bytes:
                        big.append(os.fsdecode(raw))
                    else:
                        count += 1
            if big:
                pathspec = scratch / "pathspec"
                pathspec.write_bytes(b"\0".join(
                    [os.fsencode(spec), *(os.fsencode(f":(exclude,literal){p}") for p in big)]))
                adding: tuple[str, ...] = (f"--pathspec-from-file={pathspec}",
                                           "--pathspec-file-nul")
            else:
                adding = ("--", spec)
            # (a file that cannot be read is left out, not the whole checkpoint: exit 1)
            added = await self.git.run(
                top, *self._neutral_flags.get(store.repo.common_dir, ()), "add", "-A",
                "--ignore-errors", *adding, repo=store.repo, env=env, access=access,
                check=False)
            if added.code > 1:
                raise ActionRefused("git_failed", f"git add: {added.words()}")
            tree = (await self._git(store, "write-tree", env=env, access=access)
                    ).decode().strip()
            ignored = await self._git(store, "ls-files", "-z", "-o", "-i", "--exclude-standard",
                                      "--directory", "--", spec, env=env, access=access)
            if store.shadow:
                # the shadow's own index follows (the next snapshot hashes only what changed)
                shutil.copy2(index, own)  # (its mtime kept, as above)
        named = [f"{p} (over {max_file_bytes} bytes)" for p in big]
        named += [f"{os.fsdecode(p)} (ignored)" for p in ignored.split(b"\0") if p]
        return Snapshot(tree, count, named[:LIST_CAP])

    async def record(self, workdir: Path, session: str, turn: str, phase: str = "start",
                     max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, keep: int = 0
                     ) -> tuple[Snapshot, Store]:
        """Take a snapshot and keep it as a commit on the turn's ref (see the module
        docstring); ``keep`` > 0: only the session's last ``keep`` turns stay."""
        ref = start_ref(session, turn) if phase == "start" else end_ref(session, turn)
        store = locate(workdir, self.home, session, create=True)
        assert store is not None
        snap = await self.take(store, max_file_bytes)
        message = checkpoint_message(session, turn, phase, time.time_ns(), snap.files,
                                     snap.skipped)
        access = store.access()
        snap.commit = (await self._git(store, "commit-tree", snap.tree, stdin=message.encode(),
                                       env=IDENTITY, access=access)).decode().strip()
        await self._git(store, "update-ref", "--no-deref", ref, snap.commit, access=access)
        if keep > 0:
            await self.prune(workdir, session, keep)
        return snap, store

    # -- reading what is kept ----------------------------------------------------------------

    async def listing(self, store: Store, session: str) -> list[CheckpointInfo]:
        """The session's checkpoints, start and end, oldest first."""
        check_id(session, "session")
        out = await self._git(store, "for-each-ref", "--format=%(refname)%00%(objectname)%00"
                              "%(tree)%00%(contents)%00%00", f"{START_REFS}/{session}/",
                              f"{END_REFS}/{session}/")
        found: list[CheckpointInfo] = []
        for record in out.decode(errors="replace").split("\0\0"):
            parts = record.strip("\n").split("\0")
            if len(parts) < 4:
                continue
            ref, commit, tree, text = parts[0], parts[1], parts[2], parts[3]
            data = parse_message(text)
            at = data.get("at_ns")
            files = data.get("files")
            skipped = data.get("skipped")
            found.append(CheckpointInfo(
                ref, commit, tree, session, ref.rsplit("/", 1)[-1],
                "end" if ref.startswith(END_REFS) else "start",
                at if isinstance(at, int) else 0, files if isinstance(files, int) else 0,
                tuple(str(s) for s in skipped) if isinstance(skipped, list) else ()))
        found.sort(key=lambda c: c.at_ns)
        return found

    async def _find(self, workdir: Path, session: str, turn: str, phase: str = "start"
                    ) -> tuple[Store, CheckpointInfo, list[CheckpointInfo]]:
        store = locate(workdir, self.home, session, create=False)
        if store is None:
            raise ActionRefused("checkpoint_gone", f"no checkpoint of turn {turn} is kept")
        every = await self.listing(store, session)
        want = start_ref(session, turn) if phase == "start" else end_ref(session, turn)
        for info in every:
            if info.ref == want:
                exists = await self.git.run(store.repo.top, "cat-file", "-e",
                                            f"{info.commit}^{{commit}}", repo=store.repo,
                                            check=False, access=self._read(store))
                if exists.code != 0:
                    break
                return store, info, every
        raise ActionRefused("checkpoint_gone", f"the checkpoint of turn {turn} is gone (its "
                            "commit is no longer in the repository)")

    @staticmethod
    def _read(store: Store) -> Access:
        return Access(exposed=store.repo.git_dirs) if store.shadow else Access()

    async def _changes(self, store: Store, a: str, b: str) -> list[FileDelta]:
        out = await self._git(store, "diff-tree", "-r", "-z", "--name-status", "--no-renames",
                              a, b, access=self._read(store))
        return [d for d in parse_name_status(out) if under(d.path, store.prefix)]

    async def _patch(self, store: Store, a: str, b: str, paths: list[str]) -> str:
        if not paths:
            return ""
        out = await self._git(store, "diff-tree", "-r", "-p", "--no-renames", "--no-ext-diff",
                              "--no-textconv", a, b, "--",
                              *(f":(literal){p}" for p in paths), access=self._read(store),
                              limit=DIFF_CAP)
        return out.decode(errors="replace")

    async def hand_edited(self, store: Store, every: list[CheckpointInfo], since: int,
                          now_tree: str) -> set[str]:
        """Paths changed by hand after the turn at ``since`` (an index in ``every``): between
        a turn's end and the next turn's start, and since the last end."""
        edited: set[str] = set()
        later = every[since:]
        last_end: CheckpointInfo | None = None
        for info in later:
            if info.phase == "end":
                last_end = info
            elif last_end is not None:
                edited |= {d.path for d in await self._changes(store, last_end.tree, info.tree)}
                last_end = None
        ends = [c for c in later if c.phase == "end"]
        if ends and ends[-1] is last_end:
            edited |= {d.path for d in await self._changes(store, last_end.tree, now_tree)}
        return edited

    @staticmethod
    def _skipped(info: CheckpointInfo) -> set[str]:
        return {s.rsplit(" (", 1)[0] for s in info.skipped}

    async def preview(self, workdir: Path, session: str, turn: str
                      ) -> tuple[list[tuple[FileDelta, str]], list[str], str]:
        """What a restore to ``turn`` would change (each with its diff, from now to the
        checkpoint), the hand-edited paths among them, and the checkpoint's commit."""
        store, info, every = await self._find(workdir, session, turn)
        now = await self.take(store)
        skip = self._skipped(info) | {s.rsplit(" (", 1)[0] for s in now.skipped}
        deltas = [d for d in await self._changes(store, now.tree, info.tree)
                  if d.path not in skip]
        edited = await self.hand_edited(store, every, every.index(info), now.tree)
        files = []
        for delta in deltas:
            files.append((delta, await self._patch(store, now.tree, info.tree, [delta.path])))
        return files, sorted(edited & {d.path for d in deltas}), info.commit

    async def restore(self, workdir: Path, session: str, turn: str,
                      keep: list[str] | None, path: str | None = None
                      ) -> tuple[list[str], list[str]]:
        """Make the workdir equal the checkpoint of ``turn`` (one ``path`` of it only, when
        given); ``keep``: paths left as they are (None: the hand-edited ones). Returns
        (restored, kept)."""
        store, info, every = await self._find(workdir, session, turn)
        single = None if path is None else self._confined(store, path)
        now = await self.take(store)
        skip = self._skipped(info) | {s.rsplit(" (", 1)[0] for s in now.skipped}
        deltas = [d for d in await self._changes(store, now.tree, info.tree)
                  if d.path not in skip]
        if single is not None:
            deltas = [d for d in deltas if d.path == single]
            kept: set[str] = set()
        elif keep is None:
            kept = await self.hand_edited(store, every, every.index(info), now.tree)
        else:
            kept = set(keep)
        todo = [d for d in deltas if d.path not in kept]
        await self._apply(store, info.tree, todo)
        return sorted(d.path for d in todo), sorted(kept & {d.path for d in deltas})

    def _confined(self, store: Store, path: str) -> str:
        """A path a request names, relative to the workdir: inside it, through no symlink."""
        rel = safe_relative(path)
        full = f"{store.prefix}/{rel}" if store.prefix else rel
        here = store.repo.top
        for part in full.split("/")[:-1]:
            here = here / part
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISLNK(os.lstat(here).st_mode):
                    raise ActionRefused("path_outside_workdir",
                                        f"{path!r} goes through a symlink ({here})")
        return full

    async def _apply(self, store: Store, tree: str, todo: list[FileDelta]) -> None:
        top = store.repo.top
        gone = [d.path for d in todo if d.status in ("D", "T")]
        write = [d.path for d in todo if d.status in ("A", "M", "T")]
        for rel in gone:
            self._remove(top, rel)
        if not write:
            return
        await self._neutral(store)
        with self._scratch(store) as scratch:
            env = {"GIT_INDEX_FILE": str(scratch / "index")}
            access = store.access(work_tree=True)
            await self._git(store, "read-tree", tree, env=env, access=access)
            await self._git(store, "checkout-index", "-f", "-z", "--stdin", env=env,
                            access=access, stdin=b"\0".join(os.fsencode(p) for p in write))

    @staticmethod
    def _remove(top: Path, rel: str) -> None:
        """Delete ``top/rel`` — a file or a link, never through a symlinked folder."""
        here = top
        for part in rel.split("/")[:-1]:
            here = here / part
            try:
                if not stat.S_ISDIR(os.lstat(here).st_mode):
                    return  # a link or a file on the way: nothing of ours lies beyond it
            except OSError:
                return
        target = top / rel
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
            mode = os.lstat(target).st_mode
            if stat.S_ISDIR(mode):
                return
            os.unlink(target)

    async def diff(self, workdir: Path, session: str, from_turn: str, to_turn: str
                   ) -> list[tuple[FileDelta, str]]:
        """What changed from ``from_turn``'s checkpoint to ``to_turn``'s ("": the workdir
        now), each file with its diff."""
        store, a, _ = await self._find(workdir, session, from_turn)
        if to_turn:
            b_tree = (await self._find(workdir, session, to_turn))[1].tree
        else:
            b_tree = (await self.take(store)).tree
        deltas = await self._changes(store, a.tree, b_tree)
        return [(d, await self._patch(store, a.tree, b_tree, [d.path])) for d in deltas]

    async def prune(self, workdir: Path | None, session: str, keep: int = 0) -> int:
        """Delete the session's checkpoints, but the last ``keep`` turns' (0: all, and its
        shadow repository); returns how many refs went."""
        removed = 0
        store = None
        if workdir is not None:
            with contextlib.suppress(ActionRefused, OSError):
                store = locate(workdir, self.home, session, create=False)
        if store is not None:
            every = await self.listing(store, session)
            turns = list(dict.fromkeys(c.turn for c in every))
            going = set(turns[:-keep] if keep > 0 else turns)
            refs = [c.ref for c in every if c.turn in going]
            if refs:
                script = "".join(f"delete {ref}\n" for ref in refs).encode()
                await self._git(store, "update-ref", "--stdin", stdin=script,
                                access=store.access())
                removed = len(refs)
        if keep <= 0:
            shutil.rmtree(shadow_dir(self.home, session), ignore_errors=True)
        return removed
