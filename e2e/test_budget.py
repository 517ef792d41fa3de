"""Budgets over the real stack: prices and the day's budget set on the usage page, a session
that reaches the budget stops cleanly between two model calls ("budget reached"), and one
click on "Raise by …" lets it go on to the end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"
# each call: 1000 input + 200 output tokens at $1000 per million tokens = $1.20
USAGE = {"input_tokens": 1000, "output_tokens": 200}


def test_a_session_stops_at_the_days_budget_and_goes_on_when_raised(
        stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "spend money"},
         "reply": {"text": "step one", "calls": [stack.shell("echo", "one")], "usage": USAGE}},
        {"match": {"tool": "shell", "tool_output": "one"},
         "reply": {"text": "step two", "calls": [stack.shell("echo", "two")], "usage": USAGE}},
        {"match": {"tool": "shell", "tool_output": "two"},
         "reply": {"text": "all done", "usage": USAGE}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page, "#/usage")

    # Settings → Usage: a price for the scripted model (cached input at the same price, so
    # the figure does not hang on what the provider reports as cached)
    expect(page.get_by_test_id("usage-page")).to_be_visible()
    prices = page.get_by_test_id("prices")
    expect(prices.locator("tr[data-model='gpt-5']")).to_be_visible()  # the built-in table
    prices.get_by_test_id("price-new-model").fill("scripted")
    new_row = prices.locator("tbody tr").last
    new_row.get_by_test_id("price-input").fill("1000")
    new_row.get_by_test_id("price-cached_input").fill("1000")
    new_row.get_by_test_id("price-output").fill("1000")
    prices.get_by_test_id("prices-save").click()
    expect(prices.locator("tr[data-model='scripted'] .chip")).to_have_text("yours")

    # the day's budget, every session together: $2.00
    page.get_by_test_id("day-budget-usd").fill("2")
    page.get_by_test_id("day-budget-save").click()
    expect(page.get_by_test_id("usage-day-budget")).to_contain_text("$2.00")

    page.evaluate("location.hash = '#/'")
    sid = stack.new_session(page, worker, stack.workdir(worker, "spend"), "spend money")
    page.evaluate("location.hash = '#/'")
    card = page.locator(f"[data-testid=session-card][data-session-id='{sid}']")
    # two calls ($2.40): the third is not made; the second's tool call was settled first
    expect(card.get_by_test_id("session-status")).to_have_text("budget reached", timeout=30_000)
    expect(card.get_by_test_id("session-status")).to_have_attribute("data-status",
                                                                     "waiting_user")
    stop = card.get_by_test_id("budget-stop")
    expect(stop).to_contain_text("Budget reached")
    expect(stop).to_contain_text("$2.40")
    expect(card.get_by_test_id("session-cost")).to_have_text(" · $2.40")
    expect(page.get_by_test_id("dashboard-spend")).to_have_text("today $2.40 · 2.4k tokens")
    assert len(model.requests()) == 2
    state = stack.browser_state(page)
    s = state["sessions"][sid]
    assert s["budget_stop"]["scope"] == "day" and s["budget_stop"]["unit"] == "usd"
    assert (s["budget_stop"]["limit"], s["budget_stop"]["spent"]) == (2_000_000, 2_400_000)
    tools = [i for i in s["items"] if i["kind"] == "tool_call"]
    assert [t["status"] for t in tools] == ["done", "done"]  # nothing left half-done

    # one click: $1.00 more than was spent, and the session goes on to its end
    raise_button = card.get_by_test_id("budget-raise")
    expect(raise_button).to_have_text("Raise by $1.00")
    raise_button.click()
    expect(card.get_by_test_id("session-status")).to_have_attribute("data-status", "idle",
                                                                     timeout=30_000)
    expect(card.get_by_test_id("budget-stop")).to_have_count(0)
    expect(card.get_by_test_id("session-cost")).to_have_text(" · $3.60")
    assert len(model.requests()) == 3
    state = stack.browser_state(page)
    assert state["day_budget"]["max_micros"] == 3_400_000
    assert state["sessions"][sid]["items"][-1]["text"] == "all done"

    # the usage page: today's spend, the chart's block for the provider, the session's row
    page.evaluate("location.hash = '#/usage'")
    expect(page.get_by_test_id("usage-today")).to_contain_text("$3.60")
    expect(page.locator("[data-testid=usage-chart] rect[data-provider=scripted]")).to_have_count(1)
    row = page.locator(f"[data-testid=usage-sessions] tr[data-session-id='{sid}']")
    expect(row).to_contain_text("$3.60")
    # (the "saved" toasts, which go by themselves, would cover the page's screenshot)
    page.evaluate("document.querySelectorAll('[data-testid=toast]').forEach((t) => t.remove())")
    page.set_viewport_size({"width": 1100, "height": 1000})
    page.screenshot(path=f"{SHOTS}/usage.png", full_page=True)


def test_a_sessions_own_token_budget_set_from_its_menu_stops_it_and_raise_goes_on(
        stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "first"}, "reply": {"text": "hello", "usage": USAGE}},
        {"match": {"user": "second"},
         "reply": {"text": "working", "calls": [stack.shell("echo", "two")], "usage": USAGE}},
        {"match": {"tool": "shell", "tool_output": "two"},
         "reply": {"text": "finished", "usage": USAGE}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    sid = stack.new_session(page, worker, stack.workdir(worker, "own"), "first")
    expect(stack.status(page)).to_have_attribute("data-status", "idle", timeout=30_000)

    # menu → Budget…: 2,000 tokens for this session (it has used 1,200)
    page.get_by_test_id("session-menu-button").click()
    page.get_by_test_id("menu-budget").click()
    form = page.get_by_test_id("session-budget-form")
    form.get_by_test_id("session-budget-tokens").fill("2000")
    form.get_by_test_id("session-budget-save").click()
    expect(form).to_be_hidden()
    expect(page.get_by_test_id("session-budget")).to_have_text(" · budget 2,000 tokens")

    page.get_by_test_id("prompt-input").fill("second")
    page.get_by_test_id("prompt-send").click()
    expect(stack.status(page)).to_have_text("budget reached", timeout=30_000)
    stop = page.locator("[data-testid=session-view] [data-testid=budget-stop]")
    expect(stop).to_contain_text("2.4k tokens of its budget (2.0k tokens)")
    assert len(model.requests()) == 2
    tool = stack.items(page, "tool_call")
    expect(tool.get_by_test_id("tool-status")).to_have_text("done")

    stop.get_by_test_id("budget-raise").click()  # "Raise by 1.0k tokens": 2,400 + 1,000
    expect(stack.status(page)).to_have_attribute("data-status", "idle", timeout=30_000)
    expect(stack.items(page, "assistant_message").last).to_have_text("finished")
    expect(page.get_by_test_id("session-budget")).to_have_text(" · budget 3,400 tokens")
    expect(stop).to_have_count(0)
    assert len(model.requests()) == 3
    assert stack.browser_state(page)["sessions"][sid]["budget"]["max_tokens"] == 3400
