"""A provider's HTTP connections: kept alive and reused, and new ones set up a few at a time.

Every session on a provider shares one SDK client (:mod:`codey_server.agent.models`), so one
aiohttp connection pool: a call takes an idle kept-alive connection when there is one, and
only opens a new one when every connection is busy. What this module adds is a bound on the
new ones. Sessions that start together (a server's start, a burst of prompts) each find the
pool empty and would open a connection in the same instant: against a model server with a
small accept queue (a listen backlog of 5, Python's ``socketserver`` default and that of many
self-hosted OpenAI-compatible servers), the connections past the queue have their SYN (or
the handshake's last ACK) dropped and wait in TCP's retransmission for one second, then
three, seven... — 100 sessions started at once took up to 114 s to reach a scripted model
that way, instead of about two.

:class:`SetupGate`: at most ``limit`` new connections to one provider are being set up at
once. A set-up begins when the connection is opened and ends when the server first answers
on it (the response's headers) or the request fails: on a plain-HTTP connection the TCP
handshake completes in the kernel before the server has ``accept()``-ed it, so only an
answer proves that the connection has left the accept queue. A server that takes longer
than :data:`ANSWER_S` to answer is taken to have accepted (it is working on the request), so
a slow model does not hold new connections back for long. Requests that reuse a kept-alive
connection never wait here.

The gate rides on aiohttp's public tracing signals (:meth:`SetupGate.trace_config`), so the
SDK's own request path is unchanged; :func:`http_client` builds the SDK's aiohttp client on
a session that carries it. aiohttp is imported only there (it comes with the SDK, which is
loaded in a thread, :mod:`codey_server.agent.models`), and :func:`prepare` runs in that
thread too: building a client the first time imports its HTTP stack (httpcore2, truststore,
h11, anyio: about half a second of CPU) and loads the CA store into an SSL context (40 ms,
200 on a busy machine), both on the event loop otherwise, on the first model call.
"""

from __future__ import annotations

import asyncio
import importlib
import ssl
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType, SimpleNamespace

    import aiohttp

__all__ = ["ANSWER_S", "SetupGate", "http_client", "prepare", "with_platform"]

#: a set-up not answered after this long stops counting against the gate (seconds)
ANSWER_S = 1.0


class _Setup:
    """One request's set-up holding a slot of the gate until it is answered."""

    __slots__ = ("timer",)

    def __init__(self, timer: asyncio.TimerHandle) -> None:
        self.timer = timer


