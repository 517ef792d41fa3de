"""``grep`` and ``glob``: searching the workdir, read-only.

Both run ripgrep (``rg``) when it is there — the ``ripgrep`` wheel, a dependency of the
worker, ships it in the environment's ``bin`` (:func:`find_rg`) — and fall back to pure Python
otherwise (slower, the same answers in the common cases). What both promise:

* **Confined.** The search starts at ``path``, resolved beneath the workdir by the one
  confined file API (:class:`~codey_worker.files.Tree`). ``rg`` runs in the OS sandbox
  (read-only, no network, the hidden list and ``$CODEY_HOME`` invisible), so whatever it
  meets — a symlink, a folder swapped for one while it walks — it cannot read what a
  sandboxed command could not; it never follows symlinks (no ``-L``). Without a sandbox the
  pure-Python fallback walks by directory handles, never following a symlink. Hidden paths
  under the workdir are left out, and anything found there is dropped from the answer all
  the same.
* **Ignored files stay out.** ``.gitignore`` files are respected, also outside a git
  repository (``rg --no-require-git``; the fallback reads every ``.gitignore`` on the way
  down, with git's rules: ``!`` negation, ``/`` anchoring, ``dir/``, ``**``; it does not read
  ``.ignore``, ``.git/info/exclude`` or the global excludes file, which ``rg`` also honours).
  ``.git`` is never searched; hidden files and folders (a name starting with ``.``) only with
  ``hidden``, or when the glob pattern names one.
* **Globs** (``include``/``exclude`` of ``grep``, the pattern of ``glob``) are ripgrep's, the
  gitignore syntax: a pattern without ``/`` matches a file's name at any depth (``*.py``); one
  with ``/`` matches its path from the workdir (``src/**/*.ts``); ``**`` spans folders.
* **Capped.** ``grep`` returns at most ``max_matches`` lines (``files``/``count`` mode: files)
  and ``max_bytes`` of text, each line cut at :data:`MAX_LINE_CHARS`; ``glob`` at most
  ``max_results`` paths, newest first. ``truncated`` says there was more; ``rg`` is stopped
  as soon as the caps are reached.

A pattern that is not a valid regular expression is ``bad_request`` with the engine's own
message (``rg`` speaks Rust's ``regex`` syntax, the fallback Python's ``re``: most patterns
mean the same in both).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import os
import re
import shutil
import stat
import sys
import sysconfig
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import msgspec

from codey_protocol.worker import Glob, GlobResult, Grep, GrepFile, GrepLine, GrepResult
from codey_worker.confine import ActionRefused
from codey_worker.files import Boundary, Tree
from codey_worker.home import codey_home
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import Sandbox, bwrap_failure

__all__ = ["MAX_LINE_CHARS", "find_rg", "glob", "grep", "ignore_regex"]

MAX_LINE_CHARS = 1000  # a matching line longer than this is cut (minified files)
MAX_MATCHES = 10_000
MAX_BYTES = 512 * 1024
MAX_CONTEXT = 50
MAX_RESULTS = 10_000
_T = TypeVar("_T")

RG_TIMEOUT_S = 60.0
_BINARY_SNIFF = 8 * 1024
_MAX_FILE_BYTES = 50 * 1024 * 1024  # larger files are not searched by the fallback
_UNSET = object()


@functools.cache
def find_rg() -> str | None:
    """The ``rg`` to run: the one the ``ripgrep`` wheel put beside this Python (the
    environment's scripts folder, or the user's), else one on ``PATH``; None without one."""
    folders = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    with contextlib.suppress(KeyError):
        folders.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    name = "rg.exe" if os.name == "nt" else "rg"
    for folder in folders:
        candidate = os.path.join(folder, name)
        if folder and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(name)


# ---------------------------------------------------------------------------------------------
# shared: where to search, what to leave out


@dataclass(frozen=True)
class _Scope:
    workdir: Path  # real
    root: Path  # real, inside the workdir
    rel: str  # root relative to the workdir ("." for the workdir)
    is_dir: bool
    #: hidden paths under the workdir, relative to it (never searched, never reported)
    hidden: tuple[str, ...]
    boundary: Boundary
    shown_as: str  # the workdir as the server spelled it


def _scope(workdir_text: str, path: str, policy: LocalPolicy,
           boundary: Boundary | None) -> _Scope:
    workdir = policy.check_workdir(workdir_text)
    if not workdir.is_dir():
        raise ActionRefused("not_found", f"workdir {workdir} does not exist (attach the session)")
    boundary = boundary if boundary is not None else Boundary.default()
    with Tree.open(workdir, boundary, shown_as=workdir_text) as tree:
        try:
            spot = tree.locate(path or ".")
            is_dir = not spot.name
            if not is_dir:
                tree.lstat(spot)
        except (FileNotFoundError, NotADirectoryError):
            raise ActionRefused("not_found", f"{path}: no such file or directory") from None
        except OSError as exc:
            raise ActionRefused("io_error", f"{path}: {exc.strerror or exc}") from None
    inside = tuple(h[len(str(workdir)) + 1:] for h in boundary.hidden
                   if h.startswith(str(workdir) + "/"))
    return _Scope(workdir, Path(tree.real(spot.rel)), spot.shown, is_dir, inside, boundary,
                  workdir_text)


def _dropped(scope: _Scope, rel_path: str) -> bool:
    """A path (relative to the workdir) that must not be reported: under a hidden path."""
    return any(rel_path == p or rel_path.startswith(p + "/") for p in scope.hidden)


async def _spawn_rg(args: list[str], scope: _Scope, sandbox: Sandbox | None,
                    limit: int = 2 ** 16) -> asyncio.subprocess.Process:
    """rg, in the OS sandbox when there is one (read-only, no network: see the module
    docstring), in the workdir."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"}
    if sandbox is not None:
        spec = sandbox.spec(mode="read-only", network=False, workdir=scope.workdir,
                            cwd=scope.workdir, tmp=None)
        args = sandbox.wrap(args, spec)
        env = sandbox.env(env, spec)
    return await asyncio.create_subprocess_exec(
        *args, cwd=scope.workdir, stdin=asyncio.subprocess.DEVNULL, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, limit=limit)


