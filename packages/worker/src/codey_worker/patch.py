"""The patch engine: the Codex ``apply_patch`` format, parsed, matched and applied.

The format (openai/codex)::

    *** Begin Patch
    *** Add File: path          followed by lines each starting with "+"
    *** Delete File: path
    *** Update File: path
    *** Move to: newpath        optional, right after Update File
    @@ optional context header  find this line first, then the chunk after it
     context line / -removed line / +added line
    *** End of File             optional: the chunk must match at the end of the file
    *** End Patch

Order of calls, from pure to I/O:

1. :func:`parse_patch` turns text into :data:`FileOp` values (pure; bad syntax raises
   :class:`PatchError` naming the line number).
2. :func:`compute_changes` turns operations into :class:`Change` values — the full new contents
   of every touched file — given a ``read(path) -> str | None`` callable (pure; a chunk that does
   not match raises :class:`PatchError` naming the file and the lines).
3. :func:`apply_patch` does both, then writes. Nothing is written unless every change was
   computed; a failed write is rolled back as far as the file system allows.

Matching of a chunk's old lines falls back in order: exact, ignoring trailing whitespace,
ignoring surrounding whitespace, then with Unicode punctuation folded to ASCII. Chunks of one
file apply in order, each searching from after the previous one, so repeated blocks are told
apart by position. Context lines keep the file's own text (the fuzz never rewrites them); the
file's newline style, a UTF-8 BOM, and whether it ended with a newline are preserved.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from codey_worker.confine import ActionRefused
from codey_worker.errors import WorkerError
from codey_worker.files import Boundary, Spot, Tree

Op = Literal["add", "delete", "update", "move"]
LineKind = Literal[" ", "-", "+"]

BEGIN = "*** Begin Patch"
END = "*** End Patch"
_ADD = "*** Add File:"
_DELETE = "*** Delete File:"
_UPDATE = "*** Update File:"
_MOVE = "*** Move to:"
_EOF = "*** End of File"

_MAX_SHOWN_LINES = 20  # lines of a failed chunk quoted in an error message
#: the largest file a patch will read (to update, delete, move or keep for an undo)
MAX_PATCH_FILE_BYTES = 16 * 1024 * 1024


class PatchError(WorkerError):
    """A patch that cannot be parsed, matched or written.

    ``path`` is the patch path concerned (``None`` for syntax errors outside a file section);
    ``line`` is the 1-based line of the patch text for syntax errors, else ``None``.
    ``message`` (also ``str(err)``) names the file and, for a chunk that did not match, the
    lines that were looked for.
    """

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line


# ---------------------------------------------------------------------------------------------
# parsed operations


@dataclass(frozen=True)
class Chunk:
    """One ``@@`` chunk: an optional header line, its lines in order, and the EOF anchor."""

    lines: tuple[tuple[LineKind, str], ...]
    header: str | None = None
    at_eof: bool = False

    @property
    def old_lines(self) -> list[str]:
        """The lines the chunk expects to find (context and removed)."""
        return [text for kind, text in self.lines if kind != "+"]

    @property
    def new_lines(self) -> list[str]:
        """The lines the chunk leaves behind (context and added)."""
        return [text for kind, text in self.lines if kind != "-"]


@dataclass(frozen=True)
class AddFile:
    path: str
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeleteFile:
    path: str


@dataclass(frozen=True)
class UpdateFile:
    path: str
    chunks: tuple[Chunk, ...] = ()
    move_to: str | None = None


FileOp = AddFile | DeleteFile | UpdateFile


@dataclass(frozen=True)
class Change:
    """The computed effect of one operation: old and new full contents, no I/O yet.

    ``old_content`` is ``None`` for an added file; ``new_content`` is ``None`` for a deleted
    one. For ``op == "move"`` the new content goes to ``moved_to`` and ``path`` disappears.
    """

    path: str
    op: Op
    old_content: str | None
    new_content: str | None
    moved_to: str | None = None
    added: int = 0
    removed: int = 0
    diff: str = ""  # this file's unified diff


@dataclass(frozen=True)
class FileResult:
    path: str
    op: Op
    moved_to: str | None
    added: int
    removed: int


@dataclass(frozen=True)
class PatchOutcome:
    files: list[FileResult]
    diff: str  # unified diff of all changes, a/ and b/ paths, "\n" line endings


# ---------------------------------------------------------------------------------------------
# parsing


_KNOWN_MARKERS = {
    BEGIN: "begin",
    END: "end",
    _EOF: "eof",
}
_PATH_MARKERS = {_ADD: "add", _DELETE: "delete", _UPDATE: "update", _MOVE: "move"}
_SECTION_ENDS = {"begin", "end", "add", "delete", "update"}
# "@@ -12,5 +12,6 @@ text": unified-diff hunk headers models sometimes write; numbers ignored.
_UNIFIED_HEADER = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@ ?")
_HEREDOC_OPEN = re.compile(r"^(?:apply_patch\s+)?<<\s*(['\"]?)(\w+)\1$")


def _marker(line: str) -> tuple[str, str] | None:
    """The marker a line holds, as ``(kind, argument)``; ``None`` for a content line.

    Surrounding whitespace is forgiven, so a context line whose text happens to be exactly a
    marker cannot be written — the same trade-off Codex makes.
    """
    text = line.strip()
    if not text.startswith("***"):
        return None
    kind = _KNOWN_MARKERS.get(text)
    if kind is not None:
        return kind, ""
    for prefix, kind in _PATH_MARKERS.items():
        if text.startswith(prefix):
            return kind, text[len(prefix) :].strip()
    return None


def _strip_heredoc(lines: list[str], first: int, last: int) -> tuple[int, int]:
    """Skip a shell heredoc wrapper (``<<'EOF'`` ... ``EOF``) around the patch, if any."""
    opening = _HEREDOC_OPEN.match(lines[first].strip())
    if opening and last > first and lines[last].strip() == opening.group(2):
        inner = [i for i in range(first + 1, last) if lines[i].strip()]
        if inner:
            return inner[0], inner[-1]
    return first, last


def parse_patch(text: str) -> list[FileOp]:
    """Parse a patch into file operations, in patch order.

    Lenient about CRLF, a missing final newline, blank lines around sections, whitespace around
    ``***`` markers and a shell heredoc wrapper. Raises :class:`PatchError` (with ``line`` set)
    for an empty patch, a missing ``*** Begin Patch``/``*** End Patch``, an unknown line, a
    line with a bad prefix, or a file section without content.
    """
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    filled = [i for i, ln in enumerate(lines) if ln.strip()]
    if not filled:
        raise PatchError(
            "line 1: empty patch: expected '*** Begin Patch' ... '*** End Patch'", line=1
        )
    first, last = _strip_heredoc(lines, filled[0], filled[-1])
    if lines[first].strip() != BEGIN:
        raise PatchError(
            f"line {first + 1}: a patch must start with '{BEGIN}', got {lines[first]!r}",
            line=first + 1,
        )
    if last == first or lines[last].strip() != END:
        raise PatchError(
            f"line {last + 1}: a patch must end with '{END}', got {lines[last]!r}",
            line=last + 1,
        )
    numbered = [(i + 1, lines[i]) for i in range(first + 1, last)]
    ops = _Parser(numbered).parse()
    if not ops:
        raise PatchError(
            f"line {last + 1}: empty patch: no file operations between the markers",
            line=last + 1,
        )
    return ops


@dataclass
class _ChunkBuilder:
    header: str | None
    start: int  # patch line number of the "@@" (or first line) — for messages
    lines: list[tuple[LineKind, str]] = field(default_factory=list)


class _Parser:
    def __init__(self, numbered: list[tuple[int, str]]) -> None:
        self._lines = numbered
        self._pos = 0

    def parse(self) -> list[FileOp]:
        ops: list[FileOp] = []
        while self._pos < len(self._lines):
            number, line = self._lines[self._pos]
            self._pos += 1
            if not line.strip():
                continue
            marker = _marker(line)
            if marker is None or marker[0] not in ("add", "delete", "update"):
                raise PatchError(
                    f"line {number}: expected '*** Add File:', '*** Update File:' or "
                    f"'*** Delete File:', got {line!r}",
                    line=number,
                )
            kind, path = marker
            if not path:
                raise PatchError(f"line {number}: {line.strip()!r} names no file", line=number)
            body = self._section_body()
            if kind == "add":
                ops.append(self._add(path, body))
            elif kind == "delete":
                ops.append(self._delete(path, body))
            else:
                ops.append(self._update(path, number, body))
        return ops

    def _section_body(self) -> list[tuple[int, str]]:
        """Lines up to the next file header, minus trailing blank lines."""
        start = self._pos
        while self._pos < len(self._lines):
            marker = _marker(self._lines[self._pos][1])
            if marker is not None and marker[0] in _SECTION_ENDS:
                break
            self._pos += 1
        body = self._lines[start : self._pos]
        # A completely empty line at the end of a section is a separator, not content: as
        # context it would sit on both sides of the chunk and change nothing.
        while body and body[-1][1] == "":
            body.pop()
        return body

    @staticmethod
    def _add(path: str, body: list[tuple[int, str]]) -> AddFile:
        content: list[str] = []
        if body and _marker(body[-1][1]) == ("eof", ""):
            body = body[:-1]  # harmless after an added file, and models do write it
        for number, line in body:
            if line.startswith("+"):
                content.append(line[1:])
            elif line == "":
                content.append("")  # a blank line whose "+" a model dropped
            else:
                raise PatchError(
                    f"line {number}: in '*** Add File: {path}' every line must start with "
                    f"'+', got {line!r}",
                    path=path,
                    line=number,
                )
        return AddFile(path, tuple(content))

    @staticmethod
    def _delete(path: str, body: list[tuple[int, str]]) -> DeleteFile:
        for number, line in body:
            if line.strip():
                raise PatchError(
                    f"line {number}: '*** Delete File: {path}' takes no lines, got {line!r}",
                    path=path,
                    line=number,
                )
        return DeleteFile(path)

    @staticmethod
    def _update(path: str, header_line: int, body: list[tuple[int, str]]) -> UpdateFile:
        move_to: str | None = None
        rest = body
        if body:
            marker = _marker(body[0][1])
            if marker is not None and marker[0] == "move":
                if not marker[1]:
                    raise PatchError(
                        f"line {body[0][0]}: '*** Move to:' names no file",
                        path=path,
                        line=body[0][0],
                    )
                move_to = marker[1]
                rest = body[1:]
        chunks: list[Chunk] = []
        current: _ChunkBuilder | None = None

        def finish(builder: _ChunkBuilder, at_eof: bool = False) -> None:
            if not builder.lines:
                shown = f"'@@ {builder.header}'" if builder.header is not None else "'@@'"
                raise PatchError(
                    f"line {builder.start}: chunk {shown} in '{path}' has no lines",
                    path=path,
                    line=builder.start,
                )
            chunks.append(Chunk(tuple(builder.lines), builder.header, at_eof))

        for number, line in rest:
            if line.startswith("@@"):
                if current is not None:
                    finish(current)
                current = _ChunkBuilder(_chunk_header(line), number)
                continue
            marker = _marker(line)
            if marker is not None:
                if marker[0] == "eof" and current is not None:
                    finish(current, at_eof=True)
                    current = None
                    continue
                raise PatchError(
                    f"line {number}: unexpected {line.strip()!r} in '*** Update File: {path}'",
                    path=path,
                    line=number,
                )
            if current is None:
                if chunks:  # only a chunk after "*** End of File" can get here
                    raise PatchError(
                        f"line {number}: expected '@@' to start the next chunk of '{path}', "
                        f"got {line!r}",
                        path=path,
                        line=number,
                    )
                current = _ChunkBuilder(None, number)
            current.lines.append(_chunk_line(path, number, line))
        if current is not None:
            finish(current)
        if not chunks and move_to is None:
            raise PatchError(
                f"line {header_line}: '*** Update File: {path}' has no chunks",
                path=path,
                line=header_line,
            )
        return UpdateFile(path, tuple(chunks), move_to)


def _chunk_header(line: str) -> str | None:
    unified = _UNIFIED_HEADER.match(line)
    text = line[unified.end() :] if unified else line[2:]
    if text.startswith(" "):
        text = text[1:]
    return text if text.strip() else None


def _chunk_line(path: str, number: int, line: str) -> tuple[LineKind, str]:
    if line == "":
        return " ", ""  # an empty context line whose leading space was trimmed away
    prefix = line[0]
    if prefix == " ":
        return " ", line[1:]
    if prefix == "-":
        return "-", line[1:]
    if prefix == "+":
        return "+", line[1:]
    raise PatchError(
        f"line {number}: in '*** Update File: {path}' a chunk line must start with ' ', '-' or "
        f"'+', got {line!r}",
        path=path,
        line=number,
    )


def render_patch(ops: Iterable[FileOp]) -> str:
    """Render operations as patch text; ``parse_patch(render_patch(ops)) == ops`` for any ops
    whose lines hold no newline and no text that reads as a ``***`` marker."""
    out = [BEGIN]
    for op in ops:
        if isinstance(op, AddFile):
            out.append(f"{_ADD} {op.path}")
            out.extend("+" + line for line in op.lines)
        elif isinstance(op, DeleteFile):
            out.append(f"{_DELETE} {op.path}")
        else:
            out.append(f"{_UPDATE} {op.path}")
            if op.move_to is not None:
                out.append(f"{_MOVE} {op.move_to}")
            for chunk in op.chunks:
                out.append("@@" if chunk.header is None else f"@@ {chunk.header}")
                out.extend(kind + text for kind, text in chunk.lines)
                if chunk.at_eof:
                    out.append(_EOF)
    out.append(END)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# matching


_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\uff07", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb\uff02", '"'),
        **dict.fromkeys(
            "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
            "\u202f\u205f\u3000",
            " ",
        ),
        "\u2026": "...",
        "\u200b": "",
        "\ufeff": "",
    }
)


def _normalise_punctuation(line: str) -> str:
    return line.translate(_PUNCTUATION).strip()


# The fuzz levels, strictest first; the first level at which a chunk matches anywhere wins.
_LEVELS: tuple[Callable[[str], str], ...] = (
    lambda s: s,
    str.rstrip,
    str.strip,
    _normalise_punctuation,
)


def seek_sequence(
    lines: Sequence[str], pattern: Sequence[str], start: int, at_eof: bool = False
) -> int | None:
    """Index of the first place at or after ``start`` where ``pattern`` matches ``lines``.

    Tries every fuzz level over all positions before loosening. With ``at_eof`` the only
    candidate is the position that puts the pattern's last line on the file's last line.
    Returns ``None`` when nothing matches.
    """
    last_start = len(lines) - len(pattern)
    if last_start < start:
        return None
    if not pattern:
        return last_start if at_eof else start
    candidates = [last_start] if at_eof else range(start, last_start + 1)
    width = len(pattern)
    for norm in _LEVELS:
        wanted = [norm(p) for p in pattern]
        # Normalise the searched window once per level, not once per candidate.
        have = [norm(line) for line in lines[start:]]
        for i in candidates:
            j = i - start
            if have[j] == wanted[0] and have[j : j + width] == wanted:
                return i
    return None


@dataclass(frozen=True)
class _Text:
    """A file's lines plus what is needed to write them back the same way."""

    lines: list[str]
    eol: str
    final_newline: bool
    bom: bool

    @classmethod
    def parse(cls, content: str) -> _Text:
        bom = content.startswith("\ufeff")
        if bom:
            content = content[1:]
        first_nl = content.find("\n")
        eol = "\r\n" if first_nl > 0 and content[first_nl - 1] == "\r" else "\n"
        text = content.replace("\r\n", "\n") if eol == "\r\n" else content
        final_newline = text == "" or text.endswith("\n")
        lines = text.split("\n")
        if final_newline:
            lines.pop()
        return cls(lines, eol, final_newline, bom)

    def render(self, lines: Sequence[str]) -> str:
        body = self.eol.join(lines)
        if lines and self.final_newline:
            body += self.eol
        return ("\ufeff" if self.bom else "") + body


