"""The browser's store equals the server's state (`GET /api/state/bootstrap`) at the same seq,
after a session that read, patched (a diff), asked for an approval and ran a command."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Page, expect

from codey_testkit.compare import differences
from codey_testkit.scenarios import fix_script, write_project

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack




def test_state_equals_server(stack: Stack, page: Page) -> None:
    stack.model(fix_script())
    server = stack.server()
    worker = stack.worker()
    stack.worker("idle-worker")  # a second worker, never used
    stack.open(page)
    wd = stack.workdir(worker, "proj")
    write_project(Path(wd))
    sid = stack.new_session(page, worker, wd, "fix the add function", policy="auto-edit")
    approval = page.get_by_test_id("approval")
    asking = page.locator("[data-testid=item]:has([data-testid=approval])")
    expect(asking.get_by_test_id("tool-command")).to_contain_text("python3 test_app.py")
    expect(page.get_by_test_id("diff")).to_contain_text("return a + b")
    approval.get_by_test_id("approve").click()
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "Fixed: add now adds, and the test passes.")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")

    def same_seq() -> tuple[int, dict[str, Any], dict[str, Any]] | None:
        before = page.evaluate("window.__codey.seq()")
        served = server.http.get("/api/state/bootstrap").json()
        mine = stack.browser_state(page)
        after = page.evaluate("window.__codey.seq()")
        if before == after == served["seq"] == mine["seq"]:
            return served["seq"], mine, served["state"]
        return None

    seq, mine, theirs = stack.wait_until(same_seq, what="the page and the server at one seq")
    assert seq > 0
    assert mine == theirs, differences(mine, theirs)
    # guard the comparison itself: it covered the session, its items and both workers
    assert len(theirs["workers"]) == 2
    session = theirs["sessions"][sid]
    assert [i["kind"] for i in session["items"]].count("tool_call") == 3
    assert any(i.get("diff") for i in session["items"])
    assert len(session["approvals"]) == 1
