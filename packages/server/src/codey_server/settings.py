"""Server settings: one object, passed to ``create_app``; nothing global.

Settings come from the command line and an optional ``config.json`` in the data dir
(model providers, allowed origins and host names). Secrets never live here: credentials are
kept by the auth service in ``auth.json``.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

import msgspec

from codey_server.errors import ConfigError


class ProviderConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A model provider. ``kind`` picks the wire API."""

    name: str
    kind: Literal["responses", "chat", "ollama"] = "chat"
    base_url: str
    models: list[str] = msgspec.field(default_factory=list)
    default_model: str | None = None
    auth: Literal["none", "api_key", "oauth"] = "none"
    api_key_env: str | None = None  # read the key from this environment variable
    # OAuth (auth == "oauth"): OIDC discovery at issuer, public client with PKCE
    issuer: str | None = None
    client_id: str | None = None
    scopes: list[str] = msgspec.field(default_factory=lambda: ["openid", "email", "offline_access"])
    audience: str | None = None
    max_retries: int = 4
    reasoning_summary: bool = False  # ask the Responses API for reasoning summaries


class Settings(msgspec.Struct, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8765
    data_dir: Path = msgspec.field(default_factory=lambda: Path.home() / ".codey" / "server")
    web_dir: Path | None = None  # None: the web/ shipped with the package (or the repo's)
    #: write a state snapshot once this many events were applied since the last one
    snapshot_every: int = 5000
    #: frames queued for one browser before it is closed with 4008 and must resume
    client_queue_max: int = 256
    #: events per catch-up frame
    catchup_batch: int = 2000
    providers: list[ProviderConfig] = msgspec.field(default_factory=list)
    default_provider: str | None = None
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    auth_required: bool = True
    tls: bool = False  # set when a TLS reverse proxy fronts the server
    public_url: str | None = None  # the URL browsers use, when behind a proxy
    action_timeout_s: float = 900.0
    turn_iteration_cap: int = 50
    log_level: str = "info"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "events.db"

    def is_loopback(self) -> bool:
        if self.host in ("localhost", ""):
            return self.host == "localhost"
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check(self) -> list[str]:
        """Raise ConfigError for settings that cannot be allowed; return warnings."""
        warnings: list[str] = []
        if not self.is_loopback():
            if not self.auth_required:
                raise ConfigError(
                    f"refusing to bind {self.host} without auth: anyone on the network could "
                    "run commands on your workers (see docs/security.md)")
            if not self.tls:
                warnings.append(
                    f"serving on {self.host} without TLS: the access token crosses the network "
                    "in clear; put a TLS reverse proxy in front (see docs/security.md)")
        names = {p.name for p in self.providers}
        if len(names) != len(self.providers):
            raise ConfigError("provider names must be unique")
        if self.default_provider and self.default_provider not in names:
            raise ConfigError(f"default provider {self.default_provider!r} is not configured")
        return warnings


class _ConfigFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    providers: list[ProviderConfig] = msgspec.field(default_factory=list)
    default_provider: str | None = None
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    snapshot_every: int | None = None
    client_queue_max: int | None = None
    turn_iteration_cap: int | None = None
    action_timeout_s: float | None = None


def load_config_file(settings: Settings, path: Path) -> Settings:
    """Merge a JSON config file into ``settings``; a clear ConfigError if it is malformed."""
    try:
        cfg = msgspec.json.decode(path.read_bytes(), type=_ConfigFile)
    except FileNotFoundError:
        return settings
    except (msgspec.ValidationError, msgspec.DecodeError) as err:
        raise ConfigError(f"{path}: {err}") from None
    changes: dict[str, object] = {
        "providers": cfg.providers or settings.providers,
        "default_provider": cfg.default_provider or settings.default_provider,
        "allowed_origins": settings.allowed_origins + cfg.allowed_origins,
        "allowed_hosts": settings.allowed_hosts + cfg.allowed_hosts,
    }
    for name in ("snapshot_every", "client_queue_max", "turn_iteration_cap",
                 "action_timeout_s"):
        value = getattr(cfg, name)
        if value is not None:
            changes[name] = value
    return msgspec.structs.replace(settings, **changes)
