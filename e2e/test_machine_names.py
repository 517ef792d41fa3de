"""Two machines with the same hostname (two workers on this host) are told apart wherever a
machine is chosen: by the start of their key's fingerprint, then by the name the user gives
one on its card. The New session dialog opens on the machine and folder last used."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def test_two_same_named_machines_are_told_apart_in_the_new_session_dialog(
        stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "hello"}}]})
    stack.server()
    a = stack.worker("worker-a")
    b = stack.worker("worker-b")
    stack.open(page)
    workers = stack.browser_state(page)["workers"]
    host = socket.gethostname()
    assert workers[a.worker_id]["hostname"] == workers[b.worker_id]["hostname"] == host
    key = {w.worker_id: workers[w.worker_id]["fingerprint"].removeprefix("SHA256:")[:9]
           for w in (a, b)}
    assert key[a.worker_id] != key[b.worker_id]

    # the same hostname twice: each label carries the start of its own key
    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    options = dialog.get_by_test_id("ns-worker").locator("option")
    expect(options).to_have_count(2)
    for w in (a, b):
        text = dialog.locator(f"[data-testid=ns-worker] option[value='{w.worker_id}']")
        expect(text).to_contain_text(f"{host} · key {key[w.worker_id]}")
    page.screenshot(path=f"{SHOTS}/new-session-twins.png")
    dialog.get_by_test_id("ns-cancel").click()

    # name B on its card: then both go by their names alone
    card_b = page.locator(f"[data-testid=worker-card][data-worker-id='{b.worker_id}']")
    card_b.get_by_test_id("worker-rename").click()
    card_b.get_by_test_id("worker-name-input").fill("build box")
    page.screenshot(path=f"{SHOTS}/machine-rename.png")
    card_b.get_by_test_id("worker-name-input").press("Enter")
    expect(card_b.get_by_test_id("worker-name")).to_have_text("build box")
    expect(card_b.get_by_test_id("worker-hostname")).to_have_text(host)
    card_a = page.locator(f"[data-testid=worker-card][data-worker-id='{a.worker_id}']")
    expect(card_a.get_by_test_id("worker-name")).to_have_text(host)
    page.screenshot(path=f"{SHOTS}/machine-named.png")

    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    picker = dialog.get_by_test_id("ns-worker")
    expect(picker.locator(f"option[value='{b.worker_id}']")).to_have_text(
        f"build box ({workers[b.worker_id]['os']})")
    expect(picker.locator(f"option[value='{a.worker_id}']")).to_have_text(
        f"{host} ({workers[a.worker_id]['os']})")
    page.screenshot(path=f"{SHOTS}/new-session-named.png")

    # start a session on B in a folder of its own: the next dialog opens there
    wd = stack.workdir(b, "proj")
    picker.select_option(b.worker_id)
    dialog.get_by_test_id("ns-workdir").fill(wd)
    dialog.get_by_test_id("ns-prompt").fill("hi")
    dialog.get_by_test_id("ns-submit").click()
    expect(page.get_by_test_id("session-view")).to_be_visible()
    page.evaluate("location.hash = '#/'")
    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    expect(dialog.get_by_test_id("ns-worker")).to_have_value(b.worker_id)
    expect(dialog.get_by_test_id("ns-workdir")).to_have_value(wd)
    # another machine: its own first root; back to B: B's last folder
    dialog.get_by_test_id("ns-worker").select_option(a.worker_id)
    expect(dialog.get_by_test_id("ns-workdir")).to_have_value(str(a.root))
    dialog.get_by_test_id("ns-worker").select_option(b.worker_id)
    expect(dialog.get_by_test_id("ns-workdir")).to_have_value(wd)
