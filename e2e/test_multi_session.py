"""Two sessions created through the UI run at once; each one's output streams into its view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def test_multi_session(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "job alpha"}, "reply": {"text": "Running alpha.",
                                                   "calls": [stack.gated("alpha")]}},
        {"match": {"user": "job beta"}, "reply": {"text": "Running beta.",
                                                  "calls": [stack.gated("beta")]}},
        {"match": {"tool": "shell", "tool_output": "alpha-end"}, "reply": {"text": "alpha done"}},
        {"match": {"tool": "shell", "tool_output": "beta-end"}, "reply": {"text": "beta done"}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)

    dirs = {name: stack.workdir(worker, name) for name in ("alpha", "beta")}
    sids = {name: stack.new_session(page, worker, dirs[name], f"job {name}")
            for name in ("alpha", "beta")}
    assert sids["alpha"] != sids["beta"]

    # Both commands are running at the same time, their first line already on screen.
    for name in ("alpha", "beta"):
        stack.open_session(page, sids[name])
        out = stack.items(page, "tool_call").get_by_test_id("tool-output")
        expect(out).to_have_text(f"{name}-start")
        expect(stack.items(page, "tool_call").get_by_test_id("tool-status")).to_have_text(
            "running")
        expect(stack.status(page)).to_have_attribute("data-status", "running")

    # Watching beta: its output grows in place when the command goes on.
    stack.release(dirs["beta"])
    out = stack.items(page, "tool_call").get_by_test_id("tool-output")
    expect(out).to_contain_text("beta-end")
    expect(stack.items(page, "assistant_message").last).to_have_text("beta done")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")

    # alpha was untouched by beta's output and is still waiting.
    cards = page.locator("[data-testid=session-card]")
    page.evaluate("location.hash = '#/'")
    expect(cards).to_have_count(2)
    alpha_card = page.locator(f"[data-testid=session-card][data-session-id='{sids['alpha']}']")
    expect(alpha_card.get_by_test_id("session-status")).to_have_attribute("data-status", "running")
    stack.release(dirs["alpha"])
    expect(alpha_card.get_by_test_id("session-status")).to_have_attribute("data-status", "idle")
    stack.open_session(page, sids["alpha"])
    expect(stack.items(page, "tool_call").get_by_test_id("tool-output")).to_have_text(
        "alpha-start\nalpha-end")
    expect(stack.items(page, "assistant_message").last).to_have_text("alpha done")
    assert not any("beta" in text for text in stack.items(page).all_inner_texts())
