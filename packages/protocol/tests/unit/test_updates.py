"""Item fields and ``SessionItemUpdated`` cannot drift apart.

Making an item field updatable is two edits, the item struct and the update event; these
tests fail when only one of them was made. (Python vs JS: ``test_schema.py`` checks the
generated ``web/item_fields.js``, and the fold-parity test folds every update field in both.)
"""

from __future__ import annotations

import types
import typing
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol.updates import APPEND_FIELDS, REPLACE_FIELDS, split_fields

ITEM_KINDS: tuple[type[ev.ItemBase], ...] = typing.get_args(ev.Item)

#: Tool-call fields written once, when the call is appended, and never updated. A field added
#: to ToolCall goes either here or into SessionItemUpdated: the test below says which is missing.
# (``name``, ``arguments`` and ``command`` are updatable: an ACP agent may tell them late)
TOOL_CALL_SET_AT_APPEND = frozenset({
    "id", "ts", "call_id", "patch", "path", "mcp_server", "mcp_tool", "response_id",
})


def _hints(cls: type[msgspec.Struct]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _without_none(tp: Any) -> set[Any]:
    """The types of ``tp`` other than ``None`` (``X | None`` → ``{X}``; ``X`` → ``{X}``)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return {t for t in typing.get_args(tp) if t is not type(None)}
    return {tp}


def _owners(field: str) -> list[type[ev.ItemBase]]:
    return [cls for cls in ITEM_KINDS if field in cls.__struct_fields__]


def test_the_update_event_is_split_into_appends_and_replacements() -> None:
    fields = set(ev.SessionItemUpdated.__struct_fields__)
    assert set(APPEND_FIELDS) | set(REPLACE_FIELDS) == fields - {"item_id"}
    assert not set(APPEND_FIELDS) & set(REPLACE_FIELDS)
    assert APPEND_FIELDS["text_delta"] == "text"
    assert APPEND_FIELDS["output_delta"] == "output"
    assert "status" in REPLACE_FIELDS and "output" in REPLACE_FIELDS


def test_split_keeps_order_and_skips_the_address_and_the_tag() -> None:
    appends, replaces = split_fields(["type", "item_id", "b", "x_delta", "a", "y_delta"])
    assert list(appends.items()) == [("x_delta", "x"), ("y_delta", "y")]
    assert replaces == ("b", "a")


def test_every_replacement_is_an_item_field_of_the_same_type() -> None:
    update = _hints(ev.SessionItemUpdated)
    defaults = {f.name: f.default for f in msgspec.structs.fields(ev.SessionItemUpdated)}
    for name in REPLACE_FIELDS:
        owners = _owners(name)
        assert owners, f"SessionItemUpdated.{name} is no field of any item kind"
        for cls in owners:
            assert _without_none(_hints(cls)[name]) == _without_none(update[name]), (
                f"{cls.__name__}.{name} and SessionItemUpdated.{name} differ in type")
        # ``None`` means "unchanged": an update that does not name the field leaves it alone.
        assert defaults[name] is None, f"SessionItemUpdated.{name} must default to None"


def test_every_delta_appends_to_a_text_field_of_an_item() -> None:
    update = _hints(ev.SessionItemUpdated)
    for name, target in APPEND_FIELDS.items():
        assert update[name] is str, f"SessionItemUpdated.{name} must be a str"
        owners = _owners(target)
        assert owners, f"SessionItemUpdated.{name} appends to {target!r}, no field of any item"
        for cls in owners:
            assert _hints(cls)[target] is str, f"{cls.__name__}.{target} is not a str"


def test_every_tool_call_field_is_updatable_or_set_at_append() -> None:
    updatable = set(REPLACE_FIELDS) | set(APPEND_FIELDS.values())
    fields = set(ev.ToolCall.__struct_fields__)
    missing = fields - updatable - TOOL_CALL_SET_AT_APPEND
    assert not missing, (
        f"ToolCall field(s) {sorted(missing)}: add them to SessionItemUpdated (then regenerate "
        "web/item_fields.js with `uv run python -m codey_protocol.schema "
        "web/protocol.schema.json`), or to TOOL_CALL_SET_AT_APPEND in this test if they never "
        "change after the call is appended")
    assert not TOOL_CALL_SET_AT_APPEND - fields, "stale names in TOOL_CALL_SET_AT_APPEND"
    assert not TOOL_CALL_SET_AT_APPEND & updatable, "a set-at-append field is updatable"
