"""An upgrade of the data, as the user meets it: the server is started on a data dir that
codey 0.1.0 left (no format marker, an MCP token from before scopes, a session). Every page
shows what changed, with where the backup is, until someone dismisses it; then no page shows
it again, after a reload too. Settings → About shows the server's version."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

from codey_protocol.version import __version__
from codey_server.upgrades.data import FORMAT_FILE
from codey_server.upgrades.plan import FORMAT

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = Path(__file__).resolve().parent / "test-results"
#: as codey 0.1.0 (745192a) wrote it: no scope, no maximum policy
OLD_TOKENS = [{"token_id": "mt_0a1b2c3d4e5f", "name": "ci-agent", "created_at": 1795400000.5,
               "sha256": "9f" * 32, "last_used_at": None}]


def test_the_upgrade_is_told_once_and_dismissed_everywhere(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "Done."}}]})
    server = stack.server()
    worker = stack.worker()
    wd = stack.workdir(worker, "proj")
    r = server.http.post("/api/sessions", json={"worker_id": worker.worker_id, "workdir": wd,
                                                "prompt": "hello"})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]

    def answered() -> bool:
        session = server.http.get(f"/api/sessions/{sid}").json()
        return session["status"] == "idle" and any(
            i["kind"] == "assistant_message" for i in session["items"])

    stack.wait_until(answered, what="the first turn to end")
    server.stop()
    data = server.data_dir  # now as codey 0.1.0 would have left it
    (data / FORMAT_FILE).unlink()
    with sqlite3.connect(data / "events.db") as conn:
        conn.execute("DROP TABLE codey_format")
    (data / "mcp_tokens.json").write_text(json.dumps(OLD_TOKENS))
    server.start()

    stack.open(page)
    notice = page.get_by_test_id("upgrade-notice")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text(f"Codey was upgraded to {__version__}")
    expect(notice).to_contain_text(f"from format 1 to {FORMAT}")
    changes = notice.get_by_test_id("upgrade-changes").locator("li")
    expect(changes).to_have_count(2)
    expect(changes.nth(0)).to_contain_text("ci-agent")
    expect(changes.nth(0)).to_contain_text("full-auto")
    expect(changes.nth(1)).to_contain_text("workspace-write")
    [backup] = (data / "backups").iterdir()
    expect(notice.get_by_test_id("upgrade-backup")).to_have_text(str(backup))
    page.screenshot(path=str(SHOTS / "upgrade-notice.png"))

    # on every page, in every browser, until dismissed
    stack.open_session(page, sid)
    expect(notice).to_be_visible()
    other = page.context.new_page()
    other.goto(f"{server.url}/#/board")
    other_notice = other.get_by_test_id("upgrade-notice")
    expect(other_notice).to_be_visible()

    notice.get_by_test_id("upgrade-dismiss").click()
    expect(notice).to_be_hidden()
    expect(other_notice).to_be_hidden()  # the dismissal is an event: the other tab follows
    page.reload()
    expect(page.get_by_test_id("conn-state")).to_have_text("live")
    expect(page.get_by_test_id("upgrade-notice")).to_be_hidden()
    [kept] = stack.browser_state(page)["upgrades"]
    assert kept["dismissed"] is True

    page.evaluate("location.hash = '#/settings'")
    expect(page.get_by_test_id("about-version")).to_contain_text(
        f"Codey server {__version__} · data format {FORMAT}")
    page.get_by_test_id("about").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "settings-about.png"))
