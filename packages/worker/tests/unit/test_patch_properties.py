"""Property tests of the patch engine.

Random files get random edits; the edits are rendered as a patch the way a model would write
one (some context, sometimes an ``@@`` header, sometimes ``*** End of File``), applied, and the
result compared with the edits applied directly to the list of lines.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from codey_worker.patch import (
    AddFile,
    Chunk,
    DeleteFile,
    FileOp,
    LineKind,
    UpdateFile,
    apply_patch,
    compute_changes,
    parse_patch,
    render_patch,
)

# Few letters, so repeated lines (and so ambiguous context) are common.
LINE = st.text(alphabet="ab -'\"\t", max_size=4)
# No whitespace at all: the fuzz properties rely on stripping being a no-op on the originals.
PLAIN_LINE = st.text(alphabet="ab-'\"", max_size=4)


@dataclass(frozen=True)
class Edit:
    start: int
    delete: int
    insert: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    lines: list[str]
    edits: list[Edit]
    chunks: tuple[Chunk, ...]


def _first_exact(lines: list[str], pattern: list[str], start: int) -> int | None:
    """Reference search, exact only: the engine's first fuzz level must agree with it."""
    for i in range(start, len(lines) - len(pattern) + 1):
        if lines[i : i + len(pattern)] == pattern:
            return i
    return None


def _apply_edits(lines: list[str], edits: list[Edit]) -> list[str]:
    out = list(lines)
    for edit in reversed(edits):
        out[edit.start : edit.start + edit.delete] = edit.insert
    return out


@st.composite
def scenarios(draw: st.DrawFn, line: st.SearchStrategy[str] = LINE) -> Scenario:
    lines = draw(st.lists(line, max_size=25))
    n = len(lines)
    edits: list[Edit] = []
    pos = 0
    for _ in range(draw(st.integers(1, 4))):
        if pos > n:
            break
        start = draw(st.integers(pos, n))
        delete = draw(st.integers(0, min(3, n - start)))
        insert = tuple(draw(st.lists(line, max_size=3)))
        edits.append(Edit(start, delete, insert))
        pos = start + delete + 1  # a gap of one line keeps every chunk's context its own

    chunks: list[Chunk] = []
    cursor = 0  # where the engine will search from: the end of the previous chunk's match
    for index, edit in enumerate(edits):
        end = edit.start + edit.delete
        limit = edits[index + 1].start if index + 1 < len(edits) else n
        first = max(cursor, edit.start - draw(st.integers(0, 3)))
        last = min(limit, end + draw(st.integers(0, 3)))
        if first == last and edit.start < n:
            last = end + 1  # a chunk with no old lines would mean "append at the end"
        old = lines[first:last]
        if old and _first_exact(lines, old, cursor) != first:
            first = cursor  # starting right at the cursor, it cannot match earlier
            old = lines[first:last]
        header: str | None = None
        if old and first > cursor and draw(st.booleans()):
            candidate = draw(st.integers(cursor, first - 1))
            text = lines[candidate]
            if text.strip():
                found = _first_exact(lines, [text], cursor)
                assert found is not None
                if _first_exact(lines, old, found + 1) == first:
                    header = text
        at_eof = last == n and draw(st.booleans())
        body: list[tuple[LineKind, str]] = [(" ", t) for t in lines[first : edit.start]]
        body += [("-", t) for t in lines[edit.start : end]]
        body += [("+", t) for t in edit.insert]
        body += [(" ", t) for t in lines[end:last]]
        if body:
            chunks.append(Chunk(tuple(body), header, at_eof))
        cursor = last
    return Scenario(lines, edits, tuple(chunks))


def _content(lines: list[str], eol: str, final_newline: bool) -> str:
    if not lines:
        return ""
    return eol.join(lines) + (eol if final_newline else "")


def _apply(path: str, content: str, chunks: tuple[Chunk, ...]) -> str | None:
    op = UpdateFile(path, chunks)
    ops = parse_patch(render_patch([op]))
    assert ops == [op]
    (change,) = compute_changes(ops, {path: content}.get)
    new: str | None = change.new_content
    return new


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_random_edits_apply_as_expected(scenario: Scenario, eol: str, final: bool) -> None:
    if not scenario.chunks:
        return  # every edit was a no-op on an empty region: nothing to render
    # Text ending in "" without a final newline reads back as one line fewer with one.
    final = final or not scenario.lines or scenario.lines[-1] == ""
    if "\n" not in _content(scenario.lines, "\n", final):
        eol = "\n"  # a file without any line break has no newline style; "\n" it is
    content = _content(scenario.lines, eol, final)
    expected = _apply_edits(scenario.lines, scenario.edits)
    assert _apply("f.txt", content, scenario.chunks) == _content(expected, eol, final)


_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@\n")


