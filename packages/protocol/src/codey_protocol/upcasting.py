"""Upcasting: an event stored in an older shape is read as what it meant when it was stored.

The log is kept for ever and the code changes under it. An event recorded by an older
release lacks the fields added since, and msgspec would fill each with today's default — a
command run before the OS sandbox existed would read ``sandbox: "workspace-write"``, as if
it had been sandboxed. So nothing stored is decoded straight into today's structs: it goes
through an explicit **upcaster** per event type and version first (pyeventsourcing's
upcasting: ``upcast_v1_v2`` on the event's stored state), which says what each missing field
meant then.

The scheme
==========

- **Each event type has a version**, :data:`VERSIONS` (a type not listed is at 1). The log
  stores it in each envelope it appends (:attr:`~codey_protocol.events.Envelope.version`,
  from :func:`version_of`).
- **No version (0) is the shape before this scheme**: every event stored by release
  ``745192a`` and the releases up to the one that brought versions in, each in the shape its
  release had. msgspec writes every field of a struct (no ``omit_defaults`` anywhere in the
  protocol), so a field missing from such an event was not in its writer's struct: it was
  recorded before the field existed. Its upcaster (``(type, 0)``) sets each such field to
  what it meant then, and only where it is missing.
- **Reading** (:func:`decode_stored`, :func:`decode_stored_many`, :func:`current_json_many`):
  an envelope whose version is its type's current one decodes as it is; an older one is
  decoded as JSON, passed through the upcasters from its version to the current one, each
  changing the event's JSON object in place, and then decoded. What is read — by the fold at
  start-up, by a browser catching up — is the current shape, with ``version`` the current
  one. An envelope stored by *newer* code (a version above the current) is refused
  (:class:`~codey_protocol.errors.ProtocolError`, code ``newer_data``): its meaning is not
  known here. (The data format check refuses such a data directory before anything is read.)
- **The stored bytes never change**: the log keeps what was written, and a session's export
  (``GET /api/sessions/{id}/log``) returns it byte for byte.

Changing an event's shape
=========================

Add the field with a default, as msgspec's evolution rules say, then:

1. raise the type's entry in :data:`VERSIONS` (say to 2);
2. add ``UPCASTERS[(type, 1)]``: what an event of version 1, which lacks the field, meant —
   the default only when it is the truth about those events (``None``: not recorded), never
   a new policy presented as a record;
3. record the new shape in ``packages/protocol/tests/unit/event_shapes.json`` (its test says
   how); the fold's version (:mod:`codey_protocol.foldversion`) changes by itself, so the
   next start rebuilds its state from the log instead of trusting an older snapshot.

The upcasters of version 0 and what they decide are listed in ``docs/protocol.md``
("Stored events and upcasting").
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from codey_protocol.errors import ProtocolError
from codey_protocol.events import Envelope

__all__ = ["UPCASTERS", "VERSIONS", "current_json_many", "decode_stored",
           "decode_stored_many", "upcast", "version_of"]

#: each event type's current version, where it is above 1 (every other type is at 1). Raise
#: it when the type's stored shape changes, and add the upcaster from the version before.
VERSIONS: dict[str, int] = {
    "token_usage_recorded": 3,  # 2: provider, cost_micros; 3: context_tokens (issue 39)
    # the approval policy ``reviewer`` joined the literal (version 1 could not hold it)
    "session_created": 2, "session_policy_changed": 2, "schedule_saved": 2,
    "worker_connected": 2,  # 2: capabilities.roots
    "approval_requested": 2,  # 2: the kind ``web`` joined the literal
    # 2: new action types joined the union (checkpoint_*, list_prompt_files,
    # session_bundle/_read/unpack, run_hooks, acp_configure; issue 38, 39)
    "action_requested": 2,
    # 2: a tool call's name, arguments and command; whether a hook blocked a prompt
    "session_item_updated": 2,
    # 2: a move can carry the files to another workdir (issue 38)
    "session_moved": 2,
    # 2: a user message's ``blocked`` (a UserPromptSubmit hook kept it from the model) and
    # ``for_turn`` (the model and tools a slash command set for its turn; issue 39)
    "session_item_appended": 2,
}


def version_of(tag: str) -> int:
    """The current version of event type ``tag``: the one an envelope is stored with."""
    return VERSIONS.get(tag, 1)


#: an upcaster: changes an event's JSON object (``{"type": ..., ...}``) of one version into
#: the shape of the next, in place
Upcaster = Callable[[dict[str, Any]], None]


def _missing(obj: dict[str, Any], meant: Mapping[str, Any]) -> None:
    """Give ``obj`` each field of ``meant`` it lacks, with the value it meant then (a copy:
    the table's lists are shared). A field ``obj`` has keeps its value."""
    for name, value in meant.items():
        if name not in obj:
            obj[name] = copy.deepcopy(value)


def _object(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


# --- version 0: the shapes before versions ------------------------------------------------
# Each table lists every field added to its struct since the first release that stored events,
# with what its absence meant (see docs/protocol.md, "Stored events and upcasting").

#: items (``session_item_appended.item``), by kind
_ITEM_V0: dict[str, dict[str, Any]] = {
    # no attachments could be sent then; who sent a message was not recorded
    "user_message": {"attachments": [], "attachments_written": False, "origin": "unknown"},
    # refusals and cut answers were not told apart: shown and sent back as whole answers
    "assistant_message": {"refusal": False, "partial": False},
    # no provider reasoning was kept to send back
    "reasoning": {"partial": False, "reasoning_id": None, "encrypted_content": None},
    # not recorded: which answer a call came in; no image was given to the model
    "tool_call": {"response_id": None, "image": None},
}

#: actions (``action_requested.action``), by type
_ACTION_V0: dict[str, dict[str, Any]] = {
    # commands and MCP servers ran without an OS sandbox, with the machine's network
    "run_command": {"sandbox": "none", "network": True},
    "mcp_call": {"sandbox": "none", "workdir": ""},
    # listed in a scratch directory, as for ``hello``
    "mcp_list": {"workdir": ""},
    "write_file": {"encoding": "utf-8"},
    # a setup script ran with the network on; a worktree was always made from its base
    "workspace_create": {"network": True, "existing": False},
    # a commit took every change (``git add -A``)
    "workspace_commit": {"paths": None},
    # nobody read a process's pushed tail
    "exec_start": {"live": False},
}

_WORKTREE_V0: dict[str, Any] = {"branch_deleted": False}  # (not known to be gone)


def _worker_paired_v0(event: dict[str, Any]) -> None:
    _missing(event, {"fingerprint": ""})  # its documented "paired before it was kept"


def _worker_connected_v0(event: dict[str, Any]) -> None:
    _missing(event, {"replica": ""})  # one server alone: replicas came later
    caps = _object(event.get("capabilities"))
    if caps is None:
        return
    # no terminal, no ACP agents; and no OS sandbox, which a worker of then could not have
    version = event.get("worker_version") or "of then"
    _missing(caps, {"terminal": False, "acp_agents": [], "sandbox": {
        "kind": "none", "version": "",
        "reason": f"codey-worker {version} is older than the OS sandbox"}})
    for server in caps.get("mcp_servers") or ():
        for tool in (_object(server) or {}).get("tools") or ():
            if isinstance(tool, dict):  # the server gave no hints
                _missing(tool, {"read_only_hint": None, "destructive_hint": None})


def _worker_disconnected_v0(event: dict[str, Any]) -> None:
    _missing(event, {"replica": ""})


def _worktree_v0(event: dict[str, Any]) -> None:
    worktree = _object(event.get("worktree"))
    if worktree is not None:
        _missing(worktree, _WORKTREE_V0)


def _session_created_v0(event: dict[str, Any]) -> None:
    _missing(event, {
        # the features that came later were not in use
        "plan_mode": False, "parent_id": None, "parent_item": None, "role": None,
        "read_only": False, "turn_cap": None, "agent": None, "worktree": None,
        # not recorded
        "origin": "unknown",
        # no OS sandbox existed: its commands ran without one, with the network
        "sandbox": "none", "network": True,
    })
    _worktree_v0(event)


def _session_forked_v0(event: dict[str, Any]) -> None:
    _missing(event, {"worktree": None})
    _worktree_v0(event)


def _worktree_updated_v0(event: dict[str, Any]) -> None:
    _missing(event, {"branch_deleted": None})  # (no change)


def _item_appended_v0(event: dict[str, Any]) -> None:
    item = _object(event.get("item"))
    if item is not None:
        _missing(item, _ITEM_V0.get(item.get("kind", ""), {}))


def _item_updated_v0(event: dict[str, Any]) -> None:
    # an update changes only what it names: these were not named
    _missing(event, dict.fromkeys(
        ("attachments_written", "partial", "reasoning_id", "encrypted_content", "image")))


def _action_requested_v0(event: dict[str, Any]) -> None:
    action = _object(event.get("action"))
    if action is not None:
        _missing(action, _ACTION_V0.get(action.get("type", ""), {}))


def _process_started_v0(event: dict[str, Any]) -> None:
    _missing(event, {"sandbox": None, "network": None})  # not recorded


def _schedule_fired_v0(event: dict[str, Any]) -> None:
    _missing(event, {"item_id": ""})  # not recorded: "" is documented as that


def _context_updated_v0(event: dict[str, Any]) -> None:
    environment = _object(event.get("environment"))
    if environment is not None:
        _missing(environment, {"repo_root": None})  # not reported by the worker of then


def _usage_v0(event: dict[str, Any]) -> None:
    # not recorded: the window and the model; cache reads and writes were not counted (so
    # not billed either: 0 is what was counted then)
    _missing(event, {"cached_tokens": 0, "cache_write_tokens": 0, "context_window": None,
                     "model": None})


def _usage_v1(event: dict[str, Any]) -> None:
    # calls were not priced then, and their provider was not recorded (the fold takes the
    # session's provider as it stood then)
    _missing(event, {"provider": None, "cost_micros": None})


def _usage_v2(event: dict[str, Any]) -> None:
    # the context a call used was always its input and output tokens then
    _missing(event, {"context_tokens": None})


def _item_updated_v1(event: dict[str, Any]) -> None:
    # an update changes only what it names: a tool call's name, arguments and argv were not,
    # nor whether a hook blocked a prompt
    _missing(event, dict.fromkeys(("name", "arguments", "command", "blocked")))


def _telegram_update_handled_v0(event: dict[str, Any]) -> None:
    _missing(event, {"bot_id": 0})  # which bot was not recorded: the one the fold starts with


def _policy_v1(event: dict[str, Any]) -> None:
    """Version 1 of an event with an approval policy: its policy was one of ``suggest``,
    ``auto-edit``, ``full-auto`` and means what it meant; only the literal grew (``reviewer``),
    so nothing changes."""


def _literal_grew_v1(event: dict[str, Any]) -> None:
    """Version 1 of an event whose literal grew (``approval_requested``'s kind: ``web``):
    its value was one of the older ones and means what it meant; nothing changes."""


def _worker_connected_v1(event: dict[str, Any]) -> None:
    """Version 1 did not report the worker's allowed roots: none reported (the server then
    goes by the roots it paired with)."""
    caps = _object(event.get("capabilities"))
    if caps is not None:
        _missing(caps, {"roots": []})


def _action_requested_v1(event: dict[str, Any]) -> None:
    """Version 2 only added action types (``checkpoint_*``, ``list_prompt_files``, a move's
    ``session_bundle*`` and ``session_unpack``, ``run_hooks``, ``acp_configure``): an action
    stored at 1 is one of the others, and reads the same."""


def _session_moved_v1(event: dict[str, Any]) -> None:
    # a move then kept the workdir's path and carried no files
    _missing(event, {"workdir": "", "from_workdir": "", "bundle": "", "bundle_size": 0})


def _item_appended_v1(event: dict[str, Any]) -> None:
    # no hook could keep a prompt from the model then, no slash command set a turn's model
    # or tools
    item = _object(event.get("item"))
    if item is not None and item.get("kind") == "user_message":
        _missing(item, {"blocked": "", "for_turn": None})


#: ``(event type, version) -> upcaster`` to the next version. A type with no entry for a
#: version had nothing to change at it.
UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("worker_paired", 0): _worker_paired_v0,
    ("worker_connected", 0): _worker_connected_v0,
    ("worker_disconnected", 0): _worker_disconnected_v0,
    ("session_created", 0): _session_created_v0,
    ("session_forked", 0): _session_forked_v0,
    ("worktree_updated", 0): _worktree_updated_v0,
    ("session_item_appended", 0): _item_appended_v0,
    ("session_item_updated", 0): _item_updated_v0,
    ("action_requested", 0): _action_requested_v0,
    ("process_started", 0): _process_started_v0,
    ("schedule_fired", 0): _schedule_fired_v0,
    ("session_context_updated", 0): _context_updated_v0,
    ("token_usage_recorded", 0): _usage_v0,
    ("token_usage_recorded", 1): _usage_v1,
    ("token_usage_recorded", 2): _usage_v2,
    ("telegram_update_handled", 0): _telegram_update_handled_v0,
    ("session_created", 1): _policy_v1,
    ("session_policy_changed", 1): _policy_v1,
    ("schedule_saved", 1): _policy_v1,
    ("worker_connected", 1): _worker_connected_v1,
    ("approval_requested", 1): _literal_grew_v1,
    ("action_requested", 1): _action_requested_v1,
    ("session_item_updated", 1): _item_updated_v1,
    ("session_moved", 1): _session_moved_v1,
    ("session_item_appended", 1): _item_appended_v1,
}


def upcast(event: dict[str, Any], version: int) -> int:
    """Bring ``event`` (an event's JSON object, changed in place) from ``version`` to its
    type's current version; returns that version. Raises ProtocolError (``newer_data``) for
    a version above the current one."""
    tag = event.get("type")
    current = version_of(tag) if isinstance(tag, str) else 1
    if version > current:
        raise ProtocolError("newer_data", f"a {tag!r} event of version {version} was stored "
                            f"by newer code (this code knows versions up to {current})")
    for at in range(version, current):
        step = UPCASTERS.get((str(tag), at))
        if step is not None:
            step(event)
    return current


# --- decoding what the log stored ---------------------------------------------------------

_envelope = msgspec.json.Decoder(Envelope)
_envelopes = msgspec.json.Decoder(list[Envelope])
_tags: dict[type, str] = {}


def _tag_of(event: Any) -> str:
    cls = type(event)
    tag = _tags.get(cls)
    if tag is None:
        tag = _tags[cls] = str(cls.__struct_config__.tag)
    return tag


def _bad(err: Exception) -> ProtocolError:
    return ProtocolError("bad_frame", f"stored envelope does not decode: {err}")


def _upcast_stored(raw: bytes) -> Envelope:
    """The slow road, for an envelope of an older version: JSON, upcasters, then the struct."""
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError as err:
        raise _bad(err) from None
    event = _object(obj.get("event")) if isinstance(obj, dict) else None
    if obj is None or event is None:
        raise ProtocolError("bad_frame", "stored envelope has no event object")
    version = obj.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ProtocolError("bad_frame", f"stored envelope has version {version!r}")
    obj["version"] = upcast(event, version)
    try:
        return _envelope.decode(msgspec.json.encode(obj))
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise _bad(err) from None


def _current(env: Envelope) -> bool:
    if env.version == 1 and not VERSIONS:  # (every type at 1: no need to know its type)
        return True
    return env.version == version_of(_tag_of(env.event))


def decode_stored(raw: bytes) -> Envelope:
    """One envelope as the log stored it, read in the current shape (upcast if older)."""
    try:
        env = _envelope.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _upcast_stored(raw)  # an older shape may not decode as it is: upcast it
    return env if _current(env) else _upcast_stored(raw)


def decode_stored_many(raws: Sequence[bytes]) -> list[Envelope]:
    """Stored envelopes read in the current shape: a page of current ones is decoded as one
    JSON array (several times faster than one decode each); older ones are upcast."""
    if not raws:
        return []
    try:
        envs = _envelopes.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [decode_stored(raw) for raw in raws]
    if not VERSIONS and all(env.version == 1 for env in envs):
        return envs
    for i, env in enumerate(envs):
        if not _current(env):
            envs[i] = _upcast_stored(raws[i])
    return envs


class _Type(msgspec.Struct):
    type: str


class _Head(msgspec.Struct):
    """What tells whether a stored envelope is in the current shape (the rest is skipped)."""

    event: _Type
    version: int = 0


_head = msgspec.json.Decoder(_Head)
_encoder = msgspec.json.Encoder()

# How this code's encoder lays out an envelope: its fields in order (seq, ts, session_id,
# event, version), compact. The first ``"event":{"type":"`` is the envelope's own (nothing
# before it can hold a bare quote), and ``version``, the last field, ends it.
_EVENT_TYPE = b'"event":{"type":"'
_ENDS: dict[int, bytes] = {}
_END_1 = b',"version":1}'


def _laid_out_current(raw: bytes) -> bool:
    """True when ``raw`` is an envelope this code encoded at its type's current version:
    read from its bytes, without decoding (a few hundred times faster). False says nothing:
    :func:`_is_current` decides then."""
    if not VERSIONS:  # every type at 1
        return raw.endswith(_END_1)
    at = raw.find(_EVENT_TYPE)
    if at < 0:
        return False
    start = at + len(_EVENT_TYPE)
    version = version_of(raw[start:raw.find(b'"', start)].decode("utf-8", "replace"))
    end = _ENDS.get(version)
    if end is None:
        end = _ENDS[version] = b',"version":%d}' % version
    return raw.endswith(end)


def _is_current(raw: bytes) -> bool:
    if _laid_out_current(raw):
        return True
    try:
        head = _head.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return head.version == version_of(head.event.type)


def current_json_many(raws: Sequence[bytes]) -> list[bytes]:
    """Stored envelopes as JSON in the current shape, for a browser: the stored bytes of a
    current one as they are (no decode, no re-encode), an older one upcast and encoded (every
    field present, so the browser's fold never fills in a default)."""
    if not VERSIONS and all(raw.endswith(_END_1) for raw in raws):
        return list(raws)  # the common case, at the cost of a loop over the bytes' ends
    current = [_is_current(raw) for raw in raws]
    if all(current):
        return list(raws)
    return [raw if ok else _encoder.encode(_upcast_stored(raw))
            for raw, ok in zip(raws, current, strict=True)]
