"""Settings → Tools: how the server's web tools are set up, as its config.json says — the
search backend (and whether its key is there, never the key), the networks a fetch may reach
besides public ones, the caps. Screenshot: /tmp/shots/i39-web/settings-tools.png."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Page, expect

from codey_testkit.scenarios import provider_config

from .conftest import Stack

SHOTS = Path(os.environ.get("CODEY_SHOTS", "/tmp/shots/i39-web"))


def test_settings_shows_the_web_tools_setup(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "ok"}}]})
    stack.server(config={**provider_config(model), "web": {
        "fetch_allow": ["10.1.0.0/16", "192.168.7.0/24"], "fetch_timeout_s": 20,
        "search": {"kind": "brave", "api_key_env": "CODEY_TEST_NO_SUCH_KEY"}}})
    stack.open(page, "#/settings")
    card = page.get_by_test_id("settings-tools")
    expect(card.get_by_test_id("web-search")).to_have_text(
        "Brave Search API at https://api.search.brave.com")
    expect(card.get_by_test_id("web-search-key")).to_have_text(
        "missing: set $CODEY_TEST_NO_SUCH_KEY")
    expect(card.get_by_test_id("web-fetch-allow")).to_have_text("10.1.0.0/16, 192.168.7.0/24")
    expect(card.get_by_test_id("web-fetch-caps")).to_have_text("2048 KiB, 20 s")
    SHOTS.mkdir(parents=True, exist_ok=True)
    card.scroll_into_view_if_needed()
    card.screenshot(path=str(SHOTS / "settings-tools.png"))
