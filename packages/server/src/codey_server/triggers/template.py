"""The prompt template of a trigger: ``{{payload.issue.title}}``, ``{{payload.commits[0].id}}``,
``{{event}}``. A small language of our own, on purpose: a field is a dotted path with array
indices, nothing else (no calls, no filters, no code), so a template cannot do more than read
the payload.

Rendering is one pass over the *template*: a value put in is never read again, so a comment
body holding ``{{payload.secret}}`` stays that text. A field the payload lacks renders empty
and is listed (the delivery shows it); JSON ``null`` renders empty too, but is present.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FIELD", "MAX_VALUE_CHARS", "Rendered", "problems", "render"]

_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
_STEP = r"(?:\.[A-Za-z0-9_-]+|\[[0-9]{1,6}\])"
#: one field: ``{{ root.key[0].key }}`` (spaces inside the braces allowed)
FIELD = re.compile(rf"\{{\{{\s*({_NAME}{_STEP}*)\s*\}}\}}")
_ANY = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_STEPS = re.compile(_STEP)
#: a value longer than this is cut (a huge comment must not make a huge prompt)
MAX_VALUE_CHARS = 16_000


@dataclass(frozen=True)
class Rendered:
    text: str
    #: the fields the values lacked, in the template's order, each once
    missing: tuple[str, ...]


def problems(template: str, roots: frozenset[str]) -> list[str]:
    """What is wrong with ``template``, in words: braces that are not a field, and fields
    whose root is not one of ``roots``. Empty when nothing is."""
    out: list[str] = []
    for m in _ANY.finditer(template):
        field = FIELD.fullmatch(m.group(0))
        if field is None:
            out.append(f"{m.group(0)[:60]!r} is not a field (a dotted path such as "
                       "{{payload.issue.title}}, with [0] for an array's items)")
            continue
        root = re.match(_NAME, field.group(1))
        assert root is not None
        if root.group(0) not in roots:
            out.append(f"{{{{{field.group(1)}}}}}: unknown name {root.group(0)!r} "
                       f"(one of {', '.join(sorted(roots))})")
    return out


_MISSING = object()


def _lookup(values: Mapping[str, Any], path: str) -> Any:
    root = re.match(_NAME, path)
    assert root is not None
    here: Any = values.get(root.group(0), _MISSING)
    for step in _STEPS.findall(path[root.end():]):
        if step.startswith("["):
            index = int(step[1:-1])
            here = here[index] if isinstance(here, list) and index < len(here) else _MISSING
        else:
            here = here.get(step[1:], _MISSING) if isinstance(here, dict) else _MISSING
        if here is _MISSING:
            break
    return here


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool | int | float):
        text = json.dumps(value)
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"


def render(template: str, values: Mapping[str, Any]) -> Rendered:
    """``template`` with each field replaced by its value in ``values`` (one pass)."""
    missing: list[str] = []

    def one(m: re.Match[str]) -> str:
        value = _lookup(values, m.group(1))
        if value is _MISSING:
            if m.group(1) not in missing:
                missing.append(m.group(1))
            return ""
        return _text(value)

    return Rendered(text=FIELD.sub(one, template), missing=tuple(missing))
