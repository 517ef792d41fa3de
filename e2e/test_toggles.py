"""The network toggle and the processes the agent left running (issue 32, item 7), on the
whole stack with real bubblewrap: turning the network on keeps a process started without it
(the transcript and the processes panel say it has none until restarted); turning it off
asks first, naming the process that will stop, and once confirmed it is stopped — and only
that one: the process that never had the network runs on.

Each process is a probe: a python loop that tries a TCP connect to this test's listener
every 0.2 s and prints whether it got through."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that accepts and closes every connection; its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(sock.getsockname()[1])
    finally:
        done.set()
        thread.join(timeout=5)
        sock.close()


def _probe(port: int, name: str, marker: str) -> list[str]:
    code = ("import socket, time\n"
            "while True:\n"
            "    try:\n"
            f"        socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
            "        print('connect ok', flush=True)\n"
            "    except OSError as e:\n"
            "        print('connect failed:', e, flush=True)\n"
            "    time.sleep(0.2)\n")
    # `name` leads its words (what the panel and the question show); `marker` (the
    # workdir) tells its processes from any other on the machine
    return ["python3", "-u", "-c", f"# {name}\n{code}", marker]


def _pids_with(marker: str, name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if marker in argv and any(a.startswith(f"# {name}\n") for a in argv):
                pids.append(int(entry.name))
    return pids


def test_the_network_toggle_keeps_or_stops_running_processes_and_says_which(
        stack: Stack, page: Page, listener: int) -> None:
    model = stack.model({"model": "scripted-1", "steps": []})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = stack.workdir(worker, "probes")
    offline, online = _probe(listener, "offline", wd), _probe(listener, "online", wd)
    # each probe prints within its first loop; a loaded machine has once taken more than 1.5 s
    # to start the sandboxed Python, so the first look at its output waits 5 s
    model.set_script({"model": "scripted-1", "steps": [
        {"match": {"user": "start the offline probe"},
         "reply": {"calls": [{"name": "exec",
                              "arguments": {"command": offline, "yield_ms": 5000}}]}},
        {"match": {"tool": "exec", "tool_output": "connect failed"},
         "reply": {"text": "The offline probe runs."}},
        {"match": {"user": "start the online probe"},
         "reply": {"calls": [{"name": "exec",
                              "arguments": {"command": online, "yield_ms": 5000}}]}},
        {"match": {"tool": "exec", "tool_output": "connect ok"},
         "reply": {"text": "The online probe gets through."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.new_session(page, worker, wd, "start the offline probe")
    answers = stack.items(page, "assistant_message")
    expect(answers.last).to_have_text("The offline probe runs.")
    panel = page.get_by_test_id("processes")
    first = panel.locator("[data-testid=process]").last  # newest first
    expect(first.get_by_test_id("process-status")).to_have_attribute("data-status", "running")
    expect(first.get_by_test_id("process-old-settings")).to_have_count(0)

    # more access: nothing is asked and nothing stops; both places say what it lacks
    page.get_by_test_id("network-toggle").check()
    notices = stack.items(page, "notice")
    kept = notices.locator("[data-code=processes_kept]")
    expect(kept).to_have_text(
        "Network turned on: 1 running process keeps its old settings (python3 -u -c # offline "
        "import socket, …); restart it to get the network.")
    expect(page.get_by_test_id("toggle-ask")).to_be_hidden()
    expect(first.get_by_test_id("process-old-settings")).to_have_text(
        "Started with the old settings: no network until it is restarted.")
    expect(first.get_by_test_id("process-status")).to_have_attribute("data-status", "running")

    prompt = page.get_by_test_id("prompt-input")
    prompt.fill("start the online probe")
    prompt.press("Enter")
    expect(answers.last).to_have_text("The online probe gets through.")
    second = panel.locator("[data-testid=process]").first
    expect(second).to_contain_text("# online")
    expect(second.get_by_test_id("process-old-settings")).to_have_count(0)

    # less access: asked first, naming only the process that holds the network
    toggle = page.get_by_test_id("network-toggle")
    toggle.uncheck()
    ask = page.get_by_test_id("toggle-ask")
    expect(ask).to_be_visible()
    expect(ask.get_by_test_id("toggle-ask-text")).to_have_text(
        "Network turned off: 1 running process will be stopped (python3 -u -c # online "
        "import socket, …) — it runs with the old settings.")
    shots = [_shot(stack, page, "toggle-ask.png")]
    ask.get_by_test_id("toggle-cancel").click()  # changed its mind: nothing happens
    expect(ask).to_be_hidden()
    expect(toggle).to_be_checked()
    expect(second.get_by_test_id("process-status")).to_have_attribute("data-status", "running")

    toggle.uncheck()
    ask.get_by_test_id("toggle-confirm").click()
    expect(ask).to_be_hidden()
    stopped = notices.locator("[data-code=processes_stopped]")
    expect(stopped).to_have_text(
        "Network turned off: stopping 1 running process (python3 -u -c # online import "
        "socket, …) — it ran with the old settings.")
    status = second.get_by_test_id("process-status")
    expect(status).to_have_attribute("data-status", "ended")
    expect(status).to_have_text("stopped: sandbox changed")
    # the exec call's card says the same
    card = stack.items(page, "tool_call").last
    expect(card.get_by_test_id("process-status")).to_have_text("stopped: sandbox changed")
    # the offline probe never had the network: it runs on, and lacks nothing now
    expect(first.get_by_test_id("process-status")).to_have_attribute("data-status", "running")
    expect(first.get_by_test_id("process-old-settings")).to_have_count(0)
    expect(toggle).not_to_be_checked()
    stack.wait_until(lambda: not _pids_with(wd, "online"), what="the online probe to be gone")
    assert _pids_with(wd, "offline")
    shots.append(_shot(stack, page, "toggle-stopped.png"))
    keep = os.environ.get("CODEY_SCREENSHOTS")
    if keep:  # where a person can look at them
        for shot in shots:
            (Path(keep) / shot.name).write_bytes(shot.read_bytes())


def _shot(stack: Stack, page: Page, name: str) -> Path:
    path = stack.tmp / name
    page.screenshot(path=str(path), full_page=True)
    return path