@dataclass(frozen=True)
class LineEdit:
    """Replace ``removed`` — the old file's lines from index ``start`` — with ``added``."""

    start: int
    removed: tuple[str, ...]
    added: tuple[str, ...]

    @property
    def end(self) -> int:
        return self.start + len(self.removed)


def _apply_chunks(path: str, text: _Text, chunks: Sequence[Chunk]) -> list[LineEdit]:
    """Match ``chunks`` against ``text`` and return the edits, ordered by position.

    Edits cover only removed and added lines, so context lines keep the file's own text.
    """
    lines = text.lines
    edits: list[LineEdit] = []
    cursor = 0
    for number, chunk in enumerate(chunks, 1):
        if chunk.header is not None:
            found = seek_sequence(lines, [chunk.header], cursor)
            if found is None:
                raise PatchError(
                    f"{path}: chunk {number} of {len(chunks)}: could not find the context line "
                    f"'@@ {chunk.header}'" + (f" after line {cursor}" if cursor else ""),
                    path=path,
                )
            cursor = found + 1
        old = chunk.old_lines
        if not old:
            # Pure insertion: right after the header if there is one, else at the end.
            at = cursor if chunk.header is not None and not chunk.at_eof else len(lines)
            edits.append(LineEdit(at, (), tuple(chunk.new_lines)))
            cursor = at
            continue
        found = seek_sequence(lines, old, cursor, chunk.at_eof)
        if found is None:
            raise PatchError(
                _not_found_message(path, number, len(chunks), chunk, cursor), path=path
            )
        edits.extend(_chunk_edits(chunk, lines, found))
        cursor = found + len(old)
    return edits


