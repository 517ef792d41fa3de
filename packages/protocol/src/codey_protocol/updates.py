"""How a :class:`~codey_protocol.events.SessionItemUpdated` changes an item: one rule, both folds.

The update event's own fields are the list of what can change, so making an item field
updatable is two edits: the item struct and ``SessionItemUpdated``. The rule, applied to the
item named by ``item_id``:

* a field ``X_delta`` (a string) is appended to the item's ``X``, when it is not empty and the
  item has an ``X``;
* every other field, when it is not ``None``, replaces the item's field of the same name, when
  the item has one.

Appends are applied before replacements, so an update carrying both ``output_delta`` and
``output`` ends with ``output``. An update for a field the item does not have is ignored (the
fold never raises on a well-formed event).

The server's fold (``codey_server.core.fold``) reads :data:`APPEND_FIELDS` and
:data:`REPLACE_FIELDS`. The browser's fold (``web/store.js``) imports ``web/item_fields.js``,
which :mod:`codey_protocol.schema` generates from the JSON Schema of ``SessionItemUpdated``
with :func:`split_fields`: the same two lists, and ``applyUpdate(item, e)``, this rule
written out field by field. A test regenerates it and diffs.
"""

from __future__ import annotations

from collections.abc import Iterable

from codey_protocol.events import SessionItemUpdated

__all__ = ["APPEND_FIELDS", "DELTA_SUFFIX", "REPLACE_FIELDS", "split_fields"]

DELTA_SUFFIX = "_delta"

# ``item_id`` addresses the item; ``type`` is the tag (a property in the JSON Schema only).
_NOT_CHANGES = frozenset({"item_id", "type"})


def split_fields(names: Iterable[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Split update field names into ``({delta field: item field}, replace fields)``.

    Order is kept, so the struct's field order and the schema's property order give the same
    lists.
    """
    appends: dict[str, str] = {}
    replaces: list[str] = []
    for name in names:
        if name in _NOT_CHANGES:
            continue
        if name.endswith(DELTA_SUFFIX):
            appends[name] = name[: -len(DELTA_SUFFIX)]
        else:
            replaces.append(name)
    return appends, tuple(replaces)


#: ``{update field: item field}`` for the fields that append (``text_delta`` → ``text``).
APPEND_FIELDS: dict[str, str]
#: The update fields that, when not ``None``, replace the item field of the same name.
REPLACE_FIELDS: tuple[str, ...]
APPEND_FIELDS, REPLACE_FIELDS = split_fields(SessionItemUpdated.__struct_fields__)
