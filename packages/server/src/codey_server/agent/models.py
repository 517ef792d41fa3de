"""Model providers: one pooled SDK client each, retries, errors, streaming.

``provider.stream(...)`` runs one model call and yields
:data:`~codey_server.agent.stream.ModelEvent` values. The body comes ready-made from the
provider's wire (:mod:`codey_server.agent.wire`), built from the session's cached encoded
history: the SDK is given it as plain JSON through its low-level ``post``, so it neither walks
nor re-validates the conversation. The SDK still does what it is good at: the connection pool
(keep-alive, one TLS set-up per client), timeouts and HTTP errors. The stream's server-sent
events are decoded by :mod:`codey_server.agent.wire.sse` in place of the SDK's decoder (a
tenth of its CPU on a Responses stream; the events the wire ignores are never decoded). The
SDK is ``openai`` for the OpenAI wires and ``anthropic`` for Anthropic's: both are made by the
same generator, so their low-level ``post``, stream class and error classes match
(:class:`_Sdk`).

One client per provider and credential: created on first use, shared by every session, rebuilt
only when the credential changes (a login, a refresh), closed on shutdown. A retired client is
closed once the calls still using it are done. Its connections are kept alive and reused, and
new ones are set up a few at a time (:mod:`codey_server.agent.connections`): sessions that
start together must not open their connections in one instant.

The SDK is imported in a thread (it takes seconds on a busy machine): the agent service starts
that as soon as the server has started, for each configured provider's SDK, and when a
provider is added (:meth:`ModelProvider.prepare`), so a first call finds it loaded; a call
that comes first waits for the same import.

Retries (tenacity, :data:`MODEL_RETRYING`): a 429 (not an exhausted quota), a 5xx
(Anthropic's 529 "overloaded" among them), or a connection that fails before the answer
starts is retried with backoff honouring ``Retry-After``, each announced as
:class:`~codey_server.agent.stream.Retrying` with the delay it then waits. A 401 on an OAuth
provider refreshes the token once and tries again (a new try, not a retry). Anything else
raises :class:`~codey_server.agent.errors.ModelError`.

The shared rate-limit window (:mod:`codey_server.agent.ratewindow`, the fleet governor): each
try first takes a slot in its provider's window, shared by every session of the server. A
slot that has to wait is announced as :class:`~codey_server.agent.stream.Queued` (the session
shows "queued for rate limit (resets in N s)"); the response's rate-limit headers feed the
window, and a 429 pauses every session of the provider until its reset.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import email.utils
import importlib
import json
import logging
import sys
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from tenacity import (
    AsyncRetrying,
    DoAttempt,
    DoSleep,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
)

from codey_protocol.ratelimits import RATE_LIMIT_HEADERS
from codey_server.agent.connections import SetupGate, http_client, with_platform
from codey_server.agent.connections import prepare as prepare_connections
from codey_server.agent.context import window_for
from codey_server.agent.errors import MODEL_WAIT, ModelError, backoff
from codey_server.agent.ratewindow import RateWindows, Slot
from codey_server.agent.route import ProviderInfo
from codey_server.agent.stream import ModelEvent, Queued, RateLimits, Retrying
from codey_server.agent.wire import Wire, wire_for
from codey_server.agent.wire.errors import error_from_body
from codey_server.agent.wire.sse import Sse, SseDecoder
from codey_server.errors import ServerError
from codey_server.settings import ProviderConfig

if TYPE_CHECKING:
    from types import ModuleType

log = logging.getLogger("codey.models")

__all__ = [
    "MODEL_RETRYING",
    "MODEL_WAIT",
    "Credentials",
    "ModelError",
    "ModelProvider",
    "backoff",
    "build_provider",
    "discover_ollama_models",
    "retry_after",
]


class Credentials(Protocol):
    """Where a provider's bearer comes from (the auth service, for one provider)."""

    async def token(self) -> str | None:
        """The current bearer, refreshed if it is about to expire; None if there is none."""

    async def refresh(self) -> bool:
        """Get a new bearer now (after a 401); True if there is a new one to try."""


# retry policy -----------------------------------------------------------------------------

def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds: float = parsed.timestamp() - time.time()
        return max(0.0, seconds)


#: the longest wait, whatever ``Retry-After`` asks for
RETRY_AFTER_MAX_S = 120.0


