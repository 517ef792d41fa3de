"""The browser on data an older release left (issue 36, item 7): today's server and worker are
started on a copy of the data dir and worker home ``scripts/upgrade_fixture.py`` made with that
release (``packages/server/tests/data/upgrade/<commit>/``), and a person opens every page. Each
session shows its title and every item the server serves, the board its tasks, Schedules its
schedules, Settings the providers and the MCP token; the approval left waiting is answered with
its button and its command runs once; the question is answered in its card. No page logs an
error, and none throws.

(The integration test ``test_upgrade.py`` checks the same data through the API, item by item;
this one checks that the browser's fold and views read upcast events without a fault.)
"""

from __future__ import annotations

import fcntl
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import ConsoleMessage, Page, expect

from codey_testkit.stack import WorkerProcess

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

FIXTURES = Path(__file__).resolve().parent.parent / "packages" / "server" / "tests" / "data" \
    / "upgrade"
RELEASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "fixture.json").exists())
SHOTS = Path(__file__).resolve().parent / "test-results"

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"tool": "shell", "tool_output": "made it"},
     "reply": {"text": "The notes file is made."}},
    {"match": {"tool": "ask_user", "tool_output": "SQLite"},
     "reply": {"text": "SQLite it is."}},
    {"match": {"any": True}, "reply": {"text": "Something else."}},
]}


class Faults:
    """Console errors and uncaught exceptions of every page of a context."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def watch(self, page: Page) -> Page:
        page.on("console", self._console)
        page.on("pageerror", lambda err: self.seen.append(f"pageerror: {err}"))
        return page

    def _console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            self.seen.append(f"console: {msg.text}")


@pytest.fixture(params=RELEASES)
def old(request: pytest.FixtureRequest, stack: Stack) -> Iterator[dict[str, Any]]:
    """The release's fixture.json, with its data dir copied to where the stack's server keeps
    its own, and its worker home put back where it was made (one test run at a time: the
    sessions' folders are absolute paths in the data)."""
    here = FIXTURES / request.param
    fixture: dict[str, Any] = json.loads((here / "fixture.json").read_text())
    root = Path(fixture["root"])
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(here / "worker", root / "worker", symlinks=True)
        shutil.copytree(here / "server", stack.tmp / "server", symlinks=True)
        try:
            yield fixture
        finally:
            shutil.rmtree(root, ignore_errors=True)


def test_every_page_shows_the_old_data_and_its_waiting_parts_still_work(
        stack: Stack, page: Page, old: dict[str, Any]) -> None:
    faults = Faults()
    faults.watch(page)
    model = stack.model(SCRIPT)
    config = json.loads((stack.tmp / "server" / "config.json").read_text())
    for provider in config["providers"]:
        provider["base_url"] = model.base_url
    server = stack.server(config=config)
    worker = WorkerProcess(server, Path(old["root"]) / "worker")
    assert worker.paired and worker.worker_id == old["worker_id"]
    with worker:
        _check_every_page(stack, page, old, faults)


def _check_every_page(stack: Stack, page: Page, old: dict[str, Any], faults: Faults) -> None:
    server = stack.srv
    assert server is not None
    served = server.http.get("/api/state/bootstrap").json()["state"]

    stack.open(page)
    expect(page.get_by_test_id("upgrade-notice")).to_be_visible()
    cards = page.get_by_test_id("session-card")
    live = [sid for sid, s in served["sessions"].items() if not s["archived"]]
    expect(cards).to_have_count(len(live))
    for name, title in old["titles"].items():
        if name != "archived":
            expect(cards.filter(has_text=title)).to_have_count(1)

    # every session: its title, and each item the server serves, in order
    for sid in sorted(served["sessions"]):
        view = stack.open_session(page, sid)
        expect(view.get_by_test_id("session-title")).to_contain_text(
            served["sessions"][sid]["title"])
        want = [i["id"] for i in server.http.get(f"/api/sessions/{sid}").json()["items"]]
        stack.wait_until(lambda want=want: stack.dom_item_ids(page) == want,
                         what=f"session {sid}'s items on the page")

    # the approval left waiting: asked again once the machine said hello, approved by a click
    asking = old["sessions"]["approval"]
    view = stack.open_session(page, asking)
    approval = view.get_by_test_id("approval")
    expect(approval).to_be_visible(timeout=30_000)
    approval.get_by_test_id("approve").click()
    expect(stack.items(page, "assistant_message").last).to_contain_text(
        "The notes file is made.", timeout=30_000)
    made = Path(served["sessions"][asking]["workdir"]) / "made.txt"
    assert made.read_text() == "made\n", "the approved command did not run exactly once"

    # the question: answered in its card, and its turn goes on
    view = stack.open_session(page, old["sessions"]["question"])
    question = view.get_by_test_id("question")
    expect(question).to_be_visible()
    question.get_by_test_id("answer-input").fill("SQLite")
    question.get_by_test_id("answer-send").click()
    expect(stack.items(page, "assistant_message").last).to_contain_text(
        "SQLite it is.", timeout=30_000)

    # the board, the schedules, the providers and the MCP token
    page.evaluate("location.hash = '#/board'")
    tasks = page.get_by_test_id("task")
    expect(tasks).to_have_count(len(served["tasks"]))
    titles = sorted(t["title"] for t in served["tasks"].values())
    stack.wait_until(lambda: sorted(tasks.locator(".card-title").all_inner_texts()) == titles,
                     what="each task's title on the board")
    page.evaluate("location.hash = '#/schedules'")
    schedules = page.get_by_test_id("schedule")
    expect(schedules).to_have_count(len(served["schedules"]))
    for schedule in served["schedules"].values():
        expect(schedules.filter(has_text=schedule["spec"]["name"])).to_have_count(1)
    page.evaluate("location.hash = '#/settings'")
    providers = page.get_by_test_id("provider-card")
    for name in (old["provider"], old["keyed_provider"]):
        expect(providers.filter(has=page.get_by_text(name, exact=True))).to_have_count(1)
    page.screenshot(path=str(SHOTS / f"upgrade-{old['commit']}-settings.png"))
    page.get_by_test_id("mcp-open").click()
    token = page.get_by_test_id("mcp-dialog").get_by_test_id("mcp-token-row")
    expect(token).to_have_count(1)
    expect(token).to_contain_text(old["mcp_token"]["name"])
    expect(token.get_by_test_id("mcp-token-scope")).to_have_text("admin · up to full-auto")

    assert faults.seen == [], "\n".join(faults.seen)
