"""Many sessions on one repository, as a person steers them: three sessions start at once,
each in a worktree of its own, and edit one file differently; each Changes view shows only
its own change; a review comment reaches the model's next request; one merges, the next
conflicts and its conflict goes to its agent, which resolves it, and it merges too; the third
is pushed with a pull request (gh, faked on the worker's PATH) and its dirty worktree is
removed only after a second question."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Dialog, Locator, Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def _write(path: str, content: str) -> dict[str, Any]:
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _fake_gh(tmp: Path) -> Path:
    """A ``gh`` that is logged in and records its arguments; it answers a PR's URL."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    # gh runs in the worker's git sandbox, where it writes only its own state folder
    calls = tmp / "gh-config" / "gh-calls"
    calls.parent.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\n"
                  "case \"$1\" in pr) echo https://example.test/acme/app/pull/7;; esac\n")
    gh.chmod(0o755)
    return calls


def _commit(view: Locator, page: Page, message: str) -> Locator:
    """Open the session's Changes view and commit everything with ``message``."""
    view.get_by_test_id("open-changes").click()
    changes = page.get_by_test_id("changes-dialog")
    changes.get_by_test_id("commit-message").fill(message)
    changes.get_by_test_id("commit").click()
    expect(changes.get_by_test_id("ship-result")).to_contain_text("Committed")
    return changes


def _merge(changes: Locator, said: str = "main is now at") -> None:
    changes.get_by_test_id("merge").click()
    expect(changes.get_by_test_id("ship-result")).to_contain_text(said)