def _chunk_edits(chunk: Chunk, lines: Sequence[str], found: int) -> list[LineEdit]:
    """One edit per run of removed/added lines of a chunk matched at ``found``."""
    edits: list[LineEdit] = []
    k = found
    start = k
    removed: list[str] = []
    added: list[str] = []
    for kind, line_text in [*chunk.lines, (" ", "")]:  # the sentinel flushes the last run
        if kind == " ":
            if removed or added:
                edits.append(LineEdit(start, tuple(removed), tuple(added)))
                removed, added = [], []
            k += 1
            start = k
        elif kind == "-":
            removed.append(lines[k])  # the file's text, which fuzzy matching may differ from
            k += 1
        else:
            added.append(line_text)
    return edits


def _apply_edits(lines: Sequence[str], edits: Sequence[LineEdit]) -> list[str]:
    # Positions never decrease, so applying back to front keeps earlier indices valid, and two
    # insertions at one spot keep their patch order.
    result = list(lines)
    for edit in reversed(edits):
        result[edit.start : edit.end] = edit.added
    return result


def _not_found_message(path: str, number: int, total: int, chunk: Chunk, cursor: int) -> str:
    where = " at the end of the file" if chunk.at_eof else ""
    if chunk.header is not None:
        where += f" after '@@ {chunk.header}'"
    elif cursor:
        where += f" after line {cursor}"
    old = chunk.old_lines
    shown = [f"    {line}" for line in old[:_MAX_SHOWN_LINES]]
    if len(old) > _MAX_SHOWN_LINES:
        shown.append(f"    ... ({len(old) - _MAX_SHOWN_LINES} more lines)")
    return (
        f"{path}: chunk {number} of {total} did not match; could not find these lines{where}:\n"
        + "\n".join(shown)
    )


