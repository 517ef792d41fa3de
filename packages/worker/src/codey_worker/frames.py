"""Fitting responses into one frame.

The server refuses frames over :data:`codey_protocol.MAX_FRAME_BYTES`. A result can be larger
than that once encoded (a 1 MiB output cap full of characters JSON escapes, a 2 MiB file read,
a huge MCP answer), so before a response is sent — and recorded, so a replay is identical —
its largest text fields are cut to head and tail, and long lists are shortened, until it fits.
"""

from __future__ import annotations

from typing import Any

import msgspec

from codey_protocol import MAX_FRAME_BYTES, codec
from codey_protocol.worker import ActionErrored, ActionResult, WorkerToServerMessage

__all__ = ["FRAME_BUDGET", "encode_fitted"]

#: room left under the cap for the envelope and any escaping we did not predict
FRAME_BUDGET = MAX_FRAME_BYTES - 32 * 1024


def _cut(text: str, keep: int) -> str:
    if keep >= len(text):
        return text
    half = max(0, keep // 2)
    return (f"{text[:half]}\n… [{len(text) - 2 * half} characters cut to fit one frame] …\n"
            f"{text[len(text) - half:] if half else ''}")


def _shrink(value: Any, over: int) -> Any:
    """A copy of the struct ``value`` whose largest field is smaller by about ``over`` bytes."""
    sizes: list[tuple[int, str]] = []
    for field in msgspec.structs.fields(value):
        current = getattr(value, field.name)
        if isinstance(current, (str, list, dict)):
            sizes.append((len(codec.encode(current)), field.name))
    if not sizes:
        return value
    size, name = max(sizes)
    current = getattr(value, name)
    ratio = max(0.0, (size - over - 1024) / size)
    changes: dict[str, Any] = {}
    if isinstance(current, str):
        changes[name] = _cut(current, int(len(current) * ratio))
    elif isinstance(current, list):
        changes[name] = current[: int(len(current) * ratio)]
    else:
        changes[name] = dict(list(current.items())[: int(len(current) * ratio)])
    if any(f.name == "truncated" for f in msgspec.structs.fields(value)):
        changes["truncated"] = True
    return msgspec.structs.replace(value, **changes)


def encode_fitted(response: WorkerToServerMessage) -> bytes:
    """Encode ``response``, shrunk to fit :data:`FRAME_BUDGET` when it would not."""
    frame: bytes = codec.encode(response)
    for _ in range(12):
        over = len(frame) - FRAME_BUDGET
        if over <= 0:
            return frame
        if isinstance(response, ActionResult):
            response = msgspec.structs.replace(response, result=_shrink(response.result, over))
        elif isinstance(response, ActionErrored):
            response = msgspec.structs.replace(
                response,
                message=_cut(response.message, max(0, len(response.message) - over - 1024)))
        else:
            return frame
        frame = codec.encode(response)
    return frame
