"""A scripted model server (OpenAI's APIs, Anthropic's): a real process replaying a script.

Run it as ``codey-model-server --port 0 --script steps.yaml`` (or ``python -m
codey_testkit.model_server``); once bound it prints exactly one line::

    codey-model-server listening on http://127.0.0.1:PORT

Endpoints (OpenAI clients take ``http://127.0.0.1:PORT/v1`` as base URL):

- ``POST /v1/responses`` — Responses API, streamed (SSE, real event names) or not.
- ``POST /v1/chat/completions`` — Chat Completions, streamed (``data:`` chunks, ``[DONE]``)
  or not; usage chunk when ``stream_options.include_usage``.
- ``POST /v1/messages`` — Anthropic's Messages API, streamed (SSE: ``message_start``,
  ``content_block_*``, ``message_delta``, ``message_stop``, ``ping`` between them) or not;
  the key comes in ``x-api-key`` (or as a bearer), errors in Anthropic's shape (529:
  overloaded), and usage tells prompt-cache reads from writes (a modelled cache, see
  :class:`~codey_testkit.model_wire.PromptCache`).
- ``GET /v1/models``; ``GET /api/tags`` and ``GET /api/version`` (Ollama-style).
- ``GET /_requests`` (``?path=`` filter) → ``{"requests": [...], "step_uses": [...]}``;
  ``DELETE /_requests``; ``POST /_script`` (JSON script, replaces the current one and resets
  use counts); ``GET /_health``.

Each model request is answered by the first script step matching its latest input (see
:mod:`codey_testkit.script`). No match → HTTP 500 naming the latest input. Model responses
carry ``x-ratelimit-*`` headers. With ``--api-key`` and/or ``--oidc-issuer`` the ``/v1/*``
endpoints need a bearer token (see :mod:`codey_testkit.model_auth`); the others never do.

Tests normally use :func:`codey_testkit.model_handle.start_model_server` (re-exported here).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import socket
import sys
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import uvicorn
from litestar import Litestar, Request, Response, delete, get, post
from litestar.di import Provide
from litestar.logging.config import LoggingConfig
from litestar.response import Stream

from codey_testkit.errors import ScriptError, TestkitError
from codey_testkit.model_auth import BearerAuth
from codey_testkit.model_handle import ModelServerHandle, start_model_server
from codey_testkit.model_wire import (
    PromptCache,
    WireEvent,
    anthropic_body,
    anthropic_error,
    anthropic_events,
    chat_body,
    chat_events,
    plan_reply,
    responses_body,
    responses_events,
)
from codey_testkit.script import (
    Api,
    ErrorReply,
    LatestInput,
    RateLimit,
    Script,
    ScriptRunner,
    anthropic_latest,
    chat_latest,
    load_script,
    responses_latest,
)

__all__ = ["ModelServer", "ModelServerHandle", "create_app", "main", "start_model_server"]

READY_LINE = "codey-model-server listening on {url}"
_MAX_KNOWN_CALLS = 100_000


class _Disconnect(TestkitError):
    """Raised inside a stream to drop the connection on purpose (``disconnect_after``)."""


class _HideScriptedDisconnects(logging.Filter):
    """Drop uvicorn's traceback for a ``_Disconnect``: it is the script's intent, not a bug."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        seen = 0
        while error is not None and seen < 10:
            if isinstance(error, _Disconnect):
                return False
            if isinstance(error, BaseExceptionGroup) and any(
                isinstance(e, _Disconnect) for e in error.exceptions
            ):
                return False
            error, seen = error.__cause__ or error.__context__, seen + 1
        return True


class _RateWindow:
    """Request and token counters behind the x-ratelimit-* headers (reported, not enforced)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.requests = 0
        self.tokens = 0

    def headers(self, limits: RateLimit, tokens: int) -> dict[str, str]:
        now = time.monotonic()
        if now - self.started >= limits.window_s:
            self.started, self.requests, self.tokens = now, 0, 0
        self.requests += 1
        self.tokens += tokens
        reset = _duration(limits.window_s - (now - self.started))
        return {
            "x-ratelimit-limit-requests": str(limits.limit_requests),
            "x-ratelimit-remaining-requests": str(max(0, limits.limit_requests - self.requests)),
            "x-ratelimit-reset-requests": reset,
            "x-ratelimit-limit-tokens": str(limits.limit_tokens),
            "x-ratelimit-remaining-tokens": str(max(0, limits.limit_tokens - self.tokens)),
            "x-ratelimit-reset-tokens": reset,
        }


def _duration(seconds: float) -> str:
    """Format like OpenAI's reset headers: ``20ms``, ``1.5s``, ``6m0s``."""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest}s"


