"""The one root exception of ``codey_protocol``.

    ProtocolError            any frame that is not a valid message of the expected union
      ├── FrameTooLarge      the frame is over the size cap; nothing was decoded
      └── (code attribute)   "bad_frame" | "unknown_type" | "bad_field" | "too_large"
"""

from __future__ import annotations


class ProtocolError(ValueError):
    """An undecodable frame. ``code`` is machine-readable; ``str(err)`` says what was wrong."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class FrameTooLarge(ProtocolError):
    def __init__(self, size: int, cap: int) -> None:
        super().__init__("too_large", f"frame of {size} bytes is over the {cap}-byte cap")
        self.size = size
        self.cap = cap
