"""The Telegram channel: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import State, TelegramChat
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _tg_paired(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TelegramChatPaired)
    key = str(e.chat_id)
    chat = state.telegram_chats.get(key)
    if chat is None:
        state.telegram_chats[key] = TelegramChat(chat_id=e.chat_id, title=e.title,
                                                 paired_at=env.ts)
    else:
        chat.title = e.title


def _tg_removed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TelegramChatRemoved)
    state.telegram_chats.pop(str(e.chat_id), None)


def _tg_session(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TelegramSessionChosen)
    chat = state.telegram_chats.get(str(e.chat_id))
    if chat is not None:
        chat.session_id = e.session_id


def _tg_sent(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TelegramMessageSent)
    chat = state.telegram_chats.get(str(e.chat_id))
    if chat is not None:
        chat.sent[e.key] = e.message_id


def _tg_update(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.TelegramUpdateHandled)
    if e.bot_id != state.telegram_bot_id:  # another bot: its ids have nothing to do with these
        state.telegram_bot_id, state.telegram_offset = e.bot_id, e.update_id + 1
    else:
        state.telegram_offset = max(state.telegram_offset, e.update_id + 1)


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.TelegramChatPaired: _tg_paired,
    ev.TelegramChatRemoved: _tg_removed,
    ev.TelegramSessionChosen: _tg_session,
    ev.TelegramMessageSent: _tg_sent,
    ev.TelegramUpdateHandled: _tg_update,
}
