"""The first hour's layout and defaults (issue 33, item 9), where a person sees them: linking a
machine from an empty start (the New session dialog opens at its top and links to "Link a
machine", whose request comes above the install lines), toasts clear of the top bar's
buttons, the folder last used on a machine (also by a session started elsewhere), sessions of
one title told apart, a session started with no provider saying so, Retry beside its error,
Interrupt only while there is something to stop, a mark where the model changed, the
transcript following after an approval, and the activity's clock stopped while the server
is away."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Locator, Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"
PHONE = {"width": 390, "height": 800}
DESKTOP = {"width": 1280, "height": 800}

# the install lines, without building the wheels (a minute on a cold cache): their text is
# not what is tested here (test_install_line.py runs them)
WHEELS = {"worker": "/dl/t/codey_worker-0.1.0-py3-none-any.whl",
          "protocol": "/dl/t/codey_protocol-0.1.0-py3-none-any.whl"}

# the transcript shows its end (what the session view calls "at the bottom")
AT_END = ("() => { const s = document.querySelector('[data-testid=session-items]'); "
          "return s.scrollHeight - s.scrollTop - s.clientHeight < 48; }")


def _box(locator: Locator) -> dict[str, float]:
    box = locator.bounding_box()
    assert box is not None, locator
    return box


def _overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def _clear_of_buttons(page: Page) -> None:
    """Every toast on screen covers no visible button of the top bar or the session's head."""
    toasts = page.get_by_test_id("toast")
    expect(toasts.first).to_be_visible()
    buttons = page.locator(".topbar a.btn, .topbar button, .s-head button, .s-head select, "
                           ".s-prompt button")
    for i in range(toasts.count()):
        toast = _box(toasts.nth(i))
        for j in range(buttons.count()):
            button = buttons.nth(j)
            if button.is_visible():
                assert not _overlaps(toast, _box(button)), button.evaluate("b => b.outerHTML")


def test_from_an_empty_start_to_two_sessions_of_one_title(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "Done."}}]})
    server = stack.server()
    page.route("**/dl/index.json", lambda route: route.fulfill(json=WHEELS))
    stack.open(page)

    # New session with no machine: its top in view, saying so, with the way to link one
    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    # (it opened scrolled to its end: its title out of view, that line cut at the top)
    expect(dialog.get_by_role("heading", name="New session")).to_be_in_viewport()
    expect(dialog.get_by_text("No machine is connected")).to_be_in_viewport(ratio=1)
    expect(dialog.get_by_test_id("ns-no-machine")).to_contain_text("No machine is connected")
    expect(dialog.get_by_test_id("ns-link-machine")).to_be_focused()
    page.screenshot(path=f"{SHOTS}/new-session-no-machine.png")
    dialog.get_by_test_id("ns-link-machine").click()
    expect(dialog).to_be_hidden()
    panel = page.get_by_test_id("pair-panel")
    expect(panel).to_be_visible()
    expect(panel.get_by_test_id("install-line")).to_be_visible()

    # a worker asks: its request comes first, above the long install lines, in view
    worker = stack.worker("worker", pair=False)
    request = panel.get_by_test_id("pair-request")
    expect(request).to_be_in_viewport()
    assert _box(request)["y"] < _box(panel.get_by_test_id("install"))["y"]
    page.screenshot(path=f"{SHOTS}/link-request-on-top.png")
    request.get_by_test_id("pair-approve").click()
    worker.wait_connected()

    # toasts ("Linked …", "… connected") leave the top bar's buttons clear, on a phone too
    _clear_of_buttons(page)
    page.screenshot(path=f"{SHOTS}/toast-desktop.png")
    page.set_viewport_size(PHONE)
    page.evaluate("window.__codey.app.toasts.show('A toast on a phone', 'warn')")
    _clear_of_buttons(page)
    page.screenshot(path=f"{SHOTS}/toast-phone.png")
    page.set_viewport_size(DESKTOP)

    # two sessions of one title, started elsewhere (the API): their cards tell them apart,
    # and New session opens in the folder last used on the machine, not its first root
    folders = [stack.workdir(worker, name) for name in ("billing", "search")]
    for folder in folders:
        made = server.http.post("/api/sessions", json={
            "worker_id": worker.worker_id, "workdir": folder, "title": "Fix the tests"})
        assert made.status_code == 201, made.text
    page.evaluate("location.hash = '#/'")
    cards = page.get_by_test_id("session-card")
    expect(cards).to_have_count(2)
    expect(page.get_by_test_id("session-twin")).to_have_text(["search", "billing"])
    page.screenshot(path=f"{SHOTS}/session-twins.png")
    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    expect(dialog.get_by_test_id("ns-worker")).to_have_value(worker.worker_id)
    expect(dialog.get_by_test_id("ns-workdir")).to_have_value(folders[1])
    expect(dialog.locator("h2")).to_be_in_viewport()


