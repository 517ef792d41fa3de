"""The one confined file API: every file tool reads, writes and lists through a :class:`Tree`.

A :class:`Tree` is a folder (a session's workdir) opened once: a directory handle held for the
action. Every path a tool names is resolved *from that handle*, component by component, by the
kernel (``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``) or, where ``openat2`` is
missing, by our own walk of ``O_PATH`` handles opened with ``O_NOFOLLOW`` at every step. The
last component is then looked at, and opened, relative to its folder's handle. So the check
and the use are the same open: a process that swaps a folder for a symlink between them (a
``renameat2`` exchange in a loop) cannot move the answer, where a check by path followed by an
open by path (the old ``confine.resolve_inside``) could be raced.

The rules are the sandbox's (:mod:`codey_worker.hidden` is the one list both use):

* nothing outside the root: a ``..`` above it, an absolute path elsewhere, a symlink that
  leads out of it — ``path_outside_workdir``;
* nothing hidden (``$CODEY_HOME``, ``~/.ssh`` and the rest of the hidden list), judged by the
  real path the handle has: a home-directory session's ``read_file ~/.ssh/id_ed25519``, or a
  ``grep`` through a symlink to it, is ``protected_path``;
* no write into git's files or the project's ``.codey``: any ``.git`` on the way, and the
  root's ``.codey`` but its ``attachments`` (what the user attached to a prompt, written
  there by the server) — ``protected_path``. The model's commands cannot write them in the
  sandbox, and its file tools cannot either, so a ``.git/config`` (``core.fsmonitor``, a
  filter) or an active hook is never the model's.

Symlinks that stay inside are followed, as before (a link ``docs -> src/docs`` reads fine).

Use::

    with Tree.open(workdir, boundary) as tree:
        with tree.reading("src/app.py") as (fd, shown):
            ...
        tree.write("src/app.py", data)

Raises :class:`~codey_worker.confine.ActionRefused` for what the rules refuse; the plain
``OSError`` of anything else (no such file, not a directory, permission denied) propagates,
for each tool to word.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import posixpath
import secrets
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from codey_worker.confine import ActionRefused, protected_paths, within
from codey_worker.hidden import DEFAULT_HIDDEN_PATHS, expand_all

__all__ = ["Boundary", "Spot", "Tree", "openat2_works"]

_O_PATH = getattr(os, "O_PATH", 0)
_O_DIR = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_HOPS = 40  # symlinks followed for one path, as the kernel's own limit

# openat2(2): <linux/openat2.h>
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every architecture (added after the unified table)
_AT_FDCWD = -100


@functools.cache
def _syscall() -> tuple[Any, Any] | None:
    """libc's ``syscall`` and the ``struct open_how`` type; None off Linux. (ctypes is
    imported here, on the first file action, not with the worker: it costs an idle worker
    0.3 MiB.)"""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                    ("resolve", ctypes.c_uint64)]

    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    return call, OpenHow


_EAGAIN_TRIES = 100


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    found = _syscall()
    if found is None:
        raise OSError(errno.ENOSYS, "openat2 is not available")
    import ctypes

    call, open_how = found
    how = open_how(flags | os.O_CLOEXEC, 0, resolve)
    raw = ctypes.c_char_p(os.fsencode(path))
    # A path with ".." resolved beneath a folder fails with EAGAIN when a rename or a mount
    # happened anywhere on the machine meanwhile (the kernel cannot then prove the walk stayed
    # beneath); openat2(2) says to try again. Seen on CI as a refused "src/../../x" that
    # answered EAGAIN instead of EXDEV while other tests renamed files.
    for _ in range(_EAGAIN_TRIES):
        fd = int(call(_SYS_OPENAT2, ctypes.c_int(dirfd), raw, ctypes.byref(how),
                      ctypes.c_size_t(ctypes.sizeof(how))))
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            break
    raise OSError(code, os.strerror(code), path)


@functools.cache
def openat2_works() -> bool:
    """True when ``openat2`` with ``RESOLVE_BENEATH`` works here (Linux 5.6+, and no seccomp
    filter refusing it); checked once per process."""
    try:
        os.close(_openat2(_AT_FDCWD, "/", _O_DIR, _RESOLVE_NO_MAGICLINKS))
        fd = os.open("/", _O_DIR)
        try:
            os.close(_openat2(fd, ".", _O_DIR, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS))
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def _fd_path(fd: int) -> str | None:
    """The path the kernel has for ``fd`` now (Linux: /proc; macOS: F_GETPATH), or None."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    getpath = 50  # F_GETPATH (macOS)
    if sys.platform == "darwin":
        import fcntl

        try:
            raw = fcntl.fcntl(fd, getpath, b"\0" * 1024)
        except OSError:
            return None
        return os.fsdecode(raw.split(b"\0", 1)[0])
    return None


