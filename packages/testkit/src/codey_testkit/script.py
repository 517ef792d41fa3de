"""The scripted model's script: schema, loading, and matching a request's latest input.

A script is a list of steps; each answers the request whose LATEST input it matches::

    model: scripted-1                 # or a list; listed by /v1/models and /api/tags
    options: {delay_ms: 0, chunk_size: 16}
    steps:
      - match: {user: "fix the tests"}          # substring of the latest user message
        reply:
          reasoning: "Look at the file first"   # reasoning summary
          text: "Let me look."                  # assistant text, streamed in chunk_size pieces
          calls: [{name: read_file, arguments: {path: app.py}}]
      - match: {tool: read_file, tool_output: "def add"}
        reply: {text: "Found it."}
      - match: {user: "flaky"}
        times: 1                                # then the step is spent: later steps answer
        reply: {error: {status: 429, retry_after: 1}}
      - match: {any: true}
        reply: {text: "Done."}

The latest input is the last item of the request: a user message (``user`` matches a
substring of its text), or a run of tool results (``tool`` is the name of the call a result
answers, ``tool_output`` a substring of its output; both must hold for the same result, any
result of the run may match). Keys in one ``match`` are ANDed; ``any: true`` matches anything.
The first step, in order, that matches and has uses left wins. Matching is case-sensitive.
Unknown keys anywhere are an error, so typos fail loudly.

``$PROCESS_ID`` in a call's arguments is replaced by the newest process id (``proc_…``) in the
request, so a script can poll, write to or kill what an earlier ``exec`` call started.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from codey_testkit.errors import ScriptError

__all__ = [
    "Call",
    "ErrorReply",
    "LatestInput",
    "Match",
    "Options",
    "RateLimit",
    "Reply",
    "Script",
    "ScriptRunner",
    "Step",
    "ToolResult",
    "Usage",
    "anthropic_latest",
    "chat_latest",
    "load_script",
    "responses_latest",
]

Api = Literal["responses", "chat", "anthropic"]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class Call(_Strict):
    """A function call the model makes. ``arguments`` as a mapping is JSON-encoded; a string
    is sent verbatim (so a test can send malformed JSON). ``id`` fixes the call_id."""

    name: str
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


class ErrorReply(_Strict):
    """An HTTP error instead of an answer; 429 and 5xx carry ``Retry-After`` if given."""

    status: int = 500
    retry_after: float | None = None
    message: str | None = None
    type: str | None = None
    code: str | None = None


class Usage(_Strict):
    """Token counts to report instead of the estimate (about 4 characters a token)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    #: Anthropic: None lets the server's prompt-cache model say what was read and written
    cached_tokens: int | None = None


Shape = Literal["deltas", "final_only", "completed_only"]


