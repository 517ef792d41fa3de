"""Model-provider logins: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol.state import AuthInfo, State
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _auth(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.AuthStatusUpdated)
    state.auth[e.provider] = AuthInfo(
        provider=e.provider, state=e.state, method=e.method, account=e.account,
        expires_at=e.expires_at, error=e.error, verification_uri=e.verification_uri,
        user_code=e.user_code,
    )


def _saved(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProviderSaved)
    state.providers[e.provider.name] = msgspec.structs.replace(e.provider)


def _removed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.ProviderRemoved)
    state.providers.pop(e.name, None)
    state.auth.pop(e.name, None)  # its credential went with it


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.AuthStatusUpdated: _auth,
    ev.ProviderSaved: _saved,
    ev.ProviderRemoved: _removed,
}
