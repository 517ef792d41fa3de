"""``web/fold_constants.js``: what the browser's fold shares with the server's, generated.

The web client's store (``web/store.js``) is the server's fold written again in JavaScript.
Two kinds of facts in it are not logic but data, and come from here instead of a hand copy:

* the fold's constants (:data:`CONSTANTS`: caps and lists of codes from
  :mod:`codey_protocol.state`);
* the state structs' defaults: ``fillX(fields)`` fills in the defaults of state struct ``X``,
  so the objects the JS fold creates have the keys and defaults of the objects the Python
  fold creates.

Events need no such filling: the browser receives every event complete, in the current shape
(an event stored by an older release is upcast on the server, :mod:`codey_protocol.upcasting`,
and sent with every field), so a handler reads each field as the Python fold does.

Every struct reachable from ``State`` that has a default, or holds a struct that has one, gets
a ``fillX`` function that spells out its fields (static property names, like ``applyUpdate``
in ``item_fields.js``, keep the fold fast). A tagged union gets a table from tag to function,
named after its members' common base class.

``python -m codey_protocol.schema OUT`` writes the module next to the schema, and
``packages/protocol/tests/unit/test_foldjs.py`` regenerates it and diffs.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from typing import Any

import msgspec
import msgspec.inspect as mi

from codey_protocol import state

__all__ = ["CONSTANTS", "FOLD_CONSTANTS_JS", "render"]

#: The module :func:`render` writes, next to ``protocol.schema.json``.
FOLD_CONSTANTS_JS = "fold_constants.js"

#: ``{JS name: (value, what it is)}``: the constants both folds use, from
#: :mod:`codey_protocol.state`.
CONSTANTS: dict[str, tuple[Any, str]] = {
    "MAX_CHANGED_PATHS": (state.MAX_CHANGED_PATHS,
                          "`changed_paths` keeps the most recent paths only."),
    "SCHEDULE_RUNS_KEPT": (state.SCHEDULE_RUNS_KEPT,
                           "Runs kept per schedule in `runs` (the log keeps them all)."),
    "TRIGGER_DELIVERIES_KEPT": (state.TRIGGER_DELIVERIES_KEPT,
                                "Deliveries kept per trigger (the log keeps them all)."),
    "COMPACTION_ENDED": (state.COMPACTION_ENDED,
                         "Notice codes that end a requested compaction without a summary."),
    "WORKING_STATUSES": (state.WORKING_STATUSES,
                         "Session statuses in which its board task counts as in progress."),
    "PROCESS_OUTPUT_KEPT": (state.PROCESS_OUTPUT_KEPT,
                            "Characters (code points) of a process's output a session keeps."),
    "PROCESS_TAIL_KEPT": (state.PROCESS_TAIL_KEPT,
                          "Characters of a process's live output tail a browser keeps."),
    "PROCESSES_ENDED_KEPT": (state.PROCESSES_ENDED_KEPT,
                             "Ended processes a session keeps listed."),
    "BUSY_STATUSES": (state.BUSY_STATUSES,
                      "Session statuses whose time counts in `busy_seconds`."),
    "MODEL_CHANGED": (state.MODEL_CHANGED,
                      "The code of the notice the fold adds where a session's model changed."),
    "HOOK_RUNS_KEPT": (state.HOOK_RUNS_KEPT, "Hook runs a session keeps (`hook_runs`)."),
}

# (expression naming a value that is neither undefined nor null) -> statements that fill it
_Filler = Callable[[str], list[str]]


class _Writer:
    """Walks the structs and writes one ``fillX`` per struct that has something to fill."""

    def __init__(self) -> None:
        self.functions: dict[type[Any], list[str]] = {}  # in the order first reached
        self.unions: dict[str, list[str]] = {}  # dispatch function name -> its lines
        self._union_members: dict[str, tuple[type[Any], ...]] = {}
        self._needs: dict[type[Any], bool] = {}

    def filler(self, t: mi.Type) -> _Filler | None:
        """How to fill a value of type ``t`` that is not null (None: nothing to fill)."""
        if isinstance(t, mi.StructType):
            if not self._struct(t):
                return None
            name = _fill_name(t.cls)
            return lambda x: [f"{name}({x});"]
        if isinstance(t, mi.UnionType):
            structs = [m for m in t.types if isinstance(m, mi.StructType)]
            fillers = [self.filler(m) for m in t.types
                       if not isinstance(m, (mi.StructType, mi.NoneType))]
            if len(structs) > 1:
                fillers.append(self._tagged(structs))
            elif structs:
                fillers.append(self.filler(structs[0]))
            found = [f for f in fillers if f is not None]
            if len(found) > 1:  # which one applies would depend on the value's JS type
                raise TypeError(f"a union of several types that hold structs: {t}")
            return found[0] if found else None
        if isinstance(t, (mi.ListType, mi.DictType)):
            item = t.item_type if isinstance(t, mi.ListType) else t.value_type
            each = self.filler(item)
            if each is None:
                return None
            of = "{}" if isinstance(t, mi.ListType) else "Object.values({})"
            return lambda x: [f"for (const x of {of.format(x)}) {{",
                              *_indent(_guarded(item, each, "x")), "}"]
        return None  # scalars, Any, tuples of scalars: nothing to fill

    def _struct(self, t: mi.StructType) -> bool:
        """Write ``fillX`` for ``t`` unless written; True when ``t`` has something to fill."""
        if t.cls in self._needs:
            return self._needs[t.cls]
        self._needs[t.cls] = False  # (no struct holds itself; this ends a cycle if one does)
        self.functions[t.cls] = []  # keeps first-reached order for what it reaches next
        body: list[str] = []
        for f in t.fields:
            nested = self.filler(f.type)
            access = f"v.{f.encode_name}"
            if f.required:
                if nested is not None:
                    body += _guarded(f.type, nested, access)
                continue
            default = _default_js(f)
            if nested is None and "\n" not in default:
                body.append(f"if ({access} === undefined) {access} = {default};")
                continue
            body += [f"if ({access} === undefined) {{",
                     *_indent(f"{access} = {default};".split("\n"))]
            if nested is not None:
                guard = f" if ({access} != null)" if _nullable(f.type) else ""
                body += [f"}} else{guard} {{", *_indent(nested(access))]
            body.append("}")
        if not body:
            del self.functions[t.cls]
            return False
        self._needs[t.cls] = True
        self.functions[t.cls] = [
            f"/** `{t.cls.__name__}` ({_module(t.cls)}): its defaults filled in. */",
            f"export function {_fill_name(t.cls)}(v) {{",
            *_indent(body),
            "  return v;",
            "}",
        ]
        return True

    def _tagged(self, structs: list[mi.StructType]) -> _Filler | None:
        """A tagged union: a table from tag to ``fillX``, and a function that looks it up."""
        tag_fields = {m.tag_field for m in structs}
        if len(tag_fields) != 1 or None in tag_fields:
            raise TypeError(f"a union of untagged structs: {[m.cls for m in structs]}")
        tag_field = tag_fields.pop()
        classes = tuple(m.cls for m in structs)
        base = _common_base(classes)
        name = _fill_name(base)
        if name in self._union_members:
            if self._union_members[name] != classes:
                raise TypeError(f"two unions of {base.__name__} subclasses; name them apart")
            return (lambda x: [f"{name}({x});"]) if name in self.unions else None
        self._union_members[name] = classes
        table = _constant_name(base.__name__)
        entries = [f"  {m.tag}: {_fill_name(m.cls)}," for m in structs if self._struct(m)]
        if not entries:
            return None
        self.unions[name] = [
            f"const {table} = {{",
            *entries,
            "};",
            "",
            "/**",
            f" * Any `{base.__name__}` subclass, by its `{tag_field}`: its defaults filled in (an "
            f"unknown `{tag_field}`",
            " * is left as it is).",
            " */",
            f"export function {name}(v) {{",
            f"  const fill = {table}[v.{tag_field}];",
            "  if (fill !== undefined) fill(v);",
            "  return v;",
            "}",
        ]
        return lambda x: [f"{name}({x});"]


def render() -> str:
    """``web/fold_constants.js``: the fold's constants and every ``fillX``."""
    writer = _Writer()
    writer.filler(mi.type_info(state.State))
    parts = [
        "// Generated by `uv run python -m codey_protocol.schema web/protocol.schema.json` from\n"
        "// codey_protocol (state.py's constants, every struct's defaults). Do not edit: change\n"
        "// the Python side and regenerate. What it is for: codey_protocol/foldjs.py.\n",
    ]
    for name, (value, what) in CONSTANTS.items():
        literal = json.dumps(msgspec.to_builtins(value))
        if isinstance(value, (tuple, list)):
            literal = f"Object.freeze({literal})"
            if len(literal) + len(name) > 80:
                items = textwrap.wrap(" ".join(json.dumps(v) + "," for v in value), width=98)
                literal = "Object.freeze([\n" + "".join(f"  {line}\n" for line in items) + "])"
        parts.append(f"/** {what} */\nexport const {name} = {literal};\n")
    parts += ["\n".join(lines) + "\n" for lines in writer.unions.values()]
    parts += ["\n".join(lines) + "\n" for lines in writer.functions.values()]
    return "\n".join(parts)


