"""``web_fetch``'s I/O: one page, under the rules of :mod:`.addresses`, capped in size and
time, HTML turned into Markdown.

Order of a fetch (:func:`fetch`): read the URL (:func:`~.addresses.target_of`); resolve its
host; refuse if ANY address it resolves to is refused (:func:`~.addresses.address_problem`);
connect to the first address itself (the URL's host goes in ``Host`` and in TLS's SNI, whose
certificate is checked against it), so what was checked is what is reached; follow a redirect
by the same steps, at most :data:`MAX_REDIRECTS` times. The whole fetch, redirects included,
has ``timeout_s`` (a server that sends its body a byte at a time is cut there), and at most
``max_bytes`` of a body are read (the rest is dropped, and the result says so). No proxy from
the environment is used: it would resolve the name itself.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urljoin

from codey_server.agent.web.addresses import (
    FetchFailed,
    IPNetwork,
    Refused,
    Target,
    address_problem,
    target_of,
)

__all__ = [
    "MAX_REDIRECTS",
    "FetchLimits",
    "Fetched",
    "Resolver",
    "fetch",
    "html_to_markdown",
    "resolve_host",
    "to_text",
]

MAX_REDIRECTS = 5
_REDIRECTS = {301, 302, 303, 307, 308}
#: what a fetch says it is (some sites refuse a client without a name)
USER_AGENT = "Codey-web_fetch/1 (+https://github.com/codey-dev/codey)"

#: resolve a host and port to IP addresses (the tests' own, to model a name)
Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """What a fetch may reach and read."""

    #: networks let through although private (the settings' ``web.fetch_allow``)
    allowed: Sequence[IPNetwork] = ()
    #: bytes of a body read, at most
    max_bytes: int = 2 * 1024 * 1024
    #: seconds for the whole fetch, redirects included
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched page: where it ended up, its status and type, its bytes (cut at the cap:
    ``truncated``), and the redirects followed on the way."""

    url: str
    status: int
    content_type: str
    body: bytes
    truncated: bool
    redirects: tuple[str, ...] = ()


async def resolve_host(host: str, port: int) -> list[str]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                             type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise FetchFailed(f"could not resolve {host} ({err})") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def fetch(url: str, limits: FetchLimits = FetchLimits(), *,
                resolve: Resolver = resolve_host) -> Fetched:
    """Fetch ``url`` (GET) as the module's docstring says. Raises
    :class:`~.addresses.Refused` or :class:`~.addresses.FetchFailed`, whose messages are for
    the model."""
    try:
        async with asyncio.timeout(limits.timeout_s):
            return await _follow(url, limits, resolve)
    except TimeoutError:
        raise FetchFailed(f"the fetch took more than {limits.timeout_s:.0f} s and was "
                          "stopped") from None


async def _follow(url: str, limits: FetchLimits, resolve: Resolver) -> Fetched:
    import httpx  # only when a fetch is made

    redirects: list[str] = []
    async with httpx.AsyncClient(trust_env=False, follow_redirects=False,
                                 timeout=limits.timeout_s) as http:
        while True:
            target = target_of(url)
            address = await _checked_address(target, limits, resolve)
            fetched, location = await _one(http, target, address, limits)
            if location is None:
                return Fetched(fetched.url, fetched.status, fetched.content_type, fetched.body,
                               fetched.truncated, tuple(redirects))
            if len(redirects) >= MAX_REDIRECTS:
                raise Refused(f"refused: more than {MAX_REDIRECTS} redirects (the last to "
                              f"{location})")
            redirects.append(url)
            url = urljoin(url, location)


async def _checked_address(target: Target, limits: FetchLimits, resolve: Resolver) -> str:
    addresses = await resolve(target.host, target.port)
    if not addresses:
        raise FetchFailed(f"{target.host} resolves to no address")
    for address in addresses:
        why = address_problem(address, limits.allowed)
        if why is not None:
            shown = target.host if target.host == address else f"{target.host} ({address})"
            raise Refused(f"refused: {shown} is {why}; the server does not fetch from its "
                          "own networks unless its settings allow it (web.fetch_allow)")
    return addresses[0]


async def _one(http: object, target: Target, address: str,
               limits: FetchLimits) -> tuple[Fetched, str | None]:
    import httpx

    assert isinstance(http, httpx.AsyncClient)
    literal = f"[{address}]" if ":" in address else address
    default = 443 if target.scheme == "https" else 80
    host_header = target.host if target.port == default else f"{target.host}:{target.port}"
    if ":" in target.host and target.port == default:
        host_header = f"[{target.host}]"
    elif ":" in target.host:
        host_header = f"[{target.host}]:{target.port}"
    request = http.build_request(
        "GET", f"{target.scheme}://{literal}:{target.port}{target.path}",
        headers={"Host": host_header, "User-Agent": USER_AGENT,
                 "Accept": "text/html,text/plain,application/json;q=0.9,*/*;q=0.5"},
        extensions={"sni_hostname": target.host})
    body = bytearray()
    truncated = False
    try:
        response = await http.send(request, stream=True)
        try:
            status = response.status_code
            if status in _REDIRECTS and response.headers.get("location"):
                return Fetched(target.url, status, "", b"", False), response.headers["location"]
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limits.max_bytes:
                    del body[limits.max_bytes:]
                    truncated = True
                    break
            content_type = response.headers.get("content-type", "")
        finally:
            await response.aclose()
    except httpx.TimeoutException:
        raise FetchFailed(f"{target.url} did not answer in time") from None
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as err:
        raise FetchFailed(f"could not fetch {target.url} ({type(err).__name__})") from None
    return Fetched(target.url, status, content_type, bytes(body), truncated), None


_CHARSET = re.compile(r"charset=[\"']?([\w.:-]+)", re.I)


def to_text(fetched: Fetched) -> str:
    """The page as text for the model: HTML as Markdown (scripts and styles dropped), any
    other text as it is, anything else described, not shown."""
    ctype = fetched.content_type.split(";", 1)[0].strip().lower()
    match = _CHARSET.search(fetched.content_type)
    charset = match.group(1) if match else "utf-8"
    textual = (not ctype or ctype.startswith("text/") or ctype.endswith(("+json", "+xml"))
               or ctype in ("application/json", "application/xml", "application/javascript"))
    if not textual:
        return f"({ctype} content, {len(fetched.body)} bytes, not shown)"
    try:
        text = fetched.body.decode(charset, errors="replace")
    except LookupError:
        text = fetched.body.decode("utf-8", errors="replace")
    if ctype in ("text/html", "application/xhtml+xml") or (
            not ctype and text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))):
        return html_to_markdown(text)
    return text


def html_to_markdown(html: str) -> str:
    """``html`` as Markdown (markdownify), without scripts, styles and runs of blank lines."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(html, "html.parser")
    # not only their tags: markdownify would keep a script's or a style's text
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        tag.decompose()
    text = MarkdownConverter(heading_style="ATX", strip=["img"]).convert_soup(soup)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()
