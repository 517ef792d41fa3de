"""The web terminal as a person uses it: open it from a session, type, close the tab, come
back to the same shell."""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def test_type_in_the_terminal_close_the_tab_and_find_the_same_shell(stack: Stack,
                                                                     page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [{"match": {"any": True},
                                                   "reply": {"text": "ok"}}]})
    stack.server()
    worker = stack.worker(config={"terminal": True})
    try:
        stack.open(page)
        workdir = stack.workdir(worker, "term")
        stack.new_session(page, worker, workdir, "hello")
        page.get_by_test_id("open-terminal").click()
        expect(page.get_by_test_id("terminal-state")).to_have_text("live")
        screen = page.locator("[data-testid=terminal] .xterm-rows")
        page.get_by_test_id("terminal").click()
        page.keyboard.type("export MARK=$((40+2)); echo hi; echo mark-$MARK\n")
        expect(screen).to_contain_text("mark-42")
        expect(screen).to_contain_text("hi")
        page.screenshot(path=f"{SHOTS}/terminal.png")
        url = page.url

        page.close()  # the tab goes; the shell stays
        again = page.context.new_page()
        again.goto(url)
        expect(again.get_by_test_id("terminal-state")).to_have_text("live")
        again.get_by_test_id("terminal").click()
        again.keyboard.type("echo again-$MARK\n")
        expect(again.locator("[data-testid=terminal] .xterm-rows")).to_contain_text("again-42")

        # closing asks first: Cancel keeps the shell, "Close it" ends it
        again.get_by_test_id("terminal-close").click()
        expect(again.get_by_test_id("terminal-close-ask")).to_be_visible()
        again.get_by_test_id("terminal-close-cancel").click()
        expect(again.get_by_test_id("terminal-close-ask")).to_be_hidden()
        expect(again.get_by_test_id("terminal-state")).to_have_text("live")
        again.get_by_test_id("terminal").click()
        again.keyboard.type("echo still-$MARK\n")
        expect(again.locator("[data-testid=terminal] .xterm-rows")).to_contain_text("still-42")
        again.get_by_test_id("terminal-close").click()
        again.get_by_test_id("terminal-close-confirm").click()
        expect(again.get_by_test_id("terminal-state")).to_have_text("ended")
        expect(again.get_by_test_id("terminal-reconnect")).to_be_hidden()
    finally:
        subprocess.run(["tmux", "-S", str(worker.codey_home / "tmux.sock"), "kill-server"],
                       capture_output=True, check=False)
