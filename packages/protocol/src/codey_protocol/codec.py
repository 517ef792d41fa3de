"""Module-level codecs: one encoder, one typed decoder per union.

Every ``decode_*`` function takes bytes (or str) and returns a message of its union, or raises
:class:`~codey_protocol.errors.ProtocolError` — never anything else — so an adapter can answer a
bad frame with a typed error instead of a traceback.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import msgspec

from codey_protocol.client import ClientToServer, ServerToClient
from codey_protocol.errors import FrameTooLarge, ProtocolError
from codey_protocol.events import Envelope, Event
from codey_protocol.state import State
from codey_protocol.worker import ActionMessage, ServerToWorker, WorkerToServer

#: Frames larger than this are refused before decoding (design §6).
MAX_FRAME_BYTES = 1024 * 1024

T = TypeVar("T")

encoder = msgspec.json.Encoder()

_client_to_server = msgspec.json.Decoder(ClientToServer)
_server_to_client = msgspec.json.Decoder(ServerToClient)
_server_to_worker = msgspec.json.Decoder(ServerToWorker)
_worker_to_server = msgspec.json.Decoder(WorkerToServer)
_event = msgspec.json.Decoder(Event)
_envelope = msgspec.json.Decoder(Envelope)
_state = msgspec.json.Decoder(State)
_action = msgspec.json.Decoder(ActionMessage)


def encode(msg: Any) -> bytes:
    """Encode any protocol message (or struct) to JSON bytes."""
    return encoder.encode(msg)


def _decode(decoder: msgspec.json.Decoder[T], data: bytes | str, cap: int | None) -> T:
    if cap is not None:
        size = len(data)
        if isinstance(data, str) and size * 4 > cap:
            size = len(data.encode("utf-8", "surrogatepass"))  # the cap is in bytes
        if size > cap:
            raise FrameTooLarge(size, cap)
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as err:
        text = str(err)
        code = "unknown_type" if "Invalid value" in text and "`$.type`" in text else "bad_field"
        if "Object missing required field `type`" in text:
            code = "unknown_type"
        raise ProtocolError(code, text) from None
    except msgspec.DecodeError as err:
        raise ProtocolError("bad_frame", f"not a JSON message: {err}") from None
    except RecursionError:
        raise ProtocolError("bad_frame", "the message is nested too deeply") from None
    except (UnicodeDecodeError, ValueError, TypeError) as err:
        raise ProtocolError("bad_frame", f"not a JSON message: {err}") from None


def decode_client_to_server(data: bytes | str, cap: int | None = MAX_FRAME_BYTES) -> ClientToServer:
    return cast(ClientToServer, _decode(_client_to_server, data, cap))


def decode_server_to_client(data: bytes | str, cap: int | None = None) -> ServerToClient:
    return cast(ServerToClient, _decode(_server_to_client, data, cap))


def decode_server_to_worker(data: bytes | str, cap: int | None = None) -> ServerToWorker:
    return cast(ServerToWorker, _decode(_server_to_worker, data, cap))


def decode_worker_to_server(data: bytes | str, cap: int | None = MAX_FRAME_BYTES) -> WorkerToServer:
    return cast(WorkerToServer, _decode(_worker_to_server, data, cap))


def decode_event(data: bytes | str) -> Event:
    return cast(Event, _decode(_event, data, None))


def decode_envelope(data: bytes | str) -> Envelope:
    return _decode(_envelope, data, None)


def decode_state(data: bytes | str) -> State:
    return _decode(_state, data, None)


def decode_action(data: bytes | str) -> ActionMessage:
    return cast(ActionMessage, _decode(_action, data, None))


def to_builtins(msg: Any) -> Any:
    """The JSON-compatible Python value of a message (dicts, lists, str, numbers)."""
    return msgspec.to_builtins(msg)


def convert(value: Any, type_: type[T]) -> T:
    """Build ``type_`` from builtins (e.g. a parsed request body); raises ProtocolError."""
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as err:
        raise ProtocolError("bad_field", str(err)) from None