def _key(path: str) -> str:
    """One spelling per patch path, so two operations on one file see each other's effect."""
    return posixpath.normpath(path.replace("\\", "/"))


def compute_changes(ops: Iterable[FileOp], read: Callable[[str], str | None]) -> list[Change]:
    """Compute every operation's new contents (and diff) without touching the file system.

    ``read(path)`` returns a file's current text, or ``None`` if it does not exist; it may raise
    :class:`PatchError` (e.g. for a path outside the root). Operations apply in order and see
    the effects of earlier ones on the same path. Raises :class:`PatchError` for an Add File on
    an existing file, an Update/Delete of a missing file, a Move to an existing file, or a
    chunk that does not match.
    """
    overlay: dict[str, str | None] = {}

    def current(path: str) -> str | None:
        key = _key(path)
        return overlay[key] if key in overlay else read(path)

    changes: list[Change] = []
    for op in ops:
        if isinstance(op, AddFile):
            if current(op.path) is not None:
                raise PatchError(f"cannot add {op.path}: the file already exists", path=op.path)
            new = "".join(line + "\n" for line in op.lines)
            overlay[_key(op.path)] = new
            diff = _file_diff("/dev/null", f"b/{op.path}", [], [LineEdit(0, (), op.lines)], True)
            changes.append(Change(op.path, "add", None, new, added=len(op.lines), diff=diff))
        elif isinstance(op, DeleteFile):
            old = current(op.path)
            if old is None:
                raise PatchError(f"cannot delete {op.path}: no such file", path=op.path)
            overlay[_key(op.path)] = None
            text = _Text.parse(old)
            edits = [LineEdit(0, tuple(text.lines), ())]
            diff = _file_diff(f"a/{op.path}", "/dev/null", text.lines, edits, text.final_newline)
            changes.append(Change(op.path, "delete", old, None, removed=len(text.lines), diff=diff))
        else:
            changes.append(_update(op, current, overlay))
    return changes


