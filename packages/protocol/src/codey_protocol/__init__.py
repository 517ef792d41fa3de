"""codey_protocol: every message that crosses a Codey process boundary.

msgspec structs only — no I/O, no business logic. Four tagged unions (tag field ``type``):
:data:`ServerToWorker`, :data:`WorkerToServer`, :data:`ClientToServer`, :data:`ServerToClient`;
plus the stored :data:`Event` union, its :class:`Envelope`, and the folded :class:`State`.
"""

from codey_protocol import client, events, state, worker
from codey_protocol.client import ClientToServer, ServerToClient
from codey_protocol.codec import (
    MAX_FRAME_BYTES,
    decode_action,
    decode_client_to_server,
    decode_envelope,
    decode_event,
    decode_server_to_client,
    decode_server_to_worker,
    decode_state,
    decode_worker_to_server,
    encode,
)
from codey_protocol.errors import FrameTooLarge, ProtocolError
from codey_protocol.events import Envelope, Event, Item
from codey_protocol.state import State
from codey_protocol.version import __version__
from codey_protocol.worker import PROTOCOL_VERSION, ServerToWorker, WorkerToServer

__all__ = [
    "MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "ClientToServer",
    "Envelope",
    "Event",
    "FrameTooLarge",
    "Item",
    "ProtocolError",
    "ServerToClient",
    "ServerToWorker",
    "State",
    "WorkerToServer",
    "__version__",
    "client",
    "decode_action",
    "decode_client_to_server",
    "decode_envelope",
    "decode_event",
    "decode_server_to_client",
    "decode_server_to_worker",
    "decode_state",
    "decode_worker_to_server",
    "encode",
    "events",
    "state",
    "worker",
]
