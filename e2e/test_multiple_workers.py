"""Two workers: a session started on B runs on B (its workdir, its process), not on A."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

WHERE = "import os; print('cwd', os.getcwd())"


def test_multiple_workers(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "where are you"},
         "reply": {"calls": [stack.shell("python3", "-c", WHERE)]}},
        {"match": {"tool": "shell", "tool_output": "cwd"}, "reply": {"text": "found myself"}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    server = stack.server()
    a = stack.worker("worker-a")
    b = stack.worker("worker-b")
    assert a.worker_id != b.worker_id
    stack.open(page)
    for w in (a, b):
        card = page.locator(f"[data-testid=worker-card][data-worker-id='{w.worker_id}']")
        expect(card.get_by_test_id("worker-status")).to_have_text("connected")
        expect(card).to_contain_text(str(w.root))  # each card shows its own root

    wd = stack.workdir(b, "proj")
    sid = stack.new_session(page, b, wd, "where are you")
    out = stack.items(page, "tool_call").get_by_test_id("tool-output")
    expect(out).to_contain_text(f"cwd {os.path.realpath(wd)}")
    expect(stack.items(page, "assistant_message").last).to_have_text("found myself")
    expect(page.locator("[data-testid=session-view] .s-meta")).to_contain_text(wd)
    assert server.http.get(f"/api/sessions/{sid}").json()["worker_id"] == b.worker_id

    # only B's process ran it: its console line names the session's command; A's does not
    stack.wait_until(lambda: "python3 -c" in b.log_text(), what="worker B's console line")
    assert "python3 -c" not in a.log_text()
    assert not any(Path(a.root).iterdir()), "worker A got a workdir"

    page.evaluate("location.hash = '#/'")
    card_b = page.locator(f"[data-testid=worker-card][data-worker-id='{b.worker_id}']")
    expect(card_b.get_by_role("link")).to_have_text(["where are you"])
    assert card_b.get_by_role("link").get_attribute("href") == f"#/session/{sid}"
    card_a = page.locator(f"[data-testid=worker-card][data-worker-id='{a.worker_id}']")
    expect(card_a.get_by_role("link")).to_have_count(0)