class SetupGate:
    """At most ``limit`` connections being set up at once (see the module's docstring).

    Give :meth:`trace_config` to the ``aiohttp.ClientSession`` of every client of the
    provider. ``peak`` is the most set-ups there were at once, ``opened`` the connections
    opened so far (for tests and benchmarks).
    """

    def __init__(self, limit: int, answer_s: float = ANSWER_S) -> None:
        self.limit = limit
        self.answer_s = answer_s
        self._slots = asyncio.Semaphore(limit)
        self.setting_up = 0
        self.peak = 0
        self.opened = 0

    async def begin(self, ctx: SimpleNamespace) -> None:
        """A request is about to open a connection: wait for a slot, hold it on ``ctx``."""
        if getattr(ctx, "codey_setup", None) is not None:
            return  # the same request opening again (aiohttp retries an idempotent one)
        await self._slots.acquire()
        # no await from here on: a slot taken is always recorded, so it is always given back
        self.setting_up += 1
        self.opened += 1
        self.peak = max(self.peak, self.setting_up)
        timer = asyncio.get_running_loop().call_later(self.answer_s, self.end, ctx)
        ctx.codey_setup = _Setup(timer)

    def end(self, ctx: SimpleNamespace) -> None:
        """The request was answered, failed, or waited :attr:`answer_s`: free its slot (once;
        a request that reused a kept-alive connection holds none)."""
        setup: _Setup | None = getattr(ctx, "codey_setup", None)
        if setup is None:
            return
        ctx.codey_setup = None
        setup.timer.cancel()
        self.setting_up -= 1
        self._slots.release()

    def trace_config(self) -> aiohttp.TraceConfig:
        """aiohttp's tracing hooks that run this gate: a new connection begins a set-up, the
        response's headers (``on_request_end``) or any failure, cancellation included
        (``on_request_exception``, which aiohttp sends for every request it began), end it."""
        import aiohttp

        async def created(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
            await self.begin(ctx)

        async def ended(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
            self.end(ctx)

        config = aiohttp.TraceConfig()
        config.on_connection_create_start.append(created)
        config.on_request_end.append(ended)
        config.on_request_exception.append(ended)
        config.freeze()
        return config


#: each SDK's verifying SSL context (its CA store loaded), made once by :func:`prepare` and
#: shared by every client of that SDK
_CONTEXTS: dict[str, ssl.SSLContext] = {}
#: each SDK's aiohttp client class whose transports run on gated sessions
_CLIENTS: dict[str, type] = {}
#: each SDK's description of this machine for its request headers (``get_platform``)
_PLATFORMS: dict[str, object] = {}


def _vendored(sdk: ModuleType) -> Any:
    # openai and anthropic each vendor the same httpx-to-aiohttp transport
    return importlib.import_module(f"{sdk.__name__}._vendor.httpx_aiohttp")


def prepare(sdk: ModuleType) -> None:
    """Do, once per SDK and off the event loop (in its loader thread), what building its
    first client would do on it: import the transport's HTTP stack, and make the SSL context
    every client of the SDK then shares (the SDK's own default: the system's trust store,
    ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` honoured)."""
    if sdk.__name__ not in _CONTEXTS:
        _CONTEXTS[sdk.__name__] = _vendored(sdk).AiohttpTransport().ssl_context
        "codey".encode("idna")  # the host name's codec, which the first request would load
        # what each new client's first request asks in a thread of the loop's executor
        # (the platform module reads files): starting that thread and the reads cost the
        # first model call after a server start ~20 ms
        base = importlib.import_module(f"{sdk.__name__}._base_client")
        if callable(getattr(base, "get_platform", None)):
            _PLATFORMS[sdk.__name__] = base.get_platform()


def with_platform(sdk: ModuleType, client: Any) -> Any:
    """``client`` with the platform :func:`prepare` found already set, so its first request
    does not look it up in a thread (only if the SDK still keeps it where it did)."""
    found = _PLATFORMS.get(sdk.__name__)
    if found is not None and getattr(client, "_platform", False) is None:
        client._platform = found
    return client


def http_client(sdk: ModuleType, gate: SetupGate) -> Any:
    """The SDK's aiohttp client (``sdk.DefaultAioHttpClient``, ``openai`` or ``anthropic``),
    as the SDK builds it — its limits (1,000 connections, idle ones kept 5 s), the proxies
    of the environment — except that each of its transports gets an aiohttp session whose
    new connections go through ``gate``. Cheap after :func:`prepare`."""
    made = _CLIENTS.get(sdk.__name__)
    if made is None:
        made = _CLIENTS[sdk.__name__] = _gated_client_class(sdk)
    return made(gate, verify=_CONTEXTS.get(sdk.__name__, True))


def _gated_client_class(sdk: ModuleType) -> type:
    import aiohttp

    transport_class = _vendored(sdk).AiohttpTransport

    def gated(transport: Any, gate: SetupGate) -> Any:
        if not isinstance(transport, transport_class):
            return transport

        def session() -> aiohttp.ClientSession:
            # the transport's own session (its get_client), with the gate's tracing hooks;
            # made on the first request, inside the event loop
            limits = transport.limits
            connector = aiohttp.TCPConnector(
                keepalive_timeout=limits.keepalive_expiry, ssl=transport.ssl_context,
                **({"limit": limits.max_connections} if limits.max_connections else {}))
            return aiohttp.ClientSession(connector=connector,
                                         trace_configs=[gate.trace_config()])

        transport.client = session
        return transport

    class GatedClient(sdk.DefaultAioHttpClient):  # type: ignore[name-defined,misc]
        # the transports are made inside the constructor, by these two hooks (which the
        # vendored client itself overrides to put aiohttp under httpx)
        def __init__(self, gate: SetupGate, **kwargs: Any) -> None:
            self._codey_gate = gate
            super().__init__(**kwargs)

        def _init_transport(self, *args: Any, **kwargs: Any) -> Any:
            return gated(super()._init_transport(*args, **kwargs), self._codey_gate)

        def _init_proxy_transport(self, *args: Any, **kwargs: Any) -> Any:
            return gated(super()._init_proxy_transport(*args, **kwargs), self._codey_gate)

    return GatedClient
