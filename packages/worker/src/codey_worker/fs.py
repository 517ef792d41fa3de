"""File executors: ``read_file``, ``write_file``, ``list_dir``.

Every path goes through the one confined file API (:class:`codey_worker.files.Tree`): the
workdir is opened once and each path resolved beneath that handle, so nothing outside it, and
nothing hidden (the sandbox's hidden list, ``$CODEY_HOME``), is read, written or listed,
whatever ``..``, symlinks or a folder swapped meanwhile it names; nothing in ``.git`` or the
workdir's ``.codey`` is written. Paths in results are relative to the real workdir, "/"
separated (``"."`` for the workdir itself).

The workdir itself is checked against the worker's :class:`LocalPolicy` (allowed roots) and
must exist — the server names it, so it is not trusted any more than the path.

These functions are synchronous (plain file I/O, bounded by the caps below); the connection
layer may run them in a thread. Refusals raise :class:`~codey_worker.confine.ActionRefused`
with code ``bad_request``, ``outside_allowed_roots``, ``path_outside_workdir``,
``protected_path``, ``not_found``, ``is_directory``, ``not_a_directory`` or
``not_a_regular_file``; other OS errors (permission denied, disk full) raise
``ActionRefused`` with code ``io_error``.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import io
import os
import stat
from collections import deque
from collections.abc import Iterator
from typing import BinaryIO

from codey_protocol.worker import (
    DirEntry,
    DirListing,
    FileContent,
    ListDir,
    ReadFile,
    WriteFile,
    WriteResult,
)
from codey_worker.confine import ActionRefused, readable_root
from codey_worker.files import Boundary, Spot, Tree
from codey_worker.policy import LocalPolicy

__all__ = [
    "BINARY_SNIFF", "MAX_ENTRIES", "MAX_READ_BYTES",
    "list_dir", "read_file", "read_small_file", "write_file",
]  # fmt: skip

MAX_READ_BYTES = 2 * 1024 * 1024  # content returned by read_file, at most
BINARY_SNIFF = 8 * 1024  # a NUL byte in these first bytes makes a file binary
MAX_ENTRIES = 2000  # entries returned by list_dir, at most
MAX_DEPTH = 32
SKIPPED_NAMES = frozenset({".git"})
_LINE_PIECE = 64 * 1024
WHOLE_READ_BYTES = 256 * 1024  # files up to this size are read with one read(2)


@contextlib.contextmanager
def _io_errors(what: str) -> Iterator[None]:
    """Turn OS errors into refusals the model can read."""
    try:
        yield
    except FileNotFoundError as exc:
        raise ActionRefused("not_found", f"{what}: no such file or directory") from exc
    except IsADirectoryError as exc:
        raise ActionRefused("is_directory", f"{what} is a directory") from exc
    except NotADirectoryError as exc:
        raise ActionRefused("not_a_directory", f"{what}: a parent is not a directory") from exc
    except OSError as exc:
        raise ActionRefused("io_error", f"{what}: {exc.strerror or exc}") from exc


def _tree(workdir: str, policy: LocalPolicy, boundary: Boundary | None) -> Tree:
    """The workdir, inside the policy's allowed roots and existing, opened."""
    real = policy.check_workdir(workdir)
    if not real.is_dir():
        raise ActionRefused("not_found", f"workdir {real} does not exist (attach the session)")
    return Tree.open(real, boundary, shown_as=workdir)


def read_file(
    action: ReadFile, policy: LocalPolicy, max_bytes: int = MAX_READ_BYTES,
    boundary: Boundary | None = None,
) -> FileContent:
    """Lines ``[offset, offset + limit)`` of a file (``limit=None``: to the end).

    ``total_lines`` counts every line of the file (a last line without a newline counts).
    A NUL byte in the first 8 KiB makes the file binary: ``binary=True``, empty content.
    At most ``max_bytes`` bytes of content are returned; ``truncated=True`` when the selected
    lines were longer. Content is decoded as UTF-8 with invalid bytes replaced.
    """
    content = _read_file(action, policy, max_bytes, None, boundary)
    assert content is not None  # no size limit: always read
    return content


def read_small_file(action: ReadFile, policy: LocalPolicy, size_limit: int,
                    boundary: Boundary | None = None) -> FileContent | None:
    """:func:`read_file`, or None when the file is larger than ``size_limit`` bytes.

    For reading on the event loop: a small file is answered at once, a larger one is left for
    a thread. Refusals are raised as by :func:`read_file`, whatever the size.
    """
    return _read_file(action, policy, MAX_READ_BYTES, size_limit, boundary)


