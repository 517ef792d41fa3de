"""Chat channels as a plugin: the Telegram bot's routes (``/api/telegram``, its webhook) and
events; the bot, which runs where its lease is held among replicas."""

from __future__ import annotations

from typing import Protocol

from codey_server.channels import fold
from codey_server.channels.routes import TelegramController
from codey_server.channels.telegram import TelegramChannel
from codey_server.channels.telegram_store import TelegramStore
from codey_server.core.engine import Engine
from codey_server.core.hosting import Hosting
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.settings import Settings

__all__ = ["PLUGIN"]


class _Stores(Protocol):
    @property
    def telegram(self) -> TelegramStore: ...


def _telegram(settings: Settings, engine: Engine, deployment: Hosting,
              stores: _Stores) -> TelegramChannel:
    return TelegramChannel(settings, engine, deployment.leases, store=stores.telegram)


PLUGIN = FeaturePlugin(
    "channels",
    routes=(TelegramController,),
    fold=fold.FOLD,
    parts=(Part("telegram", _telegram, start=TelegramChannel.start, stop=TelegramChannel.stop,
                intake=True),),
)
