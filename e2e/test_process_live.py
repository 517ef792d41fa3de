"""Processes the agent started, seen as they run (issue 33, items 3, 4 and 6), on the whole
stack with real bubblewrap:

* the processes panel shows what a process writes as it writes it, not only what the model
  last read — and the model's next read still gets all of it; a reloaded page shows the same
  tail; the event log does not grow with the lines;
* a dev server of a session with the network off says why no one can reach it, and the
  Forward button makes it reachable on 127.0.0.1 (only there) until it stops;
* the dashboard's card of a finished session says "1 process running".

The ticker prints a line each time the test creates the file ``go-<n>`` in its workdir: it
writes exactly when the test wants, with no sleep to tune."""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

PHONE = {"width": 390, "height": 844}


def _ticker(marker: str) -> list[str]:
    # the workdir in its argv tells this test's ticker from any other on the machine; the
    # file ``quit`` makes it exit with code 3
    return ["bash", "-c", "i=1; echo tick-1; while :; do while [ ! -f go-$i ]; do "
            "[ -f quit ] && exit 3; sleep 0.05; done; i=$((i+1)); echo tick-$i; done",
            marker]


def _shoot(stack: Stack, page: Page, name: str, *, phone: bool = False) -> None:
    """A screenshot in the test's folder, and where CODEY_SCREENSHOTS says (to look at)."""
    if phone:
        page.set_viewport_size(PHONE)
    path = stack.tmp / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    shots = os.environ.get("CODEY_SCREENSHOTS")
    if shots:
        (Path(shots) / path.name).write_bytes(path.read_bytes())
    if phone:
        page.set_viewport_size({"width": 1280, "height": 800})