def _error_body(message: str, type_: str, code: str | None, param: str | None = None) -> Any:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response[Any]:
    return Response(content=body, status_code=status, headers=dict(headers or {}),
                    media_type="application/json")


class ModelServer:
    """Everything one server process knows: the script, its use counts, recorded requests.

    Owned by the event loop (handlers run on it one step at a time), so no locks.
    """

    def __init__(self, script: Script, auth: BearerAuth, max_records: int = 10_000) -> None:
        self.runner = ScriptRunner(script)
        self.auth = auth
        self.records: deque[dict[str, Any]] = deque(maxlen=max_records)
        self._seq = 0
        self._rates = _RateWindow()
        # call_id -> tool name for calls we emitted, for requests using previous_response_id
        self.known_calls: OrderedDict[str, str] = OrderedDict()
        self.prompt_cache = PromptCache()

    @property
    def script(self) -> Script:
        return self.runner.script

    def set_script(self, script: Script) -> None:
        self.runner = ScriptRunner(script)

    def record(self, request: Request[Any, Any, Any], body: Any, **extra: Any) -> dict[str, Any]:
        """Append a record of ``request`` (the bearer or API key itself is never stored) and
        return it, so the caller can fill in ``status`` once known."""
        self._seq += 1
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("authorization", "x-api-key")}
        auth = request.headers.get("authorization", "")
        client = request.client
        record = {
            "seq": self._seq,
            "ts": time.time(),
            # the client's end of the connection: calls that share one came over a kept-alive
            # connection
            "peer": f"{client.host}:{client.port}" if client is not None else None,
            "method": request.method,
            "path": request.url.path,
            "query": str(request.url.query or ""),
            "headers": headers,
            "bearer": auth.lower().startswith("bearer ") and bool(auth[7:].strip()),
            "api_key": bool(request.headers.get("x-api-key", "").strip()),
            "body": body,
            **extra,
        }
        self.records.append(record)
        return record

    async def answer(self, request: Request[Any, Any, Any], api: Api) -> Response[Any]:
        """Handle one model request (either API) from parse to scripted reply."""
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else {}
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            self.record(request, raw.decode("utf-8", "replace"), api=api, step=None, status=400)
            return self._error(api, 400, f"Invalid JSON body: {exc}", "invalid_request_error")
        key = request.headers.get("x-api-key") if api == "anthropic" else None
        denied = await self.auth.check(
            f"Bearer {key}" if key else request.headers.get("authorization"))
        if denied is not None:
            self.record(request, body, api=api, step=None, status=401)
            return self._error(api, 401, denied, "invalid_request_error", "invalid_api_key")

        window = self.script.options.context_window
        if window is not None:
            size = len(json.dumps(body.get("input", body.get("messages", "")))) + len(
                str(body.get("instructions") or body.get("system") or ""))
            if (size + 3) // 4 > window:
                self.record(request, body, api=api, step=None, status=400)
                if api == "anthropic":
                    return _json(anthropic_error(
                        400, f"prompt is too long: {(size + 3) // 4} tokens > {window} "
                             "maximum"), 400)
                return _json(_error_body(
                    f"This model's maximum context length is {window} tokens. However, your "
                    f"messages resulted in {(size + 3) // 4} tokens. Please reduce the length "
                    "of the messages.", "invalid_request_error", "context_length_exceeded",
                    "messages"), 400)
        if api == "responses":
            latest = responses_latest(body, self.known_calls)
        elif api == "anthropic":
            latest = anthropic_latest(body)
        else:
            latest = chat_latest(body)
        model = body.get("model") if isinstance(body.get("model"), str) else None
        index = self.runner.select(latest, api, model)
        record = self.record(request, body, api=api, latest=latest.to_json(), step=index,
                              stream=bool(body.get("stream")))
        options = self.script.options
        if index is None:
            record["status"] = 500
            return self._no_match(api, latest)
        reply = self.script.steps[index].reply
        if reply.error is not None:
            record["status"] = reply.error.status
            return self._scripted_error(api, reply.error)

        plan = plan_reply(reply, model or self.script.models[0], body,
                          reply.chunk_size or options.chunk_size)
        if api == "anthropic":
            plan = self.prompt_cache.usage(plan, body)
        for call in plan.calls:
            self.known_calls[call.call_id] = call.name
            if len(self.known_calls) > _MAX_KNOWN_CALLS:
                self.known_calls.popitem(last=False)
        headers = {
            "x-request-id": f"req_{self._seq}",
            **self._rates.headers(options.rate_limit, plan.usage.total),
        }
        record["status"] = 200
        initial = (reply.initial_delay_ms if reply.initial_delay_ms is not None
                   else options.initial_delay_ms) / 1000
        if not body.get("stream"):
            if initial:
                await asyncio.sleep(initial)
            if api == "anthropic":
                content = anthropic_body(plan)
            else:
                content = responses_body(plan, body) if api == "responses" else chat_body(plan)
            return _json(content, 200, headers)
        if api == "responses":
            events = responses_events(plan, body)
        elif api == "anthropic":
            events = anthropic_events(plan)
        else:
            stream_options = body.get("stream_options") or {}
            events = chat_events(plan, bool(stream_options.get("include_usage")))
        delay = (reply.delay_ms if reply.delay_ms is not None else options.delay_ms) / 1000
        return Stream(
            _paced(events, delay, initial, reply.disconnect_after),
            status_code=200,
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    def _no_match(self, api: Api, latest: LatestInput) -> Response[Any]:
        detail = json.dumps(latest.to_json())
        message = f"codey-model-server: no script step matched this {api} request; latest={detail}"
        print(message, file=sys.stderr, flush=True)
        return self._error(api, 500, message, "server_error", "no_step_matched")

    def _error(self, api: Api, status: int, message: str, type_: str,
               code: str | None = None) -> Response[Any]:
        """An error in the API's own shape (Anthropic's type follows the status)."""
        headers = self._rates.headers(self.script.options.rate_limit, 0)
        if api == "anthropic":
            return _json(anthropic_error(status, message), status, headers)
        return _json(_error_body(message, type_, code), status, headers)

    def _scripted_error(self, api: Api, error: ErrorReply) -> Response[Any]:
        headers = self._rates.headers(self.script.options.rate_limit, 0)
        if error.retry_after is not None:
            seconds = error.retry_after
            headers["retry-after"] = str(int(seconds)) if seconds == int(seconds) else str(seconds)
            headers["retry-after-ms"] = str(int(seconds * 1000))
        default: tuple[str, str, str | None]
        if error.status == 429:
            default = ("Rate limit reached (scripted).", "requests", "rate_limit_exceeded")
        elif error.status == 529:
            default = ("Overloaded (scripted).", "overloaded_error", None)
        elif error.status >= 500:
            default = ("The server had an error (scripted).", "server_error", None)
        else:
            default = ("Scripted error.", "invalid_request_error", None)
        if api == "anthropic":
            return _json(anthropic_error(error.status, error.message or default[0],
                                         error.type), error.status, headers)
        body = _error_body(
            error.message or default[0], error.type or default[1], error.code or default[2]
        )
        return _json(body, error.status, headers)


async def _paced(
    events: list[WireEvent], delay_s: float, initial_s: float, disconnect_after: int | None
) -> AsyncIterator[bytes]:
    if initial_s:
        await asyncio.sleep(initial_s)
    for n, event in enumerate(events):
        if disconnect_after is not None and n >= disconnect_after:
            print(f"codey-model-server: scripted disconnect after {n} events", file=sys.stderr,
                  flush=True)
            raise _Disconnect(f"scripted disconnect after {n} events")
        if event.delta and delay_s:
            await asyncio.sleep(delay_s)
        yield event.encode()


# -- HTTP handlers ------------------------------------------------------------------------


@post("/v1/responses", status_code=200)
async def create_response(request: Request[Any, Any, Any], server: ModelServer) -> Response[Any]:
    return await server.answer(request, "responses")


@post("/v1/chat/completions", status_code=200)
async def create_chat_completion(
    request: Request[Any, Any, Any], server: ModelServer
) -> Response[Any]:
    return await server.answer(request, "chat")


@post("/v1/messages", status_code=200)
async def create_message(request: Request[Any, Any, Any], server: ModelServer) -> Response[Any]:
    return await server.answer(request, "anthropic")


@get("/v1/models")
async def list_models(request: Request[Any, Any, Any], server: ModelServer) -> Response[Any]:
    denied = await server.auth.check(request.headers.get("authorization"))
    server.record(request, None, api="models", step=None, status=401 if denied else 200)
    if denied is not None:
        return _json(_error_body(denied, "invalid_request_error", "invalid_api_key"), 401)
    data = [
        {"id": m, "object": "model", "created": 0, "owned_by": "codey-testkit"}
        for m in server.script.models
    ]
    return _json({"object": "list", "data": data})


@get("/api/tags")
async def ollama_tags(server: ModelServer) -> Response[Any]:
    models = [
        {
            "name": m,
            "model": m,
            "modified_at": "2024-01-01T00:00:00Z",
            "size": 0,
            "digest": hashlib.sha256(m.encode()).hexdigest(),
            "details": {"format": "gguf", "family": "scripted", "parameter_size": "0B",
                        "quantization_level": "none"},
        }
        for m in server.script.models
    ]
    return _json({"models": models})


@get("/api/version")
async def ollama_version() -> Response[Any]:
    return _json({"version": "0.0.0-codey-testkit"})


@get("/_requests")
async def recorded_requests(server: ModelServer, path: str | None = None) -> Response[Any]:
    records = [r for r in server.records if path is None or r["path"] == path]
    return _json({"requests": records, "step_uses": server.runner.used})


@delete("/_requests", status_code=200)
async def clear_requests(server: ModelServer) -> Response[Any]:
    server.records.clear()
    return _json({"ok": True})


@post("/_script", status_code=200)
async def replace_script(request: Request[Any, Any, Any], server: ModelServer) -> Response[Any]:
    try:
        data = json.loads(await request.body())
        if not isinstance(data, dict | list):
            raise ScriptError("script must be a JSON object or a list of steps")
        server.set_script(load_script(data if isinstance(data, dict) else {"steps": data}))
    except (ValueError, ScriptError) as exc:
        return _json({"ok": False, "error": str(exc)}, 400)
    return _json({"ok": True, "steps": len(server.script.steps)})


@get("/_health")
async def health() -> Response[Any]:
    return _json({"status": "ok"})


def create_app(server: ModelServer) -> Litestar:
    """The Litestar app serving ``server``."""

    def provide_server() -> ModelServer:
        return server

    return Litestar(
        route_handlers=[
            create_response, create_chat_completion, create_message, list_models, ollama_tags,
            ollama_version,
            recorded_requests, clear_requests, replace_script, health,
        ],
        dependencies={"server": Provide(provide_server, sync_to_thread=False)},
        openapi_config=None,
        # a scripted server's own bug must show in its log, not just as a 500
        logging_config=LoggingConfig(log_exceptions="always"),
        request_max_body_size=64 * 1024 * 1024,  # long conversations are big
    )


# -- process entry point ------------------------------------------------------------------


class _Uvicorn(uvicorn.Server):
    """uvicorn that announces itself once it really accepts connections."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:
            self._on_ready()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="codey-model-server",
        description="Scripted OpenAI-compatible model server for tests and benchmarks.\n\n"
        "Example: codey-model-server --port 0 --script steps.yaml --api-key sk-test",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port (printed)")
    parser.add_argument("--script", type=Path, help="YAML or JSON script; empty if omitted")
    parser.add_argument("--api-key", help="require this static bearer token on /v1/*")
    parser.add_argument("--oidc-issuer", help="also accept JWT access tokens from this issuer")
    parser.add_argument("--oidc-audience", default="codey-model",
                        help="required 'aud' of those tokens (default: codey-model, the "
                        "testkit OIDC provider's default); '' disables the check")
    parser.add_argument("--max-records", type=int, default=10_000,
                        help="recorded requests kept for /_requests (oldest dropped)")
    parser.add_argument("--backlog", type=int, default=2048,
                        help="the listen backlog (default: uvicorn's 2048); 5, Python's "
                        "socketserver default and that of many self-hosted model servers, "
                        "drops a burst of connections into TCP's retransmission")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run the server until SIGINT/SIGTERM. Exits with status 2 on a bad script."""
    args = _parse_args(argv)
    try:
        script = load_script(args.script) if args.script else Script()
    except ScriptError as exc:
        print(f"codey-model-server: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc
    auth = BearerAuth(args.api_key, args.oidc_issuer, args.oidc_audience or None)
    app = create_app(ModelServer(script, auth, args.max_records))
    sock = _bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on",
        timeout_graceful_shutdown=2, timeout_keep_alive=30, backlog=args.backlog,
    )

    def announce() -> None:
        # one write: an unbuffered print() writes the newline apart, and a log line could
        # land in between
        sys.stdout.write(READY_LINE.format(url=f"http://{shown}:{port}") + "\n")
        sys.stdout.flush()

    server = _Uvicorn(config, announce)
    # uvicorn.Config set up logging above; a filter added earlier would have been dropped
    logging.getLogger("uvicorn.error").addFilter(_HideScriptedDisconnects())
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
