"""The dashboard's cards say what happened: how long a session's turns took (not the time to
its last activity), its last meaningful words, its whole title, the machine's newest
sessions, and a fork that has not worked yet is not "finished"."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from playwright.sync_api import Locator, Page, expect

from codey_testkit.scenarios import create_session

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"

LONG = "Please run the slow benchmark suite and compare it with the numbers of last week"

CODE_LAST = """Here is the script that reproduces it:

```python
def main():
    run()
```"""


def card(page: Page, sid: str) -> Locator:
    return page.locator(f"[data-testid=session-card][data-session-id='{sid}']")


def test_took_counts_the_turns_not_later_activity(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "think a while"},
         "reply": {"text": "Thought it through.", "initial_delay_ms": 1500}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    workdir = stack.workdir(worker, "took")
    sid = stack.new_session(page, worker, workdir, "think a while")
    expect(stack.status(page)).to_have_text("finished")
    # deliberate: the later activity comes 2.5 s after the turn at least (the gap is what
    # "took" must leave out; the server's clock is this machine's), less what already passed
    s = stack.browser_state(page)["sessions"][sid]
    first = next(i["ts"] for i in s["items"] if i["kind"] == "user_message")
    time.sleep(max(0.0, first + s["busy_seconds"] + 2.6 - time.time()))
    # later activity: a rename, and the folder's memory (which touches its sessions' context)
    page.evaluate("([sid, w, wd]) => Promise.all(["
                  "window.__codey.socket.renameSession(sid, 'Thinking, renamed'),"
                  "window.__codey.socket.setMemory(w, wd, 'use tabs')])",
                  [sid, worker.worker_id, workdir])
    expect(page.get_by_test_id("session-title")).to_have_text("Thinking, renamed")
    s = stack.browser_state(page)["sessions"][sid]
    first = next(i["ts"] for i in s["items"] if i["kind"] == "user_message")
    busy = s["busy_seconds"]
    assert busy >= 1.5 and s["busy_since"] is None, s  # the model's delay, at least
    assert s["updated_at"] - first >= busy + 2.5, "the rename is later activity"
    page.evaluate("location.hash = '#/'")
    meta = card(page, sid).get_by_test_id("session-meta")
    expect(meta).to_contain_text(f"took {int(busy + 0.5)} s")


def test_preview_titles_forks_and_the_machine_list(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "show the script"}, "reply": {"text": CODE_LAST}},
        {"match": {"user": "break"}, "reply": {"error": {"status": 400, "message": "bad"}}},
        {"match": {"any": True}, "reply": {"text": "ok"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    code = stack.new_session(page, worker, stack.workdir(worker, "code"), "show the script")
    expect(stack.status(page)).to_have_text("finished")
    long = stack.new_session(page, worker, stack.workdir(worker, "long"), LONG)
    expect(stack.status(page)).to_have_text("finished")
    page.get_by_test_id("session-menu-button").click()
    page.get_by_test_id("menu-fork").click()
    view = page.locator(f"[data-testid=session-view]:not([data-session-id='{long}'])")
    expect(view).to_be_visible()
    fork = view.get_attribute("data-session-id")
    assert fork
    expect(page.get_by_test_id("title-fork")).to_have_text(" (fork)")
    failed = stack.new_session(page, worker, stack.workdir(worker, "failed"), "break")
    expect(stack.status(page)).to_have_text("failed")
    page.get_by_test_id("session-menu-button").click()
    page.get_by_test_id("menu-fork").click()
    failed_view = page.locator(f"[data-testid=session-view]:not([data-session-id='{failed}'])")
    expect(failed_view).to_be_visible()
    failed_fork = failed_view.get_attribute("data-session-id")
    assert failed_fork
    # a fork that has not worked yet is not "finished", whatever its source's outcome
    expect(stack.status(page)).to_have_text("forked")
    # two more, so the machine has more sessions than its card lists
    newest = [create_session(server, worker, stack.workdir(worker, f"more{n}"), f"more {n}")
              for n in range(2)]

    page.evaluate("location.hash = '#/'")
    # the preview is a meaningful line, never a lone fence
    expect(card(page, code).get_by_test_id("session-preview")).to_have_text(
        "Here is the script that reproduces it:")
    # the whole title, on the card's width, and "(fork)" in view
    title = card(page, long).get_by_test_id("card-title")
    expect(title).to_have_text(re.compile(r"^Please run the slow benchmark suite"))
    main = title.locator(".title-main")
    clipped = main.evaluate("(el) => el.scrollHeight > el.clientHeight + 1 || "
                            "el.scrollWidth > el.clientWidth + 1")
    assert not clipped, "the title is cut"
    suffix = card(page, fork).get_by_test_id("title-fork")
    expect(suffix).to_be_visible()
    box, card_box = suffix.bounding_box(), card(page, fork).bounding_box()
    assert box and card_box and box["x"] + box["width"] <= card_box["x"] + card_box["width"]
    expect(card(page, failed_fork).get_by_test_id("session-status")).to_have_text("forked")
    expect(card(page, failed).get_by_test_id("session-status")).to_have_text("failed")
    page.screenshot(path=f"{SHOTS}/cards.png", full_page=True)

    # the machine lists its newest sessions first, and says how many more there are
    machine = page.locator(f"[data-testid=worker-card][data-worker-id='{worker.worker_id}']")
    listed = machine.locator("[data-testid=worker-sessions] li")
    expect(listed).to_have_count(5)
    expect(listed.first).to_have_attribute("data-session-id", newest[-1])
    expect(listed.nth(1)).to_have_attribute("data-session-id", newest[0])
    expect(machine.locator(f"[data-testid=worker-sessions] li[data-session-id='{code}']")
           ).to_have_count(0)
    expect(machine.get_by_test_id("worker-sessions-more")).to_have_text("and 2 older")
