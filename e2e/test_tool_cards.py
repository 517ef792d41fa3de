"""The transcript's cards of grep, glob, edit and view_image: what was searched and found, the
edit's diff, and the image the model was shown."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = b"".join(b"\0" + b"\x20\x60\xd0" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_search_edit_and_image_cards(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "fix the greeting"},
         "reply": {"text": "Looking for the greeting and the screenshot.", "calls": [
             {"name": "grep", "arguments": {"pattern": "Helo", "include": "*.py"}},
             {"name": "glob", "arguments": {"pattern": "**/*.png"}},
             {"name": "view_image", "arguments": {"path": "shots/home.png"}},
             {"name": "edit", "arguments": {"path": "app.py", "old_string": "Helo",
                                            "new_string": "Hello"}}]}},
        {"match": {"tool": "edit"}, "reply": {"text": "Fixed the greeting in `app.py:1`."}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    stack.server()
    worker = stack.worker()
    stack.open(page)
    wd = Path(stack.workdir(worker, "cards"))
    (wd / "app.py").write_text('print("Helo, world")\n')
    (wd / "shots").mkdir()
    (wd / "shots" / "home.png").write_bytes(_png(64, 40))
    stack.new_session(page, worker, str(wd), "fix the greeting")

    expect(stack.items(page, "assistant_message").last).to_have_text(
        "Fixed the greeting in app.py:1.")
    grep, glob, image, edit = (stack.items(page, "tool_call").nth(n) for n in range(4))
    expect(grep.get_by_test_id("search-pattern")).to_have_text("Helo")
    grep.get_by_text("Matches", exact=True).click()
    expect(grep.get_by_test_id("search-result")).to_contain_text('app.py:1:print("Helo, world")')
    glob.get_by_text("Files", exact=True).click()
    expect(glob.get_by_test_id("search-result")).to_have_text("shots/home.png")
    shown = image.get_by_test_id("tool-image")
    expect(shown).to_be_visible()
    assert shown.evaluate("img => img.naturalWidth") == 64
    expect(edit.get_by_test_id("diff")).to_contain_text('+print("Hello, world")')
    assert (wd / "app.py").read_text() == 'print("Hello, world")\n'
    page.screenshot(path=str(stack.tmp / "tool-cards.png"))
    image.scroll_into_view_if_needed()
    page.screenshot(path=str(stack.tmp / "tool-cards-2.png"))
    edit.screenshot(path=str(stack.tmp / "tool-cards-edit.png"))
    shots = os.environ.get("CODEY_SCREENSHOTS")
    if shots:
        for name in ("tool-cards.png", "tool-cards-2.png", "tool-cards-edit.png"):
            (Path(shots) / name).write_bytes((stack.tmp / name).read_bytes())
