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