class Reply(_Strict):
    """What the model answers. Pacing fields override the script's ``options``.

    ``delay_ms`` sleeps before every delta; ``initial_delay_ms`` before the first byte of the
    body (headers are sent first when streaming); ``disconnect_after`` drops the connection
    after that many stream events, without a clean end.

    Wire shapes real providers send, to test a client against:

    - ``shape``: ``deltas`` (text, reasoning and arguments streamed in ``chunk_size`` pieces),
      ``final_only`` (no delta events: each output item whole in its ``done`` event; Chat:
      everything in one chunk; Anthropic: one delta a block), ``completed_only``
      (Responses: nothing but ``response.created`` and ``response.completed``; Chat: as
      ``final_only``; Anthropic: each block whole in its ``content_block_start``);
    - ``refusal``: the model declines with this text (a ``refusal`` content part);
    - ``incomplete``: the answer stops early for this reason (``response.incomplete``; Chat
      ``finish_reason`` ``length`` / ``content_filter``);
    - ``encrypted_reasoning``: a reasoning item carrying this ``encrypted_content`` (Responses,
      when the request includes ``reasoning.encrypted_content``); Anthropic: the thinking
      blocks' signature (else a made-up one: a thinking block always has one);
    - ``redacted_reasoning``: Anthropic: a ``redacted_thinking`` block with this data, after
      the thinking;
    - ``usage_at_end``: Anthropic: no usage in ``message_start``, all of it in
      ``message_delta``;
    - ``usage_every_chunk``: Chat: cumulative usage in every chunk, not only the last;
    - ``tool_call_index``: Chat: false sends tool-call deltas without ``index``;
    - ``stream_error``: after the content, the stream reports this error instead of finishing
      (``response.failed``; Chat: an ``error`` chunk; Anthropic: an ``error`` event, its
      ``type`` the reply's ``type`` or ``overloaded_error``).
    - An empty reply (no text, no calls) is a legal answer too.
    """

    text: str | None = None
    reasoning: str | list[str] | None = None
    calls: list[Call] = msgspec.field(default_factory=list)
    error: ErrorReply | None = None
    times: int | None = None
    delay_ms: float | None = None
    initial_delay_ms: float | None = None
    chunk_size: int | None = None
    usage: Usage | None = None
    disconnect_after: int | None = None
    shape: Shape = "deltas"
    refusal: str | None = None
    incomplete: Literal["max_output_tokens", "content_filter"] | None = None
    encrypted_reasoning: str | None = None
    redacted_reasoning: str | None = None
    usage_at_end: bool = False
    usage_every_chunk: bool = False
    tool_call_index: bool = True
    stream_error: ErrorReply | None = None

    def reasoning_parts(self) -> list[str]:
        if self.reasoning is None:
            return []
        return [self.reasoning] if isinstance(self.reasoning, str) else list(self.reasoning)


class Match(_Strict):
    """How a step recognises its request; see the module docstring."""

    user: str | None = None
    tool: str | None = None
    tool_output: str | None = None
    any: bool = False
    model: str | None = None
    api: Api | None = None
    #: the request holds fewer tool results than this (in the whole conversation): a session
    #: makes exactly N calls with ``{tool: shell, results_below: N}`` whatever other sessions
    #: do (``times`` counts across every session)
    results_below: int | None = None

    def matches(self, latest: LatestInput, api: Api, model: str | None) -> bool:
        if self.api is not None and self.api != api:
            return False
        if self.model is not None and self.model != model:
            return False
        if self.results_below is not None and (
                latest.kind != "tool" or latest.results_so_far >= self.results_below):
            return False
        if self.user is not None and (latest.kind != "user" or self.user not in latest.text):
            return False
        if self.tool is not None or self.tool_output is not None:
            if latest.kind != "tool":
                return False
            return any(
                (self.tool is None or result.name == self.tool)
                and (self.tool_output is None or self.tool_output in result.output)
                for result in latest.tool_results
            )
        return True


class Step(_Strict):
    """One scripted answer. ``times`` (here or in the reply) limits how often it is used."""

    match: Match
    reply: Reply
    times: int | None = None

    @property
    def uses(self) -> int | None:
        return self.times if self.times is not None else self.reply.times


class RateLimit(_Strict):
    """Values for the ``x-ratelimit-*`` headers; counters restart every ``window_s``."""

    limit_requests: int = 10_000
    limit_tokens: int = 10_000_000
    window_s: float = 60.0


class Options(_Strict):
    """Script-wide defaults."""

    delay_ms: float = 0.0
    initial_delay_ms: float = 0.0
    chunk_size: int = 16
    rate_limit: RateLimit = msgspec.field(default_factory=RateLimit)
    #: refuse (400 ``context_length_exceeded``) a request whose input is estimated (about
    #: four characters a token) above this many tokens, as a real model would
    context_window: int | None = None


class Script(_Strict):
    """A whole script. ``model`` may be one id or a list of ids."""

    steps: list[Step] = msgspec.field(default_factory=list)
    model: str | list[str] = "scripted-1"
    options: Options = msgspec.field(default_factory=Options)

    @property
    def models(self) -> list[str]:
        return [self.model] if isinstance(self.model, str) else list(self.model)


