"""Model providers' decisions: a provider's login state, as browsers may see it, and the
providers defined in Settings → Models (added, changed, removed).

Pure; :mod:`.service` runs :func:`status_changed` through
:meth:`~codey_server.core.engine.Engine.submit`, the browser's commands come through
:data:`COMMANDS`. The credentials themselves never come here: they stay in ``auth.json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import AuthInfo, State
from codey_server.core.rules import CommandRejected, Context, Decided, Decider
from codey_server.http.urls import MAX_URL_CHARS, url_problem

__all__ = ["COMMANDS", "MAX_MODELS", "MAX_MODEL_CHARS", "MAX_URL_CHARS", "check_provider",
           "status_changed"]

#: a provider's name: it is typed in config files and shown in menus
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: names that mean something else (``acp``: a session an ACP agent runs)
_RESERVED = frozenset({"acp"})
MAX_MODELS = 500
MAX_MODEL_CHARS = 200

_SHOWN = ("state", "method", "account", "expires_at", "error", "verification_uri", "user_code")


def _same(info: AuthInfo | None, status: ev.AuthStatusUpdated) -> bool:
    return info is not None and all(getattr(info, f) == getattr(status, f) for f in _SHOWN)


def status_changed(state: State, status: ev.AuthStatusUpdated, ctx: Context) -> Decided:
    """The provider's login state, when it differs from what the state shows."""
    return [] if _same(state.auth.get(status.provider), status) else [(None, status)]


def check_provider(entry: ev.ProviderEntry) -> str | None:
    """What is wrong with a provider as defined in Settings → Models (None: nothing)."""
    if not _NAME.match(entry.name):
        return ("a provider's name is 1-64 letters, digits, '.', '_' or '-', starting with a "
                "letter or digit")
    if (problem := url_problem(entry.base_url)) is not None:
        return problem.replace("the URL", "the base URL", 1)
    if len(entry.models) > MAX_MODELS:
        return f"at most {MAX_MODELS} models"
    if any(not m.strip() or len(m) > MAX_MODEL_CHARS for m in entry.models):
        return f"a model name is 1-{MAX_MODEL_CHARS} characters"
    if entry.default_model is not None and len(entry.default_model) > MAX_MODEL_CHARS:
        return f"a model name is 1-{MAX_MODEL_CHARS} characters"
    if entry.auth == "oauth" and not (entry.issuer and entry.client_id):
        return "an OAuth provider needs its issuer and client id"
    if entry.issuer is not None and (problem := url_problem(entry.issuer)) is not None:
        return problem.replace("the URL", "the issuer", 1)
    return None


def _save(state: State, c: cl.SaveProvider, ctx: Context) -> Decided:
    entry = c.provider
    if entry.name in ctx.file_providers:
        raise CommandRejected("conflict", f"the provider {entry.name!r} is defined in "
                                          "config.json; change it there")
    if entry.name in _RESERVED:
        raise CommandRejected("conflict", f"{entry.name!r} is a reserved name")
    problem = check_provider(entry)
    if problem is not None:
        raise CommandRejected("bad_request", problem)
    models = list(dict.fromkeys(m.strip() for m in entry.models))  # once each, in order
    saved = msgspec.structs.replace(
        entry, base_url=entry.base_url.rstrip("/"), models=models,
        default_model=(entry.default_model or "").strip() or None, updated_at=ctx.now())
    old = state.providers.get(entry.name)
    if old is not None and msgspec.structs.replace(old, updated_at=0.0) == \
            msgspec.structs.replace(saved, updated_at=0.0):
        return []
    return [(None, ev.ProviderSaved(provider=saved))]


def _remove(state: State, c: cl.RemoveProvider, ctx: Context) -> Decided:
    if c.name in ctx.file_providers:
        raise CommandRejected("conflict", f"the provider {c.name!r} is defined in "
                                          "config.json; remove it there")
    if c.name not in state.providers:
        raise CommandRejected("not_found", f"no provider {c.name!r}")
    return [(None, ev.ProviderRemoved(name=c.name))]


COMMANDS: Mapping[type[Any], Decider] = {
    cl.SaveProvider: _save,
    cl.RemoveProvider: _remove,
}