class _Busy(ServerError):
    """A try that failed before the answer started and may be tried again: ``error`` is what
    the call raises once there are no tries left, ``reason`` what the ``Retrying`` event
    says, ``retry_after`` the provider's ``Retry-After``."""

    def __init__(self, error: ModelError, reason: str, retry_after: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.reason = reason
        self.retry_after = retry_after


def _wait(state: RetryCallState) -> float:
    """``Retry-After`` when the provider sent one, else :data:`MODEL_WAIT`."""
    busy = state.outcome.exception() if state.outcome is not None else None
    after = busy.retry_after if isinstance(busy, _Busy) else None
    return min(after or MODEL_WAIT(state), RETRY_AFTER_MAX_S)


#: a model call's retries (tenacity): busy tries only, waits from :func:`_wait`; the tries
#: are set per provider (``max_retries``), and ``sleep`` is the tests' seam
MODEL_RETRYING = AsyncRetrying(retry=retry_if_exception_type(_Busy), wait=_wait, reraise=True)


#: rate-limit headers are reported (as an event) at most this often per provider
RATE_LIMITS_EVERY_S = 5.0


def _rate_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {h: headers[h] for h in RATE_LIMIT_HEADERS if h in headers}


# the client pool --------------------------------------------------------------------------

class _Client:
    __slots__ = ("client", "retired", "token", "users")

    def __init__(self, client: Any, token: str | None) -> None:
        self.client = client
        self.token = token
        self.users = 0
        self.retired = False


class ModelProvider:
    """One configured provider. ``stream`` is the only call the loop makes."""

    def __init__(self, config: ProviderConfig, credentials: Credentials) -> None:
        self.config = config
        self.name = config.name
        self.credentials = credentials
        self.models: list[str] = list(config.models)
        self.wire: Wire = wire_for(config.kind)
        self._sdk = _Sdk("anthropic" if config.kind == "anthropic" else "openai")
        #: new connections being set up at once, shared by every client of the provider
        self.gate = SetupGate(config.max_connecting)
        self._current: _Client | None = None
        self._retired: list[_Client] = []
        self._closed = False
        self.clients_built = 0  # for tests and the bench: proves the pool is reused
        #: told (provider, seconds, error code or None) after each model call (/metrics)
        self.observe: Callable[[str, float, str | None], None] | None = None
        #: how a call is retried (its tries: ``config.max_retries``); tests give it a sleep
        #: that records the delays instead of waiting them
        self.retrying = MODEL_RETRYING
        self._rate_reported = -RATE_LIMITS_EVERY_S
        #: the server's shared rate-limit windows (None: calls go at once, as in unit tests)
        self.windows: RateWindows | None = None

    @property
    def default_model(self) -> str:
        return self.config.default_model or (self.models[0] if self.models else "")

    def context_window(self, model: str) -> int:
        return window_for(self.config, model)

    @property
    def info(self) -> ProviderInfo:
        """The provider as a turn sees it (a value: its settings, wire and default model)."""
        return ProviderInfo(self.name, self.config, self.wire, self.default_model)

    def prepare(self) -> None:
        """Start loading the provider's SDK in a thread, if nothing has yet (it returns at
        once). Called when the server has started and when a provider is defined, so the
        first model call finds the SDK loaded, or waits only for the rest of its import."""
        self._sdk.start_loading()

    async def _acquire(self) -> _Client:
        if self._closed:
            raise ModelError(f"{self.name}: the server is shutting down", code="failed")
        token = await self.credentials.token()
        if token is None and self.config.auth != "none":
            raise ModelError(f"provider {self.name!r} is not logged in: log in from the web "
                             "UI or set its API key", status=401, code="not_logged_in")
        current = self._current
        if current is None or current.token != token:
            sdk = await self._sdk.load()
            if current is not None:
                current.retired = True
                self._retired.append(current)
                await self._close_idle()
            current = self._current = _Client(
                self._sdk.client(sdk, self.config, token, self.gate), token)
            self.clients_built += 1
        current.users += 1
        return current

    async def _release(self, entry: _Client) -> None:
        entry.users -= 1
        if entry.retired:
            await self._close_idle()

    async def _close_idle(self) -> None:
        idle = [c for c in self._retired if c.users <= 0]
        self._retired = [c for c in self._retired if c.users > 0]
        for c in idle:
            try:
                await c.client.close()
            except Exception:  # closing a pool must never fail a call
                log.debug("closing a retired client failed", exc_info=True)

    async def aclose(self) -> None:
        """Close every client (at shutdown); calls after this fail."""
        self._closed = True
        if self._current is not None:
            self._current.retired = True
            self._retired.append(self._current)
            self._current = None
        for c in self._retired:
            c.users = 0
        await self._close_idle()

    # one call -------------------------------------------------------------------------------

    async def stream(self, *, model: str, body: bytes,
                     session_id: str = "") -> AsyncIterator[ModelEvent]:
        """Run one model call with the ready ``body`` (see :meth:`Wire.body`).

        Raises ModelError; ``code == "stream_cut"`` when the answer had started (events were
        yielded) and then stopped — the caller decides whether to try again.
        """
        started = time.perf_counter()
        error: str | None = None
        try:
            async for event in self._stream(model=model, body=body, session_id=session_id):
                yield event
        except ModelError as err:
            error = err.code
            raise
        finally:
            if self.observe is not None:
                self.observe(self.name, time.perf_counter() - started, error)

    async def _stream(self, *, model: str, body: bytes,
                      session_id: str = "") -> AsyncIterator[ModelEvent]:
        sdk = await self._sdk.load()
        # tenacity's loop, driven here rather than by ``async for``: a retry is announced
        # (yielded) between tenacity's decision and its sleep
        retrying = self.retrying.copy(stop=stop_after_attempt(self.config.max_retries + 1))
        retrying.begin()
        state = RetryCallState(retrying, fn=None, args=(), kwargs={})
        refreshed = False
        while True:
            try:
                action = await retrying.iter(state)
            except _Busy as busy:  # no tries left
                raise busy.error from None
            if isinstance(action, DoSleep):
                assert state.outcome is not None
                failed = state.outcome.exception()
                assert isinstance(failed, _Busy)
                yield Retrying(state.attempt_number, float(action), failed.reason)
                state.prepare_for_next_attempt()
                await cast(Callable[[float], Awaitable[None]], retrying.sleep)(action)
            elif isinstance(action, DoAttempt):
                async with self._slot(session_id) as slot:
                    if slot is not None and slot.waiting:
                        # the provider's window is paused or low: the session says so
                        # while it waits its turn
                        yield Queued(slot.reason)
                        await slot.ready()
                        yield Queued("")
                    try:
                        # closed here, not by the loop's finalizer: the client is released
                        # as soon as the caller stops reading
                        async with contextlib.aclosing(self._try(sdk, body, slot)) as events:
                            async for event in events:
                                yield event
                    except ModelError as err:
                        if err.code == "auth" and self.config.auth == "oauth" \
                                and not refreshed:
                            refreshed = True
                            if await self.credentials.refresh():
                                continue  # the same try again, with the new token
                        raise
                    except _Busy as busy:
                        if slot is not None and busy.reason == "HTTP 429":
                            slot.limited(busy.retry_after)  # every session of it waits
                        state.set_exception(sys.exc_info())  # type: ignore[arg-type]
                    else:
                        state.set_result(None)
            else:
                return

    def _slot(self, session_id: str) -> contextlib.AbstractAsyncContextManager[Slot | None]:
        if self.windows is None:
            return contextlib.nullcontext()
        return self.windows.slot(self.name, session_id)

    async def _try(self, sdk: Any, body: bytes,
                   slot: Slot | None = None) -> AsyncGenerator[ModelEvent, None]:
        """One try of a call: its events, or :class:`_Busy` (to be retried) or a
        ModelError."""
        started = False
        entry = await self._acquire()
        try:
            stream = await entry.client.post(
                self.wire.path, cast_to=object, content=body, stream=True,
                stream_cls=self._sdk.raw_events(sdk, self.wire.skipped_events),
                options={"headers": {"Content-Type": "application/json"}})
            if slot is not None:  # the provider took the call: its window's counts
                slot.seen(stream.response.headers)
                slot.started()
            headers = _rate_headers(stream.response.headers)
            now = time.monotonic()
            if headers and now - self._rate_reported >= RATE_LIMITS_EVERY_S:
                # a snapshot for the view: every few seconds is enough, and each is an event
                # in the log
                self._rate_reported = now
                yield RateLimits(headers)
            collector = self.wire.collector()
            async for sse in stream:
                for event in collector.feed_sse(sse.event, sse.data):
                    started = True
                    yield event
            for event in collector.finish():
                yield event
        except sdk.APIStatusError as err:
            error = error_from_body(err.body, err.status_code, prefix=self.name,
                                    fallback_text=err.message)
            if started or error.code not in ("rate_limited", "server"):
                raise error from None
            raise _Busy(error, f"HTTP {err.status_code}",
                        retry_after(err.response.headers)) from None
        except self._sdk.transport_errors(sdk) as err:
            if started:
                raise ModelError(f"{self.name}: the answer stopped mid-stream ({err})",
                                 code="stream_cut") from None
            raise _Busy(ModelError(f"{self.name}: cannot reach {self.config.base_url} "
                                   f"({err})", code="connection"),
                        "connection failed") from None
        except sdk.APIError as err:  # an error event inside the stream
            raise error_from_body(err.body, None, prefix=self.name,
                                  fallback_text=err.message) from None
        except ModelError as err:
            if not err.message.startswith(self.name):
                err.message = f"{self.name}: {err.message}"
            if err.code == "stream_cut" and not started:
                raise _Busy(err, "the stream ended early") from None
            raise
        finally:
            await self._release(entry)


#: each SDK's import, started by the first model call that needs it (one for every provider
#: and loop)
_IMPORTS: dict[str, concurrent.futures.Future[object]] = {}
#: the SDKs a model call had to wait for (said in the log once each)
_WAITED: set[str] = set()
#: each SDK's stream class that yields raw server-sent events, by the events it drops
_RAW_EVENTS: dict[tuple[str, frozenset[str]], type] = {}
_ANTHROPIC_CLIENT: type | None = None


class _Sdk:
    """What the provider needs of its SDK, ``openai`` or ``anthropic``, loaded off the loop."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def start_loading(self) -> concurrent.futures.Future[object]:
        """Start importing the SDK in a thread of its own, once per process (later calls
        return the same import): it brings pydantic, aiohttp and hundreds of type modules,
        about a second of CPU (several on a busy machine), which on the loop would stall
        every socket and heartbeat of the server — and among replicas its lease renewals,
        handing its sessions to another replica."""
        loading = _IMPORTS.get(self.name)
        if loading is None:
            loading = _IMPORTS[self.name] = concurrent.futures.Future()
            name, future = self.name, loading

            def run() -> None:
                started = time.perf_counter()
                try:
                    module = importlib.import_module(name)
                    # and what building the first client would do on the loop: import the
                    # HTTP stack, load the CA store
                    prepare_connections(module)
                    future.set_result(module)
                except BaseException as err:  # given to every caller waiting for it
                    future.set_exception(err)
                else:
                    log.info("the %s SDK is loaded (%.2f s, in a thread)", name,
                             time.perf_counter() - started)

            threading.Thread(target=run, name=f"import-{name}", daemon=True).start()
        return loading

    async def load(self) -> ModuleType:
        """The SDK, imported by :meth:`start_loading` (started here if nothing did): every
        caller meanwhile waits for the same import."""
        loading = self.start_loading()
        if not loading.done():
            waiting = time.perf_counter()
            await asyncio.wrap_future(loading)
            if self.name not in _WAITED:  # the first to wait waited longest: said once
                _WAITED.add(self.name)
                log.info("a model call waited %.2f s for the %s SDK", time.perf_counter()
                         - waiting, self.name)
        module: ModuleType = loading.result()  # type: ignore[assignment]
        return module

    def client(self, sdk: ModuleType, config: ProviderConfig, token: str | None,
               gate: SetupGate) -> Any:
        """A client with no retries of its own (ours honour Retry-After and say so), on
        aiohttp (the SDK's own supported alternative transport: a model call costs the
        server a fraction of the CPU httpx's default one takes), its new connections through
        the provider's ``gate``."""
        timeout = sdk.Timeout(600.0, connect=20.0)
        if self.name == "openai":
            return with_platform(sdk, sdk.AsyncOpenAI(
                api_key=token or "none", base_url=config.base_url, max_retries=0,
                timeout=timeout, http_client=http_client(sdk, gate)))
        from codey_server.agent.wire.anthropic import API_VERSION

        base = config.base_url.rstrip("/")
        # the wire's path holds /v1 already; a base_url given as OpenAI's are ends with it
        base = base[:-3] if base.endswith("/v1") else base
        # an explicit credential, always: else the SDK would look for one in this server's
        # environment and files
        oauth = config.auth == "oauth"
        return with_platform(sdk, _anthropic_class(sdk)(
            api_key=None if oauth else (token or "none"), auth_token=token if oauth else None,
            base_url=base, max_retries=0, timeout=timeout, http_client=http_client(sdk, gate),
            default_headers={"anthropic-version": API_VERSION}))

    def transport_errors(self, sdk: ModuleType) -> tuple[type[BaseException], ...]:
        """What a failed connection raises: the SDK's errors while a call starts, and its
        transport's own (aiohttp's, httpx's) once the stream is being read, which the
        anthropic SDK lets through unwrapped."""
        import aiohttp  # both SDKs' aiohttp transport: loaded with the SDK

        http = importlib.import_module("httpx2" if self.name == "anthropic" else "httpx")
        return (sdk.APIConnectionError, sdk.APITimeoutError, aiohttp.ClientError,
                http.TransportError)

    def raw_events(self, sdk: ModuleType, skipped: frozenset[str]) -> Any:
        """The SDK's stream class, yielding its server-sent events without parsing their
        JSON: the wire's collector parses only the events it needs, and reads an error event
        itself. The events are decoded by our :class:`SseDecoder`, which drops ``skipped``
        undecoded (a Responses stream repeats the whole request's tools and instructions in
        events nobody reads); the SDK's own ``_iter_events`` still runs it, so a timeout or a
        cut connection while reading is the SDK's error as before."""
        key = (self.name, skipped)
        made = _RAW_EVENTS.get(key)
        if made is None:
            class RawEvents(sdk.AsyncStream[object]):  # type: ignore[name-defined,misc]
                def __init__(self, **kwargs: Any) -> None:
                    super().__init__(**kwargs)
                    self._decoder = _SseBytes(skipped)

                async def __stream__(self) -> AsyncIterator[Any]:
                    try:
                        async for sse in self._iter_events():
                            if not sse.data.startswith("[DONE]"):
                                yield sse
                    finally:
                        await self.response.aclose()

            made = _RAW_EVENTS[key] = RawEvents
        return made


class _SseBytes:
    """:class:`SseDecoder` in the shape the SDKs' streams take as their decoder."""

    __slots__ = ("skipped",)

    def __init__(self, skipped: frozenset[str]) -> None:
        self.skipped = skipped

    async def aiter_bytes(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[Sse]:
        decoder = SseDecoder(self.skipped)
        async for chunk in chunks:
            for sse in decoder.feed(chunk):
                yield sse


def _anthropic_class(sdk: ModuleType) -> Any:
    """``AsyncAnthropic`` sending an API key as ``x-api-key``, the header Anthropic's API
    documents (the SDK sends it as a bearer now); an OAuth token stays a bearer."""
    global _ANTHROPIC_CLIENT
    if _ANTHROPIC_CLIENT is None:
        class Client(sdk.AsyncAnthropic):  # type: ignore[name-defined,misc]
            @property
            def auth_headers(self) -> dict[str, str]:
                if self.auth_token is not None:
                    return {"Authorization": f"Bearer {self.auth_token}"}
                return {"X-Api-Key": self.api_key} if self.api_key is not None else {}

        _ANTHROPIC_CLIENT = Client
    return _ANTHROPIC_CLIENT


async def discover_ollama_models(base_url: str) -> list[str]:
    """Model names from Ollama's ``/api/tags``; an unreachable Ollama gives [] (logged)."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[:-3]
    import httpx  # only when an Ollama provider is configured

    try:
        async with httpx.AsyncClient(timeout=5.0) as http:
            r = await http.get(f"{root}/api/tags")
            r.raise_for_status()
            data = r.json()
    except (httpx.HTTPError, json.JSONDecodeError, ValueError) as err:
        log.warning("Ollama at %s is unreachable (%s): no models listed", root, err)
        return []
    return [m["name"] for m in data.get("models", []) if isinstance(m, dict) and "name" in m]


def build_provider(config: ProviderConfig, credentials: Credentials) -> ModelProvider:
    return ModelProvider(config, credentials)

