"""``codey-bot-api``, the fake Telegram Bot API, as a real process spoken to over HTTP."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from codey_testkit.bot_api import BotApiHandle

TOKEN = "42:fake-token_0123456789"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[BotApiHandle]:
    with BotApiHandle(TOKEN, tmp_path) as handle:
        yield handle


def _call(api: BotApiHandle, method: str, **params: object) -> httpx.Response:
    # form-encoded, values JSON-encoded, the way python-telegram-bot sends them
    import json

    data = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
    return httpx.post(f"{api.url}/bot{TOKEN}/{method}", data=data, timeout=30)


def test_wrong_token_is_401_and_get_me_names_the_bot(api: BotApiHandle) -> None:
    r = httpx.post(f"{api.url}/bot42:other/getMe", timeout=10)
    assert r.status_code == 401 and r.json()["ok"] is False
    me = _call(api, "getMe").json()["result"]
    assert (me["id"], me["is_bot"], me["username"]) == (42, True, "codey_test_bot")


def test_scripted_messages_wait_for_the_bot_and_offset_confirms(api: BotApiHandle) -> None:
    api.script({"message": {"chat_id": 7, "text": "hello"}},
               {"wait_for": {"text": "^hi", "chat_id": 7},
                "press": {"chat_id": 7, "button": "Yes"}})
    t0 = time.monotonic()
    first = _call(api, "getUpdates", timeout=10).json()["result"]
    assert [u["message"]["text"] for u in first] == ["hello"]
    assert time.monotonic() - t0 < 5  # answered as soon as there was an update
    # the press waits for the bot's "hi"; meanwhile a long poll returns empty at its timeout
    offset = first[-1]["update_id"] + 1
    assert _call(api, "getUpdates", offset=offset, timeout=1).json()["result"] == []
    markup = {"inline_keyboard": [[{"text": "Yes", "callback_data": "y:1"}],
                                  [{"text": "No", "callback_data": "n:1"}]]}
    sent = _call(api, "sendMessage", chat_id=7, text="hi there", reply_markup=markup).json()
    second = _call(api, "getUpdates", offset=offset, timeout=10).json()["result"]
    (press,) = second
    assert press["callback_query"]["data"] == "y:1"
    assert press["callback_query"]["message"]["message_id"] == sent["result"]["message_id"]
    edited = _call(api, "editMessageText", chat_id=7, message_id=sent["result"]["message_id"],
                   text="hi: yes").json()
    assert edited["ok"] and "reply_markup" not in edited["result"]
    assert _call(api, "editMessageText", chat_id=7, message_id=999, text="x").status_code == 400
    state = api.state()
    assert [(s["method"], s["text"], s["buttons"]) for s in state["sent"]] == [
        ("sendMessage", "hi there", ["Yes", "No"]), ("editMessageText", "hi: yes", [])]
    assert state["steps_done"] == 2 and state["step_error"] is None
    # confirmed updates are gone
    assert _call(api, "getUpdates", offset=press["update_id"] + 1).json()["result"] == []


def test_a_missing_button_fails_the_script_visibly(api: BotApiHandle) -> None:
    api.script({"press": {"chat_id": 1, "button": "Approve"}})
    with pytest.raises(AssertionError, match="no button 'Approve'"):
        api.wait(lambda s: False, timeout=10)


def test_webhook_mode_refuses_polling_and_posts_updates_with_the_secret(
        api: BotApiHandle) -> None:
    assert _call(api, "setWebhook", url="http://127.0.0.1:9/hook", secret_token="s3").json()["ok"]
    assert api.state()["webhook"] == {"url": "http://127.0.0.1:9/hook", "secret_token": "s3"}
    assert _call(api, "getUpdates").status_code == 409
    assert _call(api, "deleteWebhook").json()["ok"]
    assert _call(api, "getUpdates").json()["result"] == []


def test_help() -> None:
    out = subprocess.run([sys.executable, "-m", "codey_testkit.bot_api", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "codey-bot-api --token" in out
