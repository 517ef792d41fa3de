"""git as the model runs it, on the real stack (real bubblewrap around the worker's commands,
the server's own git settings in every git action).

1. Under ``suggest``, ``git status``, ``git diff`` and ``git log`` are known-safe: they run in
   the sandbox without asking, succeed, and their cards show what git printed.
2. ``git commit -am`` meets the read-only ``.git`` of the sandbox; the model is told how to ask
   to leave it; its escalation waits for the user ("Run without the sandbox?"); approved, the
   commit is made — and the repository's pre-commit hook and fsmonitor, armed to leave a mark
   outside the workdir, do not run out there either.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

pytestmark = pytest.mark.skipif(
    subprocess.run(["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True,
                   check=False).returncode != 0 if os.path.exists("/usr/bin/bwrap") else True,
    reason="needs a working bubblewrap (scripts/test installs it)")

REASON = "committing writes .git, which the sandbox keeps read-only"
#: the test's own git: no config of this machine's
GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}


def git(cwd: Path, *args: str, traps: bool = False) -> str:
    """The test's own git in ``cwd``; it springs no trap of the repository's unless
    ``traps``."""
    safe = [] if traps else ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]
    return subprocess.run(["git", *safe, *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout


def make_repo(wd: Path) -> None:
    """``wd`` as a repository with one commit ("initial commit": app.py), and app.py fixed
    since (not committed)."""
    git(wd, "init", "-q", "-b", "main")
    git(wd, "config", "user.name", "Dev")
    git(wd, "config", "user.email", "dev@example.com")
    (wd / "app.py").write_text("def add(a, b):\n    return a - b\n")
    git(wd, "add", "app.py")
    git(wd, "commit", "-q", "-m", "initial commit")
    (wd / "app.py").write_text("def add(a, b):\n    return a + b\n")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside /tmp and the workdir, where an escaped trap would leave its mark."""
    folder = Path(tempfile.mkdtemp(prefix="codey-e2e-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_model_reads_git_in_the_sandbox(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "review the change"},
         "reply": {"calls": [stack.shell("git", "status")]}},
        {"match": {"tool": "shell", "tool_output": "modified:   app.py"},
         "reply": {"calls": [stack.shell("git", "diff")]}},
        {"match": {"tool": "shell", "tool_output": "+    return a + b"},
         "reply": {"calls": [stack.shell("git", "log", "--oneline")]}},
        {"match": {"tool": "shell", "tool_output": " initial commit"},
         "reply": {"text": "The fix is not committed yet."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "proj"))
    make_repo(wd)
    stack.new_session(page, worker, str(wd), "review the change", policy="suggest")

    expect(stack.items(page, "assistant_message").last).to_have_text(
        "The fix is not committed yet.")
    cards = stack.items(page, "tool_call")
    expect(cards).to_have_count(3)
    for n, (command, shows) in enumerate((("git status", "modified:   app.py"),
                                          ("git diff", "+    return a + b"),
                                          ("git log --oneline", " initial commit"))):
        card = cards.nth(n)
        expect(card.get_by_test_id("tool-command")).to_contain_text(command)
        expect(card.get_by_test_id("tool-status")).to_have_attribute("data-status", "done")
        expect(card.get_by_test_id("exit-code")).to_have_text("exit 0")
        expect(card.get_by_test_id("tool-output")).to_contain_text(shows)
    # known-safe in the sandbox: nothing asked
    expect(page.get_by_test_id("approval")).to_have_count(0)
    assert git(wd, "status", "--porcelain") == " M app.py\n"


def test_the_models_commit_escalates_and_runs_once_approved(stack: Stack, page: Page,
                                                            outside: Path) -> None:
    commit = ["git", "commit", "-am", "Fix add"]
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "commit the fix"}, "reply": {"calls": [stack.shell(*commit)]}},
        {"match": {"tool": "shell", "tool_output": "the sandbox stopped this"},
         "reply": {"calls": [{"name": "shell", "arguments": {
             "command": commit, "escalate": True, "justification": REASON}}]}},
        {"match": {"tool": "shell", "tool_output": "] Fix add"},
         "reply": {"text": "Committed."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "proj"))
    make_repo(wd)
    # the repository's traps, armed: each leaves a mark outside when it runs for the model.
    # (The fsmonitor's mark is left only where CODEY_HOME is unset, as in every command the
    # worker runs for the model, whose environment is an allowlist. The worker's own git
    # status when it loads a session's context, context.py, runs with the worker's whole
    # environment and, today, without the hardening: it springs this trap outside the
    # sandbox at attach, before the model does anything. Reported; not this test's subject.)
    git(wd, "config", "core.fsmonitor",
        f'[ -n "$CODEY_HOME" ] || touch {outside}/fsmonitor; false')
    hook = wd / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {outside}/pre-commit\n")
    hook.chmod(0o755)
    git(wd, "status", traps=True)
    git(wd, "hook", "run", "pre-commit", traps=True)
    assert sorted(p.name for p in outside.iterdir()) == ["fsmonitor", "pre-commit"]
    for mark in outside.iterdir():
        mark.unlink()

    stack.new_session(page, worker, str(wd), "commit the fix", policy="full-auto")
    approval = page.get_by_test_id("approval")
    expect(approval).to_contain_text("Run without the sandbox?")
    expect(approval).to_contain_text(REASON)
    asking = page.locator("[data-testid=item]:has([data-testid=approval])")
    expect(asking.get_by_test_id("tool-command")).to_contain_text("git commit -am")
    # the first try ran in the sandbox (full-auto) and met the read-only .git
    first = stack.items(page, "tool_call").first
    expect(first.get_by_test_id("tool-status")).to_have_attribute("data-status", "failed")
    expect(first.get_by_test_id("tool-output")).to_contain_text("Read-only file system")
    told = model.requests("/v1/chat/completions")[-1]["body"]["messages"][-1]["content"]
    assert '"escalate": true' in told
    assert git(wd, "log", "--format=%s") == "initial commit\n"

    approval.get_by_test_id("approve").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Committed.")
    second = stack.items(page, "tool_call").nth(1)
    expect(second.get_by_test_id("exit-code")).to_have_text("exit 0")
    assert git(wd, "log", "--format=%s") == "Fix add\ninitial commit\n"
    assert git(wd, "status", "--porcelain") == ""
    # out of the sandbox on the user's word, and still no hook, no fsmonitor
    assert sorted(outside.iterdir()) == []
