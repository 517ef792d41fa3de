"""Small pieces the wire formats share."""

from __future__ import annotations

from typing import Any

import msgspec

from codey_server.agent.errors import ModelError

__all__ = ["REDACTED_TAG", "THINKING_TAG", "decode_event", "int_field", "nonempty",
           "thinking_content"]

_decode = msgspec.json.decode

#: Anthropic's reasoning as a reasoning item keeps it in ``encrypted_content``: a thinking
#: block's signature, or a redacted_thinking block's data, behind a tag saying which — and
#: that it is Anthropic's, so the Responses wire never sends it to OpenAI (nor the reverse)
THINKING_TAG = "anthropic.thinking:"
REDACTED_TAG = "anthropic.redacted_thinking:"


def thinking_content(encrypted: str) -> tuple[str | None, str]:
    """(``"thinking"`` or ``"redacted_thinking"``, the signature or data) of Anthropic's
    reasoning; (None, ``encrypted``) for another provider's."""
    if encrypted.startswith(THINKING_TAG):
        return "thinking", encrypted[len(THINKING_TAG):]
    if encrypted.startswith(REDACTED_TAG):
        return "redacted_thinking", encrypted[len(REDACTED_TAG):]
    return None, encrypted


def nonempty(kind: Any, value: object) -> list[Any]:
    """``[kind(value)]`` for a non-empty string (a text or reasoning delta), else ``[]``:
    providers send empty and missing deltas both."""
    return [kind(value)] if isinstance(value, str) and value else []


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
