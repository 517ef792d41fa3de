"""What the sockets share: reading one frame, text or binary alike."""

from __future__ import annotations

from typing import Any

from litestar import WebSocket
from litestar.exceptions import WebSocketDisconnect

__all__ = ["receive_frame"]


async def receive_frame(ws: WebSocket[Any, Any, Any]) -> bytes:
    """The next frame's payload, text or binary alike, as bytes."""
    msg = await ws.receive()
    if msg["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(detail="disconnected", code=msg.get("code") or 1000)
    text = msg.get("text")
    if isinstance(text, str):
        return text.encode()
    data = msg.get("bytes")
    return data if isinstance(data, bytes) else b""
