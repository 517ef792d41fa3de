"""``web_fetch`` and ``web_search``: the web, read by the server (the worker's sandbox keeps
the network off). The requests themselves are made by the turn's driver
(:mod:`codey_server.agent.web`); these tools parse, gate and show the calls.

A fetch sends data out — the URL itself can carry a secret the model read — so it asks under
``suggest`` and ``auto-edit`` unless its host is on the session's allow list ("Approve for
session" puts it there: the approval's ``command`` is :data:`FETCH_MARK` and the host, which
the session then keeps among its approved prefixes) or under a domain of Settings → Tools'
list; under ``full-auto`` it goes, as any call does. A URL naming a private address is
refused before anyone is asked. A search sends only the query to the backend the operator
chose: it asks as a fetch does, keyed on the backend rather than a host.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    Ask,
    BadToolCall,
    Display,
    ForWeb,
    Gate,
    ServerCall,
    ServerTool,
    Waiting,
    obj,
    string,
)
from codey_server.agent.web.addresses import (
    Refused,
    address_problem,
    allowed_networks,
    target_of,
)
from codey_server.agent.web.stored import domain_allowed

__all__ = ["FETCH_MARK", "SEARCH_MARK", "WEB_FETCH", "WEB_SEARCH", "FetchArgs", "SearchArgs"]

#: the first word of a fetch's approved prefix: a NUL cannot be in a program's argv, so no
#: command the model runs can ever start with an approval given to a fetch
FETCH_MARK = "\0web_fetch"
SEARCH_MARK = "\0web_search"


@dataclass(frozen=True, slots=True)
class FetchArgs:
    url: str
    host: str
    prompt: str


@dataclass(frozen=True, slots=True)
class SearchArgs:
    query: str


def _allowed(gate: Gate, mark: str, key: str) -> bool:
    return any(list(p) == [mark, key] for p in gate.approved_prefixes)


class WebFetch(ServerTool[FetchArgs]):
    name = "web_fetch"
    guide = ("`web_fetch` reads a web page (documentation, an issue, a changelog) as "
             "Markdown; never put a secret in its URL.")
    display = Display("Fetch", "globe", "file", busy="fetching a page")
    description = ("Fetch a web page over http(s) and read it as Markdown (HTML converted; "
                   "other text as it is). The server fetches it, not the user's machine: "
                   "addresses of the server's own networks are refused, pages are cut at a "
                   "size cap. The user may be asked first. `prompt`: what you want from the "
                   "page (the page is returned whole; read it for that).")
    parameters = obj({"url": {"type": "string", "description": "http:// or https:// URL"},
                      "prompt": {"type": "string",
                                 "description": "what to look for in the page"}}, ["url"])

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> FetchArgs:
        url = (string(args, "url") or "").strip()
        prompt = string(args, "prompt", required=False) or ""
        if len(url) > 4000:
            raise BadToolCall("the URL is longer than 4000 characters")
        try:
            target = target_of(url)
        except Refused as err:
            raise BadToolCall(str(err)) from None
        return FetchArgs(url, target.host, prompt[:2000])

    def refuses(self, args: FetchArgs, gate: Gate) -> str | None:
        """A URL that names an address the fetch would refuse (loopback, private, metadata,
        …) is refused now, before the user is asked to approve a fetch that cannot
        happen. A name is judged by what it resolves to, when fetched."""
        host = args.host.strip("[]")
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return None
        try:
            allowed = allowed_networks(gate.fetch_allow)
        except ValueError:
            allowed = []
        problem = address_problem(host, allowed)
        if problem is None:
            return None
        return (f"refused: {args.host} is {problem}; the server does not fetch from its own "
                "networks (its operator can allow a network there: web.fetch_allow)")

    def ask(self, args: FetchArgs, gate: Gate) -> Ask | None:
        if gate.policy == "full-auto" or _allowed(gate, FETCH_MARK, args.host) \
                or domain_allowed(gate.fetch_domains, args.host):
            return None
        return Ask("web", command=[FETCH_MARK, args.host], path=args.url,
                   reason=f"the server fetches {args.host}; \"Approve for session\" allows "
                          "that host for the rest of the session")

    def shows(self, args: FetchArgs) -> dict[str, Any]:
        return {"path": args.url}

    def start(self, args: FetchArgs, call: ServerCall) -> Waiting:
        return Waiting(ForWeb("fetch", args.url, args.prompt))


class WebSearch(ServerTool[SearchArgs]):
    name = "web_search"
    guide = "`web_search` finds pages on the web (then `web_fetch` reads one)."
    display = Display("Search the web", "globe", "file", busy="searching the web")
    description = ("Search the web: the first results as title, URL and snippet. The "
                   "server's search backend answers; the user may be asked first.")
    parameters = obj({"query": {"type": "string"}}, ["query"])

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> SearchArgs:
        query = " ".join((string(args, "query") or "").split())
        if not query or len(query) > 500:
            raise BadToolCall("`query` must be 1 to 500 characters")
        return SearchArgs(query)

    def ask(self, args: SearchArgs, gate: Gate) -> Ask | None:
        if gate.policy == "full-auto" or _allowed(gate, SEARCH_MARK, "search"):
            return None
        return Ask("web", command=[SEARCH_MARK, "search"], path=args.query,
                   reason="the query goes to the server's search backend; \"Approve for "
                          "session\" allows searches for the rest of the session")

    def start(self, args: SearchArgs, call: ServerCall) -> Waiting:
        return Waiting(ForWeb("search", args.query))


WEB_FETCH = WebFetch()
WEB_SEARCH = WebSearch()
