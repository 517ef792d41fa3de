"""Model-provider logins' one decision: a provider's login state, as browsers may see it.

Pure; :mod:`.service` runs it through :meth:`~codey_server.core.engine.Engine.submit`. The
credentials themselves never come here: they stay in ``auth.json``.
"""

from __future__ import annotations

from codey_protocol import events as ev
from codey_protocol.state import AuthInfo, State
from codey_server.core.rules import Context, Decided

__all__ = ["status_changed"]

_SHOWN = ("state", "method", "account", "expires_at", "error", "verification_uri", "user_code")


def _same(info: AuthInfo | None, status: ev.AuthStatusUpdated) -> bool:
    return info is not None and all(getattr(info, f) == getattr(status, f) for f in _SHOWN)


def status_changed(state: State, status: ev.AuthStatusUpdated, ctx: Context) -> Decided:
    """The provider's login state, when it differs from what the state shows."""
    return [] if _same(state.auth.get(status.provider), status) else [(None, status)]
