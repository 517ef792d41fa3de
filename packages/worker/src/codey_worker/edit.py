"""``edit``: replace an exact string in a file of the workdir (Claude Code's Edit).

The file must exist, be a regular file of at most :data:`MAX_EDIT_BYTES`, and lie inside the
workdir, reached through the one confined file API (:class:`codey_worker.files.Tree`: no
``..`` or symlink out, nothing hidden, never ``$CODEY_HOME``). Anything in a ``.git`` and the
workdir's ``.codey`` is refused as well (``protected_path``): the model's commands cannot
write them in the sandbox, and its edits cannot either.

``old_string`` must occur exactly once, or any number of times with ``replace_all``. The model
reads files with "\\n" line endings; in a file written with "\\r\\n" a string that is not found
as given is looked for (and replaced) with its newlines as the file spells them. The result
is written atomically (a temp file beside it, fsynced, renamed over it), keeping the file's
permission bits, and answered with a unified diff.

Refusals raise :class:`~codey_worker.confine.ActionRefused`; the codes the model can act on:

* ``edit_no_match`` — ``old_string`` is not in the file (the message says where a match
  ignoring leading and trailing whitespace would be, if there is one);
* ``edit_not_unique`` — it occurs N times (the lines are named): give more context, or set
  ``replace_all``;
* ``bad_request`` — an empty ``old_string``, or ``new_string`` equal to it;
* ``not_found``, ``is_directory``, ``not_a_regular_file``, ``too_large``, ``io_error``,
  ``path_outside_workdir``, ``protected_path``, ``outside_allowed_roots``.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import os
import stat
from collections.abc import Iterator

from codey_protocol.worker import Edit, EditResult
from codey_worker.confine import ActionRefused
from codey_worker.files import Boundary, Spot, Tree
from codey_worker.patch import LineEdit, _file_diff
from codey_worker.policy import LocalPolicy

__all__ = ["MAX_EDIT_BYTES", "edit_file"]

MAX_EDIT_BYTES = 16 * 1024 * 1024
_LINES_NAMED = 10  # lines listed in an edit_not_unique message, at most


def edit_file(action: Edit, policy: LocalPolicy, boundary: Boundary | None = None) -> EditResult:
    """Carry out ``action`` (see the module docstring); synchronous, for a thread."""
    if not action.old_string:
        raise ActionRefused("bad_request", "old_string is empty: name the text to replace "
                                           "(write_file creates a file)")
    if action.old_string == action.new_string:
        raise ActionRefused("bad_request", "old_string and new_string are the same: "
                                           "nothing to change")
    workdir = policy.check_workdir(action.workdir)
    if not workdir.is_dir():
        raise ActionRefused("not_found", f"workdir {workdir} does not exist (attach the session)")
    with Tree.open(workdir, boundary, shown_as=action.workdir) as tree:
        return _edit(tree, action)


def _edit(tree: Tree, action: Edit) -> EditResult:
    try:
        spot = tree.locate(action.path)
    except (FileNotFoundError, NotADirectoryError):
        raise ActionRefused("not_found", f"{action.path}: no such file (edit changes an "
                                         "existing file; write_file creates one)") from None
    except OSError as exc:
        raise ActionRefused("io_error", f"cannot read {action.path}: "
                                        f"{exc.strerror or exc}") from None
    shown = spot.shown
    if not spot.name:
        raise ActionRefused("is_directory", f"{shown} is a directory"
                            if spot.rel else "the workdir itself is a directory")
    tree.check_write(spot.rel, action.path)
    data, mode = _read(tree, spot, shown)
    text = data.decode("utf-8", errors="surrogateescape")
    old, new = action.old_string, action.new_string
    starts = _occurrences(text, old)
    if not starts and "\r\n" in text and "\n" in old and "\r\n" not in old:
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        starts = _occurrences(text, old)
    if not starts:
        raise ActionRefused("edit_no_match", _no_match_message(shown, text, action.old_string))
    if len(starts) > 1 and not action.replace_all:
        lines = [text.count("\n", 0, s) + 1 for s in starts]
        named = ", ".join(map(str, lines[:_LINES_NAMED])) + (
            ", …" if len(lines) > _LINES_NAMED else "")
        raise ActionRefused(
            "edit_not_unique",
            f"old_string occurs {len(starts)} times in {shown} (lines {named}): include more "
            "of the surrounding lines to pick one, or set replace_all to change every one")
    updated = text.replace(old, new)
    out = updated.encode("utf-8", errors="surrogateescape")
    with _io_errors(shown):
        tree.write(spot.rel, out, mode=stat.S_IMODE(mode), keep_mode=False, make_parents=False)
    diff, added, removed = _diff(shown, text, updated, starts, old, new)
    return EditResult(path=shown, replacements=len(starts), diff=diff, added=added,
                      removed=removed)


@contextlib.contextmanager
def _io_errors(shown: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise ActionRefused("io_error", f"cannot write {shown}: {exc.strerror or exc}") from exc


def _read(tree: Tree, spot: Spot, shown: str) -> tuple[bytes, int]:
    """The bytes and mode of the regular file at ``spot`` (opened in its folder's handle
    without following a symlink; O_NONBLOCK: a FIFO is refused, never waited on)."""
    try:
        fd = tree.open_file(spot, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        raise ActionRefused("not_found", f"{shown}: no such file (edit changes an existing "
                                         "file; write_file creates one)") from None
    except IsADirectoryError:
        raise ActionRefused("is_directory", f"{shown} is a directory") from None
    except OSError as exc:
        raise ActionRefused("io_error", f"cannot read {shown}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ActionRefused("is_directory", f"{shown} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ActionRefused("not_a_regular_file",
                                f"{shown} is not a regular file (a FIFO, socket or device)")
        if info.st_size > MAX_EDIT_BYTES:
            raise ActionRefused("too_large", f"{shown} is {info.st_size} bytes; edit changes "
                                             f"files of up to {MAX_EDIT_BYTES >> 20} MiB")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1024 * 1024):
            total += len(chunk)
            if total > MAX_EDIT_BYTES:
                raise ActionRefused("too_large", f"{shown} is over {MAX_EDIT_BYTES >> 20} MiB")
            chunks.append(chunk)
    except OSError as exc:
        raise ActionRefused("io_error", f"cannot read {shown}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks), info.st_mode


def _occurrences(text: str, old: str) -> list[int]:
    """Where ``old`` starts in ``text``, left to right without overlaps (as str.replace)."""
    found, at = [], text.find(old)
    while at >= 0:
        found.append(at)
        at = text.find(old, at + len(old))
    return found


def _no_match_message(shown: str, text: str, old: str) -> str:
    message = (f"old_string was not found in {shown}: it must match the file exactly, "
               "whitespace and indentation included (read the file again to copy it)")
    first = next((line.strip() for line in old.splitlines() if line.strip()), "")
    if first:
        for number, line in enumerate(text.splitlines(), 1):
            if first in line:
                return message + (f"; its first line, without leading and trailing "
                                  f"whitespace, is on line {number}")
    return message


def _diff(shown: str, old_text: str, new_text: str, starts: list[int], old: str,
          new: str) -> tuple[str, int, int]:
    """The unified diff of the edit, and the lines added and removed: built from where the
    replacements were (no diff search over the whole file)."""
    old_name, new_name = f"a/{shown}", f"b/{shown}"
    if old_text.endswith("\n") != new_text.endswith("\n") or not old_text:
        lines = difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), old_name,
                                     new_name, lineterm="")
        body = [line + "\n" for line in lines]
        added = sum(1 for x in body if x.startswith("+") and not x.startswith("+++"))
        removed = sum(1 for x in body if x.startswith("-") and not x.startswith("---"))
        return "".join(body), added, removed
    pieces = old_text.split("\n")
    if old_text.endswith("\n"):
        pieces.pop()
    line_starts, offset = [], 0
    for piece in pieces:
        line_starts.append(offset)
        offset += len(piece) + 1
    n = len(pieces)
    spans: list[list[int]] = []  # [first line, end line) of the old text each edit covers
    for start in starts:
        first = bisect.bisect_right(line_starts, start) - 1
        last = bisect.bisect_right(line_starts, start + len(old) - 1) - 1
        end = last + 1
        if old.endswith("\n") and not new.endswith("\n") and end < n:
            end += 1  # the line after is joined to the replacement
        if spans and first < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([first, end])
    edits, added, removed = [], 0, 0
    for first, end in spans:
        lo = line_starts[first]
        hi = line_starts[end] if end < n else len(old_text)
        segment = old_text[lo:hi].replace(old, new)
        before = old_text[lo:hi].split("\n")
        after = segment.split("\n")
        if old_text[lo:hi].endswith("\n"):
            before.pop()
            if after and after[-1] == "":
                after.pop()
        # a line the replacement left as it was is context, not a change
        while before and after and before[0] == after[0]:
            before, after, first = before[1:], after[1:], first + 1
        while before and after and before[-1] == after[-1]:
            before, after = before[:-1], after[:-1]
        if not before and not after:
            continue
        edits.append(LineEdit(first, tuple(before), tuple(after)))
        added += len(after)
        removed += len(before)
    return _file_diff(old_name, new_name, pieces, edits, old_text.endswith("\n")), added, removed
