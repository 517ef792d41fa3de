"""``web_search``'s I/O: a query to the search backend the server's settings name
(``web.search``), its results as title, URL and snippet.

Backends: ``searxng`` (a SearXNG instance's JSON API, ``GET {url}/search?q=…&format=json``;
the instance must have ``json`` among its ``search.formats``) and ``brave`` (the Brave Search
API, ``GET {url}/res/v1/web/search?q=…`` with the key in ``X-Subscription-Token``). The
backend is the operator's choice, not the model's, so its address is not held to the fetch's
address rules (a SearXNG on the same machine is the usual set-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_server.agent.web.addresses import FetchFailed, WebError

__all__ = ["MAX_RESULTS", "Hit", "SearchBackend", "search"]

MAX_RESULTS = 10
#: bytes of a backend's answer read, at most
MAX_ANSWER_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SearchBackend:
    """Where searches go: ``kind`` (``searxng``, ``brave``), the instance's or API's root
    URL, the key (Brave's), and the time a search may take."""

    kind: str
    url: str
    api_key: str | None = None
    timeout_s: float = 20.0


@dataclass(frozen=True, slots=True)
class Hit:
    title: str
    url: str
    snippet: str


async def search(query: str, backend: SearchBackend) -> list[Hit]:
    """The backend's first :data:`MAX_RESULTS` results for ``query``; raises
    :class:`~.addresses.WebError` with a message for the model."""
    import httpx

    root = backend.url.rstrip("/")
    headers = {"Accept": "application/json"}
    if backend.kind == "searxng":
        url, params = f"{root}/search", {"q": query, "format": "json"}
    elif backend.kind == "brave":
        if not backend.api_key:
            raise WebError("web search is not set up: the Brave Search API needs a key")
        url, params = f"{root}/res/v1/web/search", {"q": query, "count": str(MAX_RESULTS)}
        headers["X-Subscription-Token"] = backend.api_key
    else:
        raise WebError(f"web search is not set up (unknown backend {backend.kind!r})")
    try:
        async with httpx.AsyncClient(timeout=backend.timeout_s, follow_redirects=False,
                                     trust_env=False) as http, \
                http.stream("GET", url, params=params, headers=headers) as r:
            body = bytearray()
            async for chunk in r.aiter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise FetchFailed("the search backend answered too much")
            status = r.status_code
    except httpx.TimeoutException:
        raise FetchFailed("the search backend did not answer in time") from None
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as err:
        raise FetchFailed(f"could not reach the search backend ({type(err).__name__})") \
            from None
    if status != 200:
        raise FetchFailed(f"the search backend answered HTTP {status}")
    import json

    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise FetchFailed("the search backend did not answer with JSON") from None
    return _hits(data, backend.kind)[:MAX_RESULTS]


def _hits(data: Any, kind: str) -> list[Hit]:
    if not isinstance(data, dict):
        return []
    if kind == "brave":
        web = data.get("web")
        entries = web.get("results") if isinstance(web, dict) else None
        snippet_key = "description"
    else:
        entries = data.get("results")
        snippet_key = "content"
    hits: list[Hit] = []
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict) or not isinstance(e.get("url"), str):
            continue
        title, snippet = e.get("title"), e.get(snippet_key)
        hits.append(Hit(title if isinstance(title, str) else "", e["url"],
                        snippet if isinstance(snippet, str) else ""))
    return hits
