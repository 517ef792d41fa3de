"""The message reference of ``docs/protocol.md``, generated from the structs.

Every struct that crosses a boundary gets a section: its heading (its tag, when it is a
member of a tagged union, and its name), its docstring, and a table of its fields with their
types as the source spells them, their defaults and what the source says of them (a ``#:``
comment above the field, or a ``#`` comment after it). The literal aliases the tables name
get a table of their values.

The page stays hand-written around the tables: :func:`update` replaces only what lies between
a pair of markers, ``<!-- reference:NAME -->`` and ``<!-- /reference:NAME -->``, where NAME is
one of :data:`GROUPS` or ``aliases``. Each group lists the members of its union (or its
structs); a struct they hold goes with the one group that reaches it, or under
``shared`` when several do.

    uv run python -m codey_protocol.reference docs/protocol.md    # rewrite the tables

``packages/protocol/tests/unit/test_reference.py`` runs :func:`update` on the committed page
and fails when anything would change.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from codey_protocol import client, events, state, worker

__all__ = ["GROUPS", "render", "update"]


def _members(union: Any) -> tuple[type[Any], ...]:
    return tuple(typing.get_args(union))


#: ``{marker name: the structs it documents first}``, in the page's order.
GROUPS: dict[str, tuple[type[Any], ...]] = {
    "client-to-server": _members(client.ClientToServer),
    "server-to-client": _members(client.ServerToClient),
    "events": (*_members(events.Event), events.Envelope),
    "items": _members(events.Item),
    "state": (state.State,),
    "server-to-worker": _members(worker.ServerToWorker),
    "worker-to-server": (*_members(worker.WorkerToServer), worker.AcpUpdate),
    "outcomes": _members(worker.ActionOutcome),
    "pairing": (worker.PairRequest, worker.PairTicket, worker.PairStatus),
}

#: The group of the structs several groups hold.
SHARED = "shared"
#: The marker of the literal aliases' table.
ALIASES = "aliases"

_MODULES = (client, events, state, worker)


def render() -> dict[str, str]:
    """``{marker name: its markdown}`` for every group, ``shared`` and ``aliases``."""
    placed = _place()
    out = {name: "\n".join(_section(cls) for cls in classes) for name, classes in placed.items()}
    out[ALIASES] = _aliases([cls for classes in placed.values() for cls in classes])
    return out


def update(page: str) -> str:
    """``page`` with the text between each pair of markers replaced by :func:`render`'s.
    Raises ValueError when a marker is missing or doubled (a tool's error, not a frame's:
    no ProtocolError)."""
    parts = render()
    for name, text in parts.items():
        start, end = f"<!-- reference:{name} -->", f"<!-- /reference:{name} -->"
        if page.count(start) != 1 or page.count(end) != 1:
            raise ValueError(f"docs/protocol.md needs {start} ... {end} once")
        head, rest = page.split(start)
        _, tail = rest.split(end)
        page = f"{head}{start}\n\n{text}\n{end}{tail}"
    return page


# -- which struct goes where -------------------------------------------------------------------

def _place() -> dict[str, list[type[Any]]]:
    roots = {cls: name for name, classes in GROUPS.items() for cls in classes}
    reached: dict[type[Any], list[str]] = {}  # nested struct -> groups that hold it
    for name, classes in GROUPS.items():
        for cls in classes:
            for nested in _nested(cls):
                if nested not in roots and name not in reached.setdefault(nested, []):
                    reached[nested].append(name)
    placed: dict[str, list[type[Any]]] = {name: list(classes) for name, classes in GROUPS.items()}
    placed[SHARED] = []
    for cls, names in reached.items():
        placed[names[0] if len(names) == 1 else SHARED].append(cls)
    return placed


def _nested(cls: type[Any]) -> Iterator[type[Any]]:
    """The structs ``cls`` holds, at any depth, in the order first reached."""
    seen: set[type[Any]] = {cls}
    todo = [f.type for f in _info(cls).fields]
    while todo:
        t = todo.pop(0)
        if isinstance(t, mi.StructType):
            if t.cls not in seen:
                seen.add(t.cls)
                yield t.cls
                todo.extend(f.type for f in t.fields)
        elif isinstance(t, mi.UnionType):
            todo.extend(t.types)
        elif isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
            todo.append(t.item_type)
        elif isinstance(t, mi.DictType):
            todo.append(t.value_type)
        elif isinstance(t, mi.TupleType):
            todo.extend(t.item_types)


def _info(cls: type[Any]) -> mi.StructType:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return info


# -- one struct --------------------------------------------------------------------------------

def _section(cls: type[Any]) -> str:
    info = _info(cls)
    head = f"#### `{info.tag}` — {cls.__name__}" if info.tag is not None else (
        f"#### {cls.__name__}")
    parts = [head, ""]
    doc = cls.__dict__.get("__doc__")
    if doc:
        parts += [_markdown(inspect.cleandoc(doc)), ""]
    if info.fields:
        notes = _field_notes(cls)
        parts += ["| field | type | default |", "|---|---|---|"]
        for f in info.fields:
            default = "required" if f.required else f"`{_default(f)}`"
            note = notes.get(f.name)
            cell = f"{default} — {note}" if note else default
            parts.append(f"| `{f.encode_name}` | `{_cell(_annotation(cls, f.name))}` | "
                         f"{_cell(cell)} |")
        parts.append("")
    else:
        parts += ["No fields.", ""]
    return "\n".join(parts)


def _annotation(cls: type[Any], name: str) -> str:
    """The field's type as its class spells it (``from __future__ import annotations``)."""
    for base in cls.__mro__:
        ann = inspect.get_annotations(base)
        if name in ann:
            text = ann[name]
            return text if isinstance(text, str) else inspect.formatannotation(text)
    raise TypeError(f"{cls.__name__}.{name} has no annotation")


