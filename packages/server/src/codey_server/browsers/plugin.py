"""The browsers as a plugin: their sockets (``/ws/client``) and ``/api/logout``; the hub of
open browser sockets, told first at shutdown and closed with their login."""

from __future__ import annotations

from codey_server.browsers.routes import client_socket, logout
from codey_server.browsers.sockets import ClientHub
from codey_server.core.tails import ProcessTails
from codey_server.http.plugin import FeaturePlugin, Part

__all__ = ["PLUGIN"]


def _clients(tails: ProcessTails) -> ClientHub:
    return ClientHub(tails)


PLUGIN = FeaturePlugin(
    "browsers",
    routes=(logout, client_socket),
    parts=(Part("clients", _clients, stop=ClientHub.begin_shutdown, intake=True,
                on_logout=ClientHub.close_session),),
)