def _engine(rg: object, sandbox: Sandbox | None) -> tuple[str | None, Sandbox | None]:
    """The rg to run and the sandbox to run it in; (None, None): the Python fallback (no rg,
    or no sandbox to run it in: the fallback walks by handles and needs none)."""
    binary = find_rg() if rg is _UNSET else rg
    if binary is None:
        return None, None
    assert isinstance(binary, str)
    if sandbox is None:
        sandbox = Sandbox.detected(codey_home())
    if not sandbox.support.available:
        return None, None
    return binary, sandbox


def _rg_filters(scope: _Scope, include: list[str], exclude: list[str],
                hidden: bool) -> tuple[list[str], _Globs | None]:
    """rg's arguments for what to search, and the include globs rg cannot apply itself.

    An include given to rg as ``--glob`` would *override* .gitignore (and show hidden files):
    a name pattern becomes a file type instead (types respect both), and a path pattern is
    applied to rg's answers afterwards (``_Globs``). Excludes are ``--glob !…``: an override
    can only take more out.
    """
    args = ["--no-config", "--no-require-git"]
    if hidden:
        # (without --hidden rg skips .git as a hidden folder; an override glob costs every
        # path a match, so it is added only when needed)
        args += ["--hidden", "--glob", "!.git"]
    by_path = [p for p in include if "/" in p.rstrip("/")]
    by_name = [p for p in include if p not in by_path]
    if by_name and not by_path:
        for i, pattern in enumerate(by_name):
            args += ["--type-add", f"codey{i}:{pattern}", "--type", f"codey{i}"]
        if not hidden:  # a file type lets hidden files through in rg: keep them out
            args += ["--glob", "!.*"]
    for pattern in exclude:
        args += ["--glob", "!" + pattern.removeprefix("!")]
    for hidden_path in scope.hidden:
        args += ["--glob", f"!/{hidden_path}"]
    return args, (_Globs.of(include, []) if by_path else None)


def _names_hidden(pattern: str) -> bool:
    return any(part.startswith(".") and part not in (".", "..")
               for part in pattern.split("/"))


# ---------------------------------------------------------------------------------------------
# gitignore-style globs, for the fallback


