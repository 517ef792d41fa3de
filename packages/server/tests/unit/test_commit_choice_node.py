"""Which files the Changes view ticks for a commit, and how a binary's change reads
(``commitChoice``, ``pickable``, ``commitPaths`` and ``sizeChange`` in ``web/views/changes.js``,
run by node). Caches and build output that ``.gitignore`` does not name, and binaries, are left
out until the user ticks them (issue 33: a test run's ``__pycache__`` went into "Fix add()").

``e2e/test_commit_choice.py`` shows the boxes on the page and the commit that comes of them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

WEB = Path(__file__).resolve().parents[4] / "web"

_NODE = """
const m = await import(process.argv[1]);
const [fn, cases] = JSON.parse(process.argv[2]);
const run = {
  choice: (f) => m.commitChoice(f),
  pickable: (f) => m.pickable(f),
  paths: ([files, ticked]) => m.commitPaths(files, new Map(Object.entries(ticked))),
  size: (f) => m.sizeChange(f),
}[fn];
console.log(JSON.stringify(cases.map(run)));
"""


def js(fn: str, *cases: Any) -> list[Any]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: this test runs web/views/changes.js under "
                    "Node.js (Debian's nodejs; ./scripts/test installs it)", pytrace=False)
    out = subprocess.run([node, "--input-type=module", "-e", _NODE,
                          (WEB / "views" / "changes.js").as_uri(), json.dumps([fn, cases])],
                         capture_output=True, text=True, check=True).stdout
    result: list[Any] = json.loads(out)
    return result


def test_caches_and_build_output_are_unticked_with_what_they_are() -> None:
    generated = ["__pycache__/app.cpython-311.pyc", "src/pkg/__pycache__/x.cpython-312.pyc",
                 "legacy.pyc", "web/node_modules/left-pad/index.js", ".pytest_cache/v/cache/x",
                 ".mypy_cache/3.11/app.meta.json", ".ruff_cache/CACHEDIR.TAG", "dist/app.js",
                 "build/lib/app.py", "pkg/app.egg-info/PKG-INFO", "target/debug/app", "main.o",
                 "lib/native.so", "App.class", ".venv/bin/python", ".coverage", "htmlcov/x.html",
                 ".DS_Store", "docs/.DS_Store", ".next/cache/x"]
    choices = js("choice", *({"path": p, "binary": False} for p in generated))
    assert [c["ticked"] for c in choices] == [False] * len(generated)
    assert {c["kind"] for c in choices} == {"generated"}
    assert choices[0]["note"].startswith("Generated: a Python bytecode cache.")
    assert "add it to .gitignore" in choices[0]["note"]
    assert "installed packages" in choices[3]["note"] and "build output" in choices[7]["note"]


def test_sources_are_ticked_and_names_that_only_look_generated_are_too() -> None:
    sources = ["app.py", "src/build.py", "docs/distribution.md", "rebuild/x.py", "tests/x.py",
               "my_node_modules.txt", "src/output/x.ts", "pycache.md", "lib/so.py"]
    choices = js("choice", *({"path": p, "binary": False} for p in sources))
    assert [c["ticked"] for c in choices] == [True] * len(sources)
    assert {c["note"] for c in choices} == {""}


def test_a_binary_is_unticked_with_a_note() -> None:
    [logo] = js("choice", {"path": "assets/logo.png", "binary": True})
    assert logo == {"ticked": False, "kind": "binary",
                    "note": "A binary file: left out of the commit unless you tick it."}


def test_only_files_with_something_to_commit_get_a_box_and_a_rename_sends_both_names() -> None:
    files = [{"path": "a.py", "committed": True, "uncommitted": True},
             {"path": "done.py", "committed": True, "uncommitted": False},
             {"path": "new.py", "committed": False, "uncommitted": True},
             {"path": "b.py", "old_path": "a_old.py", "committed": False, "uncommitted": True},
             {"path": "x.pyc", "committed": False, "uncommitted": True}]
    assert js("pickable", *files) == [True, False, True, True, True]
    ticked = {"a.py": True, "done.py": True, "new.py": False, "b.py": True, "x.pyc": False}
    assert js("paths", [files, ticked]) == [["a.py", "b.py", "a_old.py"]]
    assert js("paths", [files, {}]) == [[]]


def test_a_binarys_change_is_its_sizes() -> None:
    assert js("size", {"old_size": None, "new_size": 2048},
              {"old_size": 1536, "new_size": None},
              {"old_size": 1000, "new_size": 1300},
              {"old_size": 3 * 1024 * 1024, "new_size": 1024 * 1024},
              {"old_size": 10, "new_size": 10},
              {"binary": True}) == [
        "new, 2.0 KiB", "deleted, 1.5 KiB", "1000 B → 1.3 KiB (+300 B)",
        "3.0 MiB → 1.0 MiB (−2.0 MiB)", "10 B → 10 B (same size)", "binary"]
