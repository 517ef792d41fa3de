"""The context gauge, a compaction the user asks for, and the model path's notices."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def test_gauge_compaction_and_notices(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "Summarize the conversation above"},
         "reply": {"text": "- The user asked for a listing; `ls` ran and showed the files."}},
        {"match": {"user": "list the files"},
         "reply": {"text": "Listing.", "calls": [stack.shell("ls")],
                   "usage": {"input_tokens": 5200, "output_tokens": 300, "cached_tokens": 4096}}},
        {"match": {"tool": "shell"}, "reply": {"text": "Here they are.",
                                               "usage": {"input_tokens": 6000,
                                                         "output_tokens": 100}}},
        {"match": {"user": "say nothing"}, "reply": {}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    config = {"providers": [{"name": "scripted", "kind": "responses",
                             "base_url": model.base_url, "models": ["scripted-1"],
                             "context_window": 8000}], "default_provider": "scripted"}
    stack.server(config)
    worker = stack.worker()
    stack.open(page)
    stack.new_session(page, worker, stack.workdir(worker, "proj"), "list the files")
    expect(stack.items(page, "assistant_message").last).to_have_text("Here they are.")

    gauge = page.get_by_test_id("context-gauge")
    expect(gauge).to_have_attribute("aria-valuenow", "76")  # 6100 of 8000 tokens
    expect(gauge).to_contain_text("76% of 8k")
    expect(page.get_by_test_id("cached-tokens")).to_have_text("4,096")

    page.get_by_test_id("compact").click()
    summary = stack.items(page, "summary")
    expect(summary).to_have_count(1)
    expect(summary).to_contain_text("Conversation compacted")
    expect(summary).to_contain_text("as you asked")
    summary.locator("summary").click()
    expect(summary).to_contain_text("`ls` ran".replace("`", ""))
    expect(gauge).to_have_attribute("aria-valuenow", "0")
    expect(page.get_by_test_id("compact")).to_have_text("Compact")
    page.screenshot(path=f"{SHOTS}/compaction.png", full_page=True)

    # an empty answer: a notice, and the turn ends
    page.get_by_test_id("prompt-input").fill("say nothing")
    page.get_by_test_id("prompt-send").click()
    notice = stack.items(page, "notice").last
    expect(notice).to_contain_text("empty answer")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    calls = [r for r in model.requests("/v1/responses") if "say nothing" in str(r["body"])]
    assert len(calls) == 1, "the model is not called again after an empty answer"
    # the request after compaction starts with the summary
    assert calls[0]["body"]["input"][0]["content"].startswith("Earlier parts of this")
