"""Who the client is when a reverse proxy stands between it and the server.

    trusted = parse_trusted_proxies(["127.0.0.1", "10.0.0.0/8"])   # ValueError if malformed
    client_address("10.0.0.5", ["203.0.113.7, 10.0.0.9"], trusted)  # → "203.0.113.7"

:func:`client_address` is pure: the TCP peer, the ``X-Forwarded-For`` header values in the
order they came, and the trusted networks in; the address that counts out. The header is
believed only when the peer is a trusted proxy, and then only from the right: each trusted
proxy appends the address it saw, so the right-most entry not itself a trusted proxy is the
first one no trusted party vouches for beyond — the client. Whatever the client wrote further
left is its own claim and is ignored, so a client cannot choose its own address by sending the
header. Only ``X-Forwarded-For`` is read (nginx's ``$proxy_add_x_forwarded_for`` and Caddy's
``reverse_proxy`` both set it); ``Forwarded`` and ``X-Real-IP`` are ignored, so a proxy that
sets only those counts as the client.

:class:`ClientAddressMiddleware` rewrites the ASGI scope's ``client`` with it, for HTTP and
WebSockets, before anything else reads it: every rate limit that counts a client address
(``request.client.host``) then counts the real one. uvicorn's own proxy-header handling is off
(``cli.py``), so this is the only place that trusts the header.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from litestar.middleware import DefineMiddleware

from codey_server.settings import Settings

__all__ = ["ClientAddressMiddleware", "IPNetwork", "client_address", "client_address_middleware",
           "parse_trusted_proxies"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: entries of the header looked at, from the right: a chain longer than this is not a chain
#: of proxies but a client padding the header to make the server work
_MAX_HOPS = 32


def parse_trusted_proxies(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """``["127.0.0.1", "10.0.0.0/8", "::1"]`` as networks (a bare address is one host).

    Raises ValueError naming the entry when one is not an address or a network, or has host
    bits set (``10.0.0.1/8`` is most likely a mistake for ``10.0.0.0/8`` or ``10.0.0.1``).
    """
    networks: list[IPNetwork] = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=True))
        except ValueError as err:
            raise ValueError(f"{entry!r} is not an IP address or network such as 10.0.0.0/8 "
                             f"({err})") from None
    return tuple(networks)


def _address(text: str) -> _IPAddress | None:
    """One entry of the header or a peer: ``1.2.3.4``, ``::1``, ``[::1]``, ``[::1]:80``,
    ``1.2.3.4:80``; an IPv4-mapped IPv6 address as its IPv4 one. None if it is none of these."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (end + 1 < len(text) and not text[end + 1:].startswith(":")):
            return None
        text = text[1:end]
    elif text.count(":") == 1:  # IPv4 with a port; a bare IPv6 has at least two colons
        text = text.partition(":")[0]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _trusted(addr: _IPAddress, trusted: Sequence[IPNetwork]) -> bool:
    return any(addr.version == net.version and addr in net for net in trusted)


def client_address(peer: str, forwarded_for: Sequence[str],
                   trusted: Sequence[IPNetwork]) -> str:
    """The client's address: ``peer`` unless it is a trusted proxy, else the right-most
    address of ``forwarded_for`` (every ``X-Forwarded-For`` header's value, in order) that is
    not a trusted proxy.

    When every address in the chain is trusted, the left-most of them (the client is itself
    on a trusted network). An entry that is not an address ends the walk: nothing left of it
    can be believed, so the address just right of it (or the peer) counts. Returned in
    canonical form (``::1``, IPv4 for IPv4-mapped IPv6); ``peer`` as given if it is no address.
    """
    peer_addr = _address(peer)
    if peer_addr is None or not trusted or not _trusted(peer_addr, trusted):
        return str(peer_addr) if peer_addr is not None else peer
    entries = [e for value in forwarded_for for e in value.split(",")]
    found = peer_addr
    for entry in reversed(entries[-_MAX_HOPS:]):
        addr = _address(entry)
        if addr is None:
            break
        found = addr
        if not _trusted(addr, trusted):
            break
    return str(found)


class ClientAddressMiddleware:
    """Raw ASGI: replaces ``scope["client"]`` by the client's address per
    :func:`client_address` (the port stays the peer's). Without trusted proxies it changes
    nothing."""

    def __init__(self, app: ASGIApp, trusted: Sequence[IPNetwork]) -> None:
        self.app = app
        self.trusted = tuple(trusted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if self.trusted and scope["type"] in ("http", "websocket") and client:
            values = [v.decode("latin-1") for k, v in scope.get("headers", ())
                      if k.lower() == b"x-forwarded-for"]
            host = client_address(str(client[0]), values, self.trusted)
            if host != client[0]:
                scope["client"] = (host, client[1])
        await self.app(scope, receive, send)


def client_address_middleware(settings: Settings) -> DefineMiddleware:
    """The middleware entry for ``Litestar(middleware=[...])``, first in the list
    (``settings.check()`` has validated ``trusted_proxies``)."""
    factory: Any = ClientAddressMiddleware  # raw ASGI, as access.py's
    return DefineMiddleware(factory, trusted=parse_trusted_proxies(settings.trusted_proxies))
