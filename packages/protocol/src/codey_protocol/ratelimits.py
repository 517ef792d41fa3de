"""Rate-limit headers of model providers, read into :class:`RateLimitUpdated` once.

The names are the OpenAI ones (``x-ratelimit-*``), which most compatible servers copy, or
Anthropic's (``anthropic-ratelimit-*``), read into the same fields. The server's model path
calls :func:`rate_limit_event` with a response's headers; nothing else needs to know the
header names.
"""

from __future__ import annotations

from collections.abc import Mapping

from codey_protocol.events import RateLimitUpdated

__all__ = ["RATE_LIMIT_HEADERS", "rate_limit_event"]

_OPENAI = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
)
#: Anthropic's names for the same six, in the same order (its resets are RFC 3339 times)
_ANTHROPIC = (
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
)
RATE_LIMIT_HEADERS = _OPENAI + _ANTHROPIC


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def rate_limit_event(provider: str, headers: Mapping[str, str]) -> RateLimitUpdated | None:
    """The event for ``headers`` (any case), or None when they carry no rate-limit header."""
    lowered = {k.lower(): v for k, v in headers.items()}
    found: dict[str, str | None] = {}
    for names in (_OPENAI, _ANTHROPIC):  # Anthropic's only when there are no OpenAI ones
        values = [lowered.get(name) for name in names]
        if any(v is not None for v in values):
            found = dict(zip(_OPENAI, values, strict=True))
            break
    if not found:
        return None
    return RateLimitUpdated(
        provider=provider,
        limit_requests=_int(found["x-ratelimit-limit-requests"]),
        remaining_requests=_int(found["x-ratelimit-remaining-requests"]),
        reset_requests=found["x-ratelimit-reset-requests"],
        limit_tokens=_int(found["x-ratelimit-limit-tokens"]),
        remaining_tokens=_int(found["x-ratelimit-remaining-tokens"]),
        reset_tokens=found["x-ratelimit-reset-tokens"],
    )
