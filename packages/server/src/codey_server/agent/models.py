"""Model providers over the ``openai`` SDK: the Responses API, Chat Completions, Ollama.

``provider.stream(...)`` yields :data:`ModelEvent` values for one model call. 429 and 5xx
answers (and dropped connections) before the first event are retried with backoff that honours
``Retry-After``; each retry is announced as :class:`Retrying`. Rate-limit headers come out as
:class:`RateLimits`. Anything that cannot be retried raises :class:`ModelError`.

The conversation is given as neutral :data:`Entry` values, rebuilt from the session's items
each call (design §4): each provider turns them into its own wire format.
"""

from __future__ import annotations

import abc
import asyncio
import email.utils
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx

if TYPE_CHECKING:
    from openai import AsyncOpenAI

from codey_server.agent.tools import ToolSpec
from codey_server.errors import ServerError
from codey_server.settings import ProviderConfig

log = logging.getLogger("codey.models")

__all__ = [
    "AssistantText",
    "Entry",
    "ModelError",
    "ModelEvent",
    "ModelProvider",
    "RateLimits",
    "ReasoningDelta",
    "Retrying",
    "TextDelta",
    "ToolCallEntry",
    "ToolCallRequested",
    "ToolResultEntry",
    "Usage",
    "UserText",
    "build_provider",
    "discover_ollama_models",
]

TokenSource = Callable[[], Awaitable[str | None]]


# conversation entries ---------------------------------------------------------------------

@dataclass(frozen=True)
class UserText:
    text: str


@dataclass(frozen=True)
class AssistantText:
    text: str


@dataclass(frozen=True)
class ToolCallEntry:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolResultEntry:
    call_id: str
    output: str


Entry = UserText | AssistantText | ToolCallEntry | ToolResultEntry


# events ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallRequested:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True)
class RateLimits:
    headers: dict[str, str]


@dataclass(frozen=True)
class Retrying:
    attempt: int
    delay_s: float
    reason: str


ModelEvent = TextDelta | ReasoningDelta | ToolCallRequested | Usage | RateLimits | Retrying


class ModelError(ServerError):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


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


def _backoff(attempt: int) -> float:
    base: float = min(30.0, 0.5 * 2.0 ** (attempt - 1))
    return base * (0.5 + random.random() / 2)


_RATE_HEADERS = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
                 "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens",
                 "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")


def _rate_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {h: headers[h] for h in _RATE_HEADERS if h in headers}


# providers --------------------------------------------------------------------------------

class ModelProvider(abc.ABC):
    """One configured provider. ``stream`` is the only call the loop makes."""

    def __init__(self, config: ProviderConfig, token: TokenSource) -> None:
        self.config = config
        self.name = config.name
        self._token = token
        self.models: list[str] = list(config.models)

    @property
    def default_model(self) -> str:
        return self.config.default_model or (self.models[0] if self.models else "")

    async def _client(self) -> AsyncOpenAI:
        from openai import AsyncOpenAI  # imported on first use: it takes ~0.8 s

        token = await self._token()
        if token is None and self.config.auth != "none":
            raise ModelError(f"provider {self.name!r} is not logged in", status=401)
        return AsyncOpenAI(api_key=token or "none", base_url=self.config.base_url,
                           max_retries=0, timeout=600.0)

    async def stream(self, *, model: str, instructions: str, conversation: list[Entry],
                     tools: list[ToolSpec]) -> AsyncIterator[ModelEvent]:
        import openai

        attempt = 0
        while True:
            attempt += 1
            started = False
            try:
                client = await self._client()
                async for event in self._stream_once(client, model, instructions, conversation,
                                                     tools):
                    started = True
                    yield event
                return
            except openai.APIStatusError as err:
                status = err.status_code
                if started or not (status == 429 or status >= 500) \
                        or attempt > self.config.max_retries:
                    raise ModelError(_describe(err), status=status) from None
                delay = retry_after(err.response.headers) or _backoff(attempt)
                yield Retrying(attempt, delay, f"HTTP {status}")
                await asyncio.sleep(min(delay, 120.0))
            except (openai.APIConnectionError, openai.APITimeoutError) as err:
                if started or attempt > self.config.max_retries:
                    raise ModelError(f"cannot reach {self.config.base_url}: {err}") from None
                delay = _backoff(attempt)
                yield Retrying(attempt, delay, "connection failed")
                await asyncio.sleep(delay)

    @abc.abstractmethod
    def _stream_once(self, client: AsyncOpenAI, model: str, instructions: str,
                     conversation: list[Entry], tools: list[ToolSpec]
                     ) -> AsyncIterator[ModelEvent]:
        """One model call, streamed, in this provider's wire format."""


def _describe(err: Any) -> str:
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return f"HTTP {err.status_code}: {inner['message']}"
    return f"HTTP {err.status_code}: {err.message}"


