"""The exceptions of :mod:`codey_server.cluster` (drawn in the package's docstring)."""

from __future__ import annotations

from codey_server.errors import ServerError

__all__ = ["SecretKeyError", "SharedStateError"]


class SharedStateError(ServerError):
    """Root of the shared state's errors."""


class SecretKeyError(SharedStateError):
    """The secret key that seals provider credentials is missing, malformed, or not the one a
    row was sealed with. ``code`` is ``not_configured`` (answered 409: the server's own setup
    is missing something, not the request)."""

    code = "not_configured"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
