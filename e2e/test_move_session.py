"""Move to…: a session with uncommitted changes moves from worker A to worker B through the
session menu's dialog, goes on there (the model writes a file on B), the files on B equal
A's, A's are untouched, and no action ran twice (each worker's own records count them).
Screenshots of the dialog (wide, 390 px, dark) go to /tmp/shots/i38-move/."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

from codey_protocol import codec

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SHOTS = Path(os.environ.get("CODEY_SHOTS", "/tmp/shots/i38-move"))


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(folder).parts}


def _ran(home: Path, kind: str) -> int:
    db = sqlite3.connect(home / "actions" / "records.sqlite3")
    try:
        rows = db.execute("SELECT action FROM records").fetchall()
    finally:
        db.close()
    return sum(type(codec.decode_action(raw)).__name__ == kind for (raw,) in rows)


def _shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.get_by_test_id("move-dialog").screenshot(path=str(SHOTS / f"{name}.png"))


def test_move_a_session_with_uncommitted_changes_to_another_worker(stack: Stack,
                                                                    page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "write there"}, "reply": {"calls": [{"name": "write_file",
         "arguments": {"path": "there.txt", "content": "made on B\n"}}]}},
        {"match": {"tool": "write_file"}, "reply": {"text": "written"}},
        {"match": {"any": True}, "reply": {"text": "ready"}},
    ]})
    server = stack.server()
    a = stack.worker("worker-a")
    b = stack.worker("worker-b")
    repo = Path(stack.workdir(a, "app"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "T")
    _git(repo, "config", "user.email", "t@example.com")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "start")
    (repo / "a.txt").write_text("one\nnot committed\n")
    (repo / "untracked.txt").write_text("new\n")
    before = _files(repo)
    status = _git(repo, "status", "--porcelain")

    stack.open(page)
    sid = stack.new_session(page, a, str(repo), "hello")
    expect(stack.items(page, "assistant_message").last).to_have_text("ready")
    expect(stack.status(page)).to_have_attribute("data-status", "idle")

    page.get_by_test_id("session-menu-button").click()
    page.get_by_test_id("menu-move-dialog").click()
    dialog = page.get_by_test_id("move-dialog")
    expect(dialog).to_be_visible()
    target = dialog.get_by_test_id(f"move-target-{b.worker_id}")
    expect(target).to_be_checked()
    expect(dialog.get_by_test_id("move-target-state")).to_have_text("online")
    folder = str(Path(b.root) / "app-moved")
    dialog.get_by_test_id("move-folder").fill(folder)
    _shoot(page, "move-dialog")
    # a folder outside B's roots is refused with the server's reason, and nothing moves
    dialog.get_by_test_id("move-folder").fill("/etc/not-here")
    dialog.get_by_test_id("move-submit").click()
    expect(dialog.get_by_test_id("move-error")).to_contain_text("outside the folders")
    _shoot(page, "move-dialog-refused")
    dialog.get_by_test_id("move-folder").fill(folder)
    dialog.get_by_test_id("move-submit").click()
    expect(dialog).to_be_hidden(timeout=60_000)
    expect(page.locator("[data-testid=session-view] .s-meta")).to_contain_text(folder)
    expect(stack.items(page, "notice").last).to_contain_text("Moved to")

    page.get_by_test_id("prompt-input").fill("write there")
    page.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text("written",
                                                                       timeout=30_000)
    moved = Path(folder)
    assert (moved / "there.txt").read_text() == "made on B\n"
    assert _files(moved) == {**before, "there.txt": b"made on B\n"}
    assert _git(moved, "status", "--porcelain") == status + "\n?? there.txt" or \
        sorted(_git(moved, "status", "--porcelain").splitlines()) == sorted(
            [*status.splitlines(), "?? there.txt"])
    # A's files untouched; the write ran once, on B
    assert _files(repo) == before
    assert _git(repo, "status", "--porcelain") == status
    assert _ran(b.codey_home, "WriteFile") == 1 and _ran(a.codey_home, "WriteFile") == 0
    s = server.http.get(f"/api/sessions/{sid}").json()
    assert s["worker_id"] == b.worker_id and s["workdir"] == folder
    # the browser's fold agrees with the server's
    mine = stack.browser_state(page)["sessions"][sid]
    assert (mine["worker_id"], mine["workdir"]) == (b.worker_id, folder)


def test_the_move_dialog_at_390_px_in_dark_mode(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        {"match": {"any": True}, "reply": {"text": "ready"}}]})
    stack.server()
    a = stack.worker("worker-a")
    stack.worker("worker-b")
    page.set_viewport_size({"width": 390, "height": 800})
    page.emulate_media(color_scheme="dark")
    stack.open(page)
    stack.new_session(page, a, stack.workdir(a, "notes"), "hello")
    expect(stack.items(page, "assistant_message").last).to_have_text("ready")
    page.get_by_test_id("session-menu-button").click()
    page.get_by_test_id("menu-move-dialog").click()
    dialog = page.get_by_test_id("move-dialog")
    expect(dialog).to_be_visible()
    box = dialog.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    submit = dialog.get_by_test_id("move-submit")
    expect(submit).to_be_in_viewport()
    _shoot(page, "move-dialog-390-dark")