class ResponsesProvider(ModelProvider):
    """The OpenAI Responses API, streamed; stateless (the whole input every call)."""

    async def _stream_once(self, client: AsyncOpenAI, model: str, instructions: str,
                           conversation: list[Entry], tools: list[ToolSpec]
                           ) -> AsyncIterator[ModelEvent]:
        raw = await client.responses.with_raw_response.create(
            model=model, instructions=instructions,
            input=cast(Any, _responses_input(conversation)),
            tools=cast(Any, [{"type": "function", "name": t.name, "description": t.description,
                              "parameters": t.parameters, "strict": False} for t in tools]),
            stream=True, store=False,
            reasoning=cast(Any, {"summary": "auto"} if self.config.reasoning_summary
                           else _not_given()),
        )
        headers = _rate_headers(raw.headers)
        if headers:
            yield RateLimits(headers)
        stream = raw.parse()
        calls: dict[str, dict[str, str]] = {}
        async for raw_event in stream:
            event: Any = raw_event  # the SDK's union of ~60 event types; we read a few
            kind = getattr(event, "type", "")
            if kind == "response.output_text.delta":
                yield TextDelta(event.delta)
            elif kind == "response.reasoning_summary_text.delta":
                yield ReasoningDelta(event.delta)
            elif kind == "response.output_item.done":
                item = event.item
                if getattr(item, "type", "") == "function_call":
                    calls.pop(item.id or "", None)
                    yield ToolCallRequested(item.call_id, item.name, item.arguments or "{}")
            elif kind == "response.completed":
                usage = getattr(event.response, "usage", None)
                if usage is not None:
                    details = getattr(usage, "output_tokens_details", None)
                    yield Usage(usage.input_tokens, usage.output_tokens,
                                getattr(details, "reasoning_tokens", 0) or 0,
                                usage.total_tokens)
            elif kind in ("response.failed", "error"):
                message = getattr(getattr(event, "response", None), "error", None) or event
                raise ModelError(f"the model failed: {message}")


def _not_given() -> Any:
    from openai import NOT_GIVEN

    return NOT_GIVEN


def _responses_input(conversation: list[Entry]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in conversation:
        if isinstance(e, UserText):
            out.append({"role": "user", "content": e.text})
        elif isinstance(e, AssistantText):
            out.append({"role": "assistant", "content": e.text})
        elif isinstance(e, ToolCallEntry):
            out.append({"type": "function_call", "call_id": e.call_id, "name": e.name,
                        "arguments": e.arguments})
        else:
            out.append({"type": "function_call_output", "call_id": e.call_id,
                        "output": e.output})
    return out


class ChatProvider(ModelProvider):
    """Any OpenAI-compatible Chat Completions endpoint (and Ollama's), streamed."""

    async def _stream_once(self, client: AsyncOpenAI, model: str, instructions: str,
                           conversation: list[Entry], tools: list[ToolSpec]
                           ) -> AsyncIterator[ModelEvent]:
        raw = await client.chat.completions.with_raw_response.create(
            model=model, messages=cast(Any, _chat_messages(instructions, conversation)),
            tools=cast(Any, [{"type": "function",
                              "function": {"name": t.name, "description": t.description,
                                           "parameters": t.parameters}}
                             for t in tools] or _not_given()),
            stream=True, stream_options={"include_usage": True},
        )
        headers = _rate_headers(raw.headers)
        if headers:
            yield RateLimits(headers)
        stream = raw.parse()
        calls: dict[int, dict[str, str]] = {}
        async for chunk in stream:
            if chunk.usage is not None:
                details = getattr(chunk.usage, "completion_tokens_details", None)
                yield Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens,
                            getattr(details, "reasoning_tokens", 0) or 0,
                            chunk.usage.total_tokens)
            for choice in chunk.choices:
                delta = choice.delta
                reasoning = getattr(delta, "reasoning_content", None) or getattr(
                    delta, "reasoning", None)
                if isinstance(reasoning, str) and reasoning:
                    yield ReasoningDelta(reasoning)
                if delta.content:
                    yield TextDelta(delta.content)
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function is not None:
                        if tc.function.name:
                            slot["name"] += tc.function.name
                        if tc.function.arguments:
                            slot["arguments"] += tc.function.arguments
        for index in sorted(calls):
            slot = calls[index]
            yield ToolCallRequested(slot["id"] or f"call_{index}", slot["name"],
                                    slot["arguments"] or "{}")


def _chat_messages(instructions: str, conversation: list[Entry]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}]
    for e in conversation:
        if isinstance(e, UserText):
            messages.append({"role": "user", "content": e.text})
        elif isinstance(e, AssistantText):
            messages.append({"role": "assistant", "content": e.text})
        elif isinstance(e, ToolCallEntry):
            call = {"id": e.call_id, "type": "function",
                    "function": {"name": e.name, "arguments": e.arguments}}
            last = messages[-1]
            # tool calls of one model answer belong to one assistant message
            if last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                last.setdefault("content", None)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append({"role": "tool", "tool_call_id": e.call_id, "content": e.output})
    return messages


async def discover_ollama_models(base_url: str) -> list[str]:
    """Model names from Ollama's ``/api/tags``; an unreachable Ollama gives [] (logged)."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[:-3]
    try:
        async with httpx.AsyncClient(timeout=5.0) as http:
            r = await http.get(f"{root}/api/tags")
            r.raise_for_status()
            data = r.json()
    except (httpx.HTTPError, json.JSONDecodeError, ValueError) as err:
        log.warning("Ollama at %s is unreachable (%s): no models listed", root, err)
        return []
    return [m["name"] for m in data.get("models", []) if isinstance(m, dict) and "name" in m]


def build_provider(config: ProviderConfig, token: TokenSource) -> ModelProvider:
    if config.kind == "responses":
        return ResponsesProvider(config, token)
    return ChatProvider(config, token)
