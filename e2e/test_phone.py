"""On a phone (390×844): a new approval's buttons come into view above the prompt box and can
be clicked while the box holds a draft, and the top bar and the session's header leave most
of the screen to the transcript."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from playwright.sync_api import Browser, Page, expect

from codey_testkit.scenarios import create_session

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"
PHONE = {"width": 390, "height": 844}

LONG_ANSWER = "\n\n".join(f"{n}. A paragraph of the answer, long enough to wrap on a phone's "
                          "narrow screen at least once." for n in range(1, 31))


def covered(page: Page, testid_scope: Any) -> str | None:
    """What covers the middle of the element, if anything else than itself."""
    result: str | None = testid_scope.evaluate("""(el) => {
      const r = el.getBoundingClientRect();
      const at = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
      return at && (at === el || el.contains(at)) ? null
        : (at ? at.outerHTML.slice(0, 120) : 'nothing (off screen)');
    }""")
    return result


def test_approval_on_a_phone(stack: Stack, browser: Browser,
                             browser_context_args: dict[str, Any]) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "explain"}, "reply": {"text": LONG_ANSWER, "calls": [
            {"name": "update_plan", "arguments": {"plan": [
                {"step": "Explain the code", "status": "done"},
                {"step": "Build it", "status": "in_progress"},
                {"step": "Report", "status": "pending"}]}}]}},
        {"match": {"tool": "update_plan"}, "reply": {"text": "Explained."}},
        {"match": {"user": "now build"}, "reply": {"calls": [stack.shell("true")]}},
        {"match": {"tool": "shell"}, "reply": {"text": "Built."}},
    ]})
    server = stack.server()
    worker = stack.worker()
    context = browser.new_context(**{**browser_context_args, "viewport": PHONE,
                                     "device_scale_factor": 2, "has_touch": True})
    page = context.new_page()
    stack.open(page)
    sid = create_session(server, worker, stack.workdir(worker, "phone"), "explain",
                         policy="suggest")
    view = stack.open_session(page, sid)
    expect(stack.items(page, "assistant_message").last).to_have_text("Explained.")

    # the top bar is one row, and with the session's header it leaves the screen to the
    # transcript (the plan folded to one line above it)
    top = page.locator("header.topbar").bounding_box()
    transcript = page.get_by_test_id("session-items").bounding_box()
    assert top and transcript
    assert top["height"] <= 56, top
    assert transcript["y"] <= 0.25 * PHONE["height"], (
        f"the transcript starts {transcript['y']:.0f} px down")
    expect(page.get_by_test_id("plan")).to_contain_text("1/3 done · Build it")
    page.screenshot(path=f"{SHOTS}/phone-session.png")

    # the policy, sandbox and network do not fit beside the status and Interrupt: they are
    # at the top of the session's menu, whole (not squeezed to their arrows)
    settings = page.get_by_test_id("session-settings")
    expect(settings).to_be_hidden()
    page.get_by_test_id("session-menu-button").tap()
    expect(settings).to_be_visible()
    page.screenshot(path=f"{SHOTS}/phone-menu.png")
    for select in ("policy-select", "sandbox-select"):
        fits = page.get_by_test_id(select).evaluate(
            "(el) => el.getBoundingClientRect().width >= 60 && "
            "el.scrollWidth <= el.clientWidth + 1")
        assert fits, f"{select} is squeezed"
    page.get_by_test_id("policy-select").select_option("auto-edit")
    expect(page.get_by_test_id("policy-select")).to_have_value("auto-edit")
    stack.wait_until(lambda: server.http.get(f"/api/sessions/{sid}").json()["policy"]
                     == "auto-edit", what="the policy to change")
    page.get_by_test_id("policy-select").select_option("suggest")
    stack.wait_until(lambda: server.http.get(f"/api/sessions/{sid}").json()["policy"]
                     == "suggest", what="the policy to change back")
    page.get_by_test_id("session-menu-button").tap()
    expect(settings).to_be_hidden()

    # the user reads back up and starts a draft; then an approval comes
    page.get_by_test_id("session-items").evaluate("(el) => { el.scrollTop = 0; }")
    prompt = page.get_by_test_id("prompt-input")
    prompt.click()
    prompt.fill("a draft\nof two lines")
    page.evaluate("(sid) => window.__codey.socket.sendPrompt(sid, 'now build')", sid)
    approval = view.get_by_test_id("approval")
    expect(approval).to_be_visible()
    approve = approval.get_by_test_id("approve")
    expect(approve).to_be_in_viewport()
    assert covered(page, approve) is None
    assert covered(page, approval.get_by_test_id("reject")) is None
    box, form = approve.bounding_box(), page.locator("form.s-prompt").bounding_box()
    assert box and form and box["y"] + box["height"] <= form["y"], (box, form)
    page.screenshot(path=f"{SHOTS}/phone-approval.png")
    approve.tap()
    expect(stack.items(page, "assistant_message").last).to_have_text("Built.")
    expect(prompt).to_have_value("a draft\nof two lines")  # the draft is still there

    # the pages are one tap away, behind Menu
    expect(page.get_by_test_id("board-link")).to_be_hidden()
    page.get_by_test_id("topbar-menu").tap()
    page.get_by_test_id("board-link").tap()
    expect(page.locator("main")).to_have_attribute("data-route", "board")
    expect(page.get_by_test_id("board-link")).to_be_hidden()
    context.close()
