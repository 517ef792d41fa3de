"""A worker killed mid-command shows as disconnected; started again, the session says what
happened, and (under suggest) goes on when the user says so. Under full-auto it goes on by
itself: test_worker_restart.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def test_disconnect_reconnect(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "long job"}, "reply": {"calls": [stack.gated("long")]}},
        # The killed command is never run twice: the restarted worker answers "interrupted",
        # and (under suggest) the turn stops there; the user's word runs it again.
        {"match": {"user": "go on"},
         "reply": {"calls": [stack.shell("bash", "-c", "echo second-run")]}},
        {"match": {"tool": "shell", "tool_output": "second-run"},
         "reply": {"text": "finished after the reconnect"}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = stack.workdir(worker, "proj")
    sid = stack.new_session(page, worker, wd, "long job", policy="suggest")
    stack.items(page, "tool_call").get_by_test_id("approve").click()
    expect(stack.items(page, "tool_call").get_by_test_id("tool-output")).to_have_text(
        "long-start")

    worker.kill9()
    page.evaluate("location.hash = '#/'")
    card = page.locator(f"[data-testid=worker-card][data-worker-id='{worker.worker_id}']")
    expect(card.get_by_test_id("worker-status")).to_have_text("disconnected")
    session_card = page.locator(f"[data-testid=session-card][data-session-id='{sid}']")
    expect(session_card.get_by_test_id("worker-gone")).to_be_visible()
    expect(session_card.get_by_test_id("session-status")).to_have_attribute(
        "data-status", "waiting_worker")
    expect(page.get_by_test_id("toast").filter(has_text="disconnected")).to_be_visible()

    worker.start()
    expect(card.get_by_test_id("worker-status")).to_have_text("connected")
    expect(session_card.get_by_test_id("worker-gone")).to_have_count(0)
    expect(session_card.get_by_test_id("session-status")).to_have_attribute("data-status",
                                                                             "error")

    stack.open_session(page, sid)
    expect(stack.items(page, "error_item").last).to_contain_text("The worker restarted")
    page.get_by_test_id("prompt-input").fill("go on")
    page.get_by_test_id("prompt-send").click()
    tools = stack.items(page, "tool_call")
    expect(tools).to_have_count(2)
    tools.nth(1).get_by_test_id("approve").click()
    expect(tools.nth(1).get_by_test_id("tool-output")).to_have_text("second-run")
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "finished after the reconnect")
    # the answer is one event and the turn's end the next: the page may show the first
    # before the second is stored
    state = stack.wait_until(
        lambda: (s := server.http.get(f"/api/sessions/{sid}").json())["status"] == "idle" and s,
        what="the session to be idle after its answer")
    assert [i["status"] for i in state["items"] if i["kind"] == "tool_call"] == ["failed", "done"]