# ---------------------------------------------------------------------------------------------
# what is hidden


@dataclass(frozen=True)
class Boundary:
    """What no file tool reads, lists into or writes, whatever the folder: real paths (the
    sandbox's hidden list and ``$CODEY_HOME``)."""

    hidden: tuple[str, ...] = ()

    @classmethod
    def of(cls, paths: Iterable[str | os.PathLike[str]]) -> Boundary:
        return cls(tuple(dict.fromkeys(os.path.realpath(os.fspath(p)) for p in paths)))

    @classmethod
    def default(cls) -> Boundary:
        """The default hidden list and the protected paths (``$CODEY_HOME``) as they are now:
        for a caller that was given no worker's boundary."""
        return cls.of([*protected_paths(), *expand_all(DEFAULT_HIDDEN_PATHS)])

    def hiding(self, real: str) -> str | None:
        """The hidden path ``real`` is at or below, if any."""
        return next((h for h in self.hidden if within(real, h)), None)


# ---------------------------------------------------------------------------------------------
# the tree


@dataclass(frozen=True)
class Spot:
    """Where a path leads: its folder's handle (``O_PATH``, owned by the :class:`Tree`), the
    name in it ("" when the path is a folder opened whole), and its real path relative to the
    root ("" for the root itself)."""

    dirfd: int
    name: str
    rel: str

    @property
    def shown(self) -> str:
        """The path as results show it: relative to the root, "." for the root."""
        return self.rel or "."


def _refuse_outside(path: str, root: str) -> ActionRefused:
    return ActionRefused("path_outside_workdir",
                         f"{path!r} leads outside the workdir {root}")