def test_a_session_started_without_a_provider(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "Recovered."}}]})
    server = stack.server(config={})  # no provider at all
    worker = stack.worker()
    made = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": stack.workdir(worker, "early"),
        "prompt": "too early"})
    assert made.status_code == 201, made.text
    stack.open(page)
    view = stack.open_session(page, made.json()["session_id"])

    # it names no provider nobody made; the way out is beside the error; nothing to stop
    expect(view.get_by_test_id("session-model")).to_have_text("no model provider is set up")
    error = stack.items(page, "error_item").last
    expect(error).to_contain_text("no model provider is set up on this server")
    expect(view).not_to_contain_text("'default'")
    retry = error.get_by_test_id("retry")
    expect(retry).to_be_visible()
    expect(view.get_by_test_id("interrupt")).to_be_hidden()
    page.screenshot(path=f"{SHOTS}/no-provider-retry.png")
    page.set_viewport_size(PHONE)
    expect(retry).to_be_in_viewport()
    page.screenshot(path=f"{SHOTS}/no-provider-retry-phone.png")
    page.set_viewport_size(DESKTOP)

    # a provider added, Retry: the switch to it is marked in the transcript
    server.http.post("/api/providers", json={
        "name": "local", "kind": "chat", "base_url": model.base_url, "auth": "none",
        "models": ["scripted-1", "scripted-2"]}).raise_for_status()
    retry.click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Recovered.")
    marks = view.locator("[data-testid=notice][data-code=model_changed]")
    expect(marks).to_have_text(["Model: local / scripted-1 — no model provider was set up when "
                                "the session started; using 'local'"])
    expect(error.get_by_test_id("retry")).to_have_count(0)
    expect(view.get_by_test_id("interrupt")).to_be_hidden()

    # a switch in the header between two turns: a mark where it happened
    view.get_by_test_id("model-select").select_option(label="local / scripted-2")
    expect(marks).to_have_count(2)
    expect(marks.last).to_have_text("Model: local / scripted-2")
    expect(stack.items(page).last.get_by_test_id("notice")).to_have_attribute(
        "data-code", "model_changed")  # where it happened: after the last turn
    page.screenshot(path=f"{SHOTS}/model-switch-mark.png")
    page.emulate_media(color_scheme="dark")
    page.evaluate("document.documentElement.dataset.theme = 'dark'")
    page.screenshot(path=f"{SHOTS}/model-switch-mark-dark.png")


def _long_text(n: int) -> str:
    return "\n\n".join(f"Paragraph {i}: " + "words " * 40 for i in range(n))


def test_the_transcript_follows_after_an_approval(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "read"}, "reply": {"text": _long_text(12)}},
        {"match": {"user": "count"}, "reply": {"calls": [stack.shell("bash", "-c", "seq 1 30")]}},
        {"match": {"tool": "shell"}, "reply": {"text": "Counted. " + _long_text(6)}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    stack.new_session(page, worker, stack.workdir(worker, "p"), "read", policy="suggest")
    expect(stack.status(page)).to_have_text("finished")
    interrupt = page.get_by_test_id("interrupt")
    expect(interrupt).to_be_hidden()
    # (each round is its own chance for the old view to lose the end: the browser's scroll
    # event for the decided approval's shrinking card came a frame late, measured against
    # the output added meanwhile, and read as the user scrolling up)
    for n in range(3):
        page.get_by_test_id("prompt-input").fill(f"count {n}")
        page.get_by_test_id("prompt-send").click()
        expect(interrupt).to_be_visible()  # a turn runs: it can be stopped
        page.get_by_test_id("approve").click()
        expect(stack.items(page, "assistant_message")).to_have_count(2 + n)
        expect(stack.status(page)).to_have_text("finished")
        page.wait_for_function(AT_END)
        expect(page.get_by_test_id("jump-latest")).to_be_hidden()
        expect(interrupt).to_be_hidden()

    # the user scrolls up on purpose: the next items do not pull the view down (approved
    # from elsewhere: a click here would bring the button into view)
    page.get_by_test_id("prompt-input").fill("count again")
    page.get_by_test_id("prompt-send").click()
    approval = page.get_by_test_id("approval")
    expect(approval).to_be_visible()
    approval_id = approval.get_attribute("data-approval-id")
    page.get_by_test_id("session-items").hover()
    page.mouse.wheel(0, -600)
    expect(page.get_by_test_id("jump-latest")).to_be_visible()
    sid = page.get_by_test_id("session-view").get_attribute("data-session-id")
    server.http.post(f"/api/sessions/{sid}/approvals/{approval_id}",
                     json={"decision": "approve"}).raise_for_status()
    expect(stack.items(page, "assistant_message")).to_have_count(5)
    expect(page.get_by_test_id("jump-latest")).to_be_visible()
    assert not page.evaluate(AT_END)
    page.get_by_test_id("jump-latest").click()
    page.wait_for_function(AT_END)


def test_the_activity_clock_stops_while_the_server_is_away(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "build"}, "reply": {"calls": [stack.gated("build")]}},
        {"match": {"any": True}, "reply": {"text": "Built."}},
    ]})
    server = stack.server()
    worker = stack.worker()
    page.clock.install()  # the page's own clock, moved on below without waiting
    stack.open(page)
    wd = stack.workdir(worker, "build")
    stack.new_session(page, worker, wd, "build")
    activity = page.get_by_test_id("activity")
    expect(activity.get_by_test_id("activity-text")).to_contain_text("running")
    page.clock.fast_forward(5_000)
    expect(activity).to_contain_text(re.compile(r"\d+ s"))  # its clock runs

    server.stop()
    expect(page.get_by_test_id("conn-state")).not_to_have_text("live")
    page.clock.fast_forward(1_000)  # (a tick of the line's own timer)
    shown = activity.inner_text()
    page.clock.fast_forward(60_000)  # a minute later, the page still knows nothing newer
    expect(activity).to_have_text(shown)
    expect(activity.get_by_test_id("activity-cut")).to_contain_text(
        "the server is unreachable")
    page.screenshot(path=f"{SHOTS}/activity-server-away.png")
    stack.release(Path(wd))
