"""Write an event of every type as an older release stored it: the test data of upcasting.

Run it with the *older* release's code, from a git worktree of that commit with its own
environment, so the rows are what that code wrote (its structs, its encoder, its SQLite log)::

    git worktree add --detach /work/wt-old-745192a 745192a
    (cd /work/wt-old-745192a && uv sync --all-packages --all-extras)
    /work/wt-old-745192a/.venv/bin/python scripts/old_event_rows.py \
        > packages/protocol/tests/unit/data/rows_745192a.ndjson

Each output line is one stored envelope, byte for byte as that release's ``SqliteEventLog``
put it in the ``events`` table: one event of every type of its ``Event`` union, then one
``session_item_appended`` per item kind and one ``action_requested`` per action type, every
field filled (a required one with a sample value, the others with their defaults, as the
code of then wrote them). ``codey_protocol.upcasting`` and the event-log contract read them.
The next release that changes an event's shape adds the file of the release before it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
import typing
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

# imported from whichever tree runs this script (the older release's, on purpose)
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.eventlog import SqliteEventLog


def sample(t: mi.Type, n: int) -> Any:
    """A value of type ``t``: a string or number varied by ``n``, a literal's last value."""
    if isinstance(t, mi.UnionType):
        return sample(next(x for x in t.types if not isinstance(x, mi.NoneType)), n)
    if isinstance(t, mi.LiteralType):
        return t.values[-1]
    if isinstance(t, mi.BoolType):
        return True
    if isinstance(t, mi.IntType):
        return 40 + n
    if isinstance(t, mi.FloatType):
        return 0.5 + n
    if isinstance(t, mi.StrType):
        return f"sample {n}"
    if isinstance(t, mi.ListType):
        return [sample(t.item_type, n)]
    if isinstance(t, mi.DictType):
        return {f"k{n}": sample(t.value_type, n)}
    if isinstance(t, mi.AnyType):
        return {"n": n}
    if isinstance(t, mi.StructType):
        return sample_struct(t.cls, n)
    raise TypeError(f"no sample for {t!r}")


def sample_struct(cls: type[Any], n: int = 1, **given: Any) -> Any:
    """``cls`` with its required fields sampled (the others keep their defaults)."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    fields = {f.name: sample(f.type, n) for f in info.fields
              if f.required and f.name not in given}
    return cls(**fields, **given)


def events() -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for n, cls in enumerate(typing.get_args(ev.Event), start=1):
        out.append(("s1", sample_struct(cls, n)))
    for n, cls in enumerate(typing.get_args(ev.Item), start=1):
        out.append(("s1", ev.SessionItemAppended(item=sample_struct(cls, n, id=f"i{n}"))))
    for n, cls in enumerate(typing.get_args(wk.ActionMessage), start=1):
        out.append(("s1", ev.ActionRequested(
            action_id=f"a{n}", item_id="i1", worker_id="w1",
            action=sample_struct(cls, n, action_id=f"a{n}", session_id="s1"))))
    return out


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.db"
        log = SqliteEventLog(path)
        await log.open()
        try:
            await log.append(events())
        finally:
            await log.close()
        conn = sqlite3.connect(path)
        try:
            for (blob,) in conn.execute("SELECT envelope FROM events ORDER BY seq"):
                msgspec.json.decode(blob)  # one line of JSON each
                sys.stdout.buffer.write(bytes(blob) + b"\n")
        finally:
            conn.close()


if __name__ == "__main__":
    asyncio.run(main())
