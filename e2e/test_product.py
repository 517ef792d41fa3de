"""The web client tells the truth: the login screen, offline states, the activity line, Retry,
and what each session's card says about it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx
from playwright.sync_api import Page, expect

from codey_testkit.scenarios import provider_config

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def test_the_login_screen_without_a_cookie_and_with_a_bad_token(stack: Stack,
                                                                  page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": []})
    server = stack.server()
    page.goto(server.url + "/")
    screen = page.get_by_test_id("login-screen")
    expect(screen).to_be_visible()
    expect(screen.get_by_test_id("login-url-command")).to_have_text("codey-server url")
    expect(page.get_by_test_id("conn-state")).to_have_text("logged out")
    expect(page.get_by_test_id("dashboard")).to_have_count(0)  # no "nothing set up" page
    page.screenshot(path=f"{SHOTS}/login-screen.png")

    response = page.goto(f"{server.url}/?token=not-the-token")
    assert response is not None and response.status == 401
    expect(page.get_by_test_id("login-bad-link")).to_be_visible()

    page.get_by_test_id("login-input").fill(f"{server.url}/?token={server.token}")
    page.get_by_test_id("login-submit").click()
    expect(page.get_by_test_id("dashboard")).to_be_visible()
    expect(page.get_by_test_id("conn-state")).to_have_text("live")

    page.get_by_test_id("logout").click()
    expect(page.get_by_test_id("login-screen")).to_be_visible()
    assert httpx.get(f"{server.url}/api/sessions",
                     cookies=page.context.cookies()[0:0] or None).status_code == 401


def test_offline_states_are_said(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "long one"}, "reply": {"calls": [stack.gated("long")]}},
        {"match": {"user": "ask first"}, "reply": {"calls": [stack.shell("make")]}},
        {"match": {"any": True}, "reply": {"text": "ok"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    workdir = stack.workdir(worker, "off")
    stack.new_session(page, worker, workdir, "long one")
    tool = stack.items(page, "tool_call").last.get_by_test_id("tool-status")
    expect(tool).to_have_text("running")
    expect(page.get_by_test_id("activity-text")).to_contain_text("running `bash")
    worker.kill9()
    expect(tool).to_have_text("waiting for machine")
    expect(page.get_by_test_id("activity-text")).to_have_text(
        "waiting for the machine to come back")
    page.screenshot(path=f"{SHOTS}/offline-command.png")
    stack.release(workdir)

    # an approval clicked while the server is away is queued, and says so
    worker.start()
    stack.new_session(page, worker, stack.workdir(worker, "ask"), "ask first",
                      policy="suggest")
    expect(page.get_by_test_id("approval")).to_be_visible()
    server.stop()
    expect(page.get_by_test_id("conn-state")).not_to_have_text("live")
    page.get_by_test_id("approve").click()
    expect(page.get_by_test_id("approval-queued")).to_be_visible()
    server.start()
    expect(page.get_by_test_id("conn-state")).to_have_text("live")
    expect(page.get_by_test_id("approval-decided")).to_be_visible()


def test_the_activity_line_during_a_slow_model_call(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "think hard"},
         "reply": {"text": "Thought about it.", "initial_delay_ms": 4000}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    stack.new_session(page, worker, stack.workdir(worker, "slow"), "think hard")
    activity = page.get_by_test_id("activity")
    expect(activity).to_contain_text("thinking")
    expect(activity).to_have_text(re.compile(r"thinking\s*[23] s"), timeout=10_000)
    page.screenshot(path=f"{SHOTS}/activity-line.png")
    expect(stack.items(page, "assistant_message").last).to_have_text("Thought about it.")
    expect(activity).to_be_hidden()


def test_retry_after_a_model_error(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "flaky"}, "times": 1,
         "reply": {"error": {"status": 503, "message": "The engine is overloaded."}}},
        {"match": {"user": "flaky"}, "reply": {"text": "Worked this time."}},
    ]})
    config = provider_config(model)
    config["providers"][0]["max_retries"] = 0
    stack.server(config)
    worker = stack.worker()
    stack.open(page)
    stack.new_session(page, worker, stack.workdir(worker, "retry"), "flaky")
    expect(stack.status(page)).to_have_text("failed")
    expect(stack.items(page, "error_item")).to_contain_text("The engine is overloaded.")
    retry = page.get_by_test_id("retry")
    expect(retry).to_be_visible()
    page.screenshot(path=f"{SHOTS}/retry.png")
    retry.click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Worked this time.")
    expect(stack.status(page)).to_have_text("finished")
    expect(retry).to_be_hidden()


def test_session_cards_say_how_each_session_ended(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "change a file"}, "reply": {"calls": [{"name": "apply_patch",
         "arguments": {"input": "*** Begin Patch\n*** Add File: notes.txt\n+one\n+two\n"
                                "*** End Patch"}}]}},
        {"match": {"tool": "apply_patch"}, "reply": {"text": "Added notes.txt.\nAll done."}},
        {"match": {"user": "break"}, "reply": {"error": {"status": 400, "message": "bad"}}},
        {"match": {"user": "needs ok"}, "reply": {"calls": [stack.shell("make")]}},
        {"match": {"user": "long"}, "reply": {"calls": [stack.gated("long")]}},
        {"match": {"any": True}, "reply": {"text": "ok"}},
    ]})
    server = stack.server(provider_config(model))
    worker = stack.worker()
    stack.open(page)
    done = stack.new_session(page, worker, stack.workdir(worker, "a"), "change a file")
    expect(stack.status(page)).to_have_text("finished")
    failed = stack.new_session(page, worker, stack.workdir(worker, "b"), "break")
    expect(stack.status(page)).to_have_text("failed")
    asking = stack.new_session(page, worker, stack.workdir(worker, "c"), "needs ok",
                               policy="suggest")
    expect(stack.status(page)).to_have_text("needs approval")
    stopped = stack.new_session(page, worker, stack.workdir(worker, "d"), "long")
    expect(page.get_by_test_id("activity-text")).to_contain_text("running")
    # the command itself has started on the worker: its output has come back (the card shows
    # "running", and its text holds the command, while the turn's checkpoint is still being
    # kept, before the worker starts it)
    expect(stack.items(page, "tool_call").last.get_by_test_id("tool-output")
           ).to_contain_text("long-start")
    page.get_by_test_id("interrupt").click()
    expect(stack.status(page)).to_have_text("stopped")
    page.evaluate("location.hash = '#/'")

    def card(sid: str):  # type: ignore[no-untyped-def]
        return page.locator(f"[data-testid=session-card][data-session-id='{sid}']")

    expect(card(done).get_by_test_id("session-status")).to_have_text("finished")
    expect(card(done).get_by_test_id("session-preview")).to_have_text("All done.")
    expect(card(done).get_by_test_id("session-diffstat")).to_have_text(" · 1 file +2 −0")
    expect(card(done).get_by_test_id("session-activity")).to_contain_text("active")
    expect(card(failed).get_by_test_id("session-status")).to_have_text("failed")
    expect(card(failed).get_by_test_id("session-error")).to_contain_text("bad")
    expect(card(asking).get_by_test_id("session-status")).to_have_text("needs approval")
    expect(card(asking).get_by_test_id("attention-badge")).to_be_visible()
    expect(card(stopped).get_by_test_id("session-status")).to_have_text("stopped")
    page.screenshot(path=f"{SHOTS}/session-cards.png", full_page=True)
    assert server.http.get("/api/sessions").status_code == 200

    # the machine's own terminal lines, in its card
    box = page.locator(f"[data-testid=worker-card][data-worker-id='{worker.worker_id}'] "
                       "[data-testid=worker-log]")
    box.locator("summary").click()
    lines = box.get_by_test_id("worker-log-lines")
    expect(lines).to_contain_text(f"[{done[:8]}] patch: 1 file")
    expect(lines).to_contain_text("running: ")
    page.screenshot(path=f"{SHOTS}/worker-log.png", full_page=True)


def test_shortcuts_overlay_and_approve_by_key(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "build"}, "reply": {"calls": [stack.shell("true")]}},
        {"match": {"tool": "shell"}, "reply": {"text": "Built."}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    stack.new_session(page, worker, stack.workdir(worker, "keys"), "build", policy="suggest")
    expect(page.get_by_test_id("approval")).to_be_visible()
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("?")
    expect(page.get_by_test_id("shortcuts")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("shortcuts")).to_be_hidden()
    page.keyboard.press("a")
    expect(stack.items(page, "assistant_message").last).to_have_text("Built.")