def ignore_regex(pattern: str) -> tuple[re.Pattern[str], bool]:
    """A gitignore-style glob as a regex over "/"-separated relative paths, and whether it is
    anchored (it has a "/" other than a trailing one: matched against the whole path; else
    against the name alone)."""
    anchored = "/" in pattern.rstrip("/")
    body = pattern.strip("/") if anchored else pattern.rstrip("/")
    out, i, n = [], 0, len(body)
    while i < n:
        c = body[i]
        if body.startswith("**/", i) and (i == 0 or body[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("**", i) and (i == 0 or body[i - 1] == "/") and i + 2 == n:
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = body.find("]", i + 2 if body[i + 1:i + 2] in ("!", "^", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
                i += 1
                continue
            inner = body[i + 1:end]
            if inner[:1] in ("!", "^"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(body[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL), anchored


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    anchored: bool
    negated: bool
    dir_only: bool
    base: str  # the folder of the .gitignore, relative to the workdir ("" for the workdir)

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.base:
            if not rel.startswith(self.base + "/"):
                return False
            rel = rel[len(self.base) + 1:]
        return bool(self.regex.match(rel if self.anchored else rel.rsplit("/", 1)[-1]))


def _read_gitignore(folder_fd: int, base: str) -> list[_Rule]:
    """The rules of the ``.gitignore`` in the folder ``folder_fd`` (read without following a
    symlink), for paths below ``base``."""
    try:
        fd = os.open(".gitignore", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=folder_fd)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        with open(fd, "rb", closefd=False) as f:
            lines = f.read(1024 * 1024).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    finally:
        os.close(fd)
    rules = []
    for raw in lines:
        line = raw.rstrip() if not raw.rstrip().endswith("\\") else raw
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated or line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        regex, anchored = ignore_regex(line)
        rules.append(_Rule(regex, anchored, negated, dir_only, base))
    return rules


def _ignored(rules: list[_Rule], rel: str, is_dir: bool) -> bool:
    verdict = False
    for rule in rules:
        if rule.matches(rel, is_dir):
            verdict = not rule.negated
    return verdict


@dataclass
class _Globs:
    include: list[tuple[re.Pattern[str], bool]] = field(default_factory=list)
    exclude: list[tuple[re.Pattern[str], bool]] = field(default_factory=list)

    @classmethod
    def of(cls, include: list[str], exclude: list[str]) -> _Globs:
        return cls([ignore_regex(p) for p in include],
                   [ignore_regex(p.removeprefix("!")) for p in exclude])

    @staticmethod
    def _any(globs: list[tuple[re.Pattern[str], bool]], rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        return any(rx.match(rel if anchored else name) for rx, anchored in globs)

    def wants(self, rel: str) -> bool:
        if self.include and not self._any(self.include, rel):
            return False
        return not self._any(self.exclude, rel)

    def prunes(self, rel_dir: str) -> bool:
        """An excluded folder is not walked into (as rg does)."""
        return self._any(self.exclude, rel_dir)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_WALK_DEPTH = 256


def _walk(tree: Tree, scope: _Scope, hidden: bool,
          globs: _Globs) -> Iterator[tuple[str, int, str]]:
    """Files under the scope's root: (path relative to the workdir, its folder's handle, its
    name); the handle is open while the file is yielded. Every folder is opened from its
    parent's handle without following a symlink (a folder swapped for a link while walked is
    skipped); ``.git``, hidden paths and (unless ``hidden``) hidden names skipped,
    .gitignore respected."""
    spot = tree.locate(scope.rel)
    if spot.name:
        try:
            if stat.S_ISREG(tree.lstat(spot).st_mode):
                yield spot.rel, spot.dirfd, spot.name
        except OSError:
            pass
        return
    # the .gitignore files above the root (up to the workdir) apply too
    rules: list[_Rule] = []
    if spot.rel:
        parts = spot.rel.split("/")
        for depth in range(len(parts)):
            base = "/".join(parts[:depth])
            above = tree.locate(base or ".")
            rules += _read_gitignore(above.dirfd, base)
    yield from _walk_folder(tree, scope, tree.open_listing(spot), spot.rel, rules, hidden,
                            globs, 0)


def _walk_folder(tree: Tree, scope: _Scope, fd: int, rel_dir: str, inherited: list[_Rule],
                 hidden: bool, globs: _Globs, depth: int) -> Iterator[tuple[str, int, str]]:
    try:
        here = inherited + _read_gitignore(fd, rel_dir)
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        prefix = rel_dir + "/" if rel_dir else ""
        subdirs = []
        for entry in entries:
            name = entry.name
            if name == ".git" or (name.startswith(".") and not hidden):
                continue
            rel = prefix + name
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if _ignored(here, rel, is_dir) or _dropped(scope, rel):
                continue
            if is_dir:
                if not globs.prunes(rel) and depth < _MAX_WALK_DEPTH:
                    subdirs.append(name)
            elif entry.is_file(follow_symlinks=False) and globs.wants(rel):
                yield rel, fd, name
        for name in subdirs:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a symlink: not followed
            yield from _walk_folder(tree, scope, sub, prefix + name, here, hidden, globs,
                                    depth + 1)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# grep


def _check_grep(action: Grep) -> tuple[int, int, int, int]:
    if not action.pattern:
        raise ActionRefused("bad_request", "pattern is empty")
    if "\x00" in action.pattern:
        raise ActionRefused("bad_request", "pattern contains a NUL byte")
    if action.before < 0 or action.after < 0:
        raise ActionRefused("bad_request", "before and after must not be negative")
    if action.max_matches < 1 or action.max_bytes < 1:
        raise ActionRefused("bad_request", "max_matches and max_bytes must be positive")
    return (min(action.max_matches, MAX_MATCHES), min(action.max_bytes, MAX_BYTES),
            min(action.before, MAX_CONTEXT), min(action.after, MAX_CONTEXT))


def _cut(text: str) -> str:
    text = text.rstrip("\r\n")
    if len(text) > MAX_LINE_CHARS:
        return text[:MAX_LINE_CHARS] + f"… [{len(text) - MAX_LINE_CHARS} more characters]"
    return text


class _Collector:
    """Matches per file, within the caps."""

    def __init__(self, max_matches: int, max_bytes: int) -> None:
        self.max_matches = max_matches
        self.max_bytes = max_bytes
        self.files: dict[str, GrepFile] = {}
        self.matches = 0
        self.bytes = 0
        self.truncated = False

    def line(self, path: str, number: int, text: str, match: bool) -> bool:
        """Keep a line; False once the caps are reached (stop searching)."""
        if match and self.matches >= self.max_matches:
            self.truncated = True
            return False
        text = _cut(text)
        if self.bytes + len(text) > self.max_bytes:
            self.truncated = True
            return False
        entry = self.files.get(path)
        if entry is None:
            entry = self.files[path] = GrepFile(path=path)
        entry.lines.append(GrepLine(line=number, text=text, match=match))
        self.bytes += len(text) + len(path) // 4
        if match:
            entry.count += 1
            self.matches += 1
        return True

    def file(self, path: str, count: int = 0) -> bool:
        if len(self.files) >= self.max_matches:
            self.truncated = True
            return False
        self.files[path] = GrepFile(path=path, count=count)
        self.matches += count
        return True

    def result(self, engine: str, mode: str, workdir: Path) -> GrepResult:
        files = list(self.files.values())
        if mode == "files":
            files.sort(key=lambda f: (-_mtime(workdir / f.path), f.path))
        else:
            files.sort(key=lambda f: f.path)
            for f in files:
                f.lines.sort(key=lambda line: line.line)
        return GrepResult(files=files, matches=self.matches, truncated=self.truncated,
                          engine=engine)  # type: ignore[arg-type]


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


async def grep(action: Grep, policy: LocalPolicy, *, rg: object = _UNSET,
               sandbox: Sandbox | None = None, boundary: Boundary | None = None) -> GrepResult:
    """Search as ``action`` asks (see the module docstring). ``rg``: the ripgrep to run
    (default :func:`find_rg`); None runs the Python fallback (in a thread). ``sandbox``: the
    worker's (default: this machine's); without a working one the fallback runs."""
    limits = _check_grep(action)
    scope = _scope(action.workdir, action.path, policy, boundary)
    binary, box = _engine(rg, sandbox)
    if binary is None:
        return await asyncio.to_thread(_grep_python, action, scope, limits)
    return await _once_more(lambda: _grep_rg(binary, action, scope, limits, box))


class _SandboxFailed(ActionRefused):
    """bwrap could not set the sandbox up for rg (:func:`bwrap_failure`): without a look at
    its stderr a failed search read as an empty one (a search under the stress run once
    answered no files at all)."""

    def __init__(self, reason: str) -> None:
        super().__init__("sandbox_failed", f"the search could not start in the sandbox: "
                                           f"{reason[:2000]}")


def _check_sandbox(rc: int | None, stderr: str) -> None:
    reason = bwrap_failure(rc, stderr)
    if reason is not None:
        raise _SandboxFailed(reason)


async def _once_more(run: Callable[[], Awaitable[_T]]) -> _T:
    """``run()``, and once more when the sandbox failed to start rg (a search changes
    nothing); a second failure is the model's to see."""
    try:
        return await run()
    except _SandboxFailed:
        return await run()


class _RgText(msgspec.Struct):
    text: str | None = None
    bytes: str | None = None


class _RgData(msgspec.Struct):
    path: _RgText | None = None
    lines: _RgText | None = None
    line_number: int | None = None


class _RgMessage(msgspec.Struct):
    type: str
    data: _RgData


_RG_DECODER = msgspec.json.Decoder(_RgMessage)


def _rg_text(value: _RgText | None) -> str:
    if value is None:
        return ""
    if value.text is not None:
        return value.text
    return base64.b64decode(value.bytes or "").decode("utf-8", errors="replace")


async def _grep_rg(rg: str, action: Grep, scope: _Scope,
                   limits: tuple[int, int, int, int], sandbox: Sandbox | None) -> GrepResult:
    max_matches, max_bytes, before, after = limits
    hidden = action.hidden or any(map(_names_hidden, action.include))
    filters, post = _rg_filters(scope, action.include, action.exclude, hidden)
    args = [rg, *filters]
    if action.ignore_case:
        args.append("--ignore-case")
    if action.literal:
        args.append("--fixed-strings")
    if action.mode == "files":
        args += ["--files-with-matches", "--null"]
    elif action.mode == "count":
        args += ["--count", "--null"]
    else:
        args.append("--json")
        if before:
            args += ["--before-context", str(before)]
        if after:
            args += ["--after-context", str(after)]
    args += ["--regexp", action.pattern]
    if scope.rel != ".":
        args += ["--", scope.rel]
    collector = _Collector(max_matches, max_bytes)
    proc = await _spawn_rg(args, scope, sandbox, limit=16 * 1024 * 1024)
    assert proc.stdout is not None and proc.stderr is not None
    errors = asyncio.ensure_future(proc.stderr.read())  # to its end: rg writes it in pieces
    stopped = True  # until rg's output has been read to its end
    try:
        async with asyncio.timeout(RG_TIMEOUT_S):
            stopped = not await _read_rg(proc.stdout, action.mode, scope, collector, post)
    except TimeoutError:
        collector.truncated = True
    finally:
        if stopped:
            # (only then: Popen.send_signal polls first, and a poll that reaps an exited rg
            # leaves asyncio's child watcher without its exit code)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        rc = await proc.wait()
        stderr = (await errors)[:64 * 1024].decode("utf-8", errors="replace").strip()
    _check_sandbox(rc, stderr)
    if not stopped and rc == 2 and not collector.files:
        message = stderr.splitlines()[-1] if stderr else f"rg failed (exit code {rc})"
        if "regex" in stderr or "error parsing" in stderr or "glob" in stderr:
            raise ActionRefused("bad_request", f"bad pattern: {stderr[:2000]}")
        raise ActionRefused("io_error", message[:2000])
    return collector.result("rg", action.mode, scope.workdir)


async def _read_rg(out: asyncio.StreamReader, mode: str, scope: _Scope,
                   collector: _Collector, post: _Globs | None) -> bool:
    """Feed rg's output to ``collector`` (what ``post`` wants of it); False when a cap
    stopped it."""
    if mode != "content":
        data = await out.read()  # paths only: small
        for record in data.split(b"\n" if mode == "count" else b"\x00"):
            if not record:
                continue
            if mode == "count":
                raw_path, _, raw_count = record.rpartition(b"\x00")
                count = int(raw_count or 0)
            else:
                raw_path, count = record, 0
            path = os.fsdecode(raw_path)
            if (post is not None and not post.wants(path)) or _dropped(scope, path):
                continue
            if not collector.file(path, count):
                return False
        return True
    while line := await out.readline():
        message = _RG_DECODER.decode(line)
        if message.type not in ("match", "context"):
            continue
        found = message.data
        path = _rg_text(found.path)
        if (post is not None and not post.wants(path)) or _dropped(scope, path):
            continue
        if not collector.line(path, found.line_number or 0, _rg_text(found.lines),
                              message.type == "match"):
            return False
    return True


def _grep_python(action: Grep, scope: _Scope, limits: tuple[int, int, int, int]) -> GrepResult:
    """The fallback without ``rg``: walk, read, ``re.search`` line by line."""
    max_matches, max_bytes, before, after = limits
    flags = re.IGNORECASE if action.ignore_case else 0
    try:
        regex = re.compile(re.escape(action.pattern) if action.literal else action.pattern,
                           flags)
    except re.error as exc:
        raise ActionRefused("bad_request", f"bad pattern: {exc}") from None
    collector = _Collector(max_matches, max_bytes)
    globs = _Globs.of(action.include, action.exclude)
    hidden = action.hidden or any(map(_names_hidden, action.include))
    with Tree.open(scope.workdir, scope.boundary, shown_as=scope.shown_as) as tree:
        for rel, folder, name in _walk(tree, scope, hidden, globs):
            lines = _text_lines(folder, name, explicit=rel == scope.rel)
            if lines is None:
                continue
            hits = [i for i, text in enumerate(lines) if regex.search(text)]
            if not hits:
                continue
            if action.mode != "content":
                if not collector.file(rel, len(hits) if action.mode == "count" else 0):
                    break
                continue
            shown: set[int] = set()
            for i in hits:
                shown.update(range(max(0, i - before), min(len(lines), i + after + 1)))
            hit_set = set(hits)
            if not all(collector.line(rel, i + 1, lines[i], i in hit_set)
                       for i in sorted(shown)):
                break
    return collector.result("python", action.mode, scope.workdir)


def _text_lines(folder: int, name: str, explicit: bool) -> list[str] | None:
    """The lines of a text file; None for a binary one (a NUL byte in its first 8 KiB, as
    rg judges files it meets while walking), one too large, or one that cannot be read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=folder)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_FILE_BYTES:
            return None
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    if not explicit and b"\x00" in data[:_BINARY_SNIFF]:
        return None
    return data.decode("utf-8", errors="replace").splitlines()


# ---------------------------------------------------------------------------------------------
# glob


def _glob_pattern(action: Glob, scope: _Scope) -> str:
    pattern = action.pattern.strip()
    if not pattern or "\x00" in pattern:
        raise ActionRefused("bad_request", "pattern is empty" if not pattern
                            else "pattern contains a NUL byte")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ActionRefused("bad_request", f"pattern {pattern!r} must be relative to path, "
                                           "without '..'")
    if "/" in pattern.rstrip("/") and scope.rel != ".":
        pattern = f"{scope.rel}/{pattern}"  # anchored patterns are matched from the workdir
    return pattern


async def glob(action: Glob, policy: LocalPolicy, *, rg: object = _UNSET,
               sandbox: Sandbox | None = None, boundary: Boundary | None = None) -> GlobResult:
    """Paths matching ``action.pattern`` under ``action.path``, newest first (see the module
    docstring). ``rg``, ``sandbox``: as for :func:`grep`."""
    if action.max_results < 1:
        raise ActionRefused("bad_request", "max_results must be positive")
    scope = _scope(action.workdir, action.path, policy, boundary)
    if not scope.is_dir:
        raise ActionRefused("not_a_directory", f"{scope.rel} is not a directory")
    pattern = _glob_pattern(action, scope)
    hidden = action.hidden or _names_hidden(pattern)
    binary, box = _engine(rg, sandbox)
    if binary is None:
        def walk() -> list[str]:
            with Tree.open(scope.workdir, scope.boundary, shown_as=scope.shown_as) as tree:
                return [rel for rel, _, _ in _walk(tree, scope, hidden,
                                                   _Globs.of([pattern], []))]

        paths = await asyncio.to_thread(walk)
    else:
        filters, post = _rg_filters(scope, [pattern], [], hidden)
        args = [binary, "--files", "--null", *filters]
        if scope.rel != ".":
            args += ["--", scope.rel]
        paths = await _once_more(lambda: _glob_rg(args, scope, box))
        if post is not None:
            paths = [p for p in paths if post.wants(p)]
    return await asyncio.to_thread(_newest_first, scope, paths,
                                   min(action.max_results, MAX_RESULTS))


async def _glob_rg(args: list[str], scope: _Scope, box: Sandbox | None) -> list[str]:
    proc = await _spawn_rg(args, scope, box)
    try:
        async with asyncio.timeout(RG_TIMEOUT_S):
            out, err = await proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    _check_sandbox(proc.returncode, err.decode("utf-8", errors="replace"))
    if proc.returncode == 2 and not out:
        raise ActionRefused("bad_request", err.decode("utf-8", errors="replace")[:2000])
    return [os.fsdecode(p) for p in out.split(b"\x00") if p]


def _newest_first(scope: _Scope, paths: list[str], cap: int) -> GlobResult:
    kept = [p for p in paths if not _dropped(scope, p)]
    kept.sort(key=lambda p: (-_mtime(scope.workdir / p), p))
    return GlobResult(paths=kept[:cap], truncated=len(kept) > cap)
