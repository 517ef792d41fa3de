"""``codey-search-service``: the web as the web tools' tests need it — a search backend that
answers like a SearXNG instance and like the Brave Search API, and pages to fetch, among them
hostile ones.

    codey-search-service --host 127.0.0.2 --port 0 --brave-key KEY
    # prints: codey-search-service listening on http://127.0.0.2:PORT

What it answers:

* ``GET /search?q=…&format=json``: SearXNG's JSON API (``{"query", "number_of_results",
  "results": [{"title", "url", "content", "engine"}]}``); another format is 403, as an instance
  without ``json`` in its ``search.formats`` answers.
* ``GET /res/v1/web/search?q=…``: Brave's (``{"type": "search", "web": {"results": [{"title",
  "url", "description"}]}}``); without the right ``X-Subscription-Token`` 401.
* ``GET /page``: an HTML page (a heading, a paragraph with a link, a script and a style);
  ``/text``: plain text.
* ``GET /redirect?to=URL``: a 302 to ``URL``; ``/loop``: a 302 to itself.
* ``GET /huge``: an endless body (until the client goes); ``/slow``: a byte every half
  second, for ever (a slow-loris body).
* ``GET /_queries``: every search received, oldest first (``{"api", "q", "token"}``).

Each result of a search for ``Q`` is ``Result N for Q`` at ``https://example.org/Q/N``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from codey_testkit.procs import serve_http

__all__ = ["PAGE_HTML", "SearchServiceHandle", "main"]

PAGE_HTML = ("<!doctype html><html><head><title>Test page</title><style>body{color:red}</style>"
             "<script>var secret = 'script text';</script></head><body><h1>Codey test page</h1>"
             "<p>Hello from the <a href=\"https://example.org/docs\">docs</a>.</p>"
             "</body></html>")


def _handler(brave_key: str, queries: list[dict[str, Any]],
             lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

        def _send(self, status: int, body: bytes, ctype: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Any) -> None:
            self._send(status, json.dumps(data).encode())

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            path = parts.path
            if path == "/search":
                with lock:
                    queries.append({"api": "searxng", "q": query.get("q", ""), "token": ""})
                if query.get("format") != "json":
                    self._send(403, b"Forbidden", "text/plain")
                    return
                q = query.get("q", "")
                self._json(200, {"query": q, "number_of_results": 3, "results": [
                    {"title": f"Result {n} for {q}", "url": f"https://example.org/{q}/{n}",
                     "content": f"Snippet {n} about {q}.", "engine": "test"}
                    for n in (1, 2, 3)]})
            elif path == "/res/v1/web/search":
                token = self.headers.get("X-Subscription-Token", "")
                with lock:
                    queries.append({"api": "brave", "q": query.get("q", ""), "token": token})
                if token != brave_key:
                    self._json(401, {"type": "ErrorResponse", "error": {
                        "code": "SUBSCRIPTION_TOKEN_INVALID", "status": 401}})
                    return
                q = query.get("q", "")
                self._json(200, {"type": "search", "web": {"type": "search", "results": [
                    {"title": f"Result {n} for {q}", "url": f"https://example.org/{q}/{n}",
                     "description": f"Snippet {n} about {q}."} for n in (1, 2)]}})
            elif path == "/_queries":
                with lock:
                    self._json(200, {"queries": list(queries)})
            elif path == "/page":
                self._send(200, PAGE_HTML.encode(), "text/html; charset=utf-8")
            elif path == "/text":
                self._send(200, b"plain text here\n", "text/plain")
            elif path == "/redirect":
                self._send(302, b"", "text/plain", {"Location": query.get("to", "/")})
            elif path == "/loop":
                self._send(302, b"", "text/plain", {"Location": "/loop"})
            elif path == "/huge":
                self._endless(b"A" * 65536, 0.0)
            elif path == "/slow":
                self._endless(b"x", 0.5)
            else:
                self._send(404, b"not found", "text/plain")

        def _endless(self, chunk: bytes, pause: float) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.close_connection = True
            try:
                while True:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    if pause:
                        time.sleep(pause)
            except OSError:
                return  # the client went

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Run the service until killed. Example: ``codey-search-service --port 0``."""
    parser = argparse.ArgumentParser(prog="codey-search-service", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--brave-key", default="brave-test-key",
                        help="the X-Subscription-Token the Brave API answers")
    args = parser.parse_args(argv)
    queries: list[dict[str, Any]] = []
    serve_http("codey-search-service", args.host, args.port,
               _handler(args.brave_key, queries, threading.Lock()))


if __name__ == "__main__":
    main()


class SearchServiceHandle:
    """A running ``codey-search-service`` for tests; leaving the ``with`` block stops it."""

    def __init__(self, log_dir: Any, *, host: str = "127.0.0.1",
                 brave_key: str = "brave-test-key") -> None:
        from codey_testkit.procs import ManagedProcess

        self.brave_key = brave_key
        self.process = ManagedProcess("search-service", log_dir=log_dir)
        self.process.start([sys.executable, "-m", "codey_testkit.search_service", "--host",
                            host, "--port", "0", "--brave-key", brave_key])
        self.url = self.process.wait_for_line(
            r"codey-search-service listening on (http://\S+)", timeout=30).group(1)

    def queries(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/_queries", timeout=10) as reply:
            got: list[dict[str, Any]] = json.loads(reply.read())["queries"]
            return got

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> SearchServiceHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
