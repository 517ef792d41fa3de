"""stdlib HTTP adapter: a `ThreadingHTTPServer` that only moves bytes to `OIDCProvider`.

Call `create_server(settings)`; it binds (port 0 picks a free port), builds the provider
with the bound URL as issuer, and returns the server. Then `serve_forever()` /
`shutdown()` as with any `socketserver` server (see `ProviderHTTPServer`).
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx

from .app import OIDCProvider
from .messages import HttpRequest, HttpResponse
from .settings import ProviderSettings

__all__ = ["MAX_BODY_BYTES", "ProviderHTTPServer", "create_server"]

#: Request bodies above this size are refused with 413.
MAX_BODY_BYTES = 1 << 20


class ProviderHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server holding its `provider` and `issuer` (http://host:port)."""

    daemon_threads = True
    provider: OIDCProvider
    issuer: str
    verbose: bool


class _Handler(BaseHTTPRequestHandler):
    server: ProviderHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "codey-oidc-provider"

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(HttpResponse.json_body(413, {"error": "request body too large"}))
            return
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        issuer = self.server.issuer
        request = HttpRequest(
            method=self.command,
            path=parts.path,
            url=issuer + self.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers=httpx.Headers(list(self.headers.items())),
            body=body,
        )
        try:
            response = self.server.provider.handle(request)
        except Exception as exc:  # a test server should answer, not hang, on its own bugs
            print(f"codey-oidc-provider: error in {self.command} {parts.path}: {exc!r}",
                  file=sys.stderr, flush=True)
            response = HttpResponse.json_body(500, {"error": "server_error"})
        self._send(response)

    def _send(self, response: HttpResponse) -> None:
        self.send_response(response.status)
        for name, value in response.headers:
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: object) -> None:
        if self.server.verbose:
            sys.stderr.write(f"codey-oidc-provider: {format % args}\n")


def create_server(settings: ProviderSettings) -> ProviderHTTPServer:
    """Bind `settings.host:settings.port` and build the provider for the bound address."""
    server = ProviderHTTPServer((settings.host, settings.port), _Handler)
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    server.issuer = f"http://{host}:{server.server_port}"
    server.provider = OIDCProvider(settings, server.issuer)
    server.verbose = settings.verbose
    return server
