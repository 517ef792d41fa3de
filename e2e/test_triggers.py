"""The triggers page as a person uses it: add a webhook trigger, copy its URL and its secret
(shown once), watch a signed GitHub delivery start a session live, follow it, replay it; the
page at 390 px in dark mode."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from playwright.sync_api import Page, expect

from codey_server.triggers.webhook import sign

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = Path("/tmp/shots/i39-triggers")
GITHUB = Path(__file__).resolve().parents[1] / "packages" / "server" / "tests" / "data" / "github"


def _deliver(url: str, event: str, name: str, secret: str) -> httpx.Response:
    body = (GITHUB / f"{name}.json").read_bytes()
    return httpx.post(url, content=body, timeout=30.0, headers={
        "X-GitHub-Event": event, "Content-Type": "application/json",
        "X-Hub-Signature-256": sign(secret, body)})


def test_add_a_trigger_deliver_follow_and_replay(stack: Stack, page: Page) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "octo-org/hello-world"}, "reply": {"text": "Looking at it."}}]})
    stack.server()
    worker = stack.worker()
    workdir = stack.workdir(worker, "hello-world")
    stack.open(page, "#/triggers")
    expect(page.get_by_test_id("trg-empty")).to_be_visible()
    page.get_by_test_id("trg-name").fill("fix on comment")
    page.get_by_test_id("trg-workdir").fill(workdir)
    page.get_by_test_id("trg-events").fill("issue_comment, pull_request.opened")
    page.get_by_test_id("trg-budget-usd").fill("2")
    page.get_by_test_id("trg-prompt").fill(
        "{{payload.repository.full_name}}#{{payload.issue.number}}: {{payload.comment.body}} "
        "{{payload.issue.milestone.title}}")
    page.get_by_test_id("trg-save").click()

    url = page.get_by_test_id("trg-new-url").input_value()
    secret = page.get_by_test_id("trg-new-secret").input_value()
    assert url.startswith(f"{stack.srv.url}/hooks/t/") and len(secret) >= 40  # type: ignore[union-attr]
    card = page.get_by_test_id("trigger")
    expect(card.get_by_test_id("trg-url")).to_have_text(url)
    expect(card).to_contain_text("issue_comment, pull_request.opened")
    expect(card).to_contain_text("No delivery yet.")
    page.get_by_test_id("trg-secret-close").click()
    expect(page.get_by_test_id("trg-new-secret")).to_have_count(0)
    # the secret is nowhere on the page once closed (the state never had it)
    assert secret not in page.content()

    r = _deliver(url, "issue_comment", "issue_comment.created", secret)
    assert r.status_code == 202, r.text
    delivery = card.get_by_test_id("trg-delivery").first
    expect(delivery).to_contain_text("issue_comment.created: started")
    expect(delivery).to_contain_text("missing: payload.issue.milestone.title")
    bad = _deliver(url, "issue_comment", "issue_comment.created", "not the secret")
    assert bad.status_code == 401
    expect(card.get_by_test_id("trg-delivery").first).to_contain_text("refused")
    page.screenshot(path=str(SHOTS / "triggers.png"), full_page=True)

    ok = card.locator("[data-testid=trg-delivery][data-outcome=started]")
    ok.get_by_test_id("trg-replay").click()
    expect(card.get_by_test_id("trg-delivery").first).to_contain_text("(a replay)")
    expect(card.locator("[data-testid=trg-delivery][data-outcome=started]")).to_have_count(2)

    card.locator("[data-testid=trg-delivery][data-outcome=started]").last.get_by_role(
        "link", name="session").click()
    expect(page.get_by_test_id("session-view")).to_be_visible()
    expect(stack.items(page, "user_message").first).to_contain_text(
        "octo-org/hello-world#1347: @codey please fix the off-by-one in pager.py")
    expect(stack.items(page, "assistant_message").last).to_have_text("Looking at it.")

    page.evaluate("location.hash = '#/triggers'")
    card = page.get_by_test_id("trigger")
    # edit: the form takes the trigger, its URL stays
    card.get_by_test_id("trg-edit").click()
    expect(page.get_by_test_id("trg-name")).to_have_value("fix on comment")
    expect(page.get_by_test_id("trg-events")).to_have_value("issue_comment, pull_request.opened")
    page.get_by_test_id("trg-name").fill("fix on any comment")
    page.get_by_test_id("trg-save").click()
    expect(card.locator(".card-title")).to_have_text("fix on any comment")
    expect(card.get_by_test_id("trg-url")).to_have_text(url)
    page.get_by_test_id("trg-secret-close").click()
    # a new secret: shown once; the old one is refused from then on
    card.get_by_test_id("trg-rotate").click()
    rotated = page.get_by_test_id("trg-new-secret").input_value()
    assert rotated != secret
    page.get_by_test_id("trg-secret-close").click()
    assert _deliver(url, "issue_comment", "issue_comment.created", secret).status_code == 401
    secret = rotated
    card.get_by_test_id("trg-toggle").click()
    expect(card.get_by_test_id("trg-state")).to_have_text("paused")
    paused = _deliver(url, "issue_comment", "issue_comment.created", secret)
    assert paused.json()["outcome"] == "refused"
    card.get_by_test_id("trg-delete").click()
    expect(page.get_by_test_id("trg-empty")).to_be_visible()


def test_the_triggers_page_fits_a_phone_in_dark_mode(stack: Stack, page: Page) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "ok"}}]})
    stack.server()
    worker = stack.worker()
    workdir = stack.workdir(worker, "hello-world")
    page.emulate_media(color_scheme="dark")
    page.set_viewport_size({"width": 390, "height": 844})
    stack.open(page, "#/triggers")
    page.get_by_test_id("trg-name").fill("review new pull requests")
    page.get_by_test_id("trg-workdir").fill(workdir)
    page.get_by_test_id("trg-events").fill("pull_request.opened")
    page.get_by_test_id("trg-target").select_option("task")
    page.get_by_test_id("trg-prompt").fill(
        "Review {{payload.pull_request.html_url}}: {{payload.pull_request.title}}")
    page.get_by_test_id("trg-save").click()
    url = page.get_by_test_id("trg-new-url").input_value()
    secret = page.get_by_test_id("trg-new-secret").input_value()
    page.screenshot(path=str(SHOTS / "triggers-phone-secret.png"), full_page=True)
    page.get_by_test_id("trg-secret-close").click()
    r = _deliver(url, "pull_request", "pull_request.opened", secret)
    assert r.status_code == 202 and r.json()["task_id"], r.text
    card = page.get_by_test_id("trigger")
    expect(card.get_by_test_id("trg-delivery")).to_contain_text("pull_request.opened: started")
    expect(card.get_by_role("link", name="task")).to_be_visible()
    # nothing wider than the phone: no sideways scrolling
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= 390, width
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "triggers-phone-dark.png"), full_page=True)