def test_the_panel_shows_a_process_live_and_the_model_still_reads_all_of_it(
        stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": []})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "ticker"))
    model.set_script({"model": "scripted-1", "steps": [
        {"match": {"user": "start the ticker"},
         "reply": {"calls": [{"name": "exec", "arguments": {
             "command": _ticker(str(wd)), "yield_ms": 500}}]}},
        {"match": {"tool": "exec", "tool_output": "tick-1"},
         "reply": {"text": "The ticker runs."}},
        {"match": {"user": "poll it"},
         "reply": {"calls": [{"name": "write_stdin",
                              "arguments": {"process_id": "$PROCESS_ID", "yield_ms": 0}}]}},
        # all it wrote since the model's first read: the browser's watching moved nothing
        {"match": {"tool": "write_stdin", "tool_output": "tick-2\ntick-3\ntick-4\ntick-5"},
         "reply": {"text": "It printed tick-2 to tick-5."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    sid = stack.new_session(page, worker, str(wd), "start the ticker")
    expect(stack.items(page, "assistant_message").last).to_have_text("The ticker runs.")
    output = page.get_by_test_id("processes").get_by_test_id("process-output")
    expect(output).to_have_text("tick-1\n")
    # the reply is drawn before the turn's last event (the session going idle) arrives
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    seq = page.evaluate("window.__codey.seq()")

    # the model reads nothing now; each line still reaches the panel as it is written
    for n in (1, 2, 3):
        (wd / f"go-{n}").touch()
        expect(output).to_contain_text(f"tick-{n + 1}\n")
    expect(output).to_have_text("tick-1\ntick-2\ntick-3\ntick-4\n")
    # ... and none of them was an event (only the workdir's new files are)
    assert stack.srv is not None
    log = stack.srv.http.get(f"/api/sessions/{sid}/log")
    later = [json.loads(line)["event"] for line in log.text.splitlines()
             if json.loads(line)["seq"] > seq]
    assert {e["type"] for e in later} <= {"session_workspace_changed"}, later
    _shoot(stack, page, "process-live")
    _shoot(stack, page, "mobile-process-live", phone=True)

    # a browser that reconnects (a reload: a fresh page) gets the tail whole, then more
    page.reload()
    expect(page.get_by_test_id("conn-state")).to_have_text("live")
    output = page.get_by_test_id("processes").get_by_test_id("process-output")
    expect(output).to_have_text("tick-1\ntick-2\ntick-3\ntick-4\n")
    (wd / "go-4").touch()
    expect(output).to_have_text("tick-1\ntick-2\ntick-3\ntick-4\ntick-5\n")

    page.get_by_test_id("prompt-input").fill("poll it")
    page.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text(
        "It printed tick-2 to tick-5.")
    # what the model read is recorded as before; the panel keeps the live tail
    process = stack.browser_state(page)["sessions"][sid]["processes"][0]
    assert process["output"] == "tick-1\ntick-2\ntick-3\ntick-4\ntick-5\n"
    page.get_by_test_id("process-stop").click()
    expect(page.get_by_test_id("process-status").first).to_have_attribute("data-status", "ended")


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def test_a_dev_server_without_the_network_says_why_and_is_forwarded_on_a_click(
        stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": []})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "site"))
    (wd / "index.html").write_text("<h1>hello from the sandbox</h1>")
    # port 0: the system picks a free one (tests run side by side); 0.0.0.0, as dev servers do
    serve = ["python3", "-u", "-m", "http.server", "0", "--bind", "0.0.0.0",
             "--directory", str(wd)]
    model.set_script({"model": "scripted-1", "steps": [
        {"match": {"user": "serve the site"},
         "reply": {"calls": [{"name": "exec", "arguments": {"command": serve,
                                                             "yield_ms": 2000}}]}},
        {"match": {"tool": "exec", "tool_output": "Serving HTTP"},
         "reply": {"text": "The site is served."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.new_session(page, worker, str(wd), "serve the site")
    expect(stack.items(page, "assistant_message").last).to_have_text("The site is served.")
    process = page.get_by_test_id("processes").get_by_test_id("process")
    expect(process.get_by_test_id("process-output")).to_contain_text("Serving HTTP on 0.0.0.0")
    printed = process.get_by_test_id("process-output").text_content() or ""
    port = int(re.search(r"port (\d+)", printed).group(1))  # type: ignore[union-attr]

    # its network is its own: what it printed is true inside the sandbox only, and it says so
    note = process.get_by_test_id("process-isolated")
    expect(note).to_contain_text(f"Network off: port {port} is reachable only inside the "
                                 "sandbox. Turn the network on and restart it to reach it")
    _shoot(stack, page, "process-isolated")
    assert _refused(port) or _serves_other(port)

    # the user's click: reachable on this machine's loopback, at the address shown
    note.locator(f"[data-testid=process-forward][data-port='{port}']").click()
    forwarded = note.get_by_test_id("process-forwarded")
    expect(forwarded).to_contain_text("forwarded to 127.0.0.1:")
    expect(note).to_contain_text(f"Network off: port {port} is reachable inside the sandbox, "
                                 "and on this machine through its forward")
    address = forwarded.locator("a").text_content() or ""
    host, _, host_port = address.partition(":")
    assert host == "127.0.0.1"
    url = f"http://{address}/index.html"
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.read() == b"<h1>hello from the sandbox</h1>"
    expect(process.get_by_test_id("process-output")).to_contain_text("GET /index.html")
    _shoot(stack, page, "process-forwarded")
    _shoot(stack, page, "mobile-process-forwarded", phone=True)

    # the forward ends with the process
    process.get_by_test_id("process-stop").click()
    expect(process.get_by_test_id("process-status")).to_have_attribute("data-status", "ended")
    expect(process.get_by_test_id("process-isolated")).to_have_count(0)
    stack.wait_until(lambda: _refused(int(host_port)), what="the forward to be closed")


def _serves_other(port: int) -> bool:
    """Something else of this machine listens on that port (the sandbox's is not it)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5) as r:
            return b"hello from the sandbox" not in r.read()
    except (urllib.error.URLError, OSError):
        return True


@pytest.mark.parametrize("phone", [False, True], ids=["desktop", "phone"])
def test_a_finished_sessions_card_says_its_processes_run(
        stack: Stack, page: Page, phone: bool) -> None:
    model = stack.model({"model": "scripted-1", "steps": []})
    stack.server()
    worker = stack.worker()
    if phone:
        page.set_viewport_size(PHONE)
    stack.open(page)
    wd = Path(stack.workdir(worker, "watchers"))
    model.set_script({"model": "scripted-1", "steps": [
        {"match": {"user": "start two tickers"},
         "reply": {"calls": [
             {"name": "exec", "arguments": {"command": _ticker(str(wd)), "yield_ms": 300}},
             {"name": "exec", "arguments": {"command": [*_ticker(str(wd)), "2"],
                                            "yield_ms": 300}}]}},
        {"match": {"tool": "exec", "tool_output": "tick-1"},
         "reply": {"text": "Both run."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    sid = stack.new_session(page, worker, str(wd), "start two tickers")
    expect(stack.items(page, "assistant_message").last).to_have_text("Both run.")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")
    page.evaluate("location.hash = '#/'")
    card = page.locator(f"[data-testid=session-card][data-session-id='{sid}']")
    expect(card.get_by_test_id("session-status")).to_have_text("finished")
    expect(card.get_by_test_id("session-processes")).to_have_text("2 processes running")
    _shoot(stack, page, "mobile-dashboard-processes" if phone else "dashboard-processes")

    # one stopped: the card follows, without a reload
    stack.open_session(page, sid)
    page.get_by_test_id("process-stop").first.click()
    expect(page.locator("[data-testid=process][data-status=ended]")).to_have_count(1)
    page.evaluate("location.hash = '#/'")
    expect(card.get_by_test_id("session-processes")).to_have_text("1 process running")
    # the other ends by itself, with no one polling it: its worker says so, the card follows
    (wd / "quit").touch()
    expect(card.get_by_test_id("session-processes")).to_have_count(0)
    expect(card.get_by_test_id("session-status")).to_have_text("finished")
    stack.open_session(page, sid)
    ended = page.locator("[data-testid=process][data-status=ended]")
    expect(ended).to_have_count(2)
    words = ended.get_by_test_id("process-status").all_text_contents()
    assert sorted(words) == ["exit 3", "stopped by you"]
