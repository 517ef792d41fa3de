"""``/api/about``: which release the server is, and the formats it speaks (Settings → About
shows them)."""

from __future__ import annotations

import msgspec
from litestar import get

from codey_protocol.version import __version__
from codey_protocol.worker import PROTOCOL_VERSION
from codey_server.http.errors import errors
from codey_server.http.resource import Resource
from codey_server.upgrades.plan import FORMAT

__all__ = ["About", "AboutController"]


class About(msgspec.Struct, kw_only=True):
    #: the release of the server (every Codey package has the same version)
    version: str
    #: the format of the data it writes (docs/CHANGELOG.md)
    data_format: int
    #: the version of the protocol its workers speak
    protocol_version: int


class AboutController(Resource):
    path = "/api"
    tags = ["server"]

    @get("/about", sync_to_thread=False, responses=errors())
    def about(self) -> About:
        """The server's release, the format of its data and its workers' protocol."""
        return About(version=__version__, data_format=FORMAT, protocol_version=PROTOCOL_VERSION)
