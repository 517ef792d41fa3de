"""`suggest` policy: an approval appears; approving runs the command; a rejection's message
reaches the model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def test_approval_flow(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "tidy up"},
         "reply": {"calls": [stack.shell("bash", "-c",
                                         "echo made > made.txt; echo approved-ran")]}},
        {"match": {"tool": "shell", "tool_output": "approved-ran"},
         "reply": {"calls": [stack.shell("rm", "keep.txt")]}},
        {"match": {"tool": "shell", "tool_output": "rejected by the user"},
         "reply": {"text": "Understood, I kept keep.txt."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "proj"))
    (wd / "keep.txt").write_text("precious")
    stack.new_session(page, worker, str(wd), "tidy up", policy="suggest")

    # 1. approve: the command runs only then, and its output shows
    approval = page.get_by_test_id("approval")
    expect(approval).to_be_visible()
    # the approval sits in the command's own card, which shows the command (not repeated)
    asking = page.locator("[data-testid=item]:has([data-testid=approval])")
    expect(asking.get_by_test_id("tool-command")).to_contain_text("echo made > made.txt")
    expect(page.get_by_test_id("attention-badge")).to_be_visible()
    expect(stack.status(page)).to_have_attribute("data-status", "waiting_approval")
    assert not (wd / "made.txt").exists()
    approval.get_by_test_id("approve").click()
    first = stack.items(page, "tool_call").first
    expect(first.get_by_test_id("tool-output")).to_have_text("approved-ran")
    expect(first.get_by_test_id("exit-code")).to_have_text("exit 0")
    assert (wd / "made.txt").read_text() == "made\n"

    # 2. reject with a message: the model gets the message as the tool's result
    second = stack.items(page, "tool_call").nth(1)
    approval = second.get_by_test_id("approval")
    expect(second.get_by_test_id("tool-command")).to_contain_text("rm keep.txt")
    approval.get_by_test_id("reject-message").fill("keep that file, it is precious")
    approval.get_by_test_id("reject").click()
    expect(second.get_by_test_id("tool-status")).to_have_attribute("data-status", "rejected")
    expect(second.get_by_test_id("approval-decided")).to_contain_text("rejected")
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "Understood, I kept keep.txt.")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    expect(page.get_by_test_id("attention-badge")).to_have_count(0)
    assert (wd / "keep.txt").read_text() == "precious"
    last = model.requests("/v1/chat/completions")[-1]["body"]["messages"][-1]
    assert last["role"] == "tool"
    assert last["content"] == "rejected by the user: keep that file, it is precious"
