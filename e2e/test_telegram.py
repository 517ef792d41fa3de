"""The Telegram dialog: paste a token, pair a chat with the code it shows (the chat answers
through the test kit's fake Bot API), see the chat appear live, remove it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

from codey_testkit.bot_api import BotApiHandle
from codey_testkit.scenarios import provider_config

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

TOKEN = "777000:e2e-token-never-shown_0123"


def test_telegram_dialog_pairs_and_removes_a_chat(stack: Stack, page: Page,
                                                  tmp_path: Path) -> None:
    with BotApiHandle(TOKEN, tmp_path / "bot") as bot:
        model = stack.model({"model": "scripted-1", "steps": [
            {"match": {"any": True}, "reply": {"text": "ok"}}]})
        stack.server({**provider_config(model),
                      "telegram": {"api_base": bot.url, "poll_timeout_s": 2}})
        stack.open(page)
        page.get_by_test_id("telegram-open").click()
        dialog = page.get_by_test_id("telegram-dialog")
        expect(dialog.get_by_test_id("tg-state")).to_contain_text("no token")
        expect(dialog.get_by_test_id("tg-pair")).to_be_disabled()
        dialog.get_by_label("Bot token").fill(TOKEN)
        dialog.get_by_test_id("tg-save").click()
        state = dialog.get_by_test_id("tg-state")
        expect(state).to_contain_text("Running as @codey_test_bot (polling) · token pasted")
        dialog.get_by_test_id("tg-pair").click()
        code_text = dialog.get_by_test_id("tg-code").inner_text()
        assert re.fullmatch(r"/pair [A-Z2-9]{8}", code_text)
        bot.script({"message": {"chat_id": 77, "text": code_text, "user": "Ann"}})
        chats = dialog.get_by_test_id("tg-chats")
        expect(chats).to_contain_text("Ann")  # live, from the telegram_chat_paired event
        bot.wait(lambda s: any("Paired" in x["text"] for x in s["sent"]), what="the reply")
        assert TOKEN not in page.content()
        page.screenshot(path="e2e/test-results/telegram-dialog.png")
        dialog.get_by_test_id("tg-remove").click()
        expect(dialog).to_contain_text("No chat is paired")
