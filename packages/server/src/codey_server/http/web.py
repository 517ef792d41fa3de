"""The static browser client at ``/`` and its icon at ``/favicon.ico``; both ``PUBLIC``
(they hold no secrets)."""

from __future__ import annotations

from pathlib import Path

from litestar import get
from litestar.config.app import AppConfig
from litestar.plugins import InitPlugin
from litestar.response import File
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

from codey_server.http.access import PUBLIC
from codey_server.settings import Settings

__all__ = ["WebClient", "web_dir", "web_routes"]

FAVICON = "favicon.svg"


def web_dir(settings: Settings) -> Path:
    """``settings.web_dir``, else the ``web/`` shipped in the wheel, else the repository's."""
    if settings.web_dir is not None:
        return settings.web_dir
    packaged = Path(__file__).resolve().parents[1] / "web"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[5] / "web"


def web_routes(settings: Settings) -> list[ControllerRouterHandler]:
    """The static files router and the favicon handler."""
    root = web_dir(settings)

    # browsers ask for /favicon.ico on their own; the page itself links favicon.svg
    @get("/favicon.ico", sync_to_thread=False, include_in_schema=False, opt=PUBLIC)
    def favicon() -> File:
        return File(root / FAVICON, media_type="image/svg+xml", content_disposition_type="inline")

    return [favicon, create_static_files_router(path="/", directories=[root], html_mode=True,
                                                include_in_schema=False, opt=PUBLIC)]


class WebClient(InitPlugin):
    """Adds :func:`web_routes`; listed after every feature plugin, so the static files router,
    which answers every other path, comes last."""

    __slots__ = ("settings",)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.route_handlers.extend(web_routes(self.settings))
        return app_config
