"""Base URLs the server calls on a user's word (a model provider's, an OIDC issuer): the shape
one must have, and when two name the same endpoint.

A URL that two parsers read differently is how a check passes one host while the request goes
to another: a user part (``http://api.example.com@evil/``), a backslash (browsers and WHATWG
read it as ``/``, urllib does not), white space or control characters, a query or fragment
that a path is then appended to, a bracketed IPv6 literal (which urllib refuses or accepts by
its own reading). So a base URL has a plain shape, checked by its field's pattern
(:data:`HTTP_URL`, in the OpenAPI document too) and again by :func:`url_problem`: ``http`` or
``https``, a host name or IPv4 address (an internationalised name in its ``xn--`` form), an
optional port, a path of URL characters, nothing else.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from codey_server.http.fields import pattern

__all__ = ["HTTP_URL", "MAX_URL_CHARS", "same_endpoint", "url_problem"]

MAX_URL_CHARS = 2000
_WORDS = ("must be an http:// or https:// URL: a host, maybe a port, and a path (no user "
          "name, query, fragment or spaces)")
#: the shape of a base URL (ECMA-262 and Python read it alike; see :mod:`.fields`); the port
#: is 1-65535 with no leading zero
HTTP_URL = pattern(r"^https?://[A-Za-z0-9.-]+"
                   r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
                   r"|[1-9][0-9]{0,3}))?(/[A-Za-z0-9._~!$&'()*+,;=:%/-]*)?$", _WORDS)
_HTTP_URL = re.compile(HTTP_URL)


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a base URL the server may call (None: nothing)."""
    # fullmatch: Python's `$` also matches before a final newline, ECMA's does not
    if len(url) > MAX_URL_CHARS or _HTTP_URL.fullmatch(url) is None:
        return f"the URL {_WORDS}"
    return None


def _key(url: str) -> tuple[str, str, int | None, str]:
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:  # a URL of config.json's that urllib cannot read: only itself matches
        return "", url, None, ""
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def same_endpoint(a: str, b: str) -> bool:
    """``a`` and ``b`` name the same endpoint: scheme, host, port (a default one spelt out or
    not) and path (a final ``/`` aside). A credential given for one may go to the other."""
    return _key(a) == _key(b)
