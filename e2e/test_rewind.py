"""Rewinding from the transcript over the real stack (server, worker, scripted model): three
turns, "Rewind…" on the second prompt, conversation only; the live transcript keeps the first
turn, the rewound turns are folded under a marker and can be opened, the prompt's text is back
in the prompt box, and the next model request holds nothing of them. ``/rewind`` in the prompt
box opens the same dialog; a refusal shows in it.

With files: three turns that write, patch and delete files (a binary, an untracked file, an
ignored one) and a hand edit after them; "Rewind…" on the first prompt, "files and
conversation": the dialog lists the files that change with their diffs, names the hand-edited
file and leaves it unticked; after the rewind the files equal the first turn's checkpoint, the
hand-edited file is kept and the ignored one untouched.

With ``CODEY_SHOTS_DIR`` set, the dialog is photographed there (desktop, 390 px, dark)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Page, expect

from codey_testkit.workfiles import file_turn_steps, files, make_folder

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

SCRIPT: dict[str, Any] = {"model": "scripted-1", "steps": [
    {"match": {"user": "first prompt"}, "reply": {"text": "answer one"}},
    {"match": {"user": "second prompt"}, "reply": {"text": "answer two"}},
    {"match": {"user": "third prompt"}, "reply": {"text": "answer three"}},
    {"match": {"user": "fourth prompt"}, "reply": {"text": "answer four"}},
    {"match": {"any": True}, "reply": {"text": "ok"}},
]}


def _send(page: Page, stack: Stack, text: str, answer: str) -> None:
    page.get_by_test_id("prompt-input").fill(text)
    page.get_by_test_id("prompt-send").click()
    expect(stack.items(page, "assistant_message").last).to_have_text(answer, timeout=30_000)
    expect(stack.status(page)).to_have_attribute("data-status", "idle", timeout=30_000)


def _live_prompts(page: Page) -> Any:
    """The prompts of the live transcript (not those of an opened rewound branch)."""
    return page.locator("[data-testid=session-view] [data-testid=item][data-kind=user_message]"
                        ":not([data-testid=rewound-branch] *)")


def _shoot(page: Page, name: str) -> None:
    where = os.environ.get("CODEY_SHOTS_DIR")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"{name}.png"))


def test_rewind_the_conversation_from_the_transcript(stack: Stack, page: Page) -> None:
    model = stack.model(SCRIPT)
    stack.server()
    worker = stack.worker()
    wd = stack.workdir(worker, "proj")
    stack.open(page)
    stack.new_session(page, worker, wd, "first prompt")
    expect(stack.items(page, "assistant_message").last).to_have_text("answer one",
                                                                     timeout=30_000)
    expect(stack.status(page)).to_have_attribute("data-status", "idle", timeout=30_000)
    _send(page, stack, "second prompt", "answer two")
    _send(page, stack, "third prompt", "answer three")

    second = stack.items(page, "user_message").filter(has_text="second prompt")
    second.hover()
    second.get_by_test_id("rewind-here").click()
    dialog = page.get_by_test_id("rewind-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_test_id("rewind-turn")).to_have_value(
        second.get_attribute("data-item-id") or "")
    # this server has no file checkpoints, or it has them: either way the dialog says which
    expect(dialog.get_by_test_id("rewind-no-checkpoints").or_(
        dialog.get_by_test_id("rewind-files")).first).to_be_visible()
    _shoot(page, "dialog-desktop")
    dialog.get_by_test_id("rewind-mode-conversation").check()
    dialog.get_by_test_id("rewind-confirm").click()
    expect(dialog).to_be_hidden()

    # the live transcript: the first turn; the rewound ones folded under a marker
    expect(stack.items(page, "user_message")).to_have_count(1)
    expect(stack.items(page, "user_message").locator(".user-text")).to_have_text("first prompt")
    branch = page.get_by_test_id("rewound-branch")
    expect(branch).to_have_count(1)
    expect(branch).to_contain_text("Rewound: 2 prompts from “second prompt”")
    expect(page.get_by_test_id("prompt-input")).to_have_value("second prompt")
    branch.locator("summary").click()
    expect(branch.locator("[data-testid=item][data-kind=user_message] .user-text")).to_have_text(
        ["second prompt", "third prompt"])
    expect(branch.get_by_test_id("rewind-here")).to_have_count(0)  # history: no actions
    state = stack.browser_state(page)
    sid = page.get_by_test_id("session-view").get_attribute("data-session-id") or ""
    assert stack.srv is not None
    server_session = stack.srv.http.get(f"/api/sessions/{sid}").json()
    assert state["sessions"][sid]["rewound"] == server_session["rewound"]
    assert state["sessions"][sid]["items"] == server_session["items"]

    _send(page, stack, "fourth prompt", "answer four")
    sent = json.dumps(model.requests("/v1/chat/completions")[-1]["body"]["messages"])
    assert "first prompt" in sent and "fourth prompt" in sent
    assert "second prompt" not in sent and "third prompt" not in sent

    # /rewind: the dialog at the newest prompt; a rewind to the abandoned branch is refused
    page.get_by_test_id("prompt-input").fill("/rewind")
    page.get_by_test_id("prompt-send").click()
    dialog = page.get_by_test_id("rewind-dialog")
    expect(dialog).to_be_visible()
    fourth = _live_prompts(page).filter(has_text="fourth prompt")
    expect(dialog.get_by_test_id("rewind-turn")).to_have_value(
        fourth.get_attribute("data-item-id") or "")
    abandoned = server_session["rewound"][0]["turn"]
    dialog.get_by_test_id("rewind-turn").evaluate(
        "(el, turn) => { el.add(new Option('hostile', turn)); el.value = turn;"
        " el.dispatchEvent(new Event('change')); }", abandoned)
    dialog.get_by_test_id("rewind-mode-conversation").check()
    dialog.get_by_test_id("rewind-confirm").click()
    expect(dialog.get_by_test_id("rewind-refusal")).to_contain_text("took back")
    expect(dialog).to_be_visible()
    expect(_live_prompts(page)).to_have_count(2)

    page.set_viewport_size({"width": 390, "height": 844})
    _shoot(page, "dialog-390")
    page.evaluate("document.documentElement.dataset.theme = 'dark'")
    page.set_viewport_size({"width": 1280, "height": 800})
    _shoot(page, "dialog-dark")
    dialog.get_by_test_id("rewind-cancel").click()
    expect(dialog).to_be_hidden()
    _shoot(page, "transcript-dark")  # the rewound branch, opened above


def test_rewind_files_and_conversation_from_the_transcript(stack: Stack, page: Page) -> None:
    stack.model({"model": "scripted-1", "steps": [
        *file_turn_steps(), {"match": {"any": True}, "reply": {"text": "Done."}}]})
    stack.server()
    worker = stack.worker()
    folder = make_folder(Path(worker.workdir("app")))
    before = files(folder)
    stack.open(page)
    stack.new_session(page, worker, str(folder), "turn one")
    for n, text in enumerate(("turn one", "turn two", "turn three"), 1):
        if n > 1:
            page.get_by_test_id("prompt-input").fill(text)
            page.get_by_test_id("prompt-send").click()
        # every turn answers "Done.": the n-th answer, then idle
        expect(stack.items(page, "assistant_message")).to_have_count(n, timeout=30_000)
        expect(stack.status(page)).to_have_attribute("data-status", "idle", timeout=30_000)
    # the user's own edit of a file the turns changed, after them
    (folder / "a.txt").write_text("one\nTWO\nthree\nmine\n")

    first = stack.items(page, "user_message").filter(has_text="turn one")
    first.hover()
    first.get_by_test_id("rewind-here").click()
    dialog = page.get_by_test_id("rewind-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_test_id("rewind-mode-both")).to_be_checked()
    listed = dialog.get_by_test_id("rewind-file")
    expect(listed).to_have_count(4, timeout=30_000)
    assert sorted(listed.evaluate_all("els => els.map(e => e.dataset.path)")) == [
        "a.txt", "gone.txt", "notes.md", "pic.bin"]
    hand = listed.filter(has=page.get_by_test_id("hand-edited"))
    expect(hand).to_have_count(1)
    expect(hand).to_have_attribute("data-path", "a.txt")
    expect(hand.get_by_test_id("rewind-file-tick")).not_to_be_checked()
    for path in ("gone.txt", "notes.md", "pic.bin"):
        expect(dialog.locator(f"[data-testid=rewind-file][data-path='{path}'] "
                              "[data-testid=rewind-file-tick]")).to_be_checked()
    # each text file with its diff (from now to the checkpoint)
    expect(hand.get_by_test_id("diff")).to_contain_text("-mine")
    gone = dialog.locator("[data-testid=rewind-file][data-path='gone.txt']")
    expect(gone.get_by_test_id("diff")).to_contain_text("+to be deleted")
    _shoot(page, "files-desktop")
    page.set_viewport_size({"width": 390, "height": 844})
    _shoot(page, "files-390")
    page.evaluate("document.documentElement.dataset.theme = 'dark'")
    page.set_viewport_size({"width": 1280, "height": 800})
    _shoot(page, "files-dark")

    dialog.get_by_test_id("rewind-confirm").click()
    expect(dialog).to_be_hidden(timeout=30_000)
    expect(stack.items(page, "user_message")).to_have_count(0)
    expect(page.get_by_test_id("rewound-branch")).to_contain_text(
        "Rewound: 3 prompts from “turn one” (files and conversation)")
    expect(page.get_by_test_id("prompt-input")).to_have_value("turn one")

    after = files(folder)
    assert after.pop("a.txt") == b"one\nTWO\nthree\nmine\n"  # edited by hand: kept
    assert after.pop("debug.log") == b"after\n"  # ignored: untouched
    before.pop("a.txt")
    before.pop("debug.log")
    assert after == before  # the rest as the first turn's checkpoint has it
