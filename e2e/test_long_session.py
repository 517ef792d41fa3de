"""A session followed for a long time keeps a bounded page (issue 36): while the view follows
the end, the items above its last WINDOW are dropped from the page (the store keeps them, and
"Show earlier" builds them again)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

from codey_testkit.scenarios import provider_config

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

#: web/views/session.js
WINDOW = 200
WINDOW_SLACK = 50

STEPS = 300  # tool calls of 20 output lines each: 6,000 lines, 300 items


def _elements(page: Page) -> int:
    count: int = page.evaluate("document.getElementsByTagName('*').length")
    return count


def test_a_followed_session_keeps_a_bounded_page(stack: Stack, page: Page) -> None:
    call = {"calls": [stack.shell("seq", "1", "20")]}
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "long run"}, "reply": call},
        {"match": {"tool": "shell", "results_below": STEPS}, "reply": call},
        {"match": {"tool": "shell"}, "reply": {"text": "all done"}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server(config={**provider_config(model), "turn_iteration_cap": STEPS + 5})
    worker = stack.worker()
    stack.open(page)
    sid = stack.new_session(page, worker, stack.workdir(worker, "long"), "long run")

    # the view follows the turn from its first item to its answer
    expect(stack.items(page, "assistant_message").last).to_have_text("all done",
                                                                    timeout=240_000)
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    total = len(stack.browser_state(page)["sessions"][sid]["items"])
    assert total == STEPS + 2  # the prompt, the calls, the answer: all in the store

    built = stack.items(page).count()
    assert WINDOW <= built <= WINDOW + WINDOW_SLACK, built
    assert stack.dom_item_ids(page)[-1] == stack.browser_state(page)["sessions"][sid][
        "items"][-1]["id"]
    followed = _elements(page)
    earlier = page.get_by_test_id("show-earlier")
    expect(earlier).to_have_text(f"Show earlier ({total - built} more)")

    # no bigger than the same session opened afresh (its last WINDOW items), give or take
    # the slack: without the window it held every item since it opened
    page.evaluate("location.hash = '#/'")
    expect(page.get_by_test_id("dashboard")).to_be_visible()
    stack.open_session(page, sid)
    expect(stack.items(page)).to_have_count(WINDOW)
    fresh = _elements(page)
    assert followed <= fresh * (WINDOW + WINDOW_SLACK) / WINDOW, (followed, fresh)

    # the older items are still there to read: the user scrolls up and asks for them
    page.get_by_test_id("session-items").hover()
    page.mouse.wheel(0, -100_000)
    expect(earlier).to_have_text(f"Show earlier ({total - WINDOW} more)")
    earlier.click()
    expect(stack.items(page)).to_have_count(total)  # (fewer than 2 × WINDOW)
    expect(earlier).to_be_hidden()
    assert stack.dom_item_ids(page) == [
        i["id"] for i in stack.browser_state(page)["sessions"][sid]["items"]]
