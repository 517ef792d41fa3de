"""Which URLs and addresses ``web_fetch`` may reach: pure rules, no I/O.

A fetch is asked for by the model, which may be prompt-injected: it must not make the server
read its own API (``http://127.0.0.1:<port>/api/…``), a cloud's metadata service
(``169.254.169.254``, ``fd00:ec2::254``) or anything else on the server's own networks. So:

- the URL is ``http`` or ``https`` with a host and no user part (:func:`target_of`);
- every address the host resolves to is checked (:func:`address_problem`), after unwrapping
  the IPv4 inside an IPv4-mapped, NAT64 or 6to4 IPv6 address; a host written as a decimal,
  octal or hex number (``2130706433``, ``0177.0.0.1``) is resolved like any name, so its
  address is what is judged, never its spelling;
- the fetch then connects to exactly the address that was checked (:mod:`.fetch`), so a name
  that resolves elsewhere a second time (DNS rebinding) changes nothing;
- a redirect's target goes through the same rules (:mod:`.fetch`).

Networks the server's operator lets through anyway (an intranet wiki) are listed in the
settings (``web.fetch_allow``, networks such as ``10.1.0.0/16``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from codey_server.errors import ServerError

__all__ = ["FetchFailed", "Refused", "Target", "WebError", "address_problem", "allowed_networks",
           "target_of"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: the cloud metadata services' addresses, named as such in a refusal
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class WebError(ServerError):
    """A web tool could not do what the model asked; the message is for the model."""


class Refused(WebError):
    """A rule refused the fetch (scheme, address, redirects)."""


class FetchFailed(WebError):
    """The remote did not answer (in time, at all, or as HTTP)."""


@dataclass(frozen=True, slots=True)
class Target:
    """A URL as it will be fetched: its scheme, host (lower case, IDNA), port and the path
    with its query."""

    url: str
    scheme: str
    host: str
    port: int
    path: str


def target_of(url: str) -> Target:
    """``url`` read as a fetch's target; raises :class:`Refused` saying why it cannot be."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise Refused("refused: the URL has spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise Refused(f"refused: not a URL ({err})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused(f"refused: only http:// and https:// URLs are fetched, not "
                      f"{scheme or 'this'}:")
    if "\\" in url:
        raise Refused("refused: a backslash in a URL is read two ways")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise Refused("refused: a URL with a user name or password is not fetched")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise Refused("refused: the URL has no host")
    try:
        host = host.encode("idna").decode("ascii").lower() if not _is_ip(host) else host
    except UnicodeError:
        raise Refused("refused: the host name is not a valid name") from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(url, scheme, host, port or (443 if scheme == "https" else 80), path)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def allowed_networks(entries: Sequence[str]) -> list[IPNetwork]:
    """The settings' ``fetch_allow`` entries as networks; raises ValueError on a bad one."""
    return [ipaddress.ip_network(e.strip(), strict=False) for e in entries]


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def address_problem(address: str, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why ``address`` (a resolved IP, as text) may not be fetched from, in a few words
    (``loopback``, ``cloud metadata``, …), or None: it is public, or in ``allowed``."""
    try:
        ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    # an IPv4 address carried in IPv6 (mapped, NAT64, 6to4, Teredo) is reached as that IPv4
    # address: it is the one judged (the wrapper's own range says nothing about it)
    inner = _embedded_v4(ip)
    checked: IPAddress = ip if inner is None else inner
    if any(checked.version == n.version and checked in n for n in allowed):
        return None
    return _why(checked)


def _why(ip: IPAddress) -> str | None:
    if ip in _METADATA:
        return "a cloud metadata address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "a carrier-grade NAT address"
    if ip.is_private:
        return "a private address"
    if ip.is_reserved or not ip.is_global:
        return "a reserved address"
    return None
