"""The task board as people use it, in two tabs: add tasks, drag one between columns, move
one with the keyboard's buttons, run one and watch it reach review in the other tab."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def test_board_moves_runs_and_is_live_in_two_tabs(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "Task: Write the docs"}, "reply": {"text": "Docs written."}}]})
    stack.server()
    worker = stack.worker()
    workdir = stack.workdir(worker, "docs")
    stack.open(page, "#/board")
    other = page.context.new_page()
    stack.open(other, "#/board")

    for title in ("Write the docs", "Fix the build", "Spare"):
        page.get_by_test_id("task-title").fill(title)
        page.get_by_test_id("task-add").click()
        expect(page.get_by_test_id("column-todo").get_by_test_id("task")
               .filter(has_text=title)).to_be_visible()
    todo = other.get_by_test_id("column-todo").get_by_test_id("task")
    expect(todo).to_have_count(3)  # live in the other tab

    # drag "Fix the build" to review
    build = page.get_by_test_id("task").filter(has_text="Fix the build")
    build.drag_to(page.get_by_test_id("column-review"))
    expect(other.get_by_test_id("column-review")).to_contain_text("Fix the build")
    # the keyboard's way: "Spare" up, above "Write the docs"; the focus stays with the card
    # (on its button while it still applies, else on the card)
    page.get_by_test_id("task").filter(has_text="Spare").get_by_test_id("task-up").click()
    expect(page.get_by_test_id("column-todo").get_by_test_id("task").first).to_contain_text(
        "Spare")
    expect(page.get_by_test_id("task").filter(has_text="Spare")).to_be_focused()

    docs = page.get_by_test_id("task").filter(has_text="Write the docs")
    docs.get_by_test_id("task-run").click()
    docs.get_by_test_id("run-workdir").fill(workdir)
    docs.get_by_test_id("run-policy").select_option("full-auto")
    docs.get_by_test_id("run-start").click()
    expect(other.get_by_test_id("column-review")).to_contain_text("Write the docs")
    page.screenshot(path=f"{SHOTS}/board.png", full_page=True)
    card = other.get_by_test_id("column-review").get_by_test_id("task").filter(
        has_text="Write the docs")
    card.get_by_test_id("task-right").click()
    expect(page.get_by_test_id("column-done")).to_contain_text("Write the docs")
    card = page.get_by_test_id("column-done").get_by_test_id("task").filter(
        has_text="Write the docs")
    card.get_by_test_id("task-session").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Docs written.")
