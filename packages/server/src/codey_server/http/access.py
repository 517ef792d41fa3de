"""Browser access: the access token, browser-session cookies, Host/Origin checks, route marks.

Who may do what (docs/security.md has the threat model):

- ``GET /?token=T`` with the token the server printed at start swaps it for a cookie
  (HttpOnly, SameSite=Strict, Secure behind TLS) holding a random browser-session id, then
  redirects to ``/``. The token lives in ``DATA_DIR/access_token`` (0600) and is reused across
  restarts; session ids are kept (hashed) in ``DATA_DIR/browser_sessions.json`` so an open tab
  survives a restart. Among replicas both are rows every replica reads (one token for the
  cluster; :mod:`.access_store`). ``POST /api/logout`` (:mod:`codey_server.browsers.routes`)
  ends one session.
- Every request whose ``Host`` is not loopback or a configured name gets 403 (DNS rebinding).
- Each route says who may call it, in its ``opt`` (read here, after routing):

  - no mark: a logged-in browser — the cookie, or ``Authorization: Bearer <access token>``
    for scripts — else 401; ``/ws/client`` is accepted, then closed with 4401;
  - ``opt=PUBLIC``: anyone (the health check, the static client, ``/dl/`` — the worker's
    wheels for the install line, no secret in them —, the OpenAPI document, the OAuth
    callback: the identity provider's redirect carries no SameSite=Strict cookie, so its
    handler checks the login's own binding cookie instead);
  - ``opt=UNPAIRED_WORKER``: no login (the worker has none yet), but a present, foreign
    ``Origin`` gets 403 so no browser page can drive it (the pairing request, its long poll
    guarded by the poll secret, and ``/ws/worker``, where workers prove themselves by
    signature).

  ``OPTIONS`` needs no login: Litestar answers it with the allowed methods only, which the
  public OpenAPI document lists anyway.
- A state-changing request to a logged-in route, authenticated by cookie, needs same-origin
  proof: ``Origin`` equal to the server's origin (or, without ``Origin``, ``Sec-Fetch-Site:
  same-origin``), else 403.
- WebSocket upgrades are refused before the 101 (HTTP 403) when ``Origin`` is foreign: a
  logged-in socket (``/ws/client``) requires an exact match; an ``UNPAIRED_WORKER`` one
  refuses only a present, foreign one (workers are not browsers and send none).

The server's own origin is ``http(s)://`` + the request's ``Host`` (already checked), plus
``settings.public_url``, plus ``settings.allowed_origins``.

Wiring: ``BrowserAccess(settings)`` lives on ``Services.access``; ``access_middleware(access)``
goes into ``Litestar(middleware=[...])``; routes carry ``opt=PUBLIC`` or
``opt=UNPAIRED_WORKER``; ``browser_session(connection)`` gives handlers (and ``serve_client``
its ``session_key``) the authenticated browser session.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import msgspec
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie
from litestar.middleware import DefineMiddleware

from codey_protocol import close_codes as cc
from codey_server.http.access_store import (
    SESSION_MAX_AGE_S,
    SESSIONS_FILE,
    TOKEN_FILE,
    AccessStore,
    FileAccessStore,
    load_or_create_token,
)
from codey_server.settings import Settings

log = logging.getLogger("codey.access")

__all__ = [
    "PUBLIC",
    "SCOPE_SESSION_KEY",
    "SESSIONS_FILE",
    "SESSION_MAX_AGE_S",
    "TOKEN_FILE",
    "UNPAIRED_WORKER",
    "AccessMiddleware",
    "BrowserAccess",
    "access_middleware",
    "browser_session",
    "load_or_create_token",
    "route_access",
]

#: among replicas, how often the browser logins with sockets open here are looked up again,
#: in case the notification of a logout elsewhere was lost
SWEEP_S = 5.0
#: where the middleware leaves the authenticated browser-session id for handlers
SCOPE_SESSION_KEY = "codey.browser_session"

# Raw ASGI, typed loosely on purpose: Litestar's TypedDicts do not fit a middleware that
# sees both HTTP and WebSocket scopes and writes its own messages.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_ANY_ADDRESS = frozenset({"", "0.0.0.0", "::"})


Access = Literal["public", "unpaired_worker", "browser"]
#: the key of a route's ``opt`` that says who may call it; no key means a logged-in browser
ACCESS_OPT = "access"
#: ``opt`` of a route anyone may call: ``@get("/api/health", opt=PUBLIC)`` (Litestar copies
#: it into each handler's own ``opt``)
PUBLIC: dict[str, Any] = {ACCESS_OPT: "public"}
#: ``opt`` of a route for a worker that is not paired yet: no login, no foreign ``Origin``
UNPAIRED_WORKER: dict[str, Any] = {ACCESS_OPT: "unpaired_worker"}


def route_access(scope: Mapping[str, Any]) -> Access:
    """Who may call the route this (already routed) request or socket reached.

    Anything but an explicit mark means a logged-in browser: a route nobody marked, or a
    scope without a route handler, fails closed.
    """
    if scope.get("type") == "http" and scope.get("method") == "OPTIONS":
        return "public"  # Litestar's own answer: the allowed methods, nothing else
    handler = scope.get("route_handler")
    value = handler.opt.get(ACCESS_OPT) if handler is not None else None
    return value if value in ("public", "unpaired_worker") else "browser"


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _host_name(host_header: str) -> str | None:
    """The name part of a ``Host`` header (``[::1]:80`` → ``::1``), lower-cased; None if bad."""
    host = host_header.strip().lower()
    if not host:
        return None
    if host.startswith("["):
        end = host.find("]")
        if end < 0 or (end + 1 < len(host) and not host[end + 1:].startswith(":")):
            return None
        return host[1:end]
    name, _, port = host.partition(":")
    if port and not port.isdigit():
        return None
    return name or None


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


class BrowserAccess:
    """The access token, the set of browser sessions, and the checks on every request.

    ``store`` keeps the token and the sessions: the data dir's files by default, rows shared
    by every replica with ``--database-url`` (:mod:`.access_store`). With a shared store,
    :meth:`start` loads the cluster's token (before the first request) and keeps the sockets
    of a browser logged out on another replica from staying open here.
    """

    def __init__(self, settings: Settings, store: AccessStore | None = None, *,
                 on_logout: Iterable[Callable[[str], Awaitable[None]]] = ()) -> None:
        self.settings = settings
        self.store: AccessStore = store or FileAccessStore(settings.data_dir)
        #: called with a browser login's id when it logs out: close what it opened
        self.on_logout: list[Callable[[str], Awaitable[None]]] = list(on_logout)
        self._token: str | None = None
        #: the logins that authenticated here (digest -> id): what a logout elsewhere closes
        self._seen: dict[str, str] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        hosts = set(_LOOPBACK_NAMES) | {h.lower() for h in settings.allowed_hosts}
        if settings.host not in _ANY_ADDRESS:
            hosts.add(settings.host.lower().strip("[]"))
        extra = {o for o in (_origin_of(u) for u in settings.allowed_origins) if o}
        if settings.public_url:
            public = _origin_of(settings.public_url)
            if public:
                extra.add(public)
                name = urlsplit(settings.public_url).hostname
                if name:
                    hosts.add(name.lower())
        self._hosts = frozenset(hosts)
        self._extra_origins = frozenset(extra)

    async def start(self) -> None:
        """Load the token (also without auth: the cookie's name comes from it) and delete the
        expired sessions; with a shared store, follow logouts made elsewhere."""
        self._token = await self.store.load_token()
        await self.store.forget_expired()
        if self.store.shared:
            self.store.on_removed.append(self._ended_elsewhere)
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop(),
                                                                   name="access-sweep")

    async def stop(self) -> None:
        tasks = [t for t in (self._sweeper, *self._closing) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # token and sessions ---------------------------------------------------------------------

    @property
    def cookie_name(self) -> str:
        """Named after the token's hash: stable across restarts (an open tab keeps working)
        yet different for each server on the same host (cookies ignore the port); the same
        on every replica of a cluster, which shares one token."""
        return "codey_" + hashlib.sha256(self.token.encode()).hexdigest()[:10]

    @property
    def token(self) -> str:
        if self._token is None:
            if not isinstance(self.store, FileAccessStore):
                raise RuntimeError("the shared access token is loaded by start()")
            self._token = self.store.token()
        return self._token

    async def login(self, token: str) -> str | None:
        """A new browser-session id if ``token`` is the access token, else None. Once this
        returns, the session is stored where every replica reads it."""
        if not secrets.compare_digest(token.encode(), self.token.encode()):
            return None
        session_id = secrets.token_urlsafe(32)
        await self.store.forget_expired()  # so expired sessions do not pile up between starts
        await self.store.add_session(_digest(session_id))
        return session_id

    async def check_session(self, session_id: str) -> bool:
        digest = _digest(session_id)
        if not await self.store.has_session(digest):
            return False
        if self.store.shared:
            self._seen[digest] = session_id
        return True

    async def end_session(self, session_id: str) -> None:
        digest = _digest(session_id)
        self._seen.pop(digest, None)
        await self.store.remove_session(digest)

    async def log_out(self, session_id: str) -> None:
        """End a browser login and close everything it opened (each part that keeps sockets
        of a login is in :attr:`on_logout`: the browser sockets, the terminals)."""
        await self.end_session(session_id)
        await self._close_all(session_id)

    async def _close_all(self, session_id: str) -> None:
        for close in self.on_logout:
            try:
                await close(session_id)
            except Exception:  # one part failing must not keep the others' sockets open
                log.exception("closing a logged-out browser's sockets failed")

    def _ended_elsewhere(self, digest: str) -> None:
        """Another replica logged a browser out (or the listener reconnected: ``""``)."""
        if not digest:
            self._spawn(self.sweep())
            return
        session_id = self._seen.pop(digest, None)
        if session_id is not None:
            self._spawn(self._close_all(session_id))

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        task = asyncio.get_running_loop().create_task(run(), name="access-logout")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def sweep(self) -> None:
        """Close what the logins seen here opened, for those no longer stored (a logout whose
        notification was lost)."""
        seen = dict(self._seen)
        if not seen:
            return
        alive = await self.store.existing(seen)
        for digest in set(seen) - alive:
            session_id = self._seen.pop(digest, None)
            if session_id is not None:
                await self._close_all(session_id)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("checking open browser logins failed (%s)", err)

    def check_bearer(self, value: str) -> bool:
        scheme, _, token = value.partition(" ")
        return scheme.lower() == "bearer" and bool(token) and secrets.compare_digest(
            token.strip().encode(), self.token.encode())

    def session_cookie(self, session_id: str) -> Cookie:
        return Cookie(key=self.cookie_name, value=session_id, path="/", httponly=True,
                      samesite="strict", secure=self.settings.tls, max_age=SESSION_MAX_AGE_S)

    def cleared_cookie(self) -> Cookie:
        return Cookie(key=self.cookie_name, value="", path="/", httponly=True,
                      samesite="strict", secure=self.settings.tls, max_age=0)

    # request checks -------------------------------------------------------------------------

    def host_allowed(self, host_header: str | None) -> bool:
        name = _host_name(host_header or "")
        return name is not None and name in self._hosts

    def origins(self, host_header: str, scheme: str) -> frozenset[str]:
        """Origins that count as this server for a request that came in with ``host_header``."""
        if self.settings.tls:
            scheme = "https"
        own = f"{'https' if scheme in ('https', 'wss') else 'http'}://{host_header.lower()}"
        return self._extra_origins | {own}


def _headers(scope: Scope) -> dict[str, str]:
    # Repeated headers: the first wins, which is what a browser sends for these anyway.
    out: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        out.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def _cookies(header: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in header.split(";"):
        name, eq, value = part.strip().partition("=")
        if eq and name and name not in out:
            out[name] = value.strip().strip('"')
    return out


async def _reply(send: Send, status: int, detail: str,
                 headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = msgspec.json.encode({"status_code": status, "detail": detail})
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *headers]})
    await send({"type": "http.response.body", "body": body})


#: on every answer: no page of another origin may frame this one (approve buttons and the
#: terminal could be clickjacked), and the page runs only its own scripts — none from a CDN,
#: none inline (styles may be: xterm.js writes its own)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
     b"img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
     b"form-action 'self'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
]
_SECURITY_NAMES = {name for name, _ in SECURITY_HEADERS}


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in
                    _SECURITY_NAMES]
            message = {**message, "headers": kept + SECURITY_HEADERS}
        await send(message)

    return wrapped


def _with_status(send: Send, status: int) -> Send:
    """``send`` with the response's status replaced (and no caching of it)."""

    async def wrapped(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "status": status,
                       "headers": [*message.get("headers", []), (b"cache-control", b"no-store")]}
        await send(message)

    return wrapped


async def _refuse_upgrade(receive: Receive, send: Send) -> None:
    """Refuse a WebSocket before the handshake completes: the client gets HTTP 403."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008, "reason": ""})


async def _accept_and_close(receive: Receive, send: Send, code: int, reason: str) -> None:
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": code, "reason": reason})


class AccessMiddleware:
    """ASGI middleware enforcing the rules in this module's docstring."""

    def __init__(self, app: ASGIApp, access: BrowserAccess) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _session(self, headers: dict[str, str]) -> str | None:
        value = _cookies(headers.get("cookie", "")).get(self.access.cookie_name)
        if value and await self.access.check_session(value):
            return value
        return None

    def _origin_ok(self, headers: dict[str, str], scope: Scope) -> bool:
        origin = headers.get("origin")
        return origin is not None and origin.lower() in self.access.origins(
            headers.get("host", ""), scope.get("scheme", "http"))

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        access = self.access
        headers = _headers(scope)
        send = _with_security_headers(send)
        if not access.host_allowed(headers.get("host")):
            await _reply(send, 403, "this server does not answer to that host name "
                                    "(add it to allowed_hosts; see docs/security.md)")
            return
        method: str = scope["method"]
        if scope["path"] == "/" and method == "GET":  # the URL codey-server prints at start
            token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
            if token:
                if not await self._login(token[0], send):
                    # the page itself, not a JSON error: it shows the login screen and says
                    # the link's token is not valid (status 401 all the same)
                    await self.app(scope, receive, _with_status(send, 401))
                return
        needs = route_access(scope)
        if needs == "public":
            await self.app(scope, receive, send)
            return
        if needs == "unpaired_worker":
            # no cookie, but no browser page may drive these either
            if "origin" in headers and not self._origin_ok(headers, scope):
                await _reply(send, 403, "foreign origin")
                return
            await self.app(scope, receive, send)
            return
        session = await self._session(headers)
        by_bearer = session is None and access.check_bearer(headers.get("authorization", ""))
        if session is None and not by_bearer and access.settings.auth_required:
            await _reply(send, 401, "log in with the URL codey-server printed at start",
                         [(b"www-authenticate", b'Bearer realm="codey"')])
            return
        if not by_bearer and not self._origin_or_sec_fetch(headers, scope, method):
            await _reply(send, 403, "cross-origin request refused")
            return
        if session is not None:
            scope[SCOPE_SESSION_KEY] = session
        await self.app(scope, receive, send)

    def _origin_or_sec_fetch(self, headers: dict[str, str], scope: Scope, method: str) -> bool:
        """Same-origin proof for a state-changing request (safe methods need none)."""
        if method in _SAFE_METHODS:
            return True
        if "origin" in headers:
            return self._origin_ok(headers, scope)
        return headers.get("sec-fetch-site") == "same-origin"

    async def _login(self, token: str, send: Send) -> bool:
        """Swap a right token for a cookie (303 to ``/``); False for a wrong one."""
        session_id = await self.access.login(token)
        if session_id is None:
            log.warning("a browser presented a wrong access token")
            return False
        cookie = self.access.session_cookie(session_id)
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", b"/"), (b"content-length", b"0"), (b"cache-control", b"no-store"),
            (b"referrer-policy", b"no-referrer"),
            cookie.to_encoded_header()]})
        await send({"type": "http.response.body", "body": b""})
        return True

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        access = self.access
        headers = _headers(scope)
        if not access.host_allowed(headers.get("host")):
            log.warning("refused a WebSocket for host %r", headers.get("host", "")[:100])
            await _refuse_upgrade(receive, send)
            return
        needs = route_access(scope)
        if needs == "public":
            await self.app(scope, receive, send)
            return
        if needs == "unpaired_worker":
            if "origin" in headers and not self._origin_ok(headers, scope):
                log.warning("refused a worker WebSocket from origin %r",
                            headers.get("origin", "")[:100])
                await _refuse_upgrade(receive, send)
                return
            await self.app(scope, receive, send)
            return
        if not self._origin_ok(headers, scope):
            log.warning("refused a WebSocket from origin %r", headers.get("origin", "")[:100])
            await _refuse_upgrade(receive, send)
            return
        if access.settings.auth_required:
            session = await self._session(headers)
            if session is None and not access.check_bearer(headers.get("authorization", "")):
                await _accept_and_close(receive, send, cc.UNAUTHORIZED, "log in first")
                return
            if session is not None:
                scope[SCOPE_SESSION_KEY] = session
        await self.app(scope, receive, send)


def access_middleware(access: BrowserAccess) -> DefineMiddleware:
    """The middleware entry for ``Litestar(middleware=[...])``."""
    factory: Any = AccessMiddleware  # raw ASGI: see the Scope alias above
    return DefineMiddleware(factory, access=access)


def browser_session(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The browser-session id the middleware authenticated this request or socket with."""
    value = connection.scope.get(SCOPE_SESSION_KEY)  # type: ignore[misc,unused-ignore]
    return value if isinstance(value, str) else None
