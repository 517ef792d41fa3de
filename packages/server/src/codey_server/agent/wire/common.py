"""Small pieces both wire formats use when reading a stream."""

from __future__ import annotations

from typing import Any

import msgspec

from codey_server.agent.errors import ModelError

__all__ = ["decode_event", "int_field"]

_decode = msgspec.json.decode


def int_field(value: object) -> int:
    """A token count from a usage object: an int, else 0 (a missing or odd field)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def decode_event(data: str) -> Any:
    """One event's JSON; a provider that sends something else gets a clear error."""
    try:
        return _decode(data)
    except msgspec.DecodeError:
        raise ModelError(f"the model sent an event that is not JSON: {data[:200]!r}",
                         code="failed") from None
