"""The schedules page as a person uses it: add one, run it now, follow its run to the
session, pause it, delete it — live from the schedule_* events."""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = "e2e/test-results"


def test_add_run_pause_and_delete_a_schedule(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "nightly check"}, "reply": {"text": "All green."}}]})
    stack.server()
    worker = stack.worker()
    workdir = stack.workdir(worker, "proj")
    stack.open(page, "#/schedules")
    expect(page.get_by_test_id("sch-empty")).to_be_visible()
    page.get_by_test_id("sch-name").fill("nightly")
    page.get_by_test_id("sch-cron").fill("0 3 * * *")
    page.get_by_test_id("sch-tz").fill("Europe/Paris")
    page.get_by_test_id("sch-workdir").fill(workdir)
    page.get_by_test_id("sch-prompt").fill("nightly check")
    page.get_by_test_id("sch-policy").select_option("full-auto")
    page.get_by_test_id("sch-save").click()
    card = page.get_by_test_id("schedule")
    expect(card).to_contain_text("0 3 * * *")
    expect(card).to_contain_text("Not run yet.")

    page.get_by_test_id("sch-cron").fill("not cron")  # a bad one is refused in words
    page.get_by_test_id("sch-name").fill("bad")
    page.get_by_test_id("sch-prompt").fill("x")
    page.get_by_test_id("sch-save").click()
    expect(page.get_by_role("alert")).to_contain_text("not a cron expression")

    card.get_by_test_id("sch-run").click()
    expect(card.get_by_test_id("sch-runs")).to_contain_text("ran")
    page.screenshot(path=f"{SHOTS}/schedules.png", full_page=True)
    card.get_by_role("link", name="session").click()
    expect(page.get_by_test_id("session-view")).to_be_visible()
    expect(stack.items(page, "assistant_message").last).to_have_text("All green.")

    page.evaluate("location.hash = '#/schedules'")
    card = page.get_by_test_id("schedule")
    card.get_by_test_id("sch-toggle").click()
    expect(card.get_by_test_id("sch-state")).to_have_text("paused")
    card.get_by_test_id("sch-delete").click()
    expect(page.get_by_test_id("sch-empty")).to_be_visible()


def test_a_one_time_schedule_made_in_the_ui_fires_and_then_shows_done(stack: Stack,
                                                                       page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "release check"}, "reply": {"text": "Released."}}]})
    # the schedules' clock is a file the test moves: 2030 comes at once, no waiting for it
    clock = stack.tmp / "clock"
    clock.write_text(str(time.time()))
    stack.server(extra_args=["--clock-file", str(clock)])
    worker = stack.worker()
    workdir = stack.workdir(worker, "proj")
    stack.open(page, "#/schedules")
    page.get_by_test_id("sch-name").fill("release")
    page.get_by_test_id("sch-kind").select_option("once")
    expect(page.get_by_test_id("sch-cron")).to_be_hidden()
    page.get_by_test_id("sch-at").fill("2030-06-01T09:00")
    # a wall-clock time in Paris (summer time: 07:00 UTC), whatever the browser's zone
    page.get_by_test_id("sch-tz").fill("Europe/Paris")
    page.get_by_test_id("sch-workdir").fill(workdir)
    page.get_by_test_id("sch-prompt").fill("release check")
    page.get_by_test_id("sch-policy").select_option("full-auto")
    page.get_by_test_id("sch-save").click()
    card = page.get_by_test_id("schedule")
    expect(card).to_contain_text("once at")
    expect(card).to_contain_text("09:00")
    expect(card.get_by_test_id("sch-state")).to_have_text("active")
    expect(card).to_contain_text("Not run yet.")
    page.screenshot(path=f"{SHOTS}/schedules-once.png", full_page=True)

    # ten seconds past 09:00 in Paris; read as UTC (09:00Z) it would not be due yet
    clock.write_text(str(dt.datetime(2030, 6, 1, 7, 0, 10, tzinfo=dt.UTC).timestamp()))
    expect(card.get_by_test_id("sch-state")).to_have_text("done", timeout=15_000)
    expect(card.get_by_test_id("sch-runs")).to_contain_text("ran")
    expect(card.get_by_test_id("sch-toggle")).to_have_count(0)  # nothing left to pause
    page.screenshot(path=f"{SHOTS}/schedules-done.png", full_page=True)
    card.get_by_role("link", name="session").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Released.")


def test_a_run_whose_commands_failed_says_so_on_its_card(stack: Stack, page: Page) -> None:
    checks = [stack.shell("sh", "-c", f"echo check-{n}; exit 3") for n in (1, 2, 3)]
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "nightly check"}, "times": 1, "reply": {"calls": checks}},
        {"match": {"user": "nightly check"}, "reply": {"calls": [stack.shell("true")]}},
        {"match": {"tool": "shell", "tool_output": "check-"},
         "reply": {"text": "Every check failed."}},
        {"match": {"any": True}, "reply": {"text": "All green."}},
    ]})
    stack.server()
    worker = stack.worker()
    workdir = stack.workdir(worker, "proj")
    stack.open(page, "#/schedules")
    page.get_by_test_id("sch-name").fill("nightly")
    page.get_by_test_id("sch-workdir").fill(workdir)
    page.get_by_test_id("sch-prompt").fill("nightly check")
    page.get_by_test_id("sch-policy").select_option("full-auto")
    page.get_by_test_id("sch-save").click()
    card = page.get_by_test_id("schedule")
    expect(card).to_contain_text("Not run yet.")

    # the run started (the firing's outcome), and every command it ran failed
    card.get_by_test_id("sch-run").click()
    runs = card.get_by_test_id("sch-runs").locator("li")
    expect(runs).to_have_count(1)
    expect(runs.first).to_contain_text("ran — 3 of 3 commands failed")
    expect(runs.first).to_have_class("bad")
    page.screenshot(path=f"{SHOTS}/schedules-failed-run.png", full_page=True)
    card.get_by_role("link", name="session").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("Every check failed.")
    failed = stack.items(page, "tool_call").locator("[data-testid=tool-status][data-status=failed]")
    expect(failed).to_have_count(3)

    # the next run's command passes: it says "ran", and the first still says what it did
    page.evaluate("location.hash = '#/schedules'")
    card = page.get_by_test_id("schedule")
    card.get_by_test_id("sch-run").click()
    runs = card.get_by_test_id("sch-runs").locator("li")
    expect(runs).to_have_count(2)
    expect(runs.first).to_contain_text(" — ran")  # newest first
    expect(runs.first).not_to_contain_text("failed")
    expect(runs.first).not_to_have_class("bad")
    expect(runs.nth(1)).to_contain_text("ran — 3 of 3 commands failed")
