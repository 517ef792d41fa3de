"""A commit takes the files the user ticked, and nothing else (issue 33, item 5: ``git add -A``
committed a test run's ``__pycache__/*.pyc`` under "Fix add()", and every parallel worktree
then conflicted on them).

A session in a worktree fixes ``add()`` and runs the tests in the sandbox, which leaves no
bytecode cache behind (``PYTHONDONTWRITEBYTECODE``). A cache, a build's output and a changed
image are then there anyway (written by hand, as a command outside the sandbox would): the
Changes view lists them unticked with a note saying why, the image with its sizes instead of
"+? −?"; Commit takes only ``app.py``, and its message box is empty after. Ticking the image
commits it alone. Everything left out is still in the worktree.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Locator, Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

pytestmark = pytest.mark.skipif(
    subprocess.run(["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True,
                   check=False).returncode != 0 if os.path.exists("/usr/bin/bwrap") else True,
    reason="needs a working bubblewrap (scripts/test installs it)")

SHOTS = Path(__file__).resolve().parent / "test-results"
GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}

APP = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = ("import unittest\n\nfrom app import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
LOGO = b"\x89PNG\r\n\x1a\n\x00" + bytes(range(256)) * 4  # 1033 bytes, binary
PYC = "__pycache__/app.cpython-311.pyc"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout


def committed(wt: Path) -> list[str]:
    """The files the last commit holds, as ``status<TAB>path``."""
    return git(wt, "show", "--name-status", "--format=", "HEAD").splitlines()


def file_box(changes: Locator, path: str) -> Locator:
    return changes.locator(f"[data-testid=changed-file][data-path='{path}']")


def test_a_commit_takes_the_ticked_files_and_leaves_caches_and_binaries_out(
        stack: Stack, page: Page) -> None:
    write: dict[str, Any] = {"name": "write_file",
                             "arguments": {"path": "app.py", "content": FIXED}}
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "Fix add()"}, "reply": {"calls": [write]}},
        {"match": {"tool": "write_file"},
         "reply": {"calls": [stack.shell("python3", "-m", "unittest", "-q")]}},
        {"match": {"tool": "shell", "tool_output": "OK"}, "reply": {"text": "Fixed."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    repo = Path(stack.workdir(worker, "calc"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Dev")
    git(repo, "config", "user.email", "dev@example.com")
    (repo / "app.py").write_text(APP)
    (repo / "test_app.py").write_text(TEST)
    (repo / "logo.png").write_bytes(LOGO)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start")

    stack.open(page)
    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(repo), "prompt": "Fix add()",
        "policy": "full-auto", "worktree": {"base": "main"}})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    view = stack.open_session(page, sid)
    expect(stack.items(page, "assistant_message").last).to_have_text("Fixed.")
    wt = Path(server.http.get(f"/api/sessions/{sid}").json()["workdir"])
    assert (wt / "app.py").read_text() == FIXED
    # the tests ran in the sandbox and left no bytecode cache in the worktree
    assert not (wt / "__pycache__").exists(), sorted(p.name for p in wt.iterdir())

    # what a command outside the sandbox (or a person) would leave: a cache, a build's output,
    # a new version of the image
    (wt / "__pycache__").mkdir()
    (wt / PYC).write_bytes(b"\xa7\r\r\n" + bytes(64))
    (wt / "dist").mkdir()
    (wt / "dist" / "bundle.js").write_text("console.log('built')\n")
    (wt / "logo.png").write_bytes(LOGO + bytes(1015))  # 2048 bytes

    view.get_by_test_id("open-changes").click()
    changes = page.get_by_test_id("changes-dialog")
    expect(changes.get_by_test_id("changed-file")).to_have_count(4)
    message = changes.get_by_test_id("commit-message")
    message.fill("Fix add()")
    changes.get_by_test_id("commit").click()
    expect(changes.get_by_test_id("ship-result")).to_contain_text("Committed")
    # only the fix: not the cache, the build output or the image
    assert committed(wt) == ["M\tapp.py"]
    expect(message).to_have_value("")  # the next commit needs a message of its own

    # the boxes: the cache and the build output unticked with why, the image with its sizes
    pyc = file_box(changes, PYC)
    expect(pyc.get_by_test_id("commit-pick")).not_to_be_checked()
    expect(pyc.get_by_test_id("pick-note")).to_contain_text(
        "Generated: a Python bytecode cache. Left out of the commit unless you tick it")
    expect(file_box(changes, "dist/bundle.js").get_by_test_id("pick-note")).to_contain_text(
        "build output")
    logo = file_box(changes, "logo.png")
    expect(logo.get_by_test_id("binary-size")).to_have_text("1.0 KiB → 2.0 KiB (+1015 B)")
    expect(logo).not_to_contain_text("+?")
    expect(logo.get_by_test_id("pick-note")).to_have_text(
        "A binary file: left out of the commit unless you tick it.")
    # app.py is committed and has nothing more: no box
    expect(file_box(changes, "app.py").get_by_test_id("commit-pick")).to_have_count(0)
    expect(changes.get_by_test_id("commit-count")).to_have_text("0 of 3 files to commit")
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "commit-choice.png"))

    # ticking the image commits it alone; the box does not fold the file away
    logo.get_by_test_id("commit-pick").check()
    expect(logo).to_have_attribute("open", "")
    expect(changes.get_by_test_id("commit-count")).to_have_text("1 of 3 files to commit")
    changes.get_by_test_id("commit").click()
    expect(changes.get_by_test_id("ship-result")).to_contain_text("Write a message first")
    assert committed(wt) == ["M\tapp.py"]
    message.fill("A bigger logo")
    changes.get_by_test_id("commit").click()
    expect(changes.get_by_test_id("ship-result")).to_contain_text("Committed")
    assert committed(wt) == ["M\tlogo.png"]
    assert git(wt, "status", "--porcelain", "--untracked-files=all").splitlines() == [
        f"?? {PYC}", "?? dist/bundle.js"]
    expect(changes.get_by_test_id("commit-count")).to_have_text("0 of 2 files to commit")
