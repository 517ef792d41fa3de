"""The web tools as the turn's driver runs them: a ``WebCall`` effect in, the call's status
and the text the model reads out (:meth:`WebTools.run`). Every failure is a result the model
sees ("refused: …", "error: …"), never a raise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from codey_server.agent.web.addresses import Refused, WebError, allowed_networks
from codey_server.agent.web.fetch import (
    Fetched,
    FetchLimits,
    Resolver,
    fetch,
    resolve_host,
    to_text,
)
from codey_server.agent.web.search import SearchBackend, search
from codey_server.settings import WebConfig

__all__ = ["BRAVE_API", "WebTools"]

#: the Brave Search API's root, when the settings name none
BRAVE_API = "https://api.search.brave.com"
#: characters of a page's text given back (the turn caps every result again, head and tail)
TEXT_CAP = 100_000


@dataclass
class WebTools:
    """What ``web_fetch`` may reach and read, and ``web_search``'s backend (None: not set
    up)."""

    limits: FetchLimits = field(default_factory=FetchLimits)
    backend: SearchBackend | None = None
    resolve: Resolver = resolve_host

    @classmethod
    def of(cls, config: WebConfig, key: str | None = None) -> WebTools:
        """From the settings' ``web`` section: the search key ``key`` (Settings → Tools'),
        else read from its environment variable now."""
        s = config.search
        backend = None
        if s.kind != "none":
            if key is None:
                key = os.environ.get(s.api_key_env) if s.api_key_env else None
            backend = SearchBackend(s.kind, s.url or (BRAVE_API if s.kind == "brave" else ""),
                                    key, s.timeout_s)
        return cls(FetchLimits(allowed_networks(config.fetch_allow), config.fetch_max_bytes,
                               config.fetch_timeout_s), backend)

    async def run(self, kind: str, target: str, prompt: str = "") -> tuple[str, str]:
        """``(status, text)`` of a ``web_fetch`` (``target``: the URL) or ``web_search``
        (``target``: the query)."""
        try:
            if kind == "fetch":
                return "done", self._page(await fetch(target, self.limits,
                                                      resolve=self.resolve), prompt)
            return "done", await self._search(target)
        except Refused as err:
            return "rejected", str(err)
        except WebError as err:
            return "failed", f"error: {err}"

    def _page(self, page: Fetched, prompt: str) -> str:
        head = [f"Fetched {page.url} (HTTP {page.status}"
                f"{', ' + page.content_type.split(';')[0] if page.content_type else ''}, "
                f"{len(page.body)} bytes{', cut at the size cap' if page.truncated else ''})"]
        if page.redirects:
            head.append("Redirected from: " + " → ".join(page.redirects))
        if prompt:
            head.append(f"You asked: {prompt} — the page follows whole; answer that from it.")
        text = to_text(page)
        if len(text) > TEXT_CAP:
            text = text[:TEXT_CAP] + f"\n… [{len(text) - TEXT_CAP} characters cut]"
        return "\n".join(head) + "\n\n" + text

    async def _search(self, query: str) -> str:
        if self.backend is None:
            raise WebError("web search is not set up on this server (its settings' "
                           "web.search: a SearXNG instance or the Brave Search API)")
        hits = await search(query, self.backend)
        if not hits:
            return f"No results for {query!r}."
        lines = [f"Results for {query!r}:"]
        for n, hit in enumerate(hits, 1):
            lines.append(f"{n}. {hit.title or hit.url}\n   {hit.url}"
                         + (f"\n   {hit.snippet}" if hit.snippet else ""))
        return "\n".join(lines)
