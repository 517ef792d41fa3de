"""Errors of the model path. Every one is a :class:`ModelError` (a ``ServerError``) with a
``code`` the turn loop acts on and a ``message`` the user reads in the session.

codes: ``auth`` (401), ``permission`` (403), ``not_found`` (model or endpoint, 404),
``quota`` (out of credit: not retried), ``rate_limited`` (429 after retries), ``context_length``
(the input is over the model's window: the loop compacts and tries again), ``bad_request``
(other 4xx), ``server`` (5xx after retries), ``connection`` (unreachable after retries),
``stream_cut`` (the answer stopped mid-stream), ``failed`` (the provider reported a failure in
the stream), ``not_configured``, ``not_logged_in``, ``empty`` (nothing usable came back).
"""

from __future__ import annotations

import random

from codey_server.errors import ServerError

__all__ = ["RETRYABLE_BY_FALLBACK", "ModelError", "backoff"]

#: failures a fallback provider may rescue: the primary is down, not the request wrong
RETRYABLE_BY_FALLBACK = frozenset({"server", "connection", "stream_cut", "rate_limited"})


class ModelError(ServerError):
    def __init__(self, message: str, status: int | None = None, code: str = "failed") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __repr__(self) -> str:
        return f"ModelError({self.code!r}, {self.message!r}, status={self.status})"


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, …): doubling from 0.5 s up to 30 s,
    with jitter (between half and all of it)."""
    base: float = min(30.0, 0.5 * 2.0 ** (attempt - 1))
    return base * (0.5 + random.random() / 2)
