"""The committed ``web/protocol.schema.json`` is exactly what the structs generate."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

from codey_protocol import client, events, schema, updates

ROOT = Path(__file__).resolve().parents[4]
COMMITTED = ROOT / "web" / "protocol.schema.json"
REGENERATE = "uv run python -m codey_protocol.schema web/protocol.schema.json"


def _tags(union: Any) -> set[str]:
    return {cls.__struct_config__.tag for cls in typing.get_args(union)}


def test_committed_schema_is_current() -> None:
    assert COMMITTED.is_file(), f"{COMMITTED} is missing; run `{REGENERATE}`"
    committed = COMMITTED.read_text(encoding="utf-8")
    assert schema.render() == committed, (
        f"web/protocol.schema.json is out of date with the structs; run `{REGENERATE}` "
        "from the repo root and commit the result"
    )


def test_render_is_deterministic_json() -> None:
    text = schema.render()
    assert text == schema.render()
    assert text.endswith("}\n")
    doc = json.loads(text)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(doc["properties"]) == {"ClientToServer", "ServerToClient", "Event", "Envelope",
                                      "State"}


def _union_tags_in_schema(doc: dict[str, Any], name: str) -> set[str]:
    """The ``type`` tags a browser-facing union accepts, read from the schema."""
    union = doc["properties"][name]
    tags: set[str] = set()
    for ref in union["anyOf"]:
        target = doc["$defs"][ref["$ref"].rsplit("/", 1)[1]]
        tags.update(target["properties"]["type"]["enum"])
    assert union["discriminator"]["propertyName"] == "type"
    assert set(union["discriminator"]["mapping"]) == tags
    return tags


def test_schema_lists_every_tag_of_the_browser_unions() -> None:
    doc = json.loads(schema.render())
    assert _union_tags_in_schema(doc, "ClientToServer") == _tags(client.ClientToServer)
    assert _union_tags_in_schema(doc, "ServerToClient") == _tags(client.ServerToClient)
    assert _union_tags_in_schema(doc, "Event") == _tags(events.Event)


def test_schema_lists_every_item_kind() -> None:
    doc = json.loads(schema.render())
    kinds: set[str] = set()
    for cls in typing.get_args(events.Item):
        kinds.update(doc["$defs"][cls.__name__]["properties"]["kind"]["enum"])
    assert kinds == _tags(events.Item)


def test_browser_commands_forbid_unknown_fields_in_the_schema() -> None:
    doc = json.loads(schema.render())
    for cls in typing.get_args(client.ClientToServer):
        assert doc["$defs"][cls.__name__].get("additionalProperties") is False, cls.__name__


def test_main_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "protocol.schema.json"
    assert schema.main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == schema.render()


def test_committed_item_fields_module_is_current() -> None:
    committed = COMMITTED.with_name(schema.ITEM_FIELDS_JS)
    assert committed.is_file(), f"{committed} is missing; run `{REGENERATE}`"
    assert schema.render_item_fields() == committed.read_text(encoding="utf-8"), (
        f"web/{schema.ITEM_FIELDS_JS} is out of date with SessionItemUpdated; run "
        f"`{REGENERATE}` from the repo root and commit the result")


def test_the_js_lists_are_read_from_the_schema_and_equal_the_python_lists() -> None:
    doc = json.loads(schema.render())  # the committed file's keys are sorted: compare as sets
    appends, replaces = schema.item_fields(doc)
    assert appends == updates.APPEND_FIELDS
    assert sorted(replaces) == sorted(updates.REPLACE_FIELDS)
    text = schema.render_item_fields()
    for name in (*updates.APPEND_FIELDS, *updates.REPLACE_FIELDS):
        assert f'"{name}"' in text


def test_main_writes_the_item_fields_module_next_to_the_schema(tmp_path: Path) -> None:
    assert schema.main([str(tmp_path / "protocol.schema.json")]) == 0
    written = (tmp_path / schema.ITEM_FIELDS_JS).read_text(encoding="utf-8")
    assert written == schema.render_item_fields()
