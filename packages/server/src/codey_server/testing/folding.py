"""The fold a browser does, for tests that compare what a socket received with the server."""

from __future__ import annotations

from typing import Any

import msgspec

from codey_protocol import codec
from codey_protocol.state import State
from codey_server.features import apply

__all__ = ["fold_frames"]


def fold_frames(snapshot: dict[str, Any], envelopes: list[dict[str, Any]]) -> State:
    """The state a client holds after a ``snapshot`` frame's state and the envelopes it got
    (as JSON objects); envelopes at or below the snapshot's seq are skipped, as a browser
    does."""
    state = codec.decode_state(msgspec.json.encode(snapshot))
    for env in envelopes:
        if env["seq"] > state.seq:
            apply(state, codec.decode_envelope(msgspec.json.encode(env)))
    return state