def load_script(source: Path | str | Mapping[str, Any]) -> Script:
    """Parse and validate a script from a mapping or a YAML/JSON file path.

    Files ending in ``.json`` are read as JSON, others as YAML. Raises ScriptError naming the
    offending location (e.g. ``$.steps[1].match``).
    """
    if isinstance(source, Mapping):
        data: Any = dict(source)
        where = "script"
    else:
        path = Path(source)
        where = str(path)
        try:
            raw = path.read_text(encoding="utf-8")
            data = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise ScriptError(f"{where}: cannot read script: {exc}") from exc
    if isinstance(data, list):
        data = {"steps": data}  # a bare list of steps is a script too
    try:
        script = msgspec.convert(data, Script)
    except msgspec.ValidationError as exc:
        raise ScriptError(f"{where}: invalid script: {exc}") from exc
    _validate(script, where)
    return script


def _validate(script: Script, where: str) -> None:
    for n, step in enumerate(script.steps):
        m = step.match
        if not (m.any or m.user is not None or m.tool is not None or m.tool_output is not None):
            raise ScriptError(
                f"{where}: step {n}: match needs one of user, tool, tool_output or any: true"
            )
        if step.times is not None and step.reply.times is not None:
            raise ScriptError(f"{where}: step {n}: give times once (step or reply), not both")
        if step.uses is not None and step.uses < 1:
            raise ScriptError(f"{where}: step {n}: times must be >= 1")
        err = step.reply.error
        if err is not None and not 400 <= err.status <= 599:
            raise ScriptError(f"{where}: step {n}: error status must be 4xx or 5xx")
        chunk = step.reply.chunk_size
        if chunk is not None and chunk < 1:
            raise ScriptError(f"{where}: step {n}: chunk_size must be >= 1")
    if script.options.chunk_size < 1:
        raise ScriptError(f"{where}: options.chunk_size must be >= 1")


class ScriptRunner:
    """A script plus how often each step was used. Not thread-safe: one event loop owns it."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self._used = [0] * len(script.steps)

    def select(self, latest: LatestInput, api: Api, model: str | None) -> int | None:
        """Return the index of the step that answers, counting one use of it; None if none."""
        for n, step in enumerate(self.script.steps):
            limit = step.uses
            if limit is not None and self._used[n] >= limit:
                continue
            if step.match.matches(latest, api, model):
                self._used[n] += 1
                return n
        return None

    @property
    def used(self) -> list[int]:
        """Uses per step, in script order."""
        return list(self._used)


# -- the latest input of a request --------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """One tool result in a request; ``name`` is None when the call it answers is unknown."""

    call_id: str
    name: str | None
    output: str


@dataclass(frozen=True)
class LatestInput:
    """What a request ends with: ``user`` (text), ``tool`` (results), ``other`` or ``empty``."""

    kind: Literal["user", "tool", "other", "empty"]
    text: str = ""
    tool_results: tuple[ToolResult, ...] = field(default=())
    results_so_far: int = 0  # tool results in the whole request, this turn's and older ones

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "user":
            out["text"] = self.text
        if self.tool_results:
            out["tool_results"] = [
                {"call_id": r.call_id, "name": r.name, "output": r.output}
                for r in self.tool_results
            ]
        return out


def _text_of(content: Any) -> str:
    """Flatten a message/tool content (string, list of parts, or other JSON) into text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return json.dumps(content)


def _trailing(items: Sequence[Any], is_result: Any) -> list[Any]:
    run: list[Any] = []
    for item in reversed(items):
        if not is_result(item):
            break
        run.append(item)
    run.reverse()
    return run


