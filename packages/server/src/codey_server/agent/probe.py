"""What Settings → Models asks of a provider before and after it is saved: the models its API
lists (:func:`list_models`), and whether a minimal call goes through (:func:`try_call`).

The listing may be pointed at any URL typed in the form, so it answers only in its own words:
a short kind (``http`` with the status and its standard reason, ``unreachable``, ``timeout``,
``not_json``, ``no_model_list``, ``too_large``) and never the remote's body, headers or reason
phrase — else the server would read any address it can reach (an intranet page, a cloud
metadata service) on a browser's behalf. It follows no redirect and reads at most
:data:`MAX_LISTING_BYTES`. The test call goes to a saved provider with its own credential,
and answers with that provider's words (a wrong key, an unknown model): what the user needs to
fix it.
"""

from __future__ import annotations

import json
import time
from http import HTTPStatus

import msgspec

from codey_server.agent.conversation import UserText
from codey_server.agent.errors import ModelError
from codey_server.agent.models import ModelProvider
from codey_server.agent.stream import Finished, RefusalDelta, TextDelta
from codey_server.agent.wire import CallOptions

__all__ = ["ANTHROPIC_VERSION", "CallResult", "draft_commit_message", "list_models",
           "try_call"]

#: the Messages API version Codey speaks (the ``anthropic-version`` header)
ANTHROPIC_VERSION = "2023-06-01"
#: a listing or a test call that takes longer than this failed
PROBE_TIMEOUT_S = 20.0
#: the test call's prompt: the cheapest answer any chat model gives
TEST_PROMPT = "Reply with the single word OK."
MAX_LISTED = 500
#: a model listing's body, at most (OpenAI's, with a few hundred models, is ~30 KiB)
MAX_LISTING_BYTES = 4 * 1024 * 1024
#: a listed model's name, at most (longer ones are dropped)
MAX_NAME_CHARS = 200


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

    ``base_url`` must have passed :func:`codey_server.http.urls.url_problem`. Raises
    :class:`ModelError` whose ``code`` is the kind of failure (see the module's docstring)
    and whose message is ours, naming the URL and, for ``http``, the status."""
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
    body = bytearray()
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, follow_redirects=False) as http, \
                http.stream("GET", url, headers=headers) as r:
            status = r.status_code
            if status < 300:
                # decoded bytes: the cap holds for a compressed body too
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_LISTING_BYTES:
                        raise ModelError(f"{url} answered more than "
                                         f"{MAX_LISTING_BYTES // 2**20} MiB", code="too_large")
    except httpx.TimeoutException:
        raise ModelError(f"{url} did not answer in {PROBE_TIMEOUT_S:.0f} s",
                         code="timeout") from None
    except (httpx.HTTPError, httpx.InvalidURL) as err:
        # the exception's type only: its text can quote what the remote sent
        raise ModelError(f"could not reach {url} ({type(err).__name__})",
                         code="unreachable") from None
    if status >= 300:
        raise ModelError(f"{url} answered HTTP {status} {_reason(status)}", status=status,
                         code="http")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError included
        raise ModelError(f"{url} did not answer with JSON", code="not_json") from None
    entries = (data or {}).get("models" if kind == "ollama" else "data") \
        if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ModelError(f"{url} did not answer with a list of models", code="no_model_list")
    key = "name" if kind == "ollama" else "id"
    names = [e[key] for e in entries if isinstance(e, dict) and isinstance(e.get(key), str)
             and 0 < len(e[key]) <= MAX_NAME_CHARS and e[key].isprintable()]
    return sorted(dict.fromkeys(names))[:MAX_LISTED]


def _reason(status: int) -> str:
    """The standard reason phrase of ``status``: not the remote's, which is its own text."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "(no standard reason)"


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
