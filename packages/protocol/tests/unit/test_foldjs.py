"""The committed ``web/fold_constants.js`` is what the Python side generates, and it holds every
constant and every default. (That its defaults equal msgspec's, and its constants make the two
folds agree, is tested by folding generated logs in both:
``packages/server/tests/unit/test_fold_parity_node.py``.)"""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from codey_protocol import events, foldjs, schema, state, worker

ROOT = Path(__file__).resolve().parents[4]
COMMITTED = ROOT / "web" / foldjs.FOLD_CONSTANTS_JS
REGENERATE = "uv run python -m codey_protocol.schema web/protocol.schema.json"


def test_committed_module_is_current() -> None:
    assert COMMITTED.is_file(), f"{COMMITTED} is missing; run `{REGENERATE}`"
    assert foldjs.render() == COMMITTED.read_text(encoding="utf-8"), (
        f"web/{foldjs.FOLD_CONSTANTS_JS} is out of date with codey_protocol; run "
        f"`{REGENERATE}` from the repo root and commit the result")


def test_main_writes_it_next_to_the_schema(tmp_path: Path) -> None:
    assert schema.main([str(tmp_path / "protocol.schema.json")]) == 0
    written = (tmp_path / foldjs.FOLD_CONSTANTS_JS).read_text(encoding="utf-8")
    assert written == foldjs.render()


def test_the_constants_are_the_python_ones() -> None:
    text = foldjs.render()
    assert f"export const MAX_CHANGED_PATHS = {state.MAX_CHANGED_PATHS};" in text
    assert f"export const SCHEDULE_RUNS_KEPT = {state.SCHEDULE_RUNS_KEPT};" in text
    for name, codes in (("COMPACTION_ENDED", state.COMPACTION_ENDED),
                        ("WORKING_STATUSES", state.WORKING_STATUSES)):
        found = re.search(rf"export const {name} = Object\.freeze\(\[(.*?)\]\);", text, re.S)
        assert found is not None, name
        assert re.findall(r'"([^"]*)"', found[1]) == list(codes)


def _structs(t: mi.Type, seen: dict[type[Any], mi.StructType]) -> None:
    """Every struct type reachable from ``t``, into ``seen``."""
    if isinstance(t, mi.StructType):
        if t.cls not in seen:
            seen[t.cls] = t
            for f in t.fields:
                _structs(f.type, seen)
    elif isinstance(t, mi.UnionType):
        for m in t.types:
            _structs(m, seen)
    elif isinstance(t, mi.ListType):
        _structs(t.item_type, seen)
    elif isinstance(t, mi.DictType):
        _structs(t.value_type, seen)


def _function(text: str, name: str) -> str:
    found = re.search(rf"^export function {name}\(v\) {{\n(.*?)^}}$", text, re.S | re.M)
    assert found is not None, f"no {name} in fold_constants.js"
    return found[1]


def test_every_default_of_every_struct_the_state_holds_is_filled_in() -> None:
    text = foldjs.render()
    seen: dict[type[Any], mi.StructType] = {}
    _structs(mi.type_info(state.State), seen)
    assert events.ToolCall in seen and state.SessionInfo in seen
    for cls, info in seen.items():
        defaults = [f for f in info.fields if not f.required]
        if not defaults:
            continue
        body = _function(text, f"fill{cls.__name__}")
        for f in defaults:
            assert f"if (v.{f.encode_name} === undefined)" in body, (cls.__name__, f.name)
        if info.tag is not None:  # a union member: its union's table names it
            assert f"  {info.tag}: fill{cls.__name__},\n" in text, cls.__name__


def test_the_defaults_are_msgspec_s() -> None:
    """A default spelled out in the module is the struct's (a fresh object for a factory)."""
    body = _function(foldjs.render(), "fillSessionInfo")
    assert 'if (v.status === undefined) v.status = "idle";' in body
    assert "if (v.items === undefined) {\n    v.items = [];" in body
    for key, value in msgspec.to_builtins(state.TokenUsage()).items():
        assert f'    "{key}": {json.dumps(value, ensure_ascii=False)},' in body
    body = _function(foldjs.render(), "fillWorkerInfo")
    for key, value in msgspec.to_builtins(worker.Capabilities()).items():
        assert f'    "{key}": {json.dumps(value, ensure_ascii=False)},' in body


def test_events_are_not_filled_in_the_browser() -> None:
    """The browser receives every event complete (upcast on the server when stored in an
    older shape): nothing fills an event's missing fields with today's defaults."""
    text = foldjs.render()
    assert "withDefaults" not in text
    for cls in typing.get_args(events.Event):
        assert f"function fill{cls.__name__}(" not in text, cls.__name__
