"""Linking a machine from the browser: the worker's printed link, its details, approve."""

from __future__ import annotations

import platform
import re
import socket
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def test_pairing(stack: Stack, page: Page) -> None:
    server = stack.server()
    worker = stack.worker(pair=False)
    assert worker.pair_url and worker.pair_url.startswith(server.url + "/#/pair/")
    code = worker.pair_url.rsplit("/", 1)[1]
    letters = "[BCDFGHJKLMNPQRSTVWXZ]"
    assert re.fullmatch(f"{letters}{{4}}-?{letters}{{4}}", code), code

    stack.open(page, "#/")  # the cookie first; then the link exactly as printed
    page.goto(worker.pair_url)
    card = page.get_by_test_id("pair-request")
    shown = card.get_by_test_id("pair-code")
    expect(shown).to_have_text(re.compile(".+"))
    assert shown.inner_text().replace("-", "") == code.replace("-", "")
    expect(card.get_by_test_id("pair-hostname")).to_have_text(socket.gethostname())
    expect(card).to_contain_text(platform.system())
    expect(card).to_contain_text(str(worker.root))  # the roots it asks for
    expect(card.get_by_test_id("pair-fingerprint")).to_contain_text("SHA256:")
    assert not worker.paired

    card.get_by_test_id("pair-approve").click()
    expect(card.get_by_test_id("pair-result")).to_contain_text("Linked")
    worker.wait_connected()
    page.evaluate("location.hash = '#/'")
    worker_card = page.locator(f"[data-testid=worker-card][data-worker-id='{worker.worker_id}']")
    expect(worker_card.get_by_test_id("worker-status")).to_have_text("connected")
    expect(worker_card).to_contain_text(socket.gethostname())
    # the code was single use: the request is gone
    page.get_by_test_id("link-machine").click()
    expect(page.get_by_test_id("pair-empty")).to_be_visible()
