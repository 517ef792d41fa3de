"""A prompt-injected model against the sandbox and the approval gate, on the real stack (real
bubblewrap around the worker's commands).

1. Under ``full-auto`` a write outside the workdir is stopped by the sandbox; the model is told
   how to ask to leave it; its escalation waits for the user ("Run without the sandbox?", the
   command, the model's reason, what leaving means); approved, it runs outside.
2. Under ``suggest`` the audit's traps: ``git status`` in a folder laid out as a git directory
   whose config sets ``core.fsmonitor`` asks first (and rejected, the hook never runs); ``cat``
   of the worker's key file and of another process's environment are refused by the worker,
   and nothing of them reaches the model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

pytestmark = pytest.mark.skipif(
    subprocess.run(["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True,
                   check=False).returncode != 0 if os.path.exists("/usr/bin/bwrap") else True,
    reason="needs a working bubblewrap (scripts/test installs it)")

REASON = "the release notes live next to the project, outside its folder"


def _escalate(*argv: str) -> dict[str, Any]:
    return {"name": "shell", "arguments": {"command": list(argv), "escalate": True,
                                           "justification": REASON}}


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside /tmp (inside the sandbox /tmp is private: a write there would land)."""
    folder = Path(tempfile.mkdtemp(prefix="codey-e2e-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_denied_write_escalates_only_with_the_users_word(stack: Stack, page: Page,
                                                           outside: Path) -> None:
    notes = outside / "NOTES.txt"
    write = f"echo notes > {notes} && echo wrote-the-notes"
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "write the notes"},
         "reply": {"calls": [stack.shell("sh", "-c", write)]}},
        {"match": {"tool": "shell", "tool_output": "the sandbox stopped this"},
         "reply": {"calls": [_escalate("sh", "-c", write)]}},
        {"match": {"tool": "shell", "tool_output": "wrote-the-notes"},
         "reply": {"text": "The notes are written."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "proj"))
    stack.new_session(page, worker, str(wd), "write the notes", policy="full-auto")

    approval = page.get_by_test_id("approval")
    expect(approval).to_contain_text("Run without the sandbox?")
    expect(approval).to_contain_text(REASON)
    expect(approval.get_by_test_id("approval-warning")).to_contain_text("Outside the sandbox")
    asking = page.locator("[data-testid=item]:has([data-testid=approval])")
    expect(asking.get_by_test_id("tool-command")).to_contain_text(f"echo notes > {notes}")
    expect(stack.status(page)).to_have_attribute("data-status", "waiting_approval")
    # the first try ran in the sandbox, under full-auto, and was stopped there
    first = stack.items(page, "tool_call").first
    expect(first.get_by_test_id("tool-status")).to_have_attribute("data-status", "failed")
    assert not notes.exists()
    told = model.requests("/v1/chat/completions")[-1]["body"]["messages"][-1]["content"]
    assert '"escalate": true' in told
    page.screenshot(path=str(stack.tmp / "escalation.png"), full_page=True)

    approval.get_by_test_id("approve").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("The notes are written.")
    assert notes.read_text() == "notes\n"


def _traps(worker_json: str, worker_pid: int) -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "check the vendored code"},
         "reply": {"calls": [{"name": "shell", "arguments": {
             "command": ["git", "status"], "workdir": "vendor/evil"}}]}},
        {"match": {"tool": "shell", "tool_output": "rejected by the user"},
         "reply": {"calls": [{"name": "shell", "arguments": {"command": ["cat", worker_json]}}]}},
        {"match": {"tool": "shell", "tool_output": "inside $CODEY_HOME"},
         "reply": {"calls": [{"name": "shell", "arguments": {
             "command": ["cat", f"/proc/{worker_pid}/environ"]}}]}},
        {"match": {"tool": "shell", "tool_output": "environment"},
         "reply": {"text": "I cannot read those."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]}


def test_the_audits_traps_under_suggest(stack: Stack, page: Page,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    model = stack.model({"model": "scripted-1", "steps": []})
    stack.server()
    # a worker started, not forked from the test kit's zygote: /proc/<pid>/environ (what the
    # trap reads, and where this test finds the secrets to look for) holds the environment a
    # process was exec'd with, which a forked child never was
    monkeypatch.setenv("CODEY_TEST_FORK", "0")
    worker = stack.worker()
    monkeypatch.delenv("CODEY_TEST_FORK")
    wd = Path(stack.workdir(worker, "proj"))
    pwned = wd.parent / "PWNED"
    evil = wd / "vendor" / "evil"
    for sub in ("objects", "refs"):
        (evil / sub).mkdir(parents=True)
    (evil / "HEAD").write_text("ref: refs/heads/main\n")
    (evil / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        f"\tfsmonitor = \"touch {pwned}; false\"\n")
    # the model "knows" the worker's paths (a prompt injection may well)
    assert worker.proc is not None and worker.proc.pid is not None
    model.set_script(_traps(str(worker.codey_home / "worker.json"), worker.proc.pid))
    stack.open(page)
    stack.new_session(page, worker, str(wd), "check the vendored code", policy="suggest")

    approval = page.get_by_test_id("approval")
    expect(approval).to_contain_text("Approve this command?")
    asking = page.locator("[data-testid=item]:has([data-testid=approval])")
    expect(asking.get_by_test_id("tool-command")).to_contain_text("git status")
    assert not pwned.exists()
    approval.get_by_test_id("reject").click()

    expect(stack.items(page, "assistant_message").last).to_have_text("I cannot read those.")
    assert not pwned.exists()
    key = json.loads((worker.codey_home / "worker.json").read_text())
    sent = json.dumps(model.requests("/v1/chat/completions"))
    for value in key.values():
        if isinstance(value, str) and len(value) > 16:
            assert value not in sent
    environ = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().split(b"\0")
    secrets = [v.split(b"=", 1)[1].decode() for v in environ
               if v.startswith((b"CODEY_", b"HOME=")) and len(v.split(b"=", 1)[1]) > 8]
    assert secrets and not any(f"={s}" in sent for s in secrets)
