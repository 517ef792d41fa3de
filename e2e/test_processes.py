"""A process the agent started with `exec` (a dev server) shows in the session view's
processes panel with its output, and the Stop button stops it on the worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack



def test_a_dev_server_shows_in_the_processes_panel_and_stops_with_its_button(
        stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": []})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "site"))
    (wd / "index.html").write_text("<h1>hello</h1>")
    # the workdir in its argv tells this test's server from any other on the machine
    serve = ["python3", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
             "--directory", str(wd)]
    model.set_script({"model": "scripted-1", "steps": [
        {"match": {"user": "serve the site"},
         "reply": {"text": "Starting a dev server.", "calls": [
             {"name": "exec", "arguments": {"command": serve, "yield_ms": 3000}}]}},
        {"match": {"tool": "exec", "tool_output": "Serving HTTP"},
         "reply": {"text": "The site is served; stop it from the panel when you are done."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.new_session(page, worker, str(wd), "serve the site")

    expect(stack.items(page, "assistant_message").last).to_have_text(
        "The site is served; stop it from the panel when you are done.")
    panel = page.get_by_test_id("processes")
    process = panel.get_by_test_id("process")
    expect(process).to_have_count(1)
    expect(process).to_contain_text(" ".join(serve))
    expect(process.get_by_test_id("process-status")).to_have_attribute("data-status", "running")
    expect(process.get_by_test_id("process-output")).to_contain_text("Serving HTTP on 127.0.0.1")
    # the exec call's card says the same
    card = stack.items(page, "tool_call").first
    expect(card.get_by_test_id("tool-command")).to_contain_text("http.server")
    expect(card.get_by_test_id("process-status")).to_have_text("running")
    assert (process.get_attribute("data-process-id") or "").startswith("proc_")
    assert _server_pids(str(wd))  # it runs on the machine
    page.screenshot(path=str(stack.tmp / "processes-running.png"), full_page=True)

    process.get_by_test_id("process-stop").click()
    expect(process.get_by_test_id("process-status")).to_have_attribute("data-status", "ended")
    expect(process.get_by_test_id("process-status")).to_have_text("stopped by you")
    expect(process.get_by_test_id("process-stop")).to_have_count(0)
    expect(card.get_by_test_id("process-status")).to_have_text("stopped by you")
    stack.wait_until(lambda: not _server_pids(str(wd)), what="the dev server to be gone")
    page.screenshot(path=str(stack.tmp / "processes-stopped.png"), full_page=True)
    shots = os.environ.get("CODEY_SCREENSHOTS")
    if shots:  # keep them where a person can look at them
        for name in ("processes-running.png", "processes-stopped.png"):
            (Path(shots) / name).write_bytes((stack.tmp / name).read_bytes())


def _server_pids(marker: str) -> list[int]:
    """The pids of the `http.server` processes serving ``marker`` (whoever runs them)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if "http.server" in argv and marker in argv:
                pids.append(int(entry.name))
    return pids