class Tree:
    """A folder opened once; every path is resolved beneath it (see the module docstring).

    Make one with :meth:`open` and close it (it is a context manager); the handles it gives
    out (:class:`Spot`) are closed with it. Not for use from two threads at once.
    """

    def __init__(self, fd: int, root: str, boundary: Boundary, *, aliases: tuple[str, ...] = (),
                 inside_hidden: bool = False, kernel: bool | None = None) -> None:
        self._fd = fd
        self.root = root
        self.boundary = boundary
        self._aliases = tuple(a for a in aliases if a and a != root)
        # a hidden path that holds the root itself is not held against it (the user's own
        # skills, in $CODEY_HOME, opened on purpose); hidden paths inside it still are
        self._hidden = tuple(h for h in boundary.hidden
                             if not (inside_hidden and within(root, h)))
        self._kernel = openat2_works() if kernel is None else kernel
        self._owned: list[int] = []

    # -- opening and closing -------------------------------------------------------------

    @classmethod
    def open(cls, root: str | os.PathLike[str], boundary: Boundary | None = None, *,
             shown_as: str | None = None, inside_hidden: bool = False,
             kernel: bool | None = None) -> Tree:
        """Open the folder ``root`` (a real path: the caller checked it against the allowed
        roots). Every component is opened without following a symlink, so a folder swapped
        for a link since the check is refused, not followed. ``shown_as``: the root as the
        server spelled it (absolute paths may use that spelling). ``kernel``: force (True) or
        avoid (False) openat2, for tests of both ways."""
        real = os.fspath(root)
        boundary = boundary if boundary is not None else Boundary.default()
        use_kernel = openat2_works() if kernel is None else kernel
        try:
            if use_kernel:
                fd = _openat2(_AT_FDCWD, real, _O_DIR,
                              _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
            else:
                fd = _open_plain(real)
        except FileNotFoundError:
            raise ActionRefused("not_found", f"workdir {real} does not exist") from None
        except NotADirectoryError:
            raise ActionRefused("not_a_directory", f"{real} is not a directory") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ActionRefused("path_outside_workdir", f"{real} changed into a symlink "
                                    "after it was checked; nothing was done") from None
            raise
        tree = cls(fd, real, boundary, aliases=(os.path.normpath(shown_as),) if shown_as else (),
                   inside_hidden=inside_hidden, kernel=use_kernel)
        hidden = tree._hiding(real)
        if hidden is not None:
            tree.close()
            raise ActionRefused("protected_path", f"{real} is hidden ({hidden} is in the "
                                "sandbox's hidden list): no tool reads or writes there")
        return tree

    def close(self) -> None:
        for fd in self._owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._owned.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _own(self, fd: int) -> int:
        self._owned.append(fd)
        return fd

    def release(self, fd: int) -> None:
        """Close a handle this tree gave out before the tree closes (long walks)."""
        with contextlib.suppress(ValueError):
            self._owned.remove(fd)
        os.close(fd)

    # -- the rules ---------------------------------------------------------------------------

    def _hiding(self, real: str) -> str | None:
        return next((h for h in self._hidden if within(real, h)), None)

    def real(self, rel: str) -> str:
        """The absolute real path of ``rel`` (relative to the root)."""
        return f"{self.root}/{rel}" if rel else self.root

    def check_hidden(self, rel: str, path: str) -> None:
        hidden = self._hiding(self.real(rel))
        if hidden is not None:
            raise ActionRefused("protected_path", f"{path!r} is hidden ({hidden} is in the "
                                "sandbox's hidden list): no tool reads or writes there")

    def hidden(self, rel: str) -> bool:
        """True when ``rel`` (a real path relative to the root) is hidden."""
        return self._hiding(self.real(rel)) is not None

    def check_write(self, rel: str, path: str) -> None:
        """Refuse (``protected_path``) a write at ``rel``: hidden, in any ``.git``, or in the
        root's ``.codey``."""
        self.check_hidden(rel, path)
        parts = rel.split("/") if rel else []
        # (.codey/attachments is where the server puts what the user attached to a prompt)
        codey = bool(parts) and parts[0] == ".codey" and parts[1:2] != ["attachments"]
        if any(p.casefold() == ".git" for p in parts) or codey:
            raise ActionRefused(
                "protected_path",
                f"{path!r} is inside {'.codey' if parts[0] == '.codey' else '.git'}, which the "
                "model may not change (git's own files and the .codey folder are changed by "
                "the worker's own operations only)")

    # -- resolving ---------------------------------------------------------------------------

    def _relative(self, path: str) -> str:
        """``path`` as text relative to the root: an absolute one must name the root (as it
        really is or as the server spelled it)."""
        if "\x00" in path:
            raise ActionRefused("bad_request", "path contains a NUL byte")
        if not path.startswith("/"):
            return path
        for prefix in (self.root, *self._aliases):
            for candidate in (path, posixpath.normpath(path)):
                if candidate == prefix:
                    return ""
                if candidate.startswith(prefix.rstrip("/") + "/"):
                    return candidate[len(prefix.rstrip("/")) + 1:]
        raise _refuse_outside(path, self.root)

    def _link_target(self, folder_rel: str, target: str, path: str) -> str:
        """Where a symlink in ``folder_rel`` pointing at ``target`` leads, relative to the
        root (the kernel refuses every absolute link beneath a root; one naming a place
        inside is followed here)."""
        if target.startswith("/"):
            for prefix in (self.root, *self._aliases):
                if target == prefix:
                    return ""
                if target.startswith(prefix.rstrip("/") + "/"):
                    return target[len(prefix.rstrip("/")) + 1:]
            raise _refuse_outside(path, self.root)
        return f"{folder_rel}/{target}" if folder_rel else target

    def _open_dir(self, rel: str, path: str) -> tuple[int, str]:
        """A handle on the folder ``rel`` (symlinks inside followed) and its real path
        relative to the root. OSError for a missing folder or a file on the way."""
        if self._kernel:
            try:
                fd = _openat2(self._fd, rel or ".", _O_DIR,
                              _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
            except OSError as exc:
                # EXDEV: out of the root, or an absolute link (the walk tells which)
                if exc.errno != errno.EXDEV:
                    raise
            else:
                now = _fd_path(fd)
                if now is not None:
                    try:
                        return fd, self._rel_of(now, path)
                    except BaseException:
                        os.close(fd)
                        raise
                os.close(fd)  # no /proc here: the walk knows where it is by itself
        return self._walk(rel, path)

    def _rel_of(self, now: str, path: str) -> str:
        if now == self.root:
            return ""
        if now.startswith(self.root + "/") or self.root == "/":
            return now[len(self.root.rstrip("/")) + 1:]
        # beneath the handle, yet not below the root's path: the root was moved meanwhile
        raise ActionRefused("path_outside_workdir", f"{path!r}: the workdir {self.root} was "
                            "moved or replaced while it was in use")

    def _walk(self, rel: str, path: str) -> tuple[int, str]:
        """:meth:`_open_dir` without openat2: one ``O_PATH`` + ``O_NOFOLLOW`` open per
        component from the root's handle, symlinks read and followed here, ``..`` taken
        back along the folders opened (never above the root)."""
        pending = [p for p in rel.split("/") if p not in ("", ".")]
        pending.reverse()  # a stack: the next component last
        stack: list[tuple[int, str]] = []  # folders opened below the root, with their names
        hops = 0

        def here() -> int:
            return stack[-1][0] if stack else self._fd

        try:
            while pending:
                name = pending.pop()
                if name == "..":
                    if not stack:
                        raise _refuse_outside(path, self.root)
                    os.close(stack.pop()[0])
                    continue
                info = os.stat(name, dir_fd=here(), follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    hops += 1
                    if hops > _MAX_HOPS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                    target = os.readlink(name, dir_fd=here())
                    if target.startswith("/"):
                        rest = self._link_target("", target, path)
                        for fd, _ in stack:
                            os.close(fd)
                        stack.clear()
                        parts = rest.split("/")
                    else:
                        parts = target.split("/")
                    pending.extend(reversed([p for p in parts if p not in ("", ".")]))
                    continue
                if not stat.S_ISDIR(info.st_mode):
                    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
                fd = os.open(name, _O_DIR | os.O_NOFOLLOW, dir_fd=here())
                opened = os.fstat(fd)
                stack.append((fd, name))
                if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                    # swapped between the look and the open: refuse rather than guess
                    raise OSError(errno.EAGAIN, "it changed while being opened", path)
            fd = os.open(".", _O_DIR, dir_fd=here())
            return fd, "/".join(name for _, name in stack)
        finally:
            for fd, _ in stack:
                os.close(fd)

    def _make_dirs(self, rel: str, path: str) -> None:
        """Create the folders of ``rel`` that are missing, each beneath the one before."""
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        for i in range(len(parts)):
            head = "/".join(parts[:i + 1])
            try:
                fd, _ = self._open_dir(head, path)
            except FileNotFoundError:
                parent_fd, parent_rel = self._open_dir("/".join(parts[:i]), path)
                try:
                    made = f"{parent_rel}/{parts[i]}" if parent_rel else parts[i]
                    # (an empty .codey on the way to .codey/attachments is the server's too;
                    # what is written in it is checked as the target)
                    if made != ".codey":
                        self.check_write(made, path)
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(parts[i], dir_fd=parent_fd)
                finally:
                    os.close(parent_fd)
                continue
            os.close(fd)

    def locate(self, path: str, *, follow: bool = True, make_parents: bool = False,
               missing_ok: bool = False) -> Spot:
        """Where ``path`` leads (see :class:`Spot`). ``follow``: a symlink as the last
        component is followed (it must lead inside too); otherwise it is the spot itself.
        ``make_parents``: missing folders on the way are created (for a write).
        ``missing_ok``: with folders on the way missing, the spot has no handle
        (``dirfd`` -1) and its ``rel`` is where it would be once they are made.

        Raises ``path_outside_workdir``, ``protected_path`` (hidden; the caller checks
        writes with :meth:`check_write`), ``bad_request``; OSError for the rest.
        """
        rel = self._relative(path)
        hops = 0
        while True:
            head, _, name = rel.rstrip("/").rpartition("/")
            if name in ("", ".", ".."):
                fd, real = self._open_dir(rel, path)
                self._own(fd)
                self.check_hidden(real, path)
                return Spot(fd, "", real)
            try:
                fd, folder = self._open_dir(head, path)
            except FileNotFoundError:
                if missing_ok and not make_parents:
                    return self._missing(head, name, path)
                if not make_parents:
                    raise
                self._make_dirs(head, path)
                fd, folder = self._open_dir(head, path)
            self._own(fd)
            if follow:
                try:
                    info: os.stat_result | None = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    info = None
                if info is not None and stat.S_ISLNK(info.st_mode):
                    hops += 1
                    if hops > _MAX_HOPS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                    rel = self._link_target(folder, os.readlink(name, dir_fd=fd), path)
                    self.release(fd)
                    continue
                if info is not None and stat.S_ISDIR(info.st_mode):
                    # a folder: opened whole, so ``..`` and links inside it are settled
                    self.release(fd)
                    inner = f"{folder}/{name}" if folder else name
                    dfd, real = self._open_dir(inner, path)
                    self._own(dfd)
                    self.check_hidden(real, path)
                    return Spot(dfd, "", real)
            spot = Spot(fd, name, f"{folder}/{name}" if folder else name)
            self.check_hidden(spot.rel, path)
            return spot

    def _missing(self, head: str, name: str, path: str) -> Spot:
        """The spot of ``head/name`` where folders of ``head`` do not exist yet: the real
        path of the deepest one that does, then the rest as written."""
        parts = [p for p in head.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        for i in range(len(parts) - 1, -1, -1):
            try:
                fd, real = self._open_dir("/".join(parts[:i]), path)
            except FileNotFoundError:
                continue
            os.close(fd)
            rel = "/".join(p for p in (real, *parts[i:], name) if p)
            self.check_hidden(rel, path)
            return Spot(-1, name, rel)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)

    # -- using -------------------------------------------------------------------------------

    def open_file(self, spot: Spot, flags: int = os.O_RDONLY) -> int:
        """Open the file at ``spot`` (not a folder) without following a symlink: one that
        appeared there since :meth:`locate` is refused (ELOOP), not followed. The caller
        closes the fd."""
        if not spot.name:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), spot.shown)
        if spot.dirfd < 0:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), spot.shown)
        return os.open(spot.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY,
                       dir_fd=spot.dirfd)

    @contextlib.contextmanager
    def reading(self, path: str) -> Iterator[tuple[int, Spot]]:
        """An fd open for reading on the file ``path`` leads to (regular file or not: the
        caller looks), and its spot. FIFOs do not block (``O_NONBLOCK``)."""
        spot = self.locate(path)
        fd = self.open_file(spot, os.O_RDONLY | os.O_NONBLOCK)
        try:
            yield fd, spot
        finally:
            os.close(fd)

    def open_listing(self, spot: Spot) -> int:
        """An fd for ``os.scandir`` of the folder at ``spot``; the caller closes it."""
        if spot.name:
            return os.open(spot.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                           | os.O_CLOEXEC, dir_fd=spot.dirfd)
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=spot.dirfd)

    def lstat(self, spot: Spot) -> os.stat_result:
        if spot.dirfd < 0:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), spot.shown)
        if not spot.name:
            return os.stat(spot.dirfd)
        return os.stat(spot.name, dir_fd=spot.dirfd, follow_symlinks=False)

    def write(self, path: str, data: bytes, *, mode: int | None = None,
              keep_mode: bool = True, make_parents: bool = True) -> tuple[Spot, bool]:
        """Replace the file ``path`` leads to with ``data``, atomically: a temp file in the
        same folder (created through the folder's handle), fsynced, renamed over it, the
        folder fsynced. A symlink at the end that stays inside is written through (its
        target is replaced). The file keeps its permission bits (``keep_mode``), else gets
        ``mode`` or 0o666 less the umask. Returns the spot and whether the file is new."""
        spot = self.locate(path, make_parents=make_parents)
        self.check_write(spot.rel, path)
        if not spot.name:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), spot.shown)
        try:
            info: os.stat_result | None = os.stat(spot.name, dir_fd=spot.dirfd,
                                                  follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), spot.shown)
        if keep_mode and info is not None:
            mode = stat.S_IMODE(info.st_mode)
        tmp = f".{spot.name}.{secrets.token_hex(6)}.codey-tmp"
        # 0o666 through O_CREAT lets the kernel apply the umask, as for any new file
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666, dir_fd=spot.dirfd)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if mode is not None:
                    os.fchmod(handle.fileno(), mode & 0o7777)
                os.fsync(handle.fileno())
            os.rename(tmp, spot.name, src_dir_fd=spot.dirfd, dst_dir_fd=spot.dirfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=spot.dirfd)
            raise
        _fsync_dir(spot.dirfd)
        return spot, info is None

    def unlink(self, path: str) -> Spot:
        """Delete the file ``path`` names (a symlink at the end: the link itself)."""
        spot = self.locate(path, follow=False)
        self.check_write(spot.rel, path)
        if not spot.name:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), spot.shown)
        os.unlink(spot.name, dir_fd=spot.dirfd)
        return spot

    def rmdir(self, path: str) -> None:
        """Remove the empty folder ``path`` names (undoing a folder made for a write)."""
        rel = self._relative(path)
        head, _, name = rel.rstrip("/").rpartition("/")
        fd, folder = self._open_dir(head, path)
        try:
            self.check_write(f"{folder}/{name}" if folder else name, path)
            os.rmdir(name, dir_fd=fd)
        finally:
            os.close(fd)

    def missing_dirs(self, path: str) -> list[str]:
        """The folders on the way to ``path`` that do not exist yet, outermost first (the
        ones a write with ``make_parents`` would create)."""
        rel = self._relative(path)
        parts = [p for p in rel.rstrip("/").split("/")[:-1] if p not in ("", ".")]
        missing: list[str] = []
        for i in range(len(parts)):
            head = "/".join(parts[:i + 1])
            try:
                fd, _ = self._open_dir(head, path)
            except FileNotFoundError:
                missing.append(head)
                continue
            except OSError:
                break
            os.close(fd)
        return missing


def _open_plain(real: str) -> int:
    """Open the absolute ``real`` folder one component at a time from ``/``, following no
    symlink (the walk's way of ``RESOLVE_NO_SYMLINKS``)."""
    fd = os.open("/", _O_DIR)
    try:
        for part in [p for p in real.split("/") if p]:
            if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), real)
            nxt = os.open(part, _O_DIR | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fsync_dir(fd: int) -> None:
    """Make a rename durable (best effort: not every filesystem allows it)."""
    try:
        dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)

