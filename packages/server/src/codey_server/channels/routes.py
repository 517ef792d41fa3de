"""``/api/telegram``: the Telegram channel's settings (token, pairing code, allow list) and the
webhook Telegram calls when the server has a public URL.

The webhook is the one route here without a login (``opt=PUBLIC``): Telegram proves itself
with the secret token it was given in ``setWebhook`` (checked in constant time by
:meth:`TelegramChannel.webhook`). The token is accepted here but never answered back.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from codey_server.channels.telegram import (
    TOKEN_PATTERN,
    PairingCode,
    TelegramChannel,
    TelegramStatus,
)
from codey_server.http.access import PUBLIC
from codey_server.http.errors import errors
from codey_server.http.fields import pattern
from codey_server.http.resource import Resource

__all__ = ["WEBHOOK_MAX_BYTES", "TelegramController", "TelegramToken"]

#: an update with a long message is a few KiB; refuse more before reading it
WEBHOOK_MAX_BYTES = 256 * 1024


class TelegramToken(msgspec.Struct, kw_only=True):
    """``PUT /api/telegram/token``: a bot token from @BotFather."""

    token: Annotated[str, msgspec.Meta(pattern=pattern(
        TOKEN_PATTERN, "that is not a bot token (123456:ABC…, from @BotFather)"))]


class Ok(msgspec.Struct, kw_only=True):
    ok: bool = True


class TelegramController(Resource):
    path = "/api/telegram"
    tags = ["telegram"]

    @get("", responses=errors())
    async def status(self, telegram: NamedDependency[TelegramChannel]) -> TelegramStatus:
        """Whether a token is set (and from where), the bot's state, the paired chats."""
        return await telegram.status()

    @put("/token", responses=errors(400, 409))
    async def set_token(self, data: JSONBody[TelegramToken],
                        telegram: NamedDependency[TelegramChannel]) -> TelegramStatus:
        """Store the token (``DATA_DIR/telegram.json``, 0600; among replicas a row sealed
        with the cluster's secret key) and (re)start the bot; 409 when the token comes from
        the environment, or among replicas when no secret key is set (``not_configured``)."""
        return await telegram.set_token(data.token)

    @delete("/token", status_code=200, responses=errors(409))
    async def clear_token(self, telegram: NamedDependency[TelegramChannel]) -> TelegramStatus:
        """Forget the stored token and stop the bot (among replicas: the replica running it
        stops it within about two seconds of this answer)."""
        return await telegram.clear_token()

    @post("/pairing-code", status_code=201, responses=errors())
    async def pairing_code(self, telegram: NamedDependency[TelegramChannel]) -> PairingCode:
        """A single-use code valid 10 minutes: ``/pair CODE`` in a chat adds that chat."""
        return await telegram.new_pairing_code()

    @delete("/chats/{chat_id:str}", status_code=200, responses=errors(404))
    async def remove_chat(self, chat_id: FromPath[str],
                          telegram: NamedDependency[TelegramChannel]) -> Ok:
        """Take a chat off the allow list: it gets no answers from then on."""
        await telegram.remove_chat(chat_id)
        return Ok()

    @post("/webhook", status_code=200, opt=PUBLIC, request_max_body_size=WEBHOOK_MAX_BYTES,
          responses=errors(400, 403, 409, 413, login=False))
    async def webhook(self, request: Request[Any, Any, Any],
                      telegram: NamedDependency[TelegramChannel]) -> Ok:
        """Called by Telegram with one update, carrying ``X-Telegram-Bot-Api-Secret-Token``."""
        secret = request.headers.get("x-telegram-bot-api-secret-token", "")
        await telegram.webhook(await request.body(), secret)
        return Ok()