def _read_file(action: ReadFile, policy: LocalPolicy, max_bytes: int,
               size_limit: int | None, boundary: Boundary | None) -> FileContent | None:
    if action.offset < 0 or (action.limit is not None and action.limit < 0):
        raise ActionRefused("bad_request", "offset and limit must not be negative")
    with _tree(action.workdir, policy, boundary) as tree:
        try:
            with _io_errors(action.path):
                spot = tree.locate(action.path)
            return _read_spot(tree, spot, spot.shown, action, max_bytes, size_limit)
        except ActionRefused as exc:
            # the user's own skills live in the worker's home, outside every workdir
            refused = exc
            root = readable_root(action.path)
            if root is None or refused.code not in ("path_outside_workdir", "protected_path"):
                raise
    with Tree.open(root, boundary, inside_hidden=True) as skills:
        try:
            with _io_errors(action.path):
                spot = skills.locate(action.path)
        except ActionRefused:
            raise refused from None  # (a link out of the skills: the workdir's answer)
        return _read_spot(skills, spot, skills.real(spot.rel), action, max_bytes, size_limit)


def _read_spot(tree: Tree, spot: Spot, shown: str, action: ReadFile, max_bytes: int,
               size_limit: int | None) -> FileContent | None:
    with _io_errors(shown):
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
        # Opened by name in the folder's handle without following a symlink: if the name
        # has become a link since it was resolved, that is refused rather than followed.
        if not spot.name:
            raise ActionRefused("is_directory", f"{shown} is a directory; use list_dir")
        fd = tree.open_file(spot, os.O_RDONLY | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ActionRefused("is_directory", f"{shown} is a directory; use list_dir")
            if not stat.S_ISREG(info.st_mode):
                raise ActionRefused("not_a_regular_file",
                                    f"{shown} is not a regular file (a FIFO, socket or device)")
            size = info.st_size
            if size_limit is not None and size > size_limit:
                return None
            # a small file in one read(2), then worked on in memory; a bigger one (or one
            # that grew meanwhile) in pieces, so a huge line never sits in memory whole
            whole = _read_upto(fd, size + 1) if size <= WHOLE_READ_BYTES else None
            if whole is not None and len(whole) > size and size_limit is not None:
                return None  # it is growing: not something to read to its end on the loop
            if whole is not None and len(whole) <= size:
                if b"\x00" in whole[:BINARY_SNIFF]:
                    return FileContent(path=shown, binary=True, size=size)
                content, total_lines, truncated = _select_lines(io.BytesIO(whole), action,
                                                                max_bytes)
            else:
                os.lseek(fd, 0, os.SEEK_SET)
                with open(fd, "rb", closefd=False) as f:
                    if b"\x00" in f.read(BINARY_SNIFF):
                        return FileContent(path=shown, binary=True, size=size)
                    f.seek(0)
                    content, total_lines, truncated = _select_lines(f, action, max_bytes)
        finally:
            os.close(fd)
    # A cut through a multibyte character: the incremental decoder drops the broken end.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return FileContent(
        path=shown,
        content=decoder.decode(content, final=not truncated),
        size=size,
        total_lines=total_lines,
        truncated=truncated,
        offset=action.offset,
    )


def _read_upto(fd: int, n: int) -> bytes:
    """Up to ``n`` bytes from ``fd``, fewer only at the end of the file (a read(2) may return
    less than asked, e.g. on network filesystems)."""
    data = os.read(fd, n)
    while 0 < len(data) < n:
        more = os.read(fd, n - len(data))
        if not more:
            break
        data += more
    return data


def _select_lines(f: BinaryIO, action: ReadFile, max_bytes: int) -> tuple[bytes, int, bool]:
    """Read the wanted lines in pieces, so one huge line never sits in memory whole."""
    first = action.offset
    end = None if action.limit is None else first + action.limit
    kept = bytearray()
    truncated = False
    line_no = 0
    at_line_start = True
    while True:
        piece = f.readline(_LINE_PIECE)
        if not piece:
            break
        if at_line_start:
            line_no += 1
        wanted = line_no - 1 >= first and (end is None or line_no - 1 < end)
        if wanted and not truncated:
            room = max_bytes - len(kept)
            if len(piece) > room:
                kept += piece[:room]
                truncated = True
            else:
                kept += piece
        at_line_start = piece.endswith(b"\n")
    return bytes(kept), line_no, truncated


