"""The MCP dialog: a token is made, shown once with the config to paste, used, and revoked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def test_a_token_is_made_shown_once_and_revoked(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": []})
    server = stack.server()
    stack.open(page)
    page.get_by_test_id("mcp-open").click()
    dialog = page.get_by_test_id("mcp-dialog")
    expect(dialog).to_contain_text("No token")
    dialog.get_by_test_id("mcp-name").fill("claude on laptop")
    # what it may do, and the most its sessions may do: chosen when it is made
    expect(dialog.get_by_test_id("mcp-scope")).to_have_value("sessions")
    expect(dialog.get_by_test_id("mcp-policy")).to_have_value("suggest")
    dialog.get_by_test_id("mcp-scope").select_option("read")
    dialog.get_by_test_id("mcp-create").click()
    token = dialog.get_by_test_id("mcp-token").inner_text().strip()
    assert token.startswith("cmcp_")
    expect(dialog.get_by_test_id("mcp-token-scope")).to_have_text("read · up to suggest")
    expect(dialog.get_by_test_id("mcp-copy")).to_be_visible()
    expect(dialog.get_by_test_id("mcp-fresh")).to_contain_text(f"{server.url}/mcp")
    expect(dialog.get_by_test_id("mcp-token-row")).to_contain_text("never used")
    page.screenshot(path=f"{SHOTS}/mcp.png")

    # the token opens /mcp (an MCP initialize gets an answer, not a 401)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "1"}}}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    assert httpx.post(f"{server.url}/mcp", json=init, headers=headers,
                      timeout=30).status_code == 200

    dialog.get_by_test_id("mcp-close").click()
    page.get_by_test_id("mcp-open").click()  # shown once: a new dialog has only the row
    dialog = page.get_by_test_id("mcp-dialog")
    expect(dialog.get_by_test_id("mcp-token-row")).to_contain_text("used")
    expect(dialog.get_by_test_id("mcp-fresh")).to_have_count(0)
    dialog.get_by_test_id("mcp-revoke").click()
    expect(dialog).to_contain_text("No token")
    assert httpx.post(f"{server.url}/mcp", json=init, headers=headers,
                      timeout=30).status_code == 401
