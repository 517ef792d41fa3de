"""`kill -9` the server mid-turn and start it again: the open page recovers by itself (no
reload), shows every item exactly once, and the turn finishes."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def test_server_restart(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "slow build"},
         "reply": {"text": "Building.", "calls": [stack.gated("build")]}},
        {"match": {"tool": "shell", "tool_output": "build-end"},
         "reply": {"text": "The build finished."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = stack.workdir(worker, "proj")
    sid = stack.new_session(page, worker, wd, "slow build")
    out = stack.items(page, "tool_call").get_by_test_id("tool-output")
    expect(out).to_have_text("build-start")
    page.evaluate("window.__e2eSamePage = true")  # gone if the page reloads

    server.kill9()
    conn = page.get_by_test_id("conn-state")
    expect(conn).to_have_text("reconnecting")
    server.start()  # same port, same data dir
    expect(conn).to_have_text("live")
    worker.wait_connected()
    stack.release(wd)  # the command, still running on the worker, ends now

    expect(stack.items(page, "assistant_message").last).to_have_text("The build finished.")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    expect(out).to_have_text("build-start\nbuild-end")
    assert page.evaluate("window.__e2eSamePage") is True, "the page was reloaded"

    ids = stack.dom_item_ids(page)
    twice = [i for i, n in Counter(ids).items() if n > 1]
    assert not twice, f"items shown twice: {twice}"
    served = server.http.get(f"/api/sessions/{sid}").json()
    assert ids == [i["id"] for i in served["items"]]
    assert len([i for i in served["items"] if i["kind"] == "tool_call"]) == 1