def write_file(action: WriteFile, policy: LocalPolicy,
               boundary: Boundary | None = None) -> WriteResult:
    """Write ``content`` (UTF-8) to ``path`` atomically: a temp file in the same directory,
    fsynced, then renamed over it — a reader sees the old file or the new one, never half.

    Missing parent directories are created when ``create_dirs`` (the default), else
    ``not_found``. An existing file keeps its permission bits; a symlink inside the workdir is
    written through (its real target, also inside, is replaced). ``created`` tells whether the
    file is new. Nothing in ``.git`` or the workdir's ``.codey`` is written (``protected_path``).
    """
    if action.encoding == "base64":
        try:
            data = base64.b64decode(action.content, validate=True)
        except ValueError:
            raise ActionRefused("bad_request", "content is not valid base64") from None
    else:
        data = action.content.encode("utf-8")
    with _tree(action.workdir, policy, boundary) as tree, _io_errors(action.path):
        try:
            spot, created = tree.write(action.path, data, make_parents=action.create_dirs)
        except FileNotFoundError:
            raise ActionRefused("not_found",
                                f"the directory of {action.path} does not exist") from None
    return WriteResult(path=spot.shown, bytes_written=len(data), created=created)


def list_dir(action: ListDir, policy: LocalPolicy, max_entries: int = MAX_ENTRIES,
             boundary: Boundary | None = None) -> DirListing:
    """Entries under ``path`` down to ``depth`` levels (1 = direct children), sorted by path.

    ``.git`` is skipped; symlinks are listed as ``"symlink"`` and never followed; a hidden
    folder is listed but not entered. Levels are read breadth-first, so when there are more
    than ``max_entries`` entries (``truncated=True``) the ones kept are the shallowest.
    ``size`` is the byte size of files (0 for the rest).
    """
    if action.depth < 1:
        raise ActionRefused("bad_request", f"depth must be >= 1, got {action.depth}")
    depth = min(action.depth, MAX_DEPTH)
    entries: list[DirEntry] = []
    truncated = False
    with _tree(action.workdir, policy, boundary) as tree, _io_errors(action.path):
        spot = tree.locate(action.path)
        if spot.name:
            tree.lstat(spot)  # missing: not_found
            raise ActionRefused("not_a_directory",
                                f"{spot.shown} is not a directory; use read_file")
        shown = spot.shown
        # (real path relative to the workdir, as shown in results, level)
        queue: deque[tuple[str, str, int]] = deque([(spot.rel, "", 1)])
        while queue and not truncated:
            rel, prefix, level = queue.popleft()
            try:
                # each folder opened beneath the workdir's handle: one swapped for a link
                # since it was listed is followed only where it stays inside
                fd = tree.open_listing(spot) if rel == spot.rel else _open_below(tree, rel)
            except (OSError, ActionRefused):
                continue  # unreadable, gone or now leading out: list what we can
            try:
                with os.scandir(fd) as it:
                    children = sorted(it, key=lambda e: e.name)
                for child in children:
                    if child.name in SKIPPED_NAMES:
                        continue
                    if len(entries) >= max_entries:
                        truncated = True
                        break
                    shown_path = f"{prefix}{child.name}"
                    entry = _entry(child, shown_path)
                    entries.append(entry)
                    child_rel = f"{rel}/{child.name}" if rel else child.name
                    # a hidden folder (the worker's own, ~/.ssh) is named but never entered
                    if entry.kind == "dir" and level < depth and not tree.hidden(child_rel):
                        queue.append((child_rel, shown_path + "/", level + 1))
            finally:
                os.close(fd)
    entries.sort(key=lambda e: e.path.split("/"))
    return DirListing(path=shown, entries=entries, truncated=truncated)


def _open_below(tree: Tree, rel: str) -> int:
    spot = tree.locate(rel)
    if spot.name:
        raise NotADirectoryError(rel)
    fd = tree.open_listing(spot)
    tree.release(spot.dirfd)
    return fd


def _entry(child: os.DirEntry[str], rel: str) -> DirEntry:
    try:
        if child.is_symlink():
            return DirEntry(path=rel, kind="symlink")
        if child.is_dir(follow_symlinks=False):
            return DirEntry(path=rel, kind="dir")
        if child.is_file(follow_symlinks=False):
            return DirEntry(path=rel, kind="file", size=child.stat(follow_symlinks=False).st_size)
    except OSError:
        pass
    return DirEntry(path=rel, kind="other")