def _update(
    op: UpdateFile,
    current: Callable[[str], str | None],
    overlay: dict[str, str | None],
) -> Change:
    old = current(op.path)
    if old is None:
        raise PatchError(f"cannot update {op.path}: no such file", path=op.path)
    text = _Text.parse(old)
    edits = _apply_chunks(op.path, text, op.chunks)
    new = text.render(_apply_edits(text.lines, edits))
    added = sum(len(e.added) for e in edits)
    removed = sum(len(e.removed) for e in edits)
    moving = op.move_to is not None and _key(op.move_to) != _key(op.path)
    target = op.move_to if op.move_to is not None and moving else op.path
    diff = _file_diff(f"a/{op.path}", f"b/{target}", text.lines, edits, text.final_newline)
    if not moving:
        overlay[_key(op.path)] = new
        return Change(op.path, "update", old, new, added=added, removed=removed, diff=diff)
    if current(target) is not None:
        raise PatchError(
            f"cannot move {op.path} to {target}: the destination already exists",
            path=op.path,
        )
    overlay[_key(op.path)] = None
    overlay[_key(target)] = new
    return Change(
        op.path, "move", old, new, moved_to=target, added=added, removed=removed, diff=diff
    )


# ---------------------------------------------------------------------------------------------
# diff

_CONTEXT = 3  # lines of context around each change, as ``diff -u``
_NO_NEWLINE = "\\ No newline at end of file\n"


