"""A session whose worktree was removed runs nothing there, says so, and offers the two ways
on (issue 33, item 2: a follow-up after the worktree was removed made the worker create an
empty folder at the old path and run the tests there: "Ran 0 tests … OK").

1. Removed by Codey (the Changes view's Remove, here its API): a follow-up is refused (409)
   whoever sends it, no folder appears, the session shows why with "Recreate from the branch"
   and "Fork into a new worktree" in place of the prompt box. Recreate makes the worktree
   again at its place from the branch (the committed fix is there) and the next prompt runs
   the tests there.
2. Deleted by hand while the worker was away: the follow-up is taken, but the worker will not
   make the folder again (``worktree_gone``), so no command runs; the session records the
   worktree as removed and says so. "Fork into a new worktree" starts a new session on a new
   branch from the old one, whose worktree has the fix, and the follow-up runs there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Locator, Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

    from codey_testkit.stack import ServerProcess, WorkerProcess

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


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


def script(stack: Stack) -> dict[str, Any]:
    """Fix add() and run the tests; "Run the tests again" runs them verbosely."""
    write = {"name": "write_file", "arguments": {"path": "app.py", "content": FIXED}}
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "Fix add()"}, "reply": {"calls": [write]}},
        {"match": {"tool": "write_file"},
         "reply": {"calls": [stack.shell("python3", "-m", "unittest", "-q")]}},
        {"match": {"user": "Run the tests again"},
         "reply": {"calls": [stack.shell("python3", "-m", "unittest", "-v")]}},
        {"match": {"tool": "shell", "tool_output": "test_add (test_app.T"},
         "reply": {"text": "The tests pass."}},
        {"match": {"tool": "shell", "tool_output": "OK"}, "reply": {"text": "Fixed."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]}


def fixed_session(stack: Stack, page: Page, server: ServerProcess,
                  worker: WorkerProcess) -> tuple[str, Path, Locator]:
    """A worktree session that fixed add() and committed it on its branch; (id, worktree,
    its view)."""
    repo = Path(stack.workdir(worker, "calc"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Dev")
    git(repo, "config", "user.email", "dev@example.com")
    (repo / "app.py").write_text(APP)
    (repo / "test_app.py").write_text(TEST)
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
    # the change is counted once the turn is over: done before the worktree goes, or that
    # count would be what finds it gone
    stack.wait_until(lambda: server.http.get(f"/api/sessions/{sid}").json()["worktree"]["files"],
                     what="the worktree's change to be counted")
    wt = Path(server.http.get(f"/api/sessions/{sid}").json()["workdir"])
    r = server.http.post(f"/api/sessions/{sid}/worktree/commit", json={"message": "Fix add()"})
    assert r.status_code == 200, r.text
    return sid, wt, view


def answered(server: ServerProcess, sid: str, prompt: str) -> dict[str, Any] | None:
    """The session once its turn for ``prompt`` is over (it failed, or the model answered),
    else None."""
    got: dict[str, Any] = server.http.get(f"/api/sessions/{sid}").json()
    items = got["items"]
    at = next((n for n, i in enumerate(items)
               if i["kind"] == "user_message" and i["text"] == prompt), None)
    if at is None or got["status"] not in ("idle", "error"):
        return None
    if got["status"] == "error" or any(i["kind"] == "assistant_message" for i in items[at:]):
        return got
    return None


def shells(server: ServerProcess, sid: str) -> list[dict[str, Any]]:
    return [i for i in server.http.get(f"/api/sessions/{sid}").json()["items"]
            if i["kind"] == "tool_call" and i["name"] == "shell"]


def test_a_removed_worktree_refuses_follow_ups_and_is_made_again_from_its_branch(
        stack: Stack, page: Page) -> None:
    stack.model(script(stack))
    server = stack.server()
    worker = stack.worker()
    sid, wt, view = fixed_session(stack, page, server, worker)
    r = server.http.post(f"/api/sessions/{sid}/worktree/remove", json={"force": True})
    assert r.status_code == 200, r.text
    assert not wt.exists()

    # a follow-up from anywhere (the API, a chat, a schedule) is refused, and nothing runs
    r = server.http.post(f"/api/sessions/{sid}/prompt", json={"text": "Run the tests again"})
    assert r.status_code == 409, r.text
    assert "worktree" in r.json()["detail"] and "was removed" in r.json()["detail"]
    assert not wt.exists() and len(shells(server, sid)) == 1

    # the session says so, with the two ways on in place of the prompt box
    bar = view.get_by_test_id("worktree-removed")
    expect(bar).to_contain_text("This session's worktree was removed")
    expect(bar).to_contain_text("nothing runs there any more")
    expect(view.get_by_test_id("prompt-input")).to_be_hidden()
    expect(bar.get_by_test_id("worktree-fork")).to_be_visible()
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "worktree-removed.png"))

    # made again at its place, from the branch: the committed fix is there
    bar.get_by_test_id("worktree-recreate").click()
    expect(bar).to_be_hidden()
    made = stack.items(page, "git_op").last
    expect(made.get_by_test_id("git-op-status")).to_have_text("done")
    expect(made).to_contain_text("made again from the branch")
    assert (wt / "app.py").read_text() == FIXED
    branch = server.http.get(f"/api/sessions/{sid}").json()["worktree"]["branch"]
    assert git(wt, "symbolic-ref", "--short", "HEAD") == branch
    # and the session works there again
    view.get_by_test_id("prompt-input").fill("Run the tests again")
    view.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("The tests pass.")
    assert "Ran 1 test" in shells(server, sid)[-1]["output"]


def test_a_worktree_deleted_by_hand_is_not_made_again_empty_and_the_session_forks(
        stack: Stack, page: Page) -> None:
    stack.model(script(stack))
    server = stack.server()
    worker = stack.worker()
    sid, wt, view = fixed_session(stack, page, server, worker)
    # deleted by hand while the worker was away (its next attach is a fresh one)
    worker.stop()
    shutil.rmtree(wt)
    worker.start()

    view.get_by_test_id("prompt-input").fill("Run the tests again")
    view.get_by_test_id("prompt-send").click()
    got = stack.wait_until(lambda: answered(server, sid, "Run the tests again"),
                           what="the follow-up's turn to end")
    # no empty folder in its place, and no test run on nothing
    assert not wt.exists(), [i.get("output") for i in shells(server, sid)]
    assert len(shells(server, sid)) == 1
    bar = view.get_by_test_id("worktree-removed")
    expect(bar).to_contain_text("This session's worktree was removed")
    assert got["worktree"]["status"] == "removed" and got["status"] == "error"
    assert "worktrees folder" in got["status_reason"]
    expect(view.get_by_test_id("retry")).to_be_hidden()

    # a fork with a worktree of its own, on a new branch from this one: the follow-up runs
    bar.get_by_test_id("worktree-fork").click()
    fork = page.get_by_test_id("session-view")
    expect(fork).not_to_have_attribute("data-session-id", sid)
    fid = fork.get_attribute("data-session-id")
    assert fid
    expect(fork.get_by_test_id("forked-from")).to_be_visible()
    expect(stack.items(page, "assistant_message").last).to_have_text("The tests pass.")
    info = server.http.get(f"/api/sessions/{fid}").json()
    old_branch = got["worktree"]["branch"]
    assert info["worktree"]["status"] == "ready" and info["worktree"]["base"] == old_branch
    assert info["worktree"]["branch"] != old_branch
    new_wt = Path(info["workdir"])
    assert new_wt != wt and (new_wt / "app.py").read_text() == FIXED
    assert "Ran 1 test" in shells(server, fid)[-1]["output"]
    assert not wt.exists()  # the old place stays gone
