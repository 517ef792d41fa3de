"""Settings of the test OIDC provider: one frozen object, built from CLI flags or by hand.

`parse_args(argv)` turns the command line of `codey-oidc-provider` into `ProviderSettings`;
tests that run the provider in-process build `ProviderSettings(...)` directly.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from codey_testkit.errors import TestkitError

__all__ = [
    "AUTH_METHODS",
    "DEFAULT_SCOPES",
    "ClientSettings",
    "ProviderSettings",
    "SettingsError",
    "build_parser",
    "load_clients_file",
    "parse_args",
]

DEFAULT_SCOPES: tuple[str, ...] = ("openid", "profile", "email", "offline_access")
AUTH_METHODS: tuple[str, ...] = ("none", "client_secret_basic", "client_secret_post")


class SettingsError(TestkitError):
    """The provider's configuration (flags or clients file) is invalid."""


@dataclass(frozen=True)
class ClientSettings:
    """One registered OAuth client.

    A client without `client_secret` is public (token_endpoint_auth_method "none") and must
    use PKCE; with a secret it authenticates with client_secret_basic or client_secret_post.
    """

    client_id: str
    redirect_uris: tuple[str, ...] = ()
    client_secret: str | None = None


@dataclass(frozen=True)
class ProviderSettings:
    """Everything the provider needs; durations are in seconds."""

    host: str = "127.0.0.1"
    port: int = 0
    clients: tuple[ClientSettings, ...] = (ClientSettings("codey"),)
    audience: str = "codey-model"
    access_token_ttl: int = 3600
    refresh_token_ttl: int = 30 * 24 * 3600
    id_token_ttl: int = 3600
    code_ttl: int = 600
    device_interval: int = 1
    device_expires: int = 600
    # RFC 8628 §3.5 fixes the client's back-off at 5 s; tests may shrink it to stay fast.
    device_slow_down_increment: int = 5
    user_email: str = "dev@example.test"
    user_sub: str = "user-1"
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    #: the token endpoint's client authentication methods: advertised in discovery
    #: (``token_endpoint_auth_methods_supported``) and the only ones accepted. A client with a
    #: secret must authenticate with one of the secret methods; "none" is for public clients.
    token_endpoint_auth_methods: tuple[str, ...] = AUTH_METHODS
    #: offer the device flow (RFC 8628); without it discovery names no device endpoint
    device_flow: bool = True
    verbose: bool = False


def load_clients_file(path: Path) -> list[ClientSettings]:
    """Read clients from a JSON file: `[{...}]` or `{"clients": [{...}]}`.

    Each entry has `client_id`, optional `redirect_uris` (list) and optional `client_secret`.
    Raises `SettingsError` when the file is unreadable or malformed.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SettingsError(f"cannot read clients file {path}: {exc}") from exc
    entries = data.get("clients") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise SettingsError(f"{path}: expected a list of clients or {{'clients': [...]}}")
    clients: list[ClientSettings] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("client_id"), str):
            raise SettingsError(f"{path}: every client needs a string client_id: {entry!r}")
        uris = entry.get("redirect_uris", [])
        secret = entry.get("client_secret")
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            raise SettingsError(f"{path}: redirect_uris must be a list of strings: {entry!r}")
        if secret is not None and not isinstance(secret, str):
            raise SettingsError(f"{path}: client_secret must be a string: {entry!r}")
        clients.append(ClientSettings(entry["client_id"], tuple(uris), secret))
    return clients


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `codey-oidc-provider`."""
    parser = argparse.ArgumentParser(
        prog="codey-oidc-provider",
        description=(
            "Local OAuth 2.0 / OpenID Connect provider for tests. Auto-consents for one user. "
            "Example: codey-oidc-provider --port 0 --client-id codey "
            "--redirect-uri http://127.0.0.1:8765/auth/callback"
        ),
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--client-id", default="codey", help="public client to register")
    parser.add_argument(
        "--redirect-uri",
        action="append",
        default=[],
        help="redirect URI of --client-id (repeatable; exact match)",
    )
    parser.add_argument("--clients-file", type=Path, help="JSON file with more clients")
    parser.add_argument("--audience", default="codey-model", help="'aud' of access tokens")
    parser.add_argument("--access-token-ttl", type=int, default=3600)
    parser.add_argument("--refresh-token-ttl", type=int, default=30 * 24 * 3600)
    parser.add_argument("--id-token-ttl", type=int, default=3600)
    parser.add_argument("--code-ttl", type=int, default=600, help="authorization code lifetime")
    parser.add_argument("--device-interval", type=int, default=1, help="polling interval")
    parser.add_argument("--device-expires", type=int, default=600, help="device code lifetime")
    parser.add_argument(
        "--device-slow-down-increment",
        type=int,
        default=5,
        help="seconds added to a device code's interval after each slow_down",
    )
    parser.add_argument("--user-email", default="dev@example.test")
    parser.add_argument("--user-sub", default="user-1")
    parser.add_argument(
        "--scopes",
        default=" ".join(DEFAULT_SCOPES),
        help="space-separated scopes the server supports",
    )
    parser.add_argument(
        "--token-endpoint-auth-methods",
        default=" ".join(AUTH_METHODS),
        help="space-separated client authentication methods the token endpoint accepts "
        "(none, client_secret_basic, client_secret_post)",
    )
    parser.add_argument(
        "--no-device-flow",
        dest="device_flow",
        action="store_false",
        help="do not offer the device authorization grant",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> ProviderSettings:
    """Parse the command line into `ProviderSettings`; raises `SettingsError` on bad input."""
    args = build_parser().parse_args(argv)
    clients = [ClientSettings(args.client_id, tuple(args.redirect_uri))]
    if args.clients_file is not None:
        clients.extend(load_clients_file(args.clients_file))
    ids = [c.client_id for c in clients]
    if len(set(ids)) != len(ids):
        raise SettingsError(f"duplicate client_id in {ids}")
    for name in ("access_token_ttl", "refresh_token_ttl", "id_token_ttl", "code_ttl"):
        if getattr(args, name) <= 0:
            raise SettingsError(f"--{name.replace('_', '-')} must be positive")
    if args.device_interval < 0 or args.device_expires <= 0:
        raise SettingsError("--device-interval must be >= 0 and --device-expires > 0")
    methods = tuple(args.token_endpoint_auth_methods.split())
    unknown = sorted(set(methods) - set(AUTH_METHODS))
    if not methods or unknown:
        raise SettingsError(f"--token-endpoint-auth-methods: unknown {unknown or 'empty'}; "
                            f"choose from {' '.join(AUTH_METHODS)}")
    return ProviderSettings(
        host=args.host,
        port=args.port,
        clients=tuple(clients),
        audience=args.audience,
        access_token_ttl=args.access_token_ttl,
        refresh_token_ttl=args.refresh_token_ttl,
        id_token_ttl=args.id_token_ttl,
        code_ttl=args.code_ttl,
        device_interval=args.device_interval,
        device_expires=args.device_expires,
        device_slow_down_increment=args.device_slow_down_increment,
        user_email=args.user_email,
        user_sub=args.user_sub,
        scopes=tuple(args.scopes.split()),
        token_endpoint_auth_methods=methods,
        device_flow=args.device_flow,
        verbose=args.verbose,
    )
