"""What Settings → Models asks of a provider before and after it is saved: the models its API
lists (:func:`list_models`), and whether a minimal call goes through (:func:`try_call`).

Both answer with the provider's own words when it refuses (a wrong key, a wrong URL, an unknown
model): that is what the user needs to fix it.
"""

from __future__ import annotations

import json
import time

import msgspec

from codey_server.agent.conversation import UserText
from codey_server.agent.errors import ModelError
from codey_server.agent.models import ModelProvider
from codey_server.agent.stream import Finished, RefusalDelta, TextDelta
from codey_server.agent.wire import CallOptions
from codey_server.agent.wire.errors import error_from_body

__all__ = ["ANTHROPIC_VERSION", "CallResult", "draft_commit_message", "list_models",
           "try_call"]

#: the Messages API version Codey speaks (the ``anthropic-version`` header)
ANTHROPIC_VERSION = "2023-06-01"
#: a listing or a test call that takes longer than this failed
PROBE_TIMEOUT_S = 20.0
#: the test call's prompt: the cheapest answer any chat model gives
TEST_PROMPT = "Reply with the single word OK."
MAX_LISTED = 500


class CallResult(msgspec.Struct, kw_only=True):
    """How a test call went."""

    ok: bool
    model: str
    #: the model's answer (its first 200 characters), when it answered
    reply: str = ""
    #: the provider's own words, when it refused or failed
    error: str | None = None
    seconds: float = 0.0


def _ollama_root(base_url: str) -> str:
    """The host's root, without the ``/v1`` of an OpenAI-compatible base URL."""
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


async def list_models(kind: str, base_url: str, token: str | None) -> list[str]:
    """The model ids the provider's API lists (``GET /models``; Ollama's ``/api/tags``).
    Raises :class:`ModelError` with the provider's words when it will not say."""
    import httpx  # only when someone asks

    headers: dict[str, str] = {}
    if kind == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if token:
            headers["x-api-key"] = token
    elif token:
        headers["authorization"] = f"Bearer {token}"
    if kind == "ollama":
        url = f"{_ollama_root(base_url)}/api/tags"
    elif kind == "anthropic":  # its base URL is the host's (the SDK adds /v1/...)
        url = f"{_ollama_root(base_url)}/v1/models"
    else:
        url = f"{base_url.rstrip('/')}/models"
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as http:
            r = await http.get(url, headers=headers)
    except httpx.HTTPError as err:
        raise ModelError(f"could not reach {url}: {err or type(err).__name__}",
                         code="unreachable") from None
    try:
        data = r.json()
    except (json.JSONDecodeError, ValueError):
        data = None
    if r.status_code >= 400:
        raise error_from_body(data, r.status_code, fallback_text=r.text[:300])
    entries = (data or {}).get("models" if kind == "ollama" else "data") \
        if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ModelError(f"{url} did not answer with a list of models", code="failed")
    key = "name" if kind == "ollama" else "id"
    names = [e[key] for e in entries if isinstance(e, dict) and isinstance(e.get(key), str)]
    return sorted(dict.fromkeys(names))[:MAX_LISTED]


async def try_call(provider: ModelProvider, model: str) -> CallResult:
    """One minimal model call, streamed as every call is: the provider's answer or its
    refusal. Retries are the provider's own (a 429 is waited out, up to its max_retries)."""
    started = time.perf_counter()
    assembler = provider.wire.assembler()
    assembler.add(UserText(TEST_PROMPT))
    body = provider.wire.body(model=model, instructions="You are a connection test.",
                              messages=assembler.finish(), tools=b"[]", session_id=None,
                              options=CallOptions())
    said: list[str] = []
    try:
        async for event in provider.stream(model=model, body=body):
            if isinstance(event, TextDelta | RefusalDelta):
                said.append(event.text)
            elif isinstance(event, Finished):
                break
    except ModelError as err:
        return CallResult(ok=False, model=model, error=err.message,
                          seconds=round(time.perf_counter() - started, 3))
    return CallResult(ok=True, model=model, reply="".join(said).strip()[:200],
                      seconds=round(time.perf_counter() - started, 3))


#: characters of a change the model reads to draft its commit message
DRAFT_DIFF_CAP = 24_000
DRAFT_INSTRUCTIONS = (
    "You write git commit messages. Given a change, answer with the message only: a subject "
    "line of at most 72 characters in the imperative mood, a blank line, then a short body "
    "saying what changed and why, wrapped at 72 characters. No code fences, no preamble.")


async def draft_commit_message(provider: ModelProvider, model: str, title: str,
                               diff: str) -> str:
    """A commit message for ``diff`` (the session's whole change), written by the model.
    Raises :class:`ModelError` with the provider's words."""
    assembler = provider.wire.assembler()
    cut = diff[:DRAFT_DIFF_CAP]
    more = "\n[… the rest of the diff is cut]" if len(diff) > DRAFT_DIFF_CAP else ""
    assembler.add(UserText(f"The session's task: {title}\n\nThe change:\n{cut}{more}"))
    body = provider.wire.body(model=model, instructions=DRAFT_INSTRUCTIONS,
                              messages=assembler.finish(), tools=b"[]", session_id=None,
                              options=CallOptions())
    said: list[str] = []
    async for event in provider.stream(model=model, body=body):
        if isinstance(event, TextDelta):
            said.append(event.text)
        elif isinstance(event, Finished):
            break
    message = "".join(said).strip().strip("`").strip()
    if not message:
        raise ModelError("the model wrote no message", code="empty_answer")
    return message
