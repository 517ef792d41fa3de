"""Hooks in Claude Code's format, in the browser (issue 39): a repository's hook waits for the
user's trust (the banner shows its command), then denies a command, and the tool card shows
the hook's run folded under the call: its decision, reason, exit code and command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = Path("/tmp/shots/i39-hooks")
TURN_SHOTS = Path("/tmp/shots/i39-hooks2")

GUARD = "if grep -q 'rm -rf'; then echo 'no rm -rf in this repository' >&2; exit 2; fi"


def test_a_trusted_project_hook_denies_and_its_run_shows_on_the_card(
        stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "say one"},
         "reply": {"calls": [{"name": "shell", "arguments": {
             "command": ["bash", "-c", "echo one"]}}]}},
        {"match": {"tool": "shell", "tool_output": "one"}, "reply": {"text": "Said one."}},
        {"match": {"user": "clean up"},
         "reply": {"calls": [{"name": "shell", "arguments": {
             "command": ["bash", "-c", "rm -rf build"]}}]}},
        {"match": {"tool": "shell", "tool_output": "blocked by a PreToolUse hook"},
         "reply": {"text": "The repository's hook refused that."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    workdir = Path(stack.workdir(worker, "repo"))
    (workdir / "build").mkdir()
    (workdir / ".claude").mkdir()
    (workdir / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": GUARD}]}]}}))

    stack.open(page)
    stack.new_session(page, worker, str(workdir), "say one")
    expect(stack.items(page, "assistant_message").last).to_have_text("Said one.")
    # not trusted: it did not run, and the banner shows what it would run
    expect(page.get_by_test_id("hook-runs")).to_have_count(0)
    banner = page.get_by_test_id("hook-trust")
    expect(banner).to_be_visible(timeout=30_000)
    expect(banner.get_by_test_id("hook-trust-command")).to_have_text(GUARD)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "hook-trust-banner.png"), full_page=True)
    banner.get_by_test_id("hook-trust-button").click()
    expect(banner).to_have_count(0, timeout=30_000)

    page.get_by_test_id("prompt-input").fill("clean up")
    page.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "The repository's hook refused that.", timeout=30_000)
    card = stack.items(page, "tool_call").last
    expect(card.get_by_test_id("tool-status")).to_have_attribute("data-status", "rejected")
    run = card.get_by_test_id("hook-run")
    expect(run).to_have_count(1)
    expect(run).to_have_attribute("data-decision", "deny")
    expect(run.get_by_test_id("hook-decision")).to_have_text("deny")
    expect(run.get_by_test_id("hook-reason")).to_contain_text("no rm -rf in this repository")
    run.locator("summary").click()
    expect(run.get_by_test_id("hook-command")).to_have_text(GUARD)
    assert (workdir / "build").is_dir()
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "hook-deny-on-card.png"), full_page=True)


#: the repository's UserPromptSubmit guard (bash): no prompt that says "forbidden"
PROMPT_GUARD = "if grep -q forbidden; then echo 'not this prompt' >&2; exit 2; fi"
#: its Stop hook: the first answer that says ONCE goes on, with a reason
STOP_ONCE = ('input=$(cat); case "$input" in *\'"stop_hook_active": false\'*ONCE*) '
             'echo \'{"decision": "block", "reason": "run the tests first"}\' ;; esac')


def test_turn_hooks_show_on_the_prompt_and_the_answer(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "say hi"}, "reply": {"text": "Hi."}},
        {"match": {"user": "finish up"}, "reply": {"text": "Done ONCE."}},
        {"match": {"user": "run the tests first"}, "reply": {"text": "Tests pass; done."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    workdir = Path(stack.workdir(worker, "turnhooks"))
    (workdir / ".claude").mkdir(parents=True)
    (workdir / ".claude" / "settings.json").write_text(json.dumps({"hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": PROMPT_GUARD}]}],
        "Stop": [{"hooks": [{"type": "command", "command": STOP_ONCE}]}]}}))

    stack.open(page)
    stack.new_session(page, worker, str(workdir), "say hi")
    expect(stack.items(page, "assistant_message").last).to_have_text("Hi.")
    banner = page.get_by_test_id("hook-trust")
    expect(banner).to_be_visible(timeout=30_000)
    banner.get_by_test_id("hook-trust-button").click()
    expect(banner).to_have_count(0, timeout=30_000)

    # the guard keeps a prompt from the model: the prompt says so, with the hook's run
    page.get_by_test_id("prompt-input").fill("something forbidden")
    page.get_by_test_id("prompt-send").click()
    prompt = stack.items(page, "user_message").filter(has_text="something forbidden")
    expect(prompt.get_by_test_id("prompt-blocked")).to_be_visible(timeout=30_000)
    run = prompt.get_by_test_id("hook-run")
    expect(run).to_have_attribute("data-decision", "block")
    expect(run.get_by_test_id("hook-reason")).to_contain_text("not this prompt")
    expect(page.locator('[data-testid="notice"][data-code="hook_blocked"]')).to_be_visible()

    # the Stop hook keeps the turn going once: its run is on the answer it judged, and its
    # reason is the Hook's message the model answered
    page.get_by_test_id("prompt-input").fill("finish up")
    page.get_by_test_id("prompt-send").click()
    # (an answer's text is followed by the Stop hooks' runs shown on it)
    expect(stack.items(page, "assistant_message").last).to_contain_text(
        "Tests pass; done.", timeout=30_000)
    judged = stack.items(page, "assistant_message").filter(has_text="Done ONCE.")
    stop = judged.get_by_test_id("hook-run")
    expect(stop).to_have_attribute("data-decision", "block")
    expect(page.get_by_test_id("hook-prompt")).to_have_count(1)
    stop.locator("summary").click()
    run.locator("summary").click()
    TURN_SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(TURN_SHOTS / "turn-hooks.png"), full_page=True)
