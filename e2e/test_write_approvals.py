"""A write's approval is not blind: it shows a diff against the file as it is (the worker
reads it first), or the whole content of a new file; the card keeps it after the decision
and after a reload. A write that asks nothing still shows what it wrote."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Locator, Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"

README_BEFORE = "# Proj\n\nBuild with make.\nTests: none yet.\n"
README_AFTER = "# Proj\n\nBuild with make.\nTests: uv run pytest.\n"
LICENSE = "MIT License\n\nCopyright (c) 2026 Codey\n"


def write(path: str, content: str) -> dict[str, Any]:
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


def expect_lines(diff: Locator, cls: str, texts: list[str]) -> None:
    """The diff's lines of class ``cls`` read ``texts``, once the card has drawn them (a
    read without waiting saw rows not yet filled, on a busy machine)."""
    expect(diff.locator(f".d-line.{cls}")).to_have_text(texts)


def test_write_approvals_show_what_changes(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "tidy the docs"}, "reply": {"calls": [write("README.md",
                                                                       README_AFTER)]}},
        {"match": {"tool": "write_file", "tool_output": "README.md"},
         "reply": {"calls": [write("LICENSE", LICENSE)]}},
        {"match": {"tool": "write_file", "tool_output": "LICENSE"},
         "reply": {"text": "README updated and LICENSE added."}},
        {"match": {"user": "one more"}, "reply": {"calls": [write("NOTES", "a note\n")]}},
        {"match": {"tool": "write_file", "tool_output": "NOTES"}, "reply": {"text": "Noted."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "docs"))
    (wd / "README.md").write_text(README_BEFORE)
    sid = stack.new_session(page, worker, str(wd), "tidy the docs", policy="suggest")

    # 1. an existing file: the diff against what is on disk, before anything is written
    readme = stack.items(page, "tool_call").first
    approval = readme.get_by_test_id("approval")
    expect(approval).to_be_visible()
    expect(approval).to_contain_text("Approve this write?")
    expect(approval).to_contain_text("changes README.md (+1 −1)")
    diff = readme.get_by_test_id("diff")
    expect(diff).to_be_visible()
    expect(diff.locator(".diff-path")).to_have_text("README.md")
    expect_lines(diff, "d-del", ["-Tests: none yet."])
    expect_lines(diff, "d-add", ["+Tests: uv run pytest."])
    assert (wd / "README.md").read_text() == README_BEFORE
    page.screenshot(path=f"{SHOTS}/write-approval-diff.png")
    approval.get_by_test_id("approve").click()

    # 2. a new file: its whole content
    license_ = stack.items(page, "tool_call").nth(1)
    approval = license_.get_by_test_id("approval")
    expect(approval).to_contain_text("creates LICENSE (3 lines)")
    diff = license_.get_by_test_id("diff")
    expect(diff.locator(".diff-path")).to_have_text("LICENSE")
    expect_lines(diff, "d-add", ["+MIT License", "+", "+Copyright (c) 2026 Codey"])
    expect(diff.locator(".d-line.d-del")).to_have_count(0)
    assert not (wd / "LICENSE").exists()
    page.screenshot(path=f"{SHOTS}/write-approval-new-file.png")
    approval.get_by_test_id("approve").click()
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "README updated and LICENSE added.")
    assert (wd / "README.md").read_text() == README_AFTER
    assert (wd / "LICENSE").read_text() == LICENSE

    # the diffs stay on the cards after the decisions, and after a reload
    for _ in range(2):
        readme, license_ = stack.items(page, "tool_call").first, stack.items(
            page, "tool_call").nth(1)
        expect(readme.get_by_test_id("tool-status")).to_have_attribute("data-status", "done")
        expect(readme.get_by_test_id("approval-decided")).to_contain_text("write approved")
        expect_lines(readme.get_by_test_id("diff"), "d-add", ["+Tests: uv run pytest."])
        expect(license_.get_by_test_id("diff").locator(".d-line.d-add").first).to_have_text(
            "+MIT License")
        page.reload()
        expect(page.get_by_test_id("conn-state")).to_have_text("live")
    page.screenshot(path=f"{SHOTS}/write-approved.png")

    # the model got the writes' results, not the diffs
    told = [m["content"] for m in model.requests("/v1/chat/completions")[-1]["body"]["messages"]
            if m["role"] == "tool"]
    assert told == [f"wrote {len(README_AFTER)} bytes to README.md",
                    f"wrote {len(LICENSE)} bytes to LICENSE"]

    # a write that asks nothing (auto-edit) reads nothing first, and its card shows the content
    page.get_by_test_id("policy-select").select_option("auto-edit")
    expect(page.get_by_test_id("policy-select")).to_have_value("auto-edit")
    stack.wait_until(lambda: stack.browser_state(page)["sessions"][sid]["policy"] == "auto-edit",
                     what="the policy to change")
    page.get_by_test_id("prompt-input").fill("one more")
    page.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Noted.")
    notes = stack.items(page, "tool_call").last
    expect(notes.get_by_test_id("approval")).to_have_count(0)
    notes.locator("summary", has_text="Content").click()
    expect(notes.get_by_test_id("file-view")).to_have_text("a note\n")
    assert (wd / "NOTES").read_text() == "a note\n"
