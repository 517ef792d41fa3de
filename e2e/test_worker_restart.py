"""A worker that restarts while a command runs: the card says why the command failed and the
model is told what happened (not "cancelled"). Under suggest the session does not end
"finished": it waits for the user. Under full-auto nobody is waited for: the model reads the
honest result and the session goes on by itself once the worker is back."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def script(stack: Stack) -> dict[str, Any]:
    return {"model": "scripted-1", "steps": [
        {"match": {"user": "build it"}, "reply": {"calls": [stack.gated("build")]}},
        {"match": {"user": "go on"}, "reply": {"text": "I will run the build again."}},
        {"match": {"tool_output": "the worker"},
         "reply": {"text": "The build was cut off; I will check before running it again."}},
        {"match": {"any": True}, "reply": {"text": "All done."}},
    ]}


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_a_worker_restart_during_a_command_is_told_as_it_is(
        stack: Stack, page: Page, how: str) -> None:
    model = stack.model(script(stack))
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = stack.workdir(worker, "build")
    sid = stack.new_session(page, worker, wd, "build it", policy="suggest")
    tool = stack.items(page, "tool_call").last
    tool.get_by_test_id("approve").click()
    expect(tool.get_by_test_id("tool-output")).to_have_text("build-start")

    if how == "stopped":
        worker.stop()  # SIGTERM: the worker stops its commands on the way out
    else:
        worker.kill9()  # the command outlives it (its own session); the worker knows nothing
    expect(stack.status(page)).to_have_attribute("data-status", "waiting_worker")
    worker.start()

    # the card: failed, and why
    expect(tool.get_by_test_id("tool-status")).to_have_attribute("data-status", "failed")
    error = tool.locator(".tool-error")
    said = {"stopped": "the worker stopped (signal SIGTERM) while this command ran",
            "killed": "the worker restarted while this command ran"}[how]
    expect(error).to_contain_text(said)
    # the session: not "finished", and it says why
    expect(stack.status(page)).to_have_attribute("data-status", "error")
    expect(stack.status(page)).to_have_text("failed")
    notice = stack.items(page, "error_item").last
    went = "stopped" if how == "stopped" else "restarted"
    expect(notice).to_contain_text(f"The worker {went}")
    served = worker.server.http.get(f"/api/sessions/{sid}").json()
    assert served["status_reason"] == f"the worker {went} during a command", served
    page.screenshot(path=f"e2e/test-results/worker-restart-{how}.png")
    # the model was not called behind the user's back with a made-up story
    assert not [r for r in model.requests("/v1/chat/completions")
                if r["body"]["messages"][-1]["role"] == "tool"]

    # going on: the model is told the truth about the command
    page.get_by_test_id("prompt-input").fill("go on")
    page.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "I will run the build again.")
    messages = model.requests("/v1/chat/completions")[-1]["body"]["messages"]
    [told] = [m for m in messages if m["role"] == "tool"]
    content = told["content"]
    assert "cancelled" not in content, content
    if how == "stopped":
        assert content.startswith("the command did not finish: the worker stopped (signal "
                                  "SIGTERM) while it ran, and stopped it\n"), content
        assert "build-start" in content  # and what it printed before
    else:
        assert content.startswith("error: the worker restarted while this command ran. It was "
                                  "not run again, and whether it finished is unknown"), content
    stack.release(wd)
    assert Path(wd).is_dir()


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_under_full_auto_the_session_goes_on_by_itself_after_a_worker_restart(
        stack: Stack, page: Page, how: str) -> None:
    model = stack.model(script(stack))
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = stack.workdir(worker, "build")
    sid = stack.new_session(page, worker, wd, "build it", policy="full-auto")
    tool = stack.items(page, "tool_call").last
    expect(tool.get_by_test_id("tool-output")).to_have_text("build-start")

    if how == "stopped":
        worker.stop()
    else:
        worker.kill9()
    expect(stack.status(page)).to_have_attribute("data-status", "waiting_worker")
    worker.start()

    # the same honest report on the card; then, by itself, the model's answer to it
    expect(tool.get_by_test_id("tool-status")).to_have_attribute("data-status", "failed")
    said = {"stopped": "the worker stopped (signal SIGTERM) while this command ran",
            "killed": "the worker restarted while this command ran"}[how]
    expect(tool.locator(".tool-error")).to_contain_text(said)
    notice = page.locator("[data-testid=notice][data-code=worker_lost]")
    expect(notice).to_contain_text("Full auto: the model was told, and the session goes on.")
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "The build was cut off; I will check before running it again.")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    expect(stack.items(page, "error_item")).to_have_count(0)
    page.screenshot(path=f"e2e/test-results/worker-restart-full-auto-{how}.png")

    # what the model read: the truth, not "cancelled"
    calls = model.requests("/v1/chat/completions")
    [told] = [m for m in calls[-1]["body"]["messages"] if m["role"] == "tool"]
    content = told["content"]
    assert "cancelled" not in content, content
    if how == "stopped":
        assert content.startswith("the command did not finish: the worker stopped (signal "
                                  "SIGTERM) while it ran, and stopped it\n"), content
    else:
        assert content.startswith("error: the worker restarted while this command ran. It was "
                                  "not run again, and whether it finished is unknown"), content
    served = worker.server.http.get(f"/api/sessions/{sid}").json()
    assert served["status"] == "idle", served
    stack.release(wd)
