"""The Telegram channel's decisions: chats paired and removed, the session a chat follows,
what was sent to it, and the last update handled.

Pure, ``(state, input, ctx) -> [(session_id, event)]``, run by :mod:`.telegram` through
:meth:`~codey_server.core.engine.Engine.submit`. What a chat asks of sessions goes through the
browser's own commands (``Engine.execute``), so a chat can do nothing a browser could not.
"""

from __future__ import annotations

from dataclasses import dataclass

from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.core.rules import CommandRejected, Context, Decided

__all__ = ["ChatPaired", "Chosen", "Handled", "Sent", "chat_paired", "chat_removed",
           "message_sent", "session_chosen", "update_handled"]


@dataclass(frozen=True)
class ChatPaired:
    chat_id: int
    title: str


def chat_paired(state: State, p: ChatPaired, ctx: Context) -> Decided:
    """A chat that sent the right pairing code (checked by the channel, which holds it)."""
    return [(None, ev.TelegramChatPaired(chat_id=p.chat_id, title=p.title[:200]))]


def chat_removed(state: State, chat_key: str, ctx: Context) -> Decided:
    """``chat_key``: the chat id as the state's key (group chats' ids are negative)."""
    paired = state.telegram_chats.get(chat_key)
    if paired is None:
        raise CommandRejected("not_found", f"chat {chat_key} is not paired")
    return [(None, ev.TelegramChatRemoved(chat_id=paired.chat_id))]


@dataclass(frozen=True)
class Chosen:
    chat_id: int
    session_id: str


def session_chosen(state: State, c: Chosen, ctx: Context) -> Decided:
    if str(c.chat_id) not in state.telegram_chats or c.session_id not in state.sessions:
        return []
    return [(None, ev.TelegramSessionChosen(chat_id=c.chat_id, session_id=c.session_id))]


@dataclass(frozen=True)
class Sent:
    chat_id: int
    key: str
    message_id: int


def message_sent(state: State, s: Sent, ctx: Context) -> Decided:
    """A message about ``key`` (an approval, a question, an answer) went out: it is not sent
    again, and later edits of it use ``message_id``."""
    return [(None, ev.TelegramMessageSent(chat_id=s.chat_id, key=s.key,
                                          message_id=s.message_id))]


@dataclass(frozen=True)
class Handled:
    update_id: int
    bot_id: int


def update_handled(state: State, h: Handled, ctx: Context) -> Decided:
    """The next poll (and the next start) asks for what comes after this update."""
    return [(None, ev.TelegramUpdateHandled(update_id=h.update_id, bot_id=h.bot_id))]
