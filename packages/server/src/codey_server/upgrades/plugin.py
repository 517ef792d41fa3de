"""Upgrades as a plugin: ``/api/about`` (the version), the notice's dismissal command, and its
fold (the one-time notice of what an upgrade changed). The format check and the migrations run
before the server starts (``startup.py``), not as a part."""

from __future__ import annotations

from codey_server.http.plugin import FeaturePlugin
from codey_server.upgrades import decide, fold
from codey_server.upgrades.routes import AboutController

__all__ = ["PLUGIN"]

PLUGIN = FeaturePlugin("upgrades", routes=(AboutController,), commands=decide.COMMANDS,
                       fold=fold.FOLD)
