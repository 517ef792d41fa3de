"""Goals in the browser over the real stack (a real worker, its commands in bubblewrap; the
scripted model): a goal set in New session reached after a failing and then a passing test
run; a goal typed as ``/goal`` in the prompt box and judged through ``goal_met``; the cap of
turns stopping a goal that is never met. The goal's box and the dashboard card show it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Page, expect

from codey_testkit.scenarios import FIX_PATCH, write_project

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

pytestmark = pytest.mark.skipif(
    subprocess.run(["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True,
                   check=False).returncode != 0 if os.path.exists("/usr/bin/bwrap") else True,
    reason="needs a working bubblewrap (scripts/test installs it)")

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "Your goal for this session: $ python3 test_app.py"},
     "reply": {"text": "I will run the tests first."}},
    {"match": {"user": "`python3 test_app.py` exited 1"},
     "reply": {"calls": [{"name": "apply_patch", "arguments": {"input": FIX_PATCH}}]}},
    {"match": {"tool": "apply_patch"}, "reply": {"text": "Fixed add: it adds now."}},
    {"match": {"user": "say hello"}, "reply": {"text": "Hello."}},
    {"match": {"user": "Your goal for this session: hello.txt says hello"},
     "reply": {"calls": [{"name": "shell", "arguments": {
         "command": ["sh", "-c", "echo hello > hello.txt && cat hello.txt"]}}]}},
    {"match": {"tool": "shell", "tool_output": "hello"},
     "reply": {"calls": [{"name": "goal_met", "arguments": {
         "evidence": "wrote hello.txt; `cat hello.txt` printed: hello"}}]}},
    {"match": {"tool": "goal_met"}, "reply": {"text": "The file says hello."}},
    {"match": {"user": "shows the goal met"},
     "reply": {"text": '{"decision": "approve", "risk": 5, '
                       '"reason": "cat printed hello from hello.txt"}'}},
    {"match": {"any": True}, "reply": {"text": "Still trying."}},
]}


def _goal_box(page: Page) -> Any:
    return page.get_by_test_id("goal-box")


def test_a_goal_from_new_session_is_met_after_a_failing_then_a_passing_run(
        stack: Stack, page: Page) -> None:
    stack.model(SCRIPT)
    stack.server()
    worker = stack.worker()
    wd = Path(stack.workdir(worker, "calc"))
    write_project(wd)
    stack.open(page)
    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    dialog.get_by_test_id("ns-worker").select_option(worker.worker_id)
    dialog.get_by_test_id("ns-workdir").fill(str(wd))
    dialog.get_by_test_id("ns-policy").select_option("full-auto")
    dialog.get_by_test_id("ns-goal").fill("$ python3 test_app.py")
    dialog.get_by_test_id("ns-submit").click()
    expect(page.get_by_test_id("session-view")).to_be_visible()

    box = _goal_box(page)
    expect(box).to_have_attribute("data-goal-status", "met", timeout=60_000)
    expect(box.get_by_test_id("goal-condition")).to_have_text("$ python3 test_app.py")
    expect(box.get_by_test_id("goal-status")).to_have_text("met after 2 checks")
    expect(box.get_by_test_id("goal-attempts")).to_have_text("2 of 10")
    expect(box.get_by_test_id("goal-reason")).to_have_text("its command exited 0 (check 2)")
    expect(box).to_contain_text("Last check: met · exit 0")
    # the second turn began with what the failing run printed
    told = stack.items(page, "user_message").filter(has_text="not met yet (check 1 of 10)")
    expect(told).to_contain_text("AssertionError: -1")
    expect(told.get_by_test_id("goal-prompt")).to_have_text("Goal")
    expect(stack.items(page, "assistant_message").last).to_have_text("Fixed add: it adds now.")
    assert (wd / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    page.screenshot(path=str(stack.tmp / "goal-met.png"), full_page=True)

    page.evaluate("location.hash = '#/'")
    card = page.get_by_test_id("card-goal")
    expect(card).to_contain_text("$ python3 test_app.py")
    expect(card).to_contain_text("met after 2 checks")


def test_a_goal_typed_in_the_prompt_box_is_judged_through_goal_met(
        stack: Stack, page: Page) -> None:
    model = stack.model(SCRIPT)
    stack.server()
    worker = stack.worker()
    wd = Path(stack.workdir(worker, "greet"))
    stack.open(page)
    stack.new_session(page, worker, str(wd), "say hello")
    expect(stack.items(page, "assistant_message").last).to_have_text("Hello.")
    expect(_goal_box(page)).to_have_count(0)

    page.get_by_test_id("prompt-input").fill("/goal hello.txt says hello")
    page.get_by_test_id("prompt-send").click()
    box = _goal_box(page)
    expect(box).to_have_attribute("data-goal-status", "met", timeout=60_000)
    expect(box.get_by_test_id("goal-attempts")).to_have_text("1 of 10")
    expect(box.get_by_test_id("goal-output")).to_have_text("cat printed hello from hello.txt")
    expect(box).to_contain_text("a reviewer (goal_met)")
    expect(page.get_by_test_id("prompt-input")).to_have_value("")
    assert (wd / "hello.txt").read_text() == "hello\n"
    judged = [r for r in model.requests("/v1/chat/completions")
              if "shows the goal met" in str(r["body"]["messages"][-1]["content"])]
    assert len(judged) == 1
    # on a phone the goal stays above the transcript, as the plan does
    page.set_viewport_size({"width": 390, "height": 844})
    expect(box).to_be_visible()
    expect(box.get_by_test_id("goal-status")).to_have_text("met after 1 check")


def test_the_cap_stops_a_goal_that_is_never_met(stack: Stack, page: Page) -> None:
    stack.model(SCRIPT)
    stack.server()
    worker = stack.worker()
    wd = Path(stack.workdir(worker, "never"))
    stack.open(page)
    sid = stack.new_session(page, worker, str(wd), "say hello")
    expect(stack.items(page, "assistant_message").last).to_have_text("Hello.")
    assert stack.srv is not None
    r = stack.srv.http.post(f"/api/sessions/{sid}/goal",
                            json={"condition": "$ sh -c 'echo 2 failed; exit 1'",
                                  "max_turns": 3})
    assert r.status_code == 200, r.text
    box = _goal_box(page)
    expect(box).to_have_attribute("data-goal-status", "given_up", timeout=60_000)
    expect(box.get_by_test_id("goal-status")).to_have_text("given up after 3 of 3")
    expect(box.get_by_test_id("goal-reason")).to_have_text(
        "not met after 3 turns (the cap is 3)")
    expect(box.get_by_test_id("goal-output")).to_have_text("2 failed")
    expect(box.get_by_test_id("goal-clear")).to_have_count(0)
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    # three turns towards it, no fourth
    expect(stack.items(page, "assistant_message")).to_have_count(4)  # "Hello." and three
