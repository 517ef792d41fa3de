"""The state at start: from a snapshot of this fold, or rebuilt from the log.

:func:`load_state` reads the latest snapshot. Made by this fold (its
:data:`~codey_protocol.foldversion.FOLD_VERSION`), it is the state at its seq and only the
events after it are replayed. Made by any other code — an older release, whose snapshots carry
no fold at all, or a newer or older one in a downgrade and back — it is never trusted: the
state is rebuilt from the whole log (every event read in its current shape, through its
upcasters), and the engine writes a fresh snapshot at once. Such a snapshot may lack what the
log says (a provider saved, a session's sandbox or model changed by code that did not know
those events, the time a session took), and trusting it would lose that without a word.

One thing only such a snapshot still has: the sessions whose events retention deleted
(``EventLog.trim``: a closed session stays listed from the snapshot). When the log was trimmed,
those sessions (in the snapshot, but not created by any event left in the log) are taken from
it as they are — decoded by today's state, their missing fields at their defaults, the best
there is — and only their events after the snapshot are folded onto them.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from codey_protocol import codec
from codey_protocol.errors import ProtocolError
from codey_protocol.events import Envelope
from codey_protocol.foldversion import FOLD_VERSION, read_snapshot
from codey_protocol.state import State
from codey_server.eventlog import EventLog

__all__ = ["Loaded", "load_state"]

log = logging.getLogger("codey.engine")

#: events read from the log at once while replaying
REPLAY_BATCH = 20000

Apply = Callable[[State, Envelope], Any]


@dataclass
class Loaded:
    """The state a start begins with, and how it was made."""

    state: State
    #: the seq of the snapshot it started from (0: none, or one not trusted)
    snapshot_seq: int
    #: events folded from the log
    replayed: int
    #: the fold of the latest snapshot when it was not trusted ("": it named none), else None
    foreign: str | None = None
    #: sessions taken from that snapshot because the log no longer has their events
    kept_from_snapshot: int = 0


def _decode(raw: msgspec.Raw) -> State:
    # the snapshot is millions of new objects, none of them in a cycle: without the collector
    # walking them again and again as they are made, decoding takes ~1/3 less
    gc.disable()
    try:
        return codec.decode_state(bytes(raw))
    finally:
        gc.enable()


async def _replay(eventlog: EventLog, apply: Apply, state: State, after: int,
                  skip: Callable[[Envelope], bool] | None = None) -> int:
    """Fold every stored event after ``after`` into ``state`` (but those ``skip`` says)."""
    replayed = 0
    while True:
        batch = await eventlog.read(after, limit=REPLAY_BATCH)
        if not batch:
            return replayed
        for env in batch:
            if skip is None or not skip(env):
                apply(state, env)
            state.seq = env.seq
        replayed += len(batch)
        after = batch[-1].seq


async def load_state(eventlog: EventLog, apply: Apply) -> Loaded:
    """The state of the log's events (see the module docstring). The log is open."""
    snap = await eventlog.latest_snapshot()
    if snap is None:
        state = State()
        return Loaded(state, 0, await _replay(eventlog, apply, state, 0))
    snap_seq, data = snap
    try:
        fold, raw = read_snapshot(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        fold, raw = "not JSON", msgspec.Raw(b"")
    if fold == FOLD_VERSION:
        state = _decode(raw)
        return Loaded(state, snap_seq, await _replay(eventlog, apply, state, state.seq))
    log.warning("the snapshot at seq %d was made by other code (fold %s; this code's is %s): "
                "rebuilding the state from the log", snap_seq, fold or "not recorded",
                FOLD_VERSION)
    state = State()
    replayed = await _replay(eventlog, apply, state, 0)
    loaded = Loaded(state, 0, replayed, foreign=fold)
    first = await eventlog.first_seq()
    if first > 1:
        await _keep_trimmed(eventlog, apply, loaded, snap_seq, raw)
        # the newest events may have been trimmed too: the log goes on after them
        loaded.state.seq = max(loaded.state.seq, first - 1)
    return loaded


async def _keep_trimmed(eventlog: EventLog, apply: Apply, loaded: Loaded, snap_seq: int,
                        raw: msgspec.Raw) -> None:
    """Take from the snapshot the sessions whose events retention deleted, then fold again
    with them in place (their events up to the snapshot are in it already)."""
    try:
        theirs = _decode(raw)
    except ProtocolError as err:
        log.error("the log was trimmed and the snapshot at seq %d does not decode (%s): the "
                  "sessions whose events were trimmed are not in the state", snap_seq, err)
        return
    gone = {sid: s for sid, s in theirs.sessions.items() if sid not in loaded.state.sessions}
    if not gone:
        return
    state = State(sessions=dict(gone))
    loaded.replayed += await _replay(
        eventlog, apply, state, 0,
        skip=lambda env: env.seq <= snap_seq and env.session_id in gone)
    loaded.state = state
    loaded.kept_from_snapshot = len(gone)
    log.warning("%d sessions whose events were trimmed are kept as the snapshot at seq %d "
                "had them", len(gone), snap_seq)
