"""One write path: no module of the server appends to the log but the engine, and the engine
appends only what a decision decided (``Engine.execute``, ``Engine.submit``)."""

from __future__ import annotations

import ast
from pathlib import Path

import codey_server
from codey_server.core.engine import Engine

ROOT = Path(codey_server.__path__[0])
#: where appending is the point: the engine's private write, and the log's own backends
ALLOWED = {"core/engine.py", "eventlog/base.py", "eventlog/memory.py", "eventlog/sqlite.py",
           "eventlog/postgres.py", "eventlog/contract.py"}


def _appends(tree: ast.AST) -> list[tuple[int, str]]:
    """Each call of ``<…>.append`` / ``<…>._append`` whose receiver is an engine, a log or a
    store (by its name), with its line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "_append"):
            receiver = ast.unparse(node.func.value)
            last = receiver.rsplit(".", 1)[-1]
            if node.func.attr == "_append" or last in ("engine", "log", "eventlog", "store"):
                found.append((node.lineno, f"{receiver}.{node.func.attr}"))
    return found


def test_nothing_outside_the_engine_appends_to_the_log() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        for line, call in _appends(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{rel}:{line}: {call}")
    assert offenders == [], "append only through Engine.execute / Engine.submit:\n" + \
        "\n".join(offenders)


def test_the_scan_finds_an_append_when_there_is_one() -> None:
    """(so the test above can fail)"""
    tree = ast.parse("async def f(engine, self):\n"
                     "    await engine.append([])\n"
                     "    await self.engine._append([])\n"
                     "    await self.store.append([])\n"
                     "    items.append(1)\n")
    assert [call for _, call in _appends(tree)] == [
        "engine.append", "self.engine._append", "self.store.append"]


def test_the_engine_offers_no_public_append() -> None:
    assert not hasattr(Engine, "append")
    assert {"execute", "submit"} <= set(dir(Engine))
