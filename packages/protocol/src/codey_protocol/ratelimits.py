"""Rate-limit headers of model providers, read into :class:`RateLimitUpdated` once.

The names are the OpenAI ones (``x-ratelimit-*``), which most compatible servers copy. The
server's model path calls :func:`rate_limit_event` with a response's headers; nothing else
needs to know the header names.
"""

from __future__ import annotations

from collections.abc import Mapping

from codey_protocol.events import RateLimitUpdated

__all__ = ["RATE_LIMIT_HEADERS", "rate_limit_event"]

RATE_LIMIT_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def rate_limit_event(provider: str, headers: Mapping[str, str]) -> RateLimitUpdated | None:
    """The event for ``headers`` (any case), or None when they carry no rate-limit header."""
    found = {name: headers.get(name) for name in RATE_LIMIT_HEADERS}
    if not any(v is not None for v in found.values()):
        lowered = {k.lower(): v for k, v in headers.items()}
        found = {name: lowered.get(name) for name in RATE_LIMIT_HEADERS}
        if not any(v is not None for v in found.values()):
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
