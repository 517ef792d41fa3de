"""Settings → Tools as the user edits it: the web tools' settings kept by the server in
``DATA_DIR/web_tools.json`` (0600: it may hold the Brave Search API key), over the
``web`` section of its config.json. Its Brave key is never sent back to a browser: only
whether one is kept.

Checking what the user sent (:func:`check`) and what the tools then run with
(:func:`effective`) are pure; :func:`load` and :func:`save` read and write the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import msgspec

from codey_server.agent.web.addresses import allowed_networks
from codey_server.secretfile import read_secret_file, write_secret_file
from codey_server.settings import SearchConfig, WebConfig

__all__ = ["FILE_NAME", "StoredWeb", "check", "domain_allowed", "effective", "load", "save"]

FILE_NAME = "web_tools.json"
#: the most entries a list may have
MAX_ENTRIES = 200
#: a domain name (``docs.python.org``, ``*.example.org``), any case
DOMAIN = (r"^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
          r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
#: an IPv4 network (``10.1.0.0/16``) or what looks like an IPv6 one (parsed after)
NETWORK = (r"^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
           r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(/(3[0-2]|[12]?[0-9]))?$"
           r"|^[0-9A-Fa-f:]*:[0-9A-Fa-f:]*(/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))?$")
#: an API key: printable ASCII, no space
API_KEY = r"^[!-~]*$"
_DOMAIN = re.compile(DOMAIN)


class StoredWeb(msgspec.Struct, kw_only=True):
    """What Settings → Tools set. ``fetch_domains``: hosts a fetch reaches without asking
    (``example.org`` and its subdomains). ``search_key``: the Brave Search API key ("":
    none kept; the config's ``api_key_env`` then)."""

    fetch_allow: list[str] = msgspec.field(default_factory=list)
    fetch_domains: list[str] = msgspec.field(default_factory=list)
    search_kind: Literal["none", "searxng", "brave"] = "none"
    search_url: str = ""
    search_key: str = ""

    def __repr__(self) -> str:  # never let a stray log line print the key
        return (f"StoredWeb(search_kind={self.search_kind!r}, search_url={self.search_url!r}, "
                f"key={'set' if self.search_key else 'none'})")


def check(stored: StoredWeb) -> str | None:
    """Why ``stored`` cannot be saved (for the user), or None."""
    if len(stored.fetch_allow) > MAX_ENTRIES or len(stored.fetch_domains) > MAX_ENTRIES:
        return f"at most {MAX_ENTRIES} networks and {MAX_ENTRIES} domains"
    try:
        allowed_networks(stored.fetch_allow)
    except ValueError as err:
        return f"not a network (such as 10.1.0.0/16): {err}"
    for domain in stored.fetch_domains:
        if len(domain) > 253 or not _DOMAIN.match(domain):
            return f"not a domain name (such as docs.python.org): {domain!r}"
    url = stored.search_url
    if url and not re.match(r"^https?://[^\s/]+", url):
        return "the search backend's URL must be an http:// or https:// URL"
    if not re.fullmatch(API_KEY, stored.search_key) or len(stored.search_key) > 500:
        return "that does not look like an API key"
    return None


def effective(config: WebConfig, stored: StoredWeb | None) -> tuple[WebConfig, str | None]:
    """The web tools' settings: Settings → Tools' when it set them, else the config's; and
    the search key kept there (None: the config's ``api_key_env`` is read)."""
    if stored is None:
        return config, None
    # a SearXNG instance not named yet: not set up (web_search says so)
    kind = "none" if stored.search_kind == "searxng" and not stored.search_url \
        else stored.search_kind
    search = SearchConfig(kind=kind, url=stored.search_url,
                          api_key_env=config.search.api_key_env,
                          timeout_s=config.search.timeout_s)
    return (msgspec.structs.replace(config, fetch_allow=list(stored.fetch_allow),
                                    search=search),
            stored.search_key or None)


def domain_allowed(domains: tuple[str, ...] | list[str], host: str) -> bool:
    """Whether a fetch of ``host`` goes without asking: it is a listed domain or under one
    (``*.example.org`` is read as ``example.org``)."""
    host = host.lower().rstrip(".")
    for domain in domains:
        bare = domain.removeprefix("*.")
        if host == bare or host.endswith("." + bare):
            return True
    return False


def load(data_dir: Path) -> StoredWeb | None:
    """What Settings → Tools saved (None: nothing, or a file that does not read)."""
    raw = read_secret_file(data_dir / FILE_NAME)
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=StoredWeb)
    except msgspec.DecodeError:
        return None


def save(data_dir: Path, stored: StoredWeb) -> None:
    write_secret_file(data_dir / FILE_NAME, msgspec.json.encode(stored))
