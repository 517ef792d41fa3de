"""``docs/protocol.md``'s message reference is what ``codey_protocol.reference`` generates from
the structs, and the hand-written tables around it name every message."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from codey_protocol import client, events, reference, state, worker

ROOT = Path(__file__).resolve().parents[4]
PAGE = ROOT / "docs" / "protocol.md"
REGENERATE = "uv run python -m codey_protocol.reference docs/protocol.md"


def test_the_page_is_current() -> None:
    page = PAGE.read_text(encoding="utf-8")
    fresh = reference.update(page)
    if fresh != page:
        diff = "".join(list(difflib.unified_diff(
            page.splitlines(keepends=True), fresh.splitlines(keepends=True),
            "docs/protocol.md", "generated", n=1))[:60])
        pytest.fail(f"docs/protocol.md's message reference is out of date with "
                    f"codey_protocol; run `{REGENERATE}` and commit the result:\n{diff}")


def test_every_struct_that_crosses_a_boundary_has_a_section() -> None:
    page = PAGE.read_text(encoding="utf-8")
    roots: list[Any] = [client.ClientToServer, client.ServerToClient, events.Event,
                        events.Envelope, state.State, worker.ServerToWorker,
                        worker.WorkerToServer]
    for cls in _structs(roots):
        assert re.search(rf"^#### (`\w+` — )?{cls.__name__}$", page, re.M), cls.__name__
    # e.g. the fields CreateSession gained after the page was written by hand
    create = page.split("— CreateSession\n", 1)[1].split("\n#### ", 1)[0]
    for field in ("sandbox", "network", "plan_mode", "worktree", "attachments"):
        assert f"| `{field}` |" in create


def test_each_tag_is_in_its_groups_hand_written_table() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for name, classes in reference.GROUPS.items():
        start = page.index(f"<!-- reference:{name} -->")
        hand = page[page.rindex("\n### ", 0, start):start]
        if not re.search(r"^\| `?(type|action)`? \|", hand, re.M):
            continue  # a group without a table of what its messages do
        tags = [_info(cls).tag for cls in classes if _info(cls).tag is not None]
        missing = [t for t in tags if f"`{t}`" not in hand]
        assert not missing, f"docs/protocol.md: say what these {name} do: {missing}"


def test_field_notes_come_from_the_source() -> None:
    text = reference.render()["client-to-server"]
    row = next(line for line in text.splitlines() if line.startswith("| `plan_mode` |"))
    assert row == ("| `plan_mode` | `bool` | `False` — propose a plan first; nothing changes "
                   "before the user approves it |")
    row = next(line for line in text.splitlines() if line.startswith("| `provider` |"))
    assert row.endswith("`None` — None: the server's default provider |")  # a trailing comment


def test_a_missing_marker_is_an_error() -> None:
    with pytest.raises(ValueError, match="needs <!-- reference:"):
        reference.update("# no markers\n")


def test_main_rewrites_the_page(tmp_path: Path) -> None:
    page = tmp_path / "protocol.md"
    stale = PAGE.read_text(encoding="utf-8").replace("| `plan_mode` |", "| `plan_mod` |")
    page.write_text(stale, encoding="utf-8")
    assert reference.main([str(page)]) == 0
    assert page.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")


def _info(cls: type[Any]) -> mi.StructType:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return info


def _structs(roots: list[Any]) -> list[type[msgspec.Struct]]:
    found: dict[type[msgspec.Struct], None] = {}
    todo: list[Any] = [mi.type_info(r) for r in roots]
    while todo:
        t = todo.pop()
        if isinstance(t, mi.StructType):
            if t.cls not in found:
                found[t.cls] = None
                todo += [f.type for f in t.fields]
        elif isinstance(t, mi.UnionType):
            todo += t.types
        elif isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
            todo.append(t.item_type)
        elif isinstance(t, mi.DictType):
            todo.append(t.value_type)
        elif isinstance(t, mi.TupleType):
            todo += t.item_types
    return list(found)