def _range(start: int, length: int) -> str:
    """A hunk header range, spelled as ``diff -u`` (and difflib) spell it."""
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def _file_diff(
    old_name: str,
    new_name: str,
    old: Sequence[str],
    edits: Sequence[LineEdit],
    final_newline: bool,
) -> str:
    """The unified diff of one file, built from the edits the patch made (no diff search).

    ``final_newline`` says whether both old and new text end with a newline (the engine keeps
    that property of a file); an empty side has no last line to mark.
    """
    out = [f"--- {old_name}\n", f"+++ {new_name}\n"]
    edits = [e for e in edits if e.removed or e.added]
    if not edits:
        return "".join(out)
    n = len(old)
    last = edits[-1]
    if not final_newline and last.end == n and last.start > 0 and not (last.removed and last.added):
        # The line before the end changes whether it is the file's last (newline-less) line,
        # so it has to show as removed and added again.
        prev = old[last.start - 1]
        edits[-1] = LineEdit(last.start - 1, (prev, *last.removed), (prev, *last.added))
    m = n + sum(len(e.added) - len(e.removed) for e in edits)

    groups: list[list[LineEdit]] = []
    for edit in edits:
        if groups and edit.start - groups[-1][-1].end <= 2 * _CONTEXT:
            groups[-1].append(edit)
        else:
            groups.append([edit])

    def mark(line: str, old_index: int | None, new_index: int | None) -> str:
        at_end = (old_index is not None and old_index == n - 1) or (
            new_index is not None and new_index == m - 1
        )
        return line + "\n" + (_NO_NEWLINE if at_end and not final_newline else "")

    delta = 0  # new index minus old index, outside the edits seen so far
    for group in groups:
        lo = max(0, group[0].start - _CONTEXT)
        hi = min(n, group[-1].end + _CONTEXT)
        new_lo = lo + delta
        body: list[str] = []
        pos = lo
        for edit in group:
            body.extend(mark(" " + old[i], i, i + delta) for i in range(pos, edit.start))
            body.extend(
                mark("-" + line, edit.start + k, None) for k, line in enumerate(edit.removed)
            )
            body.extend(
                mark("+" + line, None, edit.start + delta + k) for k, line in enumerate(edit.added)
            )
            delta += len(edit.added) - len(edit.removed)
            pos = edit.end
        body.extend(mark(" " + old[i], i, i + delta) for i in range(pos, hi))
        old_len = hi - lo
        new_len = hi + delta - new_lo
        out.append(f"@@ -{_range(lo, old_len)} +{_range(new_lo, new_len)} @@\n")
        out.extend(body)
    return "".join(out)


def render_diff(changes: Iterable[Change]) -> str:
    """The unified diff of all ``changes``: ``a/``/``b/`` paths, ``/dev/null`` for an added or
    deleted file, ``\\ No newline at end of file`` where it applies, "\\n" line endings."""
    return "".join(change.diff for change in changes)


# ---------------------------------------------------------------------------------------------
# I/O


def check_patch_path(path: str) -> None:
    """Refuse (PatchError) what a patch path may never be, by its text: empty, a NUL byte,
    absolute (or ``~``), or holding a ``..`` segment."""
    if not path or "\x00" in path:
        raise PatchError(f"invalid path {path!r}", path=path)
    if os.path.isabs(path) or path.startswith(("/", "\\", "~")):
        raise PatchError(
            f"{path}: absolute paths are not allowed; use a path relative to the workdir",
            path=path,
        )
    if ".." in re.split(r"[\\/]", path):
        raise PatchError(f"{path}: '..' is not allowed in patch paths", path=path)