def _default_js(f: mi.Field) -> str:
    """The field's default as a JS literal (a fresh object each time it is evaluated); an
    object that would make a long line takes a line per key."""
    value = msgspec.to_builtins(
        f.default_factory() if f.default is msgspec.NODEFAULT else f.default)
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > 60 and isinstance(value, dict):
        lines = [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},"
                 for k, v in value.items()]
        text = "\n".join(["{", *lines, "}"])
    return text


def _nullable(t: mi.Type) -> bool:
    return isinstance(t, mi.UnionType) and any(isinstance(m, mi.NoneType) for m in t.types)


def _guarded(t: mi.Type, fill: _Filler, x: str) -> list[str]:
    """``fill(x)``, behind a null check when a value of ``t`` may be null."""
    if not _nullable(t):
        return fill(x)
    return [f"if ({x} != null) {{", *_indent(fill(x)), "}"]


def _module(cls: type[Any]) -> str:
    return cls.__module__.rsplit(".", 1)[-1] + ".py"


def _fill_name(cls: type[Any]) -> str:
    return f"fill{cls.__name__}"


def _constant_name(name: str) -> str:
    """``ItemBase`` → ``ITEM_BASE``."""
    return "".join(f"_{ch}" if ch.isupper() and i else ch for i, ch in enumerate(name)).upper()


def _common_base(classes: tuple[type[Any], ...]) -> type[Any]:
    """The nearest class every one of ``classes`` derives from (below ``msgspec.Struct``)."""
    for base in classes[0].__mro__:
        if base is msgspec.Struct:
            break
        if all(issubclass(c, base) for c in classes):
            return base
    raise TypeError(f"no common base below msgspec.Struct: {classes}")


def _indent(lines: list[str]) -> list[str]:
    return [f"  {line}" for line in lines]