def _apply_unified(old: str, diff: str) -> str:
    """Reference applier of a one-file unified diff; checks every header count and context."""
    old_lines = old.splitlines(keepends=True)
    lines = diff.splitlines(keepends=True)
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ ")
    out: list[str] = []
    pos = 0
    i = 2
    while i < len(lines):
        header = _HUNK.fullmatch(lines[i])
        assert header, lines[i]
        old_len = int(header[2]) if header[2] is not None else 1
        new_len = int(header[4]) if header[4] is not None else 1
        start = int(header[1]) - 1 if old_len else int(header[1])
        assert start >= pos, "hunks must be in order and not overlap"
        out.extend(old_lines[pos:start])
        assert len(out) == (int(header[3]) - 1 if new_len else int(header[3]))
        pos = start
        seen_old = seen_new = 0
        i += 1
        while i < len(lines) and not lines[i].startswith("@@"):
            kind, text = lines[i][0], lines[i][1:]
            no_newline = i + 1 < len(lines) and lines[i + 1] == "\\ No newline at end of file\n"
            if no_newline:
                text = text[:-1]
            if kind in " -":
                assert old_lines[pos] == text
                pos += 1
                seen_old += 1
            if kind in " +":
                out.append(text)
                seen_new += 1
            i += 2 if no_newline else 1
        assert (seen_old, seen_new) == (old_len, new_len)
    out.extend(old_lines[pos:])
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.booleans())
def test_diff_turns_old_into_new(scenario: Scenario, final: bool) -> None:
    if not scenario.chunks:
        return
    final = final or not scenario.lines or scenario.lines[-1] == ""
    old = _content(scenario.lines, "\n", final)
    ops = [UpdateFile("f.txt", scenario.chunks)]
    (change,) = compute_changes(ops, {"f.txt": old}.get)
    assert change.new_content is not None
    assert _apply_unified(old, change.diff) == change.new_content
    (deleted,) = compute_changes([DeleteFile("f.txt")], {"f.txt": old}.get)
    assert _apply_unified(old, deleted.diff) == ""
    (added,) = compute_changes([AddFile("g.txt", tuple(scenario.lines))], {}.get)
    assert _apply_unified("", added.diff) == added.new_content


FUZZ: dict[str, Callable[[str], str]] = {
    "trailing whitespace": lambda s: s + " \t",
    "surrounding whitespace": lambda s: "\t " + s + "  ",
    "unicode punctuation": lambda s: (
        s.replace("-", "\u2014").replace("'", "\u2019").replace('"', "\u201c") + "\u200b"
    ),
}


@settings(max_examples=150, deadline=None)
@given(scenarios(PLAIN_LINE), st.sampled_from(sorted(FUZZ)))
def test_fuzzy_matching_finds_the_same_places(scenario: Scenario, level: str) -> None:
    # Every file line is disguised so that no stricter level can match anywhere; the looser
    # level then sees exactly the original lines, so the chunks land where they did before, and
    # context lines keep the disguised (file's own) text.
    if not scenario.chunks or not scenario.lines:
        return
    disguise = FUZZ[level]
    fuzzed = [disguise(s) for s in scenario.lines]
    expected = _apply_edits(fuzzed, scenario.edits)  # inserted lines stay as written
    assert _apply("f.txt", _content(fuzzed, "\n", True), scenario.chunks) == _content(
        expected, "\n", True
    )


@settings(max_examples=25, deadline=None)
@given(scenarios(), st.sampled_from(["\n", "\r\n"]))
def test_apply_patch_on_disk_matches_the_pure_result(scenario: Scenario, eol: str) -> None:
    if not scenario.chunks:
        return
    eol = eol if scenario.lines else "\n"
    content = _content(scenario.lines, eol, True)
    patch = render_patch([UpdateFile("dir/f.txt", scenario.chunks, "moved/f.txt")])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "dir").mkdir()
        (root / "dir" / "f.txt").write_bytes(content.encode())
        outcome = apply_patch(patch, root)
        assert not (root / "dir" / "f.txt").exists()
        written = (root / "moved" / "f.txt").read_bytes().decode()
    expected = _content(_apply_edits(scenario.lines, scenario.edits), eol, True)
    assert written == expected
    (result,) = outcome.files
    assert (result.op, result.moved_to) == ("move", "moved/f.txt")
    assert result.added == sum(len(e.insert) for e in scenario.edits)
    assert result.removed == sum(e.delete for e in scenario.edits)


# ---------------------------------------------------------------------------------------------
# parse → render round trips

PATH = st.from_regex(r"[a-z_][a-z0-9_.]{0,6}(/[a-z_][a-z0-9_.]{0,6}){0,2}", fullmatch=True)
TEXT = st.text(alphabet=st.characters(blacklist_characters="\r\n*", codec="utf-8"), max_size=8)
HEADER = TEXT.filter(lambda s: bool(s.strip()) and not s.startswith("-"))
KIND = st.sampled_from([" ", "-", "+"])
CHUNK = st.builds(
    Chunk,
    st.lists(st.tuples(KIND, TEXT), min_size=1, max_size=5).map(tuple),
    st.none() | HEADER,
    st.booleans(),
)
OPS = st.lists(
    st.one_of(
        st.builds(AddFile, PATH, st.lists(TEXT, max_size=4).map(tuple)),
        st.builds(DeleteFile, PATH),
        st.builds(UpdateFile, PATH, st.lists(CHUNK, min_size=1, max_size=3).map(tuple)),
        st.builds(UpdateFile, PATH, st.lists(CHUNK, max_size=3).map(tuple), PATH),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_render_then_parse_round_trips(ops: list[FileOp]) -> None:
    text = render_patch(ops)
    assert parse_patch(text) == ops
    # The lenient forms read the same: CRLF, no final newline, padded markers.
    assert parse_patch(text.replace("\n", "\r\n")) == ops
    assert parse_patch(text.rstrip("\n")) == ops
    padded = "\n".join(
        f"  {line}  " if line.startswith("*** ") else line for line in text.split("\n")
    )
    assert parse_patch(padded) == ops