def patch_target(tree: Tree, path: str) -> Spot:
    """Where the patch path ``path`` leads in ``tree`` (the one confined file API): its
    text checked (:func:`check_patch_path`), then resolved beneath the workdir's handle.
    Leading outside (a symlink out, the workdir itself) is a PatchError; a hidden or
    protected place stays ``ActionRefused("protected_path")``."""
    check_patch_path(path)
    try:
        spot = tree.locate(path, missing_ok=True)
    except ActionRefused as refused:
        if refused.code != "path_outside_workdir":
            raise
        raise PatchError(f"{path}: leads outside the workdir {tree.root}", path=path) from None
    except NotADirectoryError:
        raise PatchError(f"{path}: a folder on its way is a file", path=path) from None
    except OSError as exc:
        raise PatchError(f"{path}: {exc.strerror or exc}", path=path) from None
    if not spot.rel:
        raise PatchError(f"{path}: resolves to the workdir itself, which is outside the "
                         "workdir's files", path=path)
    return spot


def apply_patch(text: str, root: Path, boundary: Boundary | None = None) -> PatchOutcome:
    """Parse ``text``, compute every change against files under ``root``, then write them.

    All-or-nothing: any parse, match or path error raises :class:`PatchError` before a single
    byte is written. Every path goes through the one confined file API
    (:class:`codey_worker.files.Tree` of ``root``, with ``boundary``'s hidden paths): one
    leading outside is a PatchError, one in a hidden place or in ``.git`` / the root's
    ``.codey`` is ``ActionRefused("protected_path")``. Files are read and written as UTF-8;
    only regular files of up to :data:`MAX_PATCH_FILE_BYTES` are read (a FIFO, device or
    socket is refused, never opened for a blocking read). Writes replace files atomically
    (fsynced, then renamed) and keep their permission bits; an added file gets ``0o666``
    less the umask.
    """
    ops = parse_patch(text)
    with Tree.open(os.path.realpath(root), boundary) as tree:

        def read(path: str) -> str | None:
            spot = patch_target(tree, path)
            found = _read_regular(tree, spot, path)
            if found is None:
                return None
            try:
                return found[0].decode("utf-8")
            except UnicodeDecodeError:
                raise PatchError(f"{path} is not UTF-8 text", path=path) from None

        changes = compute_changes(ops, read)
        _write_all(changes, tree)
    files = [FileResult(c.path, c.op, c.moved_to, c.added, c.removed) for c in changes]
    return PatchOutcome(files=files, diff=render_diff(changes))


def _read_regular(tree: Tree, spot: Spot, shown: str) -> tuple[bytes, int] | None:
    """The bytes and ``st_mode`` of the regular file at ``spot``; None if it does not exist.
    Raises PatchError, naming ``shown``, for anything else.

    O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused after ``fstat``).
    Opened in its folder's handle without following a symlink: one appearing since is refused.
    """
    try:
        fd = tree.open_file(spot, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):  # a parent that is a file: no such file
        return None
    except IsADirectoryError:
        raise PatchError(f"{shown} is a directory, not a file", path=shown) from None
    except OSError as exc:
        raise PatchError(f"cannot read {shown}: {exc.strerror or exc}", path=shown) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise PatchError(f"{shown} is a directory, not a file", path=shown)
        if not stat.S_ISREG(info.st_mode):
            raise PatchError(
                f"{shown} is not a regular file (a FIFO, socket or device); a patch only "
                "changes regular files",
                path=shown,
            )
        if info.st_size > MAX_PATCH_FILE_BYTES:
            raise PatchError(
                f"{shown} is {info.st_size} bytes; a patch only changes files of up to "
                f"{MAX_PATCH_FILE_BYTES // (1024 * 1024)} MiB",
                path=shown,
            )
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1024 * 1024):
            total += len(chunk)
            if total > MAX_PATCH_FILE_BYTES:  # it grew while being read
                raise PatchError(
                    f"{shown} is larger than {MAX_PATCH_FILE_BYTES // (1024 * 1024)} MiB; "
                    "a patch only changes files up to that size",
                    path=shown,
                )
            chunks.append(chunk)
        return b"".join(chunks), info.st_mode
    except OSError as exc:
        raise PatchError(f"cannot read {shown}: {exc.strerror or exc}", path=shown) from None
    finally:
        os.close(fd)


