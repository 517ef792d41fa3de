"""A session run by an external ACP agent, from the browser: pick the agent in the new-session
dialog, approve its permission request on the card, see its answer; set its mode and a
config option from the session's header."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

from codey_testkit.acp_agent import worker_config

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def test_acp_session_in_the_browser(stack: Stack, page: Page, tmp_path: Path) -> None:
    script = tmp_path / "turns.json"
    script.write_text(json.dumps({
        "modes": {"current": "ask", "available": [["ask", "Ask"], ["code", "Code"]]},
        "config": [{"id": "model", "name": "Model", "current": "fast",
                    "choices": [["fast", "Fast"], ["deep", "Deep"]]}],
        "turns": [[
        {"tool": {"id": "c1", "title": "ls", "kind": "execute",
                  "raw_input": {"command": ["ls", "-la"]}}},
        {"permission": {"id": "c1", "title": "ls", "kind": "execute",
                        "raw_input": {"command": ["ls", "-la"],
                                      "reason": "see what is in the folder"}}},
        {"update": {"id": "c1", "status": "completed",
                    "raw_output": {"stdout": "x\n", "formatted_output": "total 0\nnotes\n",
                                   "exit_code": 0}}},
        {"say": "I will write notes.txt."},
        {"tool": {"id": "t1", "title": "Write notes.txt", "kind": "edit"}},
        {"permission": {"id": "t1", "title": "Write notes.txt"}},
        {"write": {"path": "notes.txt", "content": "noted\n"}, "if_allowed": True},
        {"update": {"id": "t1", "status": "completed", "text": "wrote notes.txt"},
         "if_allowed": True},
        {"say": "Written."},
    ]]}))
    stack.server()
    worker = stack.worker(config=worker_config(script))
    workdir = stack.workdir(worker, "notes")
    stack.open(page)
    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    dialog.get_by_test_id("ns-worker").select_option(worker.worker_id)
    dialog.get_by_test_id("ns-workdir").fill(workdir)
    dialog.get_by_test_id("ns-agent").select_option("scripted")
    dialog.get_by_test_id("ns-prompt").fill("take a note")
    dialog.get_by_test_id("ns-submit").click()
    # codex-acp's shapes: the command and why on the card, the output from the raw output
    card = page.get_by_test_id("approval")
    expect(card).to_contain_text("see what is in the folder")
    command = stack.items(page, "tool_call").first
    expect(command.get_by_test_id("tool-command")).to_have_text("$ ls -la")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(command.get_by_test_id("tool-output")).to_have_text("total 0\nnotes")
    expect(command.get_by_test_id("tool-status")).to_have_attribute("data-status", "done")
    card = page.get_by_test_id("approval")
    expect(card).to_contain_text("Write notes.txt")
    page.screenshot(path="e2e/test-results/acp-approval.png")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Written.")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    assert (Path(workdir) / "notes.txt").read_text() == "noted\n"
    page.screenshot(path="e2e/test-results/acp-session.png")
    # the agent's mode and config option in the header; a choice is what the agent confirms
    mode = page.get_by_test_id("agent-mode")
    expect(mode).to_have_value("ask")
    mode.select_option("code")
    expect(page.get_by_test_id("toast").last).to_contain_text("Mode: Code")
    page.get_by_test_id("agent-option-model").select_option("deep")
    expect(page.get_by_test_id("toast").last).to_contain_text("Model: Deep")
    page.screenshot(path=str(tmp_path / "acp-header-modes.png"))  # to look at, on failure too
    page.reload()
    expect(page.get_by_test_id("agent-mode")).to_have_value("code")
    expect(page.get_by_test_id("agent-option-model")).to_have_value("deep")
