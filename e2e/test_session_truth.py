"""The session view says what is so: the lines of output it counts are the ones on screen, a
file's size is the same before and after sending, a rate limit's reset counts down, the
header keeps the model and "archived" apart, the fork icon is one the page ships, a
sub-agent links back to its parent, a fork opened before its event arrived shows up
without a reload, and the changed files and memory notes are the session's own."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"

# three lines, then (once the test releases it) three more
SIX_LINES = ("for i in 1 2 3; do echo line $i; sleep 0.3; done; "
             "for i in $(seq 600); do [ -f go ] && break; sleep 0.1; done; "
             "for i in 4 5 6; do echo line $i; done")


def test_output_attachments_rate_limits_header_and_fork_icon(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "six lines"},
         "reply": {"calls": [stack.shell("bash", "-c", SIX_LINES)]}},
        {"match": {"tool": "shell"}, "reply": {"text": "Printed six lines."}},
        {"match": {"any": True}, "reply": {"text": "Got the file."}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    workdir = stack.workdir(worker, "truth")
    stack.new_session(page, worker, workdir, "six lines")

    # "Output (N lines)" counts the lines on screen while they stream, and after
    tool = stack.items(page, "tool_call").last
    out = tool.get_by_test_id("tool-output")
    expect(out).to_contain_text("line 3")
    expect(tool.get_by_test_id("output-summary")).to_have_text("Output (3 lines)")
    stack.release(workdir)
    expect(stack.items(page, "assistant_message").last).to_have_text("Printed six lines.")
    expect(out).to_contain_text("line 6")
    expect(tool.get_by_test_id("output-summary")).to_have_text("Output (6 lines)")

    # an attachment's size reads the same before and after sending
    page.get_by_test_id("attach-input").set_input_files(
        files=[{"name": "note.txt", "mimeType": "text/plain", "buffer": b"x" * 48}])
    expect(page.get_by_test_id("attach-chip")).to_contain_text("note.txt (48 B)")
    page.get_by_test_id("prompt-input").fill("here is a file")
    page.get_by_test_id("prompt-send").click()
    user = stack.items(page, "user_message").last
    expect(user.get_by_test_id("attachment-file")).to_have_text("note.txt (48 B)")
    expect(stack.items(page, "assistant_message").last).to_have_text("Got the file.")

    # the scripted model's reset times ("59.8s") count down
    reset = page.get_by_test_id("rate-limit-reset").first
    expect(reset).to_have_text(re.compile(r"^(resets in (\d+ s|1 min)|resets now|reset)$"))

    def seconds() -> int:
        text = reset.inner_text()
        return 0 if not text.startswith("resets in") else (
            60 if "min" in text else int(text.split()[2]))

    before = seconds()
    # a countdown, not a frozen figure: it goes down by two (waited for, through Playwright:
    # a busy machine's page ticks late, and a fixed sleep then read a single tick). The
    # element is looked up at each poll: an event that re-renders the header (the worker's
    # report of the attachment written into the workdir) replaces it, and a handle taken
    # once then reads a detached copy that never ticks again
    page.wait_for_function(
        """(floor) => { const el = document.querySelector('[data-testid="rate-limit-reset"]');
            if (!el) return false;
            const t = el.textContent;
            const n = !t.startsWith("resets in") ? 0 : t.includes("min") ? 60
              : parseInt(t.split(" ")[2], 10);
            return n <= floor; }""", arg=max(0, before - 2), timeout=15_000)

    # "archived" is a badge of its own, not run into the model's name
    page.get_by_test_id("session-menu-button").click()
    page.get_by_test_id("menu-archive").click()
    badge = page.get_by_test_id("archived")
    expect(badge).to_have_text("archived")
    model = page.get_by_test_id("session-model")
    expect(model).to_have_text("scripted / scripted-1")
    a, b = badge.bounding_box(), model.bounding_box()
    assert a and b
    apart = (a["y"] >= b["y"] + b["height"] or b["y"] >= a["y"] + a["height"]
             or a["x"] >= b["x"] + b["width"] + 4 or b["x"] >= a["x"] + a["width"] + 4)
    assert apart, (a, b)

    # the fork icon is drawn by the page (an inline SVG), not a glyph fonts may lack
    fork = stack.items(page, "assistant_message").last.get_by_test_id("fork-here")
    fork.focus()
    icon = fork.locator("svg[data-icon=fork]")
    expect(icon).to_be_visible()
    box = icon.bounding_box()
    assert box and box["width"] >= 10 and box["height"] >= 10
    label = fork.evaluate("(el) => getComputedStyle(el, '::after').content + "
                          "getComputedStyle(el, '::before').content")
    assert "Fork from here" in label and "\u2442" not in label, label
    page.screenshot(path=f"{SHOTS}/session-truth.png")


def test_a_sub_agent_links_back_to_its_parent(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "get help"}, "reply": {"calls": [
            {"name": "delegate", "arguments": {"role": "explorer", "task": "look-around"}}]}},
        {"match": {"user": "look-around"}, "reply": {"text": "Looked: all fine."}},
        {"match": {"tool": "delegate"}, "reply": {"text": "The explorer reported."}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    parent = stack.new_session(page, worker, stack.workdir(worker, "subs"), "get help")
    expect(stack.items(page, "assistant_message").last).to_have_text("The explorer reported.")
    stack.items(page, "tool_call").last.get_by_test_id("child-session").get_by_role(
        "link").click()
    child = page.locator(f"[data-testid=session-view]:not([data-session-id='{parent}'])")
    expect(child).to_be_visible()
    back = page.get_by_test_id("parent-link")
    expect(back).to_contain_text("sub-agent of “get help”")
    back.click()
    expect(page.locator(f"[data-testid=session-view][data-session-id='{parent}']")
           ).to_be_visible()


def test_a_fork_shows_up_without_a_reload(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "Answered."}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    sid = stack.new_session(page, worker, stack.workdir(worker, "fork"), "question")
    expect(stack.items(page, "assistant_message").last).to_have_text("Answered.")
    page.evaluate("window.__e2eSamePage = true")
    # hold the fork's events back for a while: the page opens the fork before they come
    page.evaluate("""() => {
      const store = window.__codey.store;
      const apply = store.apply.bind(store);
      let held = null;
      store.apply = (env) => {
        if (held) { held.push(env); return true; }
        if (env.event.type !== 'session_forked') return apply(env);
        held = [env];
        setTimeout(() => { const all = held; held = null; all.forEach(apply); }, 1500);
        return true;
      };
    }""")
    stack.items(page, "assistant_message").last.get_by_test_id("fork-here").click()
    view = page.locator(f"[data-testid=session-view]:not([data-session-id='{sid}'])")
    expect(view).to_be_visible()
    expect(page.get_by_test_id("session-missing")).to_be_visible()  # not there yet
    expect(page.get_by_test_id("session-missing")).to_be_hidden()
    expect(stack.items(page, "assistant_message").last).to_have_text("Answered.")
    expect(page.get_by_test_id("forked-from")).to_be_visible()
    expect(stack.status(page)).to_have_text("forked")
    assert page.evaluate("window.__e2eSamePage") is True, "the page was reloaded"


def test_changed_files_and_memory_notes_are_the_sessions_own(stack: Stack, page: Page) -> None:
    """Two sessions in one folder: each lists the files it changed, not the other's nor the
    user's; the note both remember is in the folder's memory once."""
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "task one"}, "reply": {"calls": [
            {"name": "write_file", "arguments": {"path": "a.txt", "content": "a\n"}},
            {"name": "remember", "arguments": {"note": "Use tabs"}}]}},
        {"match": {"user": "task two"}, "reply": {"calls": [
            stack.shell("bash", "-c", "echo b > b.txt"),
            {"name": "remember", "arguments": {"note": "use  tabs."}}]}},
        {"match": {"tool": "remember"}, "reply": {"text": "Done."}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    workdir = stack.workdir(worker, "shared")
    one = stack.new_session(page, worker, workdir, "task one")
    expect(stack.items(page, "assistant_message").last).to_have_text("Done.")
    changed = page.get_by_test_id("changed-files")
    expect(changed.locator("li")).to_have_text(["a.txt"])
    # the user's own edit between turns (well after the session's last action) is not its.
    # Deliberate sleeps: the worker's watcher counts a change as the session's for 2 s after
    # its last action (ATTRIBUTION_SLACK_S), on its own clock; and it drops the user's edit
    # without a trace, so nothing shows it was seen but time (300 ms of debounce)
    time.sleep(3)
    (Path(workdir) / "mine.txt").write_text("by hand\n")
    time.sleep(1.5)  # seen by the watcher meanwhile, and left out

    two = stack.new_session(page, worker, workdir, "task two")
    expect(stack.items(page, "assistant_message").last).to_have_text("Done.")
    expect(changed.locator("li")).to_have_text(["b.txt"])
    remembered = stack.items(page, "tool_call").last
    expect(remembered.get_by_test_id("memory-already")).to_be_visible()
    expect(page.get_by_test_id("memory-text")).to_have_text("- Use tabs")
    page.screenshot(path=f"{SHOTS}/changed-files.png")

    stack.open_session(page, one)
    expect(changed.locator("li")).to_have_text(["a.txt"])
    state = stack.browser_state(page)
    assert state["sessions"][one]["changed_paths"] == ["a.txt"]
    assert state["sessions"][two]["changed_paths"] == ["b.txt"]
