"""Sub-agents in the browser: nested under their parent, their approvals asked in the
parent's view, interrupted with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def test_nested_sub_agents_and_their_approvals(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "fix it with help"}, "reply": {"text": "Delegating.", "calls": [
            {"name": "delegate", "arguments": {"role": "explorer", "task": "look-around"}},
            {"name": "delegate", "arguments": {"role": "developer", "task": "make-it"}}]}},
        {"match": {"user": "look-around"}, "reply": {"text": "Looked: all fine."}},
        {"match": {"user": "make-it"}, "reply": {"calls": [stack.shell("make")]}},
        {"match": {"tool": "shell"}, "reply": {"text": "Made."}},
        {"match": {"tool": "delegate"}, "reply": {"text": "Both sub-agents reported."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    sid = stack.new_session(page, worker, stack.workdir(worker, "subs"), "fix it with help",
                            policy="suggest")
    # the developer's `make` needs approval: it is asked in the parent's view
    child_approval = page.get_by_test_id("child-approval")
    expect(child_approval).to_be_visible()
    expect(page.get_by_test_id("child-status")).to_have_count(2)
    page.screenshot(path=f"{SHOTS}/sub-agents.png", full_page=True)
    page.evaluate("location.hash = '#/'")
    card = page.locator(f"[data-testid=session-card][data-session-id='{sid}']")
    expect(card.get_by_test_id("child-card")).to_have_count(2)
    expect(page.get_by_test_id("session-card")).to_have_count(1)  # children are nested
    expect(page.get_by_test_id("session-counts")).to_contain_text("2 sub-agents")
    page.screenshot(path=f"{SHOTS}/sub-agents-dashboard.png", full_page=True)
    stack.open_session(page, sid)
    child_approval.get_by_test_id("approve").click()
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "Both sub-agents reported.")
    delegations = stack.items(page, "tool_call")
    expect(delegations).to_have_count(2)
    for n in range(2):
        expect(delegations.nth(n).get_by_test_id("child-status")).to_have_attribute(
            "data-status", "idle")


def test_interrupting_the_parent_interrupts_its_sub_agents(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "long job"}, "reply": {"calls": [
            {"name": "delegate", "arguments": {"role": "developer", "task": "run-long"}}]}},
        {"match": {"user": "run-long"}, "reply": {"calls": [stack.gated("long")]}},
        {"match": {"any": True}, "reply": {"text": "done"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    sid = stack.new_session(page, worker, stack.workdir(worker, "long"), "long job")
    expect(page.get_by_test_id("child-status")).to_have_attribute("data-status", "running")
    page.get_by_test_id("interrupt").click()
    expect(stack.status(page)).to_have_attribute("data-status", "interrupted")
    expect(page.get_by_test_id("child-status")).to_have_attribute("data-status", "interrupted")
    state = server.http.get("/api/state/bootstrap").json()["state"]
    [child] = [s for s in state["sessions"].values() if s["parent_id"] == sid]
    assert child["status"] == "interrupted"


def test_a_sub_agent_given_another_folder_is_asked_about_by_name_even_under_full_auto(
        stack: Stack, page: Page) -> None:
    """The audit: a prompt-injected model delegated with workdir=~ and its developer wrote
    ~/.bashrc, no question asked. The card names the folder; rejected, nothing starts."""
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "tidy up"}, "reply": {"calls": [
            {"name": "delegate", "arguments": {"role": "developer", "task": "edit-bashrc",
                                               "workdir": "../.."}}]}},
        {"match": {"user": "edit-bashrc"}, "reply": {"calls": [stack.shell("touch", "x")]}},
        {"match": {"tool": "delegate"}, "reply": {"text": "It was refused."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    workdir = stack.workdir(worker, "app")
    sid = stack.new_session(page, worker, workdir, "tidy up", policy="full-auto")
    approval = page.get_by_test_id("approval")
    expect(approval).to_contain_text("Give a sub-agent another folder or machine?")
    expect(approval.get_by_test_id("approval-path")).to_have_text(str(worker.home))
    expect(approval).to_contain_text(f"outside this session's folder {workdir}")
    expect(stack.items(page, "tool_call").get_by_test_id("delegate-where")).to_contain_text(
        str(worker.home))
    page.screenshot(path=f"{SHOTS}/sub-agent-folder-approval.png", full_page=True)
    approval.get_by_test_id("reject").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("It was refused.")
    state = server.http.get("/api/state/bootstrap").json()["state"]
    assert [s for s in state["sessions"].values() if s["parent_id"] == sid] == []
