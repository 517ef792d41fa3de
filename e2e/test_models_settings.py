"""From a server with no model to an answer, in the browser, with no restart: the New session
dialog says there is none and links to Settings → Models; the user adds a provider there
(its models listed from its API), the test call answers; a session started before, which
failed for want of a provider, succeeds on Retry; a session switches model between two turns
and the next request uses it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

from codey_testkit.model_handle import start_model_server

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def test_a_first_run_adds_a_model_in_settings_and_gets_answers(stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "Reply with the single word OK."}, "reply": {"text": "OK"}},
        {"match": {"user": "too early"}, "reply": {"text": "Recovered."}},
        {"match": {"user": "first question"}, "reply": {"text": "First answer."}},
        {"match": {"user": "second question"}, "reply": {"text": "Second answer."}},
    ]})
    server = stack.server(config={})  # a fresh server: no provider at all
    worker = stack.worker()
    workdir = stack.workdir(worker, "proj")
    # a session started too early (through the API: the dialog would not allow it) fails
    early = server.http.post("/api/sessions", json={
        "worker_id": worker.worker_id, "workdir": workdir, "prompt": "too early"})
    assert early.status_code == 201, early.text
    early_id = early.json()["session_id"]

    stack.open(page)
    page.get_by_test_id("new-session").click()
    dialog = page.get_by_test_id("new-session-dialog")
    expect(dialog.get_by_test_id("ns-no-model")).to_be_visible()
    expect(dialog.get_by_test_id("ns-submit")).to_be_disabled()
    dialog.get_by_test_id("ns-settings-link").click()
    expect(page.get_by_test_id("models-page")).to_be_visible()
    expect(page.get_by_test_id("no-providers")).to_be_visible()

    page.get_by_test_id("pv-name").fill("local")
    page.get_by_test_id("pv-kind").select_option("chat")
    page.get_by_test_id("pv-url").fill(model.base_url)
    page.get_by_test_id("pv-auth").select_option("none")
    page.get_by_test_id("pv-discover").click()
    expect(page.get_by_test_id("pv-found")).to_contain_text("1 model listed")
    expect(page.get_by_test_id("pv-models")).to_have_value("scripted-1")
    page.get_by_test_id("pv-save").click()
    card = page.locator("[data-testid=provider-card][data-provider=local]")
    expect(card.get_by_test_id("provider-source")).to_have_text("added here")
    # saving runs the test call: the model's own answer
    expect(card.get_by_test_id("provider-test-result")).to_contain_text(
        "scripted-1 answered “OK”")
    page.screenshot(path=f"{SHOTS}/settings-models.png", full_page=True)

    # the failed session recovers on Retry: it takes the new default provider
    view = stack.open_session(page, early_id)
    expect(stack.status(page)).to_have_attribute("data-status", "error")
    expect(view).to_contain_text("add a model provider in Settings → Models")
    view.get_by_test_id("retry").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Recovered.")
    expect(view.get_by_test_id("session-model")).to_have_text("local / scripted-1")

    # a new session from the dialog, no warning now; then a switch of model between turns
    sid = stack.new_session(page, worker, workdir, "first question")
    expect(stack.items(page, "assistant_message").last).to_have_text("First answer.")
    view = stack.open_session(page, sid)
    server.http.post("/api/providers", json={
        "name": "local", "kind": "chat", "base_url": model.base_url, "auth": "none",
        "models": ["scripted-1", "scripted-2"]}).raise_for_status()
    picker = view.get_by_test_id("model-select")
    expect(picker.locator("option")).to_have_count(2)  # the page follows the new list
    picker.select_option(label="local / scripted-2")
    view.get_by_test_id("effort-select").select_option("high")
    expect(view.get_by_test_id("session-model")).to_have_text("local / scripted-2 · high")
    view.get_by_test_id("prompt-input").fill("second question")
    view.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Second answer.")
    asked = [r["body"] for r in model.requests("/v1/chat/completions")
             if r["body"]["messages"][-1].get("content") == "second question"]
    assert [(b["model"], b.get("reasoning_effort")) for b in asked] == [("scripted-2", "high")]
    page.screenshot(path=f"{SHOTS}/session-model.png")


def test_a_saved_key_is_not_sent_to_a_url_typed_while_editing(stack: Stack, page: Page,
                                                               tmp_path: Path) -> None:
    """The audit: editing a provider's URL and listing its models sent the saved key to the
    new URL. Now it goes nowhere new: the page says so and takes the key typed in the form."""
    key = "sk-saved"
    script = {"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "OK"}}]}
    with start_model_server(script, tmp_path / "a", api_key=key) as saved_at, \
            start_model_server(script, tmp_path / "b", api_key=key) as elsewhere:
        server = stack.server(config={})
        server.http.post("/api/providers", json={
            "name": "remote", "kind": "chat", "base_url": saved_at.base_url,
            "models": ["scripted-1"], "api_key": key}).raise_for_status()
        stack.open(page, "#/settings")
        card = page.locator("[data-testid=provider-card][data-provider=remote]")
        card.get_by_test_id("provider-edit").click()
        page.get_by_test_id("pv-url").fill(elsewhere.base_url)
        expect(page.get_by_test_id("pv-key-hint")).to_contain_text(
            f"The saved key goes only to {saved_at.base_url}")
        page.get_by_test_id("pv-discover").click()
        found = page.get_by_test_id("pv-found")
        expect(found).to_contain_text("HTTP 401 Unauthorized")
        expect(found).to_contain_text("The saved key is not sent to a new URL")
        assert [r["bearer"] for r in elsewhere.requests("/v1/models")] == [False]
        # typed in the form, the key goes with the listing and is saved for the new URL
        page.get_by_test_id("pv-key").fill(key)
        page.get_by_test_id("pv-discover").click()
        expect(found).to_contain_text("1 model listed")
        page.get_by_test_id("pv-save").click()
        expect(card.get_by_test_id("provider-test-result")).to_contain_text(
            "scripted-1 answered “OK”")
        assert [r["bearer"] for r in elsewhere.requests("/v1/models")] == [False, True]
        assert saved_at.requests("/v1/models") == []
