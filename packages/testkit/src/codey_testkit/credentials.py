"""A model provider's credentials for a scripted model: a fixed bearer (none by default), and
no refresh. Structurally the server's ``codey_server.agent.models.Credentials``."""

from __future__ import annotations

__all__ = ["FixedCredentials"]


class FixedCredentials:
    def __init__(self, bearer: str | None = None) -> None:
        self.bearer = bearer

    async def token(self) -> str | None:
        return self.bearer

    async def refresh(self) -> bool:
        return False