def test_three_sessions_on_one_repository_review_merge_resolve_push_and_remove(
        stack: Stack, page: Page, tmp_path: Path, monkeypatch: Any) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "version one"}, "reply": {"calls": [_write("a.txt", "ONE\n")]}},
        {"match": {"user": "version two"}, "reply": {"calls": [_write("a.txt", "TWO\n")]}},
        {"match": {"user": "version three"}, "reply": {"calls": [_write("a.txt", "THREE\n")]}},
        {"match": {"user": "Review comments on your change"},
         "reply": {"text": "I will keep it short."}},
        {"match": {"user": "left conflicts in these files"},
         "reply": {"calls": [_write("a.txt", "ONE and TWO\n")]}},
        {"match": {"tool": "write_file"}, "reply": {"text": "Done."}},
    ]})
    calls = _fake_gh(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GH_CONFIG_DIR", str(calls.parent))
    server = stack.server()
    worker = stack.worker()
    repo = Path(stack.workdir(worker, "app"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "Tester")
    _git(repo, "config", "user.email", "t@example.com")
    (repo / "a.txt").write_text("zero\n")
    (repo / ".codey").mkdir()
    (repo / ".codey" / "setup.sh").write_text("echo installing the project\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "start")
    bare = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", str(bare))
    _git(repo, "remote", "add", "origin", str(bare))

    stack.open(page)
    # the first from the dialog, the other two through the API, all at once
    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    dialog.get_by_test_id("ns-worker").select_option(worker.worker_id)
    dialog.get_by_test_id("ns-workdir").fill(str(repo))
    dialog.get_by_test_id("ns-policy").select_option("full-auto")
    dialog.get_by_test_id("ns-network").check()  # (the dialog dropped it once)
    dialog.get_by_test_id("ns-worktree").check()
    dialog.get_by_test_id("ns-base").fill("main")
    dialog.get_by_test_id("ns-prompt").fill("version one")
    dialog.get_by_test_id("ns-submit").click()
    view = page.get_by_test_id("session-view")
    expect(view).to_be_visible()
    one = view.get_attribute("data-session-id")
    assert one
    assert server.http.get(f"/api/sessions/{one}").json()["network"] is True
    others = []
    for prompt in ("version two", "version three"):
        r = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": str(repo), "prompt": prompt,
            "policy": "full-auto", "worktree": {"base": "main"}})
        assert r.status_code == 201, r.text
        others.append(r.json()["session_id"])
    two, three = others

    # the first: its worktree made with the setup output, its own change only
    expect(stack.items(page, "assistant_message").last).to_have_text("Done.")
    made = stack.items(page, "git_op").first
    expect(made.get_by_test_id("git-op-status")).to_have_text("done")
    expect(made).to_contain_text("installing the project")
    expect(view.get_by_test_id("worktree-branch")).to_contain_text("codey/version-one-")
    view.get_by_test_id("open-changes").click()
    changes = page.get_by_test_id("changes-dialog")
    files = changes.get_by_test_id("changed-file")
    expect(files).to_have_count(1)
    expect(files.first).to_contain_text("+ONE")
    expect(files.first).not_to_contain_text("TWO")
    page.screenshot(path=f"{SHOTS}/changes.png")
    # a comment on a line goes to the agent as a review
    files.first.locator(".d-line.d-add").first.click()
    changes.get_by_test_id("comment-input").fill("Shorter, please")
    changes.get_by_test_id("comment-add").click()
    changes.get_by_test_id("send-review").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("I will keep it short.")
    reviewed = [r["body"] for r in model.requests("/v1/chat/completions")
                if "Shorter, please" in str(r["body"]["messages"][-1].get("content"))]
    assert reviewed and "a.txt, at `+ONE`" in str(reviewed[0]["messages"][-1]["content"])

    # commit and merge it
    changes = _commit(view, page, "Version one")
    _merge(changes)
    assert (repo / "a.txt").read_text() == "ONE\n"
    changes.get_by_role("button", name="Close").click()

    # the second conflicts: its conflict goes to its agent, then it merges
    view = stack.open_session(page, two)
    expect(stack.items(page, "assistant_message").last).to_have_text("Done.")
    view.get_by_test_id("open-changes").click()
    changes = page.get_by_test_id("changes-dialog")
    expect(changes.get_by_test_id("changed-file").first).to_contain_text("+TWO")
    expect(changes.get_by_test_id("changed-file").first).not_to_contain_text("ONE")
    changes.get_by_role("button", name="Close").click()
    changes = _commit(view, page, "Version two")
    _merge(changes, "conflicts with main in: a.txt")
    changes.get_by_test_id("resolve-with-agent").click()
    expect(changes).to_be_hidden()
    expect(stack.items(page, "assistant_message").last).to_have_text("Done.")
    expect(stack.items(page, "assistant_message")).to_have_count(2)
    changes = _commit(view, page, "Merge main")
    _merge(changes)
    assert (repo / "a.txt").read_text() == "ONE and TWO\n"
    changes.get_by_role("button", name="Close").click()

    # the third: pushed with a pull request, then its dirty worktree removed after asking
    view = stack.open_session(page, three)
    expect(stack.items(page, "assistant_message").last).to_have_text("Done.")
    changes = _commit(view, page, "Version three")
    changes.get_by_test_id("push").click()
    expect(changes.get_by_test_id("ship-result")).to_contain_text(
        "https://example.test/acme/app/pull/7")
    assert "pr create" in calls.read_text()
    branch = server.http.get(f"/api/sessions/{three}").json()["worktree"]["branch"]
    assert _git(bare, "branch", "--list", branch)
    worktree = Path(server.http.get(f"/api/sessions/{three}").json()["workdir"])
    (worktree / "scratch.txt").write_text("not committed\n")
    asked: list[str] = []

    def answer(d: Dialog) -> None:
        asked.append(d.message)
        d.accept()

    page.on("dialog", answer)
    changes.get_by_test_id("remove-worktree").click()
    expect(changes.get_by_test_id("ship-result")).to_contain_text("Removed")
    assert len(asked) == 2 and "uncommitted" in asked[1]
    assert not worktree.exists()

    # closing the first session (merged, clean) offers to remove its worktree: removed
    changes.get_by_role("button", name="Close").click()
    view = stack.open_session(page, one)
    first_path = Path(server.http.get(f"/api/sessions/{one}").json()["workdir"])
    view.get_by_test_id("session-menu").locator("summary").click()
    view.get_by_test_id("menu-close").click()
    # (wait through Playwright: its sync API answers the page's confirm() only while the test
    # is in one of its calls, never while it polls the server)
    expect(page.get_by_test_id("toast").filter(has_text="Worktree removed")).to_be_visible()
    assert server.http.get(f"/api/sessions/{one}").json()["worktree"]["status"] == "removed"
    assert not first_path.exists() and "Remove this session's worktree too" in asked[-1]
