"""`GET /api/sessions/{id}/log` (the page's "Download log") matches what the page shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def test_log_download(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "count to three"},
         "reply": {"text": "Counting **now**.",
                   "calls": [stack.shell("bash", "-c", "for i in 1 2 3; do echo n=$i; done")]}},
        {"match": {"tool": "shell", "tool_output": "n=3"},
         "reply": {"text": "Counted to three.", "chunk_size": 3}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)
    sid = stack.new_session(page, worker, stack.workdir(worker, "proj"), "count to three")
    expect(stack.items(page, "assistant_message").last).to_have_text("Counted to three.")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")

    with page.expect_download() as info:
        page.get_by_test_id("download-log").click()
    download = info.value
    assert download.suggested_filename.endswith(".ndjson")
    body = Path(download.path()).read_bytes()
    served = server.http.get(f"/api/sessions/{sid}/log")
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("application/x-ndjson")
    assert body == served.content

    events = [json.loads(line) for line in body.decode().splitlines()]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert {e["session_id"] for e in events} == {sid}
    assert events[0]["event"]["type"] == "session_created"

    # Fold the items from the log by hand; the page shows exactly those, in that order.
    texts: dict[str, str] = {}
    outputs: dict[str, str] = {}
    order: list[str] = []
    kinds: dict[str, str] = {}
    for e in events:
        ev: dict[str, Any] = e["event"]
        if ev["type"] == "session_item_appended":
            item = ev["item"]
            order.append(item["id"])
            kinds[item["id"]] = item["kind"]
            texts[item["id"]] = item.get("text") or ""
            outputs[item["id"]] = item.get("output") or ""
        elif ev["type"] == "session_item_updated":
            texts[ev["item_id"]] = texts.get(ev["item_id"], "") + (ev.get("text_delta") or "")
            if ev.get("output") is not None:
                outputs[ev["item_id"]] = ev["output"]
            outputs[ev["item_id"]] = outputs.get(ev["item_id"], "") + (
                ev.get("output_delta") or "")
    assert stack.dom_item_ids(page) == order
    for item_id in order:
        node = page.locator(f"[data-testid=item][data-item-id='{item_id}']")
        if kinds[item_id] == "user_message":
            expect(node).to_contain_text(texts[item_id])
        elif kinds[item_id] == "assistant_message":
            # markdown is rendered: compare the visible text with the source minus markup
            expect(node).to_have_text(texts[item_id].replace("**", ""))
        elif kinds[item_id] == "tool_call":
            expect(node.get_by_test_id("tool-output")).to_have_text(outputs[item_id].rstrip("\n"))
    assert outputs[order[2]] == "n=1\nn=2\nn=3\n"
    assert [kinds[i] for i in order] == ["user_message", "assistant_message", "tool_call",
                                         "assistant_message"]