def _default(f: mi.Field) -> str:
    if f.default is not msgspec.NODEFAULT:
        return repr(f.default)
    factory = f.default_factory
    if isinstance(factory, type) and issubclass(factory, msgspec.Struct):
        return f"{factory.__name__}()"
    return repr(factory())


_FIELD = re.compile(r"^    (\w+)\s*:(?!=)")
_NOT_NOTES = re.compile(r"^(type: ignore|noqa|fmt: |pragma)")


def _field_notes(cls: type[Any]) -> dict[str, str]:
    """``{field: what its comment says}``: the ``#:`` lines above each field of ``cls`` and
    its bases, or the ``#`` comment that ends the field's first line."""
    notes: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        own = inspect.get_annotations(base)
        if base is msgspec.Struct or not issubclass(base, msgspec.Struct) or not own:
            continue
        pending: list[str] = []
        for line in _class_source(base).splitlines()[1:]:
            stripped = line.strip()
            if stripped.startswith("#:"):
                pending.append(stripped[2:].strip())
                continue
            m = _FIELD.match(line)
            if m and m.group(1) in own:
                comment = _trailing_comment(line)
                text = " ".join(pending) or comment
                if text:
                    notes[m.group(1)] = _markdown(text)
                else:
                    notes.pop(m.group(1), None)
            pending = []
    return notes


def _class_source(cls: type[Any]) -> str:
    """``inspect.getsource(cls)``, from one parse of its module: ``getsource`` parses the whole
    module again for every class (seven seconds for the reference's 400 classes)."""
    return _module_classes(sys.modules[cls.__module__].__file__ or "").get(
        cls.__qualname__) or inspect.getsource(cls)


@functools.cache
def _module_classes(path: str) -> dict[str, str]:
    """``{qualified name: source}`` of the classes defined at a module's top level."""
    if not path:
        return {}
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    found: dict[str, str] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found[node.name] = "".join(lines[start - 1:node.end_lineno])
    return found


def _trailing_comment(line: str) -> str:
    """The ``# ...`` at the end of a source line (outside strings), or ""."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            text = line[i + 1:].strip()
            return "" if _NOT_NOTES.match(text) else text
    return ""


_ROLE = re.compile(r":(?:class|data|func|meth|attr|mod|exc|obj):`~?(?:[\w.]*\.)?([^`]+)`")


def _markdown(text: str) -> str:
    """reStructuredText's inline code and cross-references as markdown."""
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# -- the literal aliases -----------------------------------------------------------------------

def _aliases(classes: list[type[Any]]) -> str:
    """A table of the ``Literal`` aliases the fields of ``classes`` are typed with."""
    aliases: dict[str, tuple[Any, ...]] = {}
    for module in _MODULES:
        for name, value in vars(module).items():
            if typing.get_origin(value) is typing.Literal:
                aliases[name] = typing.get_args(value)
    used: dict[str, None] = {}
    for cls in classes:
        for f in _info(cls).fields:
            for word in re.findall(r"\w+", _annotation(cls, f.name)):
                if word in aliases:
                    used[word] = None
    rows = ["| alias | values |", "|---|---|"]
    for name in sorted(used):
        values = ", ".join(f"`{v!r}`" if v == "" else f"`{v}`" for v in aliases[name])
        rows.append(f"| `{name}` | {values} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the reference tables of the page at ``argv[0]`` (docs/protocol.md)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m codey_protocol.reference docs/protocol.md\n")
        return 2
    page = Path(args[0])
    page.write_text(update(page.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
