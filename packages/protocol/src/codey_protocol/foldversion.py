"""The fold's version, and the snapshots that carry it.

A snapshot is the folded :class:`~codey_protocol.state.State` at a seq, saved so that a start
replays only the events after it. It is only worth anything to the code that folded it: other
code (an older release, or a newer one after a downgrade and back) may lack fields the state
has now, fold events differently, or not know some events at all — and a state taken over
from it would silently miss what its events say (a provider added in Settings, a session's
sandbox, a model switch, the time a session took). So every snapshot carries the version of
the fold that made it, and one made by any other fold is never trusted: the state is rebuilt
from the log, and a fresh snapshot written.

:data:`FOLD_VERSION` is a hash of what decides what a fold makes of the log: the JSON Schema of
the :data:`~codey_protocol.events.Event` union and of ``State`` (without their descriptions,
so that a docstring's edit keeps it), the event types' versions
(:data:`codey_protocol.upcasting.VERSIONS`) and :data:`FOLD_REVISION`. It is the same on every
machine and every run of the same code (the schema is encoded with sorted keys).

A stored snapshot is ``{"fold": FOLD_VERSION, "state": {...}}`` (:func:`encode_snapshot`);
one written before snapshots carried a version is the bare state, and reads as fold ``""``
(:func:`read_snapshot`).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import msgspec

from codey_protocol.events import Event
from codey_protocol.state import State
from codey_protocol.upcasting import VERSIONS

__all__ = ["FOLD_REVISION", "FOLD_VERSION", "StoredSnapshot", "encode_snapshot", "fold_version",
           "read_snapshot"]

#: Raise it when either fold (``codey_server``'s or ``web/store.js``) starts to make something
#: else of the same events without any schema changing (a rule of the fold, not a field): a
#: snapshot made by the fold before is then rebuilt too.
FOLD_REVISION = 1


def _without_descriptions(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_descriptions(v) for k, v in value.items() if k != "description"}
    if isinstance(value, list):
        return [_without_descriptions(v) for v in value]
    return value


def fold_version(event: Any = Event, state: Any = State,
                 versions: dict[str, int] | None = None, revision: int = FOLD_REVISION) -> str:
    """The version of a fold of ``event`` (a union) into ``state``: a short hash of their
    schemas, the events' versions and the revision (the defaults: this code's)."""
    schemas, components = msgspec.json.schema_components([event, state])
    material = {"schemas": schemas, "components": components,
                "versions": VERSIONS if versions is None else versions, "revision": revision}
    digest = hashlib.sha256(msgspec.json.encode(_without_descriptions(material),
                                                order="sorted"))
    return digest.hexdigest()[:16]


FOLD_VERSION = fold_version()


class StoredSnapshot(msgspec.Struct):
    """A snapshot as stored: the fold that made it (``""``: written before snapshots said so)
    and its state's JSON, not decoded."""

    fold: str = ""
    #: empty: none (a bare state, whose JSON is the whole snapshot)
    state: msgspec.Raw = msgspec.Raw(b"")


_stored = msgspec.json.Decoder(StoredSnapshot)
_state = msgspec.json.Decoder(State)


@functools.cache
def _prefix(fold: str) -> bytes:
    return b'{"fold":' + msgspec.json.encode(fold) + b',"state":'


def encode_snapshot(state: State, fold: str = FOLD_VERSION) -> bytes:
    """``state`` as a snapshot of this fold (``fold``: another's, for tests)."""
    return _prefix(fold) + msgspec.json.encode(state) + b"}"


def read_snapshot(data: bytes) -> tuple[str, msgspec.Raw]:
    """``(fold, state JSON)`` of a stored snapshot: the fold that wrote it (``""`` for a bare
    state, written before snapshots carried one) and its state, still to be decoded (with
    ``codey_protocol.codec.decode_state``: only a snapshot of this fold is). Raises
    :class:`msgspec.DecodeError` for bytes that are not JSON."""
    stored = _stored.decode(data)
    if not stored.state:
        return stored.fold, msgspec.Raw(data)
    return stored.fold, stored.state
