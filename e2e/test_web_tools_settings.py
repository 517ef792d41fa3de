"""Settings → Tools: how the server's web tools are set up, as its config.json says — the
search backend (and whether its key is there, never the key), the networks a fetch may reach
besides public ones, the caps. Screenshot: /tmp/shots/i39-web/settings-tools.png."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from codey_testkit.scenarios import provider_config
from codey_testkit.search_service import SearchServiceHandle

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
    # changed here: the key pasted is kept by the server and never shown again
    form = card.get_by_test_id("web-tools-form")
    form.get_by_test_id("web-key").fill("brave-secret-123")
    form.get_by_test_id("web-domains").fill("docs.python.org\nexample.org")
    form.get_by_test_id("web-save").click()
    expect(card.get_by_test_id("web-search-key")).to_have_text("kept by the server")
    expect(card.get_by_test_id("web-fetch-domains")).to_have_text(
        "docs.python.org, example.org")
    expect(card.get_by_test_id("web-key")).to_have_value("")
    card.scroll_into_view_if_needed()
    card.screenshot(path=str(SHOTS / "settings-tools-edited.png"))
    page.reload()
    expect(card.get_by_test_id("web-search-key")).to_have_text("kept by the server")
    assert "brave-secret-123" not in page.content()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[SearchServiceHandle]:
    with SearchServiceHandle(tmp_path / "site", host="127.0.0.2") as handle:
        yield handle


def test_a_fetch_asks_on_its_card_and_shows_the_page(stack: Stack, page: Page,
                                                     site: SearchServiceHandle) -> None:
    """Under suggest the fetch's card asks first, naming the URL; approved, it shows the page
    as Markdown. Screenshots: web-fetch-approval.png, web-fetch-done.png."""
    url = f"{site.url}/page"
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "read the page"},
         "reply": {"calls": [{"name": "web_fetch", "arguments": {"url": url}}]}},
        {"match": {"tool": "web_fetch", "tool_output": "# Codey test page"},
         "reply": {"text": "The page says hello."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}}]})
    stack.server(config={**provider_config(model), "web": {"fetch_allow": ["127.0.0.2/32"]}})
    worker = stack.worker()
    stack.open(page)
    stack.new_session(page, worker, stack.workdir(worker, "proj"), "read the page",
                      policy="suggest")
    approval = page.get_by_test_id("approval")
    expect(approval).to_contain_text("Let the server reach the web?")
    card = page.locator("[data-testid=item]:has([data-testid=approval])")
    expect(card).to_contain_text(url)  # the card's path: the URL the server would fetch
    SHOTS.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=str(SHOTS / "web-fetch-approval.png"))
    approval.get_by_test_id("approve-session").click()
    expect(stack.items(page, "assistant_message").last).to_contain_text("The page says hello.")
    fetched = stack.items(page, "tool_call").first
    expect(fetched).to_contain_text("Fetch")
    fetched.screenshot(path=str(SHOTS / "web-fetch-done.png"))
