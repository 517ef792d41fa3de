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

from tenacity import wait_exponential, wait_random_exponential

from codey_server.core.retry import wait_after
from codey_server.errors import ServerError

__all__ = ["MODEL_WAIT", "RETRYABLE_BY_FALLBACK", "ModelError", "backoff"]

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


#: the wait after a model call's failed try (tenacity): 0.5 s doubling to 30 s, in its upper
#: half at random ("equal jitter": half of it fixed, so a retry never comes at once, half
#: random, so sessions that failed together do not come back together)
MODEL_WAIT = wait_exponential(multiplier=0.25, max=15.0) + \
    wait_random_exponential(multiplier=0.25, max=15.0)


def backoff(attempt: int) -> float:
    """The wait after try number ``attempt`` failed (:data:`MODEL_WAIT`); the turn waits it
    before it asks again for an answer that was cut off (here, not in ``models``: the turn
    does no I/O)."""
    return wait_after(MODEL_WAIT, attempt)