class _Journal:
    """What the writes changed (by real path relative to the workdir), so a failure half
    way can put it back."""

    def __init__(self, tree: Tree) -> None:
        self._tree = tree
        self._saved: dict[str, tuple[bytes | None, int | None]] = {}
        self._order: list[str] = []
        self._made_dirs: list[str] = []

    def save(self, spot: Spot) -> None:
        if spot.rel in self._saved:
            return
        found = _read_regular(self._tree, spot, spot.rel)
        self._saved[spot.rel] = (None, None) if found is None else found
        self._order.append(spot.rel)

    def make_parents(self, rel: str) -> None:
        self._made_dirs += self._tree.missing_dirs(rel)

    def undo(self) -> None:
        for rel in reversed(self._order):
            data, mode = self._saved[rel]
            try:
                if data is None:
                    with contextlib.suppress(FileNotFoundError):
                        self._tree.unlink(rel)
                else:
                    self._tree.write(rel, data, mode=mode, keep_mode=False)
            except (OSError, WorkerError):
                pass  # best effort: the original error is what the caller needs to see
        for rel in reversed(self._made_dirs):
            try:
                self._tree.rmdir(rel)
            except (OSError, WorkerError):
                pass


def _write_all(changes: Sequence[Change], tree: Tree) -> None:
    journal = _Journal(tree)
    current = ""
    try:
        for change in changes:
            current = change.path
            source = patch_target(tree, change.path)
            tree.check_write(source.rel, change.path)
            journal.save(source)
            if change.op == "delete":
                tree.unlink(source.rel)
                continue
            assert change.new_content is not None
            data = change.new_content.encode("utf-8")
            # An updated or moved file keeps its permission bits; an added one gets the umask's.
            mode = stat.S_IMODE(tree.lstat(source).st_mode) if change.op != "add" else None
            target = source
            if change.op == "move":
                assert change.moved_to is not None
                current = change.moved_to
                target = patch_target(tree, change.moved_to)
                tree.check_write(target.rel, change.moved_to)
                journal.save(target)
            journal.make_parents(target.rel)
            tree.write(target.rel, data, mode=mode, keep_mode=False)
            if change.op == "move":
                tree.unlink(source.rel)
    except OSError as exc:
        journal.undo()
        raise PatchError(
            f"cannot write {current}: {exc.strerror or exc}; no file was changed", path=current
        ) from None
    except WorkerError:  # e.g. a file swapped for a FIFO since it was read: put back, say why
        journal.undo()
        raise


# ---------------------------------------------------------------------------------------------
# CLI


_OP_LETTER = {"add": "A", "delete": "D", "update": "M", "move": "R"}


def summary_line(result: FileResult) -> str:
    """``M path (+3 -1)``; a move reads ``R old -> new (+3 -1)``."""
    name = f"{result.path} -> {result.moved_to}" if result.moved_to else result.path
    return f"{_OP_LETTER[result.op]} {name} (+{result.added} -{result.removed})"


def apply_patch_cli(patch_text: str, cwd: Path, out: TextIO) -> int:
    """Apply a patch in ``cwd`` and print one summary line per file to ``out``.

    ``patch_text`` is the patch itself, ``"-"`` to read it from stdin, or the path (absolute or
    relative to ``cwd``) of a file holding it. Returns 0 on success; on failure prints
    ``error: <reason>`` and returns 1, leaving every file as it was.

    Example: ``codey-worker apply-patch fix.patch`` → ``M src/app.py (+3 -1)``.
    """
    try:
        text = _load_patch_text(patch_text, cwd)
        outcome = apply_patch(text, cwd)
    except (PatchError, ActionRefused, OSError, UnicodeDecodeError) as exc:
        out.write(f"error: {exc}\n")
        return 1
    for result in outcome.files:
        out.write(summary_line(result) + "\n")
    return 0


def _load_patch_text(patch_text: str, cwd: Path) -> str:
    if patch_text == "-":
        return sys.stdin.read()
    if "\n" not in patch_text and patch_text.strip():
        candidate = cwd / patch_text
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    return patch_text


__all__ = [
    "AddFile",
    "Change",
    "Chunk",
    "DeleteFile",
    "FileOp",
    "FileResult",
    "LineEdit",
    "PatchError",
    "PatchOutcome",
    "UpdateFile",
    "apply_patch",
    "apply_patch_cli",
    "check_patch_path",
    "compute_changes",
    "parse_patch",
    "patch_target",
    "render_diff",
    "render_patch",
    "seek_sequence",
    "summary_line",
]
