"""Plain HTTP request/response values passed between the HTTP adapter and the provider.

The provider core (`OIDCProvider.handle`) takes an `HttpRequest` and returns an
`HttpResponse`; it never touches sockets, so it can be unit-tested without a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx

__all__ = ["HttpRequest", "HttpResponse", "first_values"]


def first_values(values: dict[str, list[str]]) -> dict[str, str]:
    """`{name: [v1, v2]}` → `{name: v1}` (authlib reads single values from `.data`)."""
    return {k: v[0] for k, v in values.items() if v}


@dataclass
class HttpRequest:
    """An HTTP request as the provider sees it.

    `url` is the absolute URL (issuer + path + query) because authlib checks it for
    transport security; `headers` is case-insensitive.
    """

    method: str
    path: str
    url: str
    query: dict[str, list[str]] = field(default_factory=dict)
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    body: bytes = b""

    @property
    def content_type(self) -> str:
        value: str = self.headers.get("content-type", "")
        return value.split(";")[0].strip().lower()

    @property
    def form(self) -> dict[str, list[str]]:
        """The urlencoded body; empty for any other content type."""
        if self.content_type != "application/x-www-form-urlencoded":
            return {}
        return parse_qs(self.body.decode("utf-8", "replace"), keep_blank_values=True)

    def json(self) -> Any:
        """The JSON body, or `None` when absent or not JSON."""
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass
class HttpResponse:
    """Status, headers (a list: names may repeat) and body bytes."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @classmethod
    def json_body(
        cls, status: int, payload: Any, headers: list[tuple[str, str]] | None = None
    ) -> HttpResponse:
        """JSON response. Extra `headers` replace any default with the same name."""
        merged = {"Content-Type": "application/json", "Cache-Control": "no-store"}
        for name, value in headers or []:
            merged = {k: v for k, v in merged.items() if k.lower() != name.lower()}
            merged[name] = value
        return cls(status, list(merged.items()), json.dumps(payload).encode())

    @classmethod
    def html(cls, status: int, text: str) -> HttpResponse:
        return cls(status, [("Content-Type", "text/html; charset=utf-8")], text.encode())

    @classmethod
    def redirect(cls, location: str) -> HttpResponse:
        return cls(302, [("Location", location), ("Cache-Control", "no-store")])

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None