def responses_latest(body: Mapping[str, Any], known_calls: Mapping[str, str]) -> LatestInput:
    """The latest input of a Responses API request body.

    ``known_calls`` maps call_id → tool name for calls this server emitted earlier, so a
    request that relies on ``previous_response_id`` (and so omits the function_call items)
    still resolves tool names.
    """
    raw = body.get("input")
    if isinstance(raw, str):
        return LatestInput("user", text=raw)
    if not isinstance(raw, list) or not raw:
        return LatestInput("empty")
    items = [i for i in raw if isinstance(i, Mapping)]
    if not items:
        return LatestInput("empty")
    names = dict(known_calls)
    for item in items:
        if item.get("type") == "function_call" and isinstance(item.get("call_id"), str):
            names[item["call_id"]] = str(item.get("name"))

    def is_result(item: Mapping[str, Any]) -> bool:
        return item.get("type") == "function_call_output"

    last = items[-1]
    if is_result(last):
        results = tuple(
            ToolResult(
                call_id=str(i.get("call_id")),
                name=names.get(str(i.get("call_id"))),
                output=_text_of(i.get("output")),
            )
            for i in _trailing(items, is_result)
        )
        return LatestInput("tool", tool_results=results,
                           results_so_far=sum(1 for i in items if is_result(i)))
    if last.get("role") == "user" and last.get("type", "message") == "message":
        return LatestInput("user", text=_text_of(last.get("content")))
    return LatestInput("other")


def _images_of_results(msg: Mapping[str, Any]) -> bool:
    """A user message of tool results' images (Codey's "The image from tool call …")."""
    content = msg.get("content")
    if msg.get("role") != "user" or not isinstance(content, list) or not content:
        return False
    first = content[0]
    return (isinstance(first, Mapping) and str(first.get("text", "")).startswith(
        "The image from tool call ")
        and any(isinstance(p, Mapping) and p.get("type") == "image_url" for p in content))


def chat_latest(body: Mapping[str, Any]) -> LatestInput:
    """The latest input of a Chat Completions request body (its ``messages``)."""
    raw = body.get("messages")
    if not isinstance(raw, list):
        return LatestInput("empty")
    messages = [m for m in raw if isinstance(m, Mapping)]
    if not messages:
        return LatestInput("empty")
    names: dict[str, str] = {}
    for msg in messages:
        for call in msg.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                function = call.get("function") or {}
                names[call["id"]] = str(function.get("name"))

    def is_result(msg: Mapping[str, Any]) -> bool:
        return msg.get("role") == "tool"

    # A tool message carries text only, so Codey sends the images of tool results
    # (view_image) in one user message right after them: that message belongs to the results.
    if len(messages) > 1 and is_result(messages[-2]) and _images_of_results(messages[-1]):
        messages = messages[:-1]
    last = messages[-1]
    if is_result(last):
        results = tuple(
            ToolResult(
                call_id=str(m.get("tool_call_id")),
                name=names.get(str(m.get("tool_call_id"))),
                output=_text_of(m.get("content")),
            )
            for m in _trailing(messages, is_result)
        )
        return LatestInput("tool", tool_results=results,
                           results_so_far=sum(1 for m in messages if is_result(m)))
    if last.get("role") == "user":
        return LatestInput("user", text=_text_of(last.get("content")))
    return LatestInput("other")


def anthropic_latest(body: Mapping[str, Any]) -> LatestInput:
    """The latest input of an Anthropic Messages request body: the last user message's
    trailing text (a prompt), else its tool results."""
    raw = body.get("messages")
    if not isinstance(raw, list):
        return LatestInput("empty")
    messages = [m for m in raw if isinstance(m, Mapping)]
    if not messages:
        return LatestInput("empty")
    names: dict[str, str] = {}
    results_so_far = 0
    for msg in messages:
        for block in _blocks(msg):
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                names[block["id"]] = str(block.get("name"))
            elif block.get("type") == "tool_result":
                results_so_far += 1
    last = messages[-1]
    if last.get("role") != "user":
        return LatestInput("other")
    blocks = _blocks(last)
    if blocks and blocks[-1].get("type") == "tool_result":
        results = tuple(
            ToolResult(call_id=str(b.get("tool_use_id")),
                       name=names.get(str(b.get("tool_use_id"))),
                       output=_text_of(b.get("content")))
            for b in blocks if b.get("type") == "tool_result")
        return LatestInput("tool", tool_results=results, results_so_far=results_so_far)
    texts = _trailing(blocks, lambda b: b.get("type") != "tool_result")
    return LatestInput("user", text=_text_of(texts))


def _blocks(msg: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = msg.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, Mapping)]
