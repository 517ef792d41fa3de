"""The project memory is the repository's, not one folder's (issue 33, item 7: memory was kept
per folder path, so a worktree of the same repository started with "Nothing remembered").

A session in the repository's main checkout remembers how to run the tests; a session in a
worktree of its own on that repository has the note in its Memory panel and in its model's
instructions, and what it remembers is there for the first session too. A note kept for one
folder the way the previous release kept them (``set_memory`` for that folder) is still found
by a session in it, beside the repository's, and an edit there keeps it for the repository.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = Path(__file__).resolve().parent / "test-results"
GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
TESTS = "- Run the tests with python3 -m unittest"
WORKTREES = "- Worktrees start without the virtualenv: run .codey/setup.sh"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


def remember(note: str) -> dict[str, Any]:
    return {"name": "remember", "arguments": {"note": note}}


def instructions(model: Any, prompt: str) -> str:
    """The instructions of the first model request of ``prompt``."""
    bodies = [r["body"] for r in model.requests("/v1/chat/completions")
              if prompt in str(r["body"]["messages"])]
    assert bodies, f"no model request for {prompt!r}"
    text: str = bodies[0]["messages"][0]["content"]
    return text


def test_a_worktree_session_has_the_repositorys_memory_and_adds_to_it(
        stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "How are the tests run"}, "reply": {"calls": [remember(TESTS[2:])]}},
        {"match": {"user": "Try it in a worktree"},
         "reply": {"calls": [remember(WORKTREES[2:])]}},
        {"match": {"tool": "remember"}, "reply": {"text": "Noted."}},
        {"match": {"user": "And in pkg"}, "reply": {"text": "I remember."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    repo = Path(stack.workdir(worker, "app"))
    git(repo, "init", "-q", "-b", "main")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "README").write_text("vendored\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", "i")

    stack.open(page)
    main = stack.new_session(page, worker, str(repo), "How are the tests run here?")
    expect(stack.items(page, "assistant_message").last).to_have_text("Noted.")
    expect(page.get_by_test_id("memory-text")).to_have_text(TESTS)

    r = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": str(repo), "prompt": "Try it in a worktree",
        "policy": "full-auto", "worktree": {"base": "main"}})
    assert r.status_code == 201, r.text
    wt = r.json()["session_id"]
    view = stack.open_session(page, wt)
    expect(stack.items(page, "assistant_message").last).to_have_text("Noted.")
    assert server.http.get(f"/api/sessions/{wt}").json()["worktree"]["status"] == "ready"
    # what the main checkout's session remembered reached the worktree's model …
    assert TESTS in instructions(model, "Try it in a worktree")
    # … and its panel, with what it remembered itself, kept for the repository
    memory = view.get_by_test_id("memory")
    expect(memory.get_by_test_id("memory-text")).to_have_text(f"{TESTS}\n{WORKTREES}")
    scope = memory.get_by_test_id("memory-scope")
    expect(scope).to_have_text("For the repository app")
    expect(scope).to_have_attribute("title", str(repo))
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "memory-per-repository.png"))
    # the first session has the worktree's note too
    stack.open_session(page, main)
    expect(page.get_by_test_id("memory-text")).to_have_text(f"{TESTS}\n{WORKTREES}")

    # a note kept for a folder as the previous release kept them is still found there
    page.evaluate("([w, d]) => window.__codey.socket.setMemory(w, d, '- pkg is vendored')",
                  [worker.worker_id, str(repo / "pkg")])
    pkg = stack.new_session(page, worker, str(repo / "pkg"), "And in pkg?")
    expect(stack.items(page, "assistant_message").last).to_have_text("I remember.")
    view = stack.open_session(page, pkg)
    text = view.get_by_test_id("memory-text")
    expect(text).to_have_text(f"{TESTS}\n{WORKTREES}\n- pkg is vendored")
    assert "- pkg is vendored" in instructions(model, "And in pkg?")
    # an edit there is kept for the repository, the folder's note moved into it
    view.get_by_test_id("memory-edit").click()
    view.get_by_test_id("memory-input").fill(f"{TESTS}\n- pkg is vendored")
    view.get_by_test_id("memory-save").click()
    expect(text).to_have_text(f"{TESTS}\n- pkg is vendored")
    stack.open_session(page, wt)
    expect(page.get_by_test_id("memory-text")).to_have_text(f"{TESTS}\n- pkg is vendored")
