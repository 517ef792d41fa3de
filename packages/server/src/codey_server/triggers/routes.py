"""``/api/triggers`` (logged in: create, change, remove, replay a delivery) and the webhook
itself, ``POST /hooks/t/<hook_id>`` (public: GitHub has no login; the secret's signature,
the unguessable URL, a size cap and a rate limit guard it)."""

from __future__ import annotations

import hmac
import time
from typing import Annotated, Any, Literal, Protocol, runtime_checkable
from urllib.parse import parse_qs

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from codey_protocol import events as ev
from codey_protocol.events import ApprovalPolicy
from codey_protocol.state import State, TriggerInfo
from codey_server.core.engine import Engine
from codey_server.core.rules import CommandRejected
from codey_server.http.access import PUBLIC
from codey_server.http.errors import errors
from codey_server.http.fields import NonBlank, pattern
from codey_server.http.resource import Resource
from codey_server.triggers import rules, template
from codey_server.triggers.limits import RateLimits
from codey_server.triggers.secrets import TriggerSecrets, new_secret
from codey_server.triggers.webhook import signature_problem

__all__ = ["HOOK_PATH", "MAX_BODY_BYTES", "HookController", "TriggerBody",
           "TriggersController"]

#: where a trigger's deliveries go: ``HOOK_PATH/<hook_id>``
HOOK_PATH = "/hooks/t"
#: the largest delivery taken (GitHub's are mostly under 100 KB; a bigger one is answered 413
#: before it is read whole)
MAX_BODY_BYTES = 1024 * 1024

EventFilter = Annotated[str, msgspec.Meta(
    pattern=pattern(rules.EVENT_FILTER, "not an event filter (e.g. issue_comment, "
                                        "pull_request.opened)"),
    description="An `X-GitHub-Event` name, optionally with the payload's action: "
                "`issue_comment`, `pull_request.opened`.")]


@runtime_checkable  # Litestar checks a dependency's type
class Blobs(Protocol):
    """The deployment's blob store (``blobs``): where a delivery's payload is kept, by its
    sha256, for a replay."""

    def put(self, data: bytes) -> str: ...

    def get(self, digest: str) -> bytes | None: ...


class TriggerBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A trigger: what a delivery starts. ``prompt`` is a template: ``{{payload.<path>}}``
    (dotted keys, ``[0]`` for an array's item), ``{{event}}``, ``{{action}}``. ``signed``:
    deliveries must carry GitHub's ``X-Hub-Signature-256`` under a secret the server makes
    (shown once, in the answer); ``rotate_secret`` makes a new one."""

    name: Annotated[NonBlank, msgspec.Meta(max_length=200)]
    worker_id: str
    workdir: NonBlank
    prompt: Annotated[NonBlank, msgspec.Meta(max_length=20_000)]
    policy: ApprovalPolicy = "suggest"
    target: Literal["session", "task"] = "session"
    events: Annotated[list[EventFilter], msgspec.Meta(max_length=20)] = msgspec.field(
        default_factory=list)
    # 0 is no budget (not None: Litestar drops the bounds of a type inside a union, and the
    # document must say them)
    # whole numbers as JSON Schema has them (45.0 is one), made ints in :meth:`fields`
    budget_tokens: Annotated[float, msgspec.Meta(ge=0, le=1_000_000_000, multiple_of=1)] = 0
    budget_usd: Annotated[float, msgspec.Meta(ge=0, le=1_000_000)] = 0
    per_minute: Annotated[float, msgspec.Meta(ge=1, le=rules.MAX_PER_MINUTE, multiple_of=1)] = 30
    enabled: bool = True
    signed: bool = True
    rotate_secret: bool = False

    def fields(self) -> ev.TriggerFields:
        given = {k: getattr(self, k) for k in ev.TriggerFields.__struct_fields__}
        return ev.TriggerFields(**{**given, "budget_tokens": int(self.budget_tokens) or None,
                                   "budget_usd": self.budget_usd or None,
                                   "per_minute": int(self.per_minute)})


class Saved(msgspec.Struct, kw_only=True):
    trigger_id: str
    #: the path deliveries go to (the server's address before it)
    url_path: str
    #: the webhook secret, this once (None: unchanged, or the trigger is not signed)
    secret: str | None = None
    #: the template's braces that are not fields (they stay as they are)
    warnings: list[str] = msgspec.field(default_factory=list)
    seq: int


class Removed(msgspec.Struct, kw_only=True):
    trigger_id: str
    seq: int


class Delivered(msgspec.Struct, kw_only=True):
    """What a delivery came to (``trigger_delivered``)."""

    delivery_id: str
    outcome: ev.TriggerOutcome
    reason: str = ""
    session_id: str | None = None
    task_id: str | None = None
    missing: list[str] = msgspec.field(default_factory=list)


def _saved(envs: list[ev.Envelope], secret: str | None, prompt: str) -> Saved:
    e = envs[0].event
    assert isinstance(e, ev.TriggerSet)
    return Saved(trigger_id=e.spec.trigger_id, url_path=f"{HOOK_PATH}/{e.spec.hook_id}",
                 secret=secret, warnings=template.problems(prompt, rules.ROOTS),
                 seq=envs[-1].seq)


def _delivered(envs: list[ev.Envelope]) -> Delivered:
    e = envs[0].event
    assert isinstance(e, ev.TriggerDelivered)
    return Delivered(delivery_id=e.delivery_id, outcome=e.outcome, reason=e.reason,
                     session_id=e.session_id, task_id=e.task_id, missing=list(e.missing))


class TriggersController(Resource):
    path = "/api/triggers"
    tags = ["triggers"]

    @get(sync_to_thread=False, responses=errors())
    def list_triggers(self, engine: NamedDependency[Engine]) -> list[TriggerInfo]:
        """Every trigger with its latest deliveries (never its secret)."""
        return list(engine.state.triggers.values())

    @post(status_code=201, responses=errors(404))
    async def create_trigger(self, data: JSONBody[TriggerBody], engine: NamedDependency[Engine],
                             trigger_secrets: NamedDependency[TriggerSecrets]) -> Saved:
        """A new trigger; its secret (when ``signed``) is in the answer, this once."""
        hook_id = new_hook_id()
        trigger_id = engine.context.new_id("trg")
        secret = new_secret() if data.signed else None
        if secret is not None:  # kept before the trigger exists: it never runs unsigned
            trigger_secrets.put(trigger_id, secret)
        try:
            envs = await engine.submit(rules.save, rules.Save(
                fields=data.fields(), trigger_id=trigger_id, hook_id=hook_id, new=True,
                has_secret=secret is not None))
        except BaseException:
            trigger_secrets.remove(trigger_id)
            raise
        return _saved(envs, secret, data.prompt)

    @post("/{trigger_id:str}", status_code=200, responses=errors(404))
    async def update_trigger(self, trigger_id: FromPath[str], data: JSONBody[TriggerBody],
                             engine: NamedDependency[Engine],
                             trigger_secrets: NamedDependency[TriggerSecrets]) -> Saved:
        """Change a trigger (its URL stays); a new secret when ``rotate_secret`` or when it
        becomes ``signed``."""
        info = engine.state.triggers.get(trigger_id)
        if info is None:
            raise CommandRejected("not_found", f"no trigger {trigger_id!r}")
        secret = None
        if data.signed and (data.rotate_secret or trigger_secrets.get(trigger_id) is None):
            secret = new_secret()
        envs = await engine.submit(rules.save, rules.Save(
            fields=data.fields(), trigger_id=trigger_id, has_secret=data.signed))
        # after the change is taken (a refused one keeps the old secret); until the file has
        # the new one, the old one still signs, or (just made signed) nothing does: refused
        if secret is not None:
            trigger_secrets.put(trigger_id, secret)
        if not data.signed:
            trigger_secrets.remove(trigger_id)
        return _saved(envs, secret, data.prompt)

    @delete("/{trigger_id:str}", status_code=200, responses=errors(404))
    async def delete_trigger(self, trigger_id: FromPath[str], engine: NamedDependency[Engine],
                             trigger_secrets: NamedDependency[TriggerSecrets],
                             trigger_limits: NamedDependency[RateLimits]) -> Removed:
        envs = await engine.submit(rules.remove, trigger_id)
        trigger_secrets.remove(trigger_id)
        trigger_limits.forget(trigger_id)
        return Removed(trigger_id=trigger_id, seq=envs[-1].seq)

    @post("/{trigger_id:str}/deliveries/{delivery_id:str}/replay", status_code=200,
          responses=errors(404, 409))
    async def replay_delivery(self, trigger_id: FromPath[str], delivery_id: FromPath[str],
                              engine: NamedDependency[Engine],
                              blobs: NamedDependency[Blobs]) -> Delivered:
        """Run a delivery's payload again, as a new delivery that names it (``replay_of``).
        Only a delivery whose payload was kept (it was not refused) can be."""
        info = engine.state.triggers.get(trigger_id)
        if info is None:
            raise CommandRejected("not_found", f"no trigger {trigger_id!r}")
        old = next((d for d in info.deliveries if d.delivery_id == delivery_id), None)
        if old is None:
            raise CommandRejected("not_found", f"no delivery {delivery_id!r} listed")
        raw = blobs.get(old.payload) if old.payload else None
        if raw is None:
            raise CommandRejected("conflict", "this delivery's payload was not kept (it was "
                                              "refused): there is nothing to replay")
        payload = msgspec.json.decode(raw)
        envs = await engine.submit(rules.deliver, rules.Delivery(
            trigger_id=trigger_id, event=old.event.split(".", 1)[0], payload=payload,
            payload_hash=old.payload, replay_of=delivery_id))
        return _delivered(envs)


def new_hook_id() -> str:
    """A URL part nobody can guess: 24 random bytes."""
    import secrets

    return secrets.token_urlsafe(24)


def _find(state: State, hook_id: str) -> TriggerInfo | None:
    """The trigger whose URL part is ``hook_id``, compared to each in constant time, every
    one of them: how long a miss takes says nothing about how close it came."""
    found = None
    wanted = hook_id.encode()
    for info in state.triggers.values():
        if hmac.compare_digest(info.spec.hook_id.encode(), wanted):
            found = info
    return found


def _error(status: int, detail: str) -> Response[dict[str, Any]]:
    return Response({"status_code": status, "detail": detail}, status_code=status)


async def _body(request: Request[Any, Any, Any]) -> bytes | None:
    """The body, or None when it is over :data:`MAX_BODY_BYTES` (stopped reading there)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _payload(body: bytes, content_type: str) -> tuple[Any, str]:
    """The delivery's JSON, from a JSON body or GitHub's form-encoded one (``payload=...``);
    (None, why) when it is neither."""
    text = body
    if content_type.startswith("application/x-www-form-urlencoded"):
        form = parse_qs(body.decode("utf-8", "replace"))
        if "payload" not in form:
            return None, "a form body without a payload field"
        text = form["payload"][0].encode()
    try:
        return msgspec.json.decode(text), ""
    except msgspec.DecodeError:
        return None, "the body is not JSON"


class HookController(Resource):
    path = HOOK_PATH
    include_in_schema = False

    @post("/{hook_id:str}", opt=PUBLIC, status_code=202)
    async def deliver(self, hook_id: FromPath[str], request: Request[Any, Any, Any],
                      engine: NamedDependency[Engine],
                      trigger_secrets: NamedDependency[TriggerSecrets],
                      trigger_limits: NamedDependency[RateLimits],
                      blobs: NamedDependency[Blobs]) -> Response[Any]:
        """A webhook delivery: checked (size, rate, signature), then recorded with what it
        started."""
        info = _find(engine.state, hook_id)
        if info is None:
            return _error(404, "no such trigger")
        trigger_id = info.spec.trigger_id
        if not trigger_limits.take(trigger_id, info.spec.per_minute, time.monotonic()):
            return _error(429, "too many deliveries to this trigger; try again in a minute")
        body = await _body(request)
        if body is None:
            return _error(413, f"the body is over {MAX_BODY_BYTES} bytes")
        event = request.headers.get("x-github-event", "")[:100]
        secret = trigger_secrets.get(trigger_id) if info.spec.has_secret else None
        refused = signature_problem(secret, body, request.headers.get("x-hub-signature-256"))
        if info.spec.has_secret and secret is None:
            refused = "this server does not hold the trigger's secret"
        status = 401 if refused else 400
        payload: Any = None
        payload_hash = ""
        if not refused:
            payload, refused = _payload(body, request.headers.get("content-type", ""))
        if not refused:
            status = 202
            payload_hash = blobs.put(msgspec.json.encode(payload))
        envs = await engine.submit(rules.deliver, rules.Delivery(
            trigger_id=trigger_id, event=event, payload=payload, payload_hash=payload_hash,
            refused=refused))
        # GitHub shows a delivery answered other than 2xx as failed: a bad signature or body
        return Response(msgspec.to_builtins(_delivered(envs)), status_code=status)
