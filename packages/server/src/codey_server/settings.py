"""Server settings: one object, passed to ``create_app``; nothing global.

Settings come from the command line and an optional ``config.json`` in the data dir
(model providers, allowed origins and host names). Secrets never live here: credentials are
kept by the auth service in ``auth.json`` (among replicas, sealed in the database with the key
``secret_key_file`` names).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import msgspec

from codey_protocol.events import ProviderEntry, ProviderKind
from codey_server.errors import ConfigError


class FallbackConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where a call goes when its provider keeps failing (5xx, unreachable) after retries."""

    provider: str
    model: str | None = None  # None: that provider's default model


class ProviderConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A model provider. ``kind`` picks the wire API."""

    name: str
    kind: ProviderKind = "chat"
    base_url: str
    models: list[str] = msgspec.field(default_factory=list)
    default_model: str | None = None
    auth: Literal["none", "api_key", "oauth"] = "none"
    api_key_env: str | None = None  # read the key from this environment variable
    # OAuth (auth == "oauth"): OIDC discovery at issuer, PKCE; a public client, or a
    # confidential one whose secret is read from the environment variable client_secret_env
    issuer: str | None = None
    client_id: str | None = None
    client_secret_env: str | None = None
    scopes: list[str] = msgspec.field(default_factory=lambda: ["openid", "email", "offline_access"])
    audience: str | None = None
    max_retries: int = 4
    #: new connections to the provider being set up at once, each until the server first
    #: answers on it (agent/connections.py): a burst of sessions must not overflow a small
    #: accept queue (a listen backlog of 5 holds 6), where a connection waits seconds in
    #: TCP's retransmission
    max_connecting: int = 4
    reasoning_summary: bool = False  # ask the Responses API for reasoning summaries
    #: the most tokens an answer may take (None: the model's known maximum, for Anthropic,
    #: which requires a figure; the provider's own default elsewhere)
    max_output_tokens: int | None = None
    #: Anthropic's extended thinking: the tokens a call may think with (at least 1024);
    #: None: no thinking (unless a session asks for a reasoning effort)
    thinking_budget: int | None = None
    #: tokens the model can take in; None: a known default for the model name, else 128k
    context_window: int | None = None
    #: per-model windows, for providers whose models differ (overrides context_window)
    context_windows: dict[str, int] = msgspec.field(default_factory=dict)
    #: compact the session when a call's context reaches this share of the window
    compact_at: float = 0.85
    fallback: FallbackConfig | None = None
    #: how the model changes files: ``apply_patch`` (Codex's patch format, which OpenAI's
    #: coding models are trained on), ``edit`` (exact string replacement, as Claude Code's
    #: Edit) or ``both`` (the default: each model picks what it does best)
    edit_tools: Literal["both", "apply_patch", "edit"] = "both"


def provider_config(entry: ProviderEntry) -> ProviderConfig:
    """A provider of Settings → Models as the server uses one of config.json (the settings
    the browser does not offer keep their defaults)."""
    return ProviderConfig(name=entry.name, kind=entry.kind, base_url=entry.base_url,
                          models=list(entry.models), default_model=entry.default_model,
                          auth=entry.auth, issuer=entry.issuer, client_id=entry.client_id)


class RoleConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A sub-agent role the model can ``delegate`` to."""

    description: str
    #: only reading tools: read_file, list_dir and known-safe read-only commands
    read_only: bool = False
    #: model calls per turn before the sub-agent stops
    turn_cap: int = 30
    #: the approval policy; "parent": the delegating session's
    policy: Literal["parent", "suggest", "auto-edit", "full-auto"] = "parent"


class AttentionConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The default "when nobody answers" (the attention ladder, docs/attention.md); a session
    may have its own (``session_attention_changed``)."""

    #: T1: an approval or question waiting this long nudges every device once (None: off)
    nudge_after_s: float | None = 120.0
    #: T2: then the ladder acts (None: the wait lasts until someone answers)
    act_after_s: float | None = 1800.0
    #: what T2 does to an approval: ``reject`` (and tell the model), ``park`` the session,
    #: or hand it to the ``reviewer`` (which rejects and tells unless it approves)
    on_approval: Literal["reject", "park", "reviewer"] = "reject"
    #: what T2 does to a question: ``answer`` "no answer; use your best judgement", or ``park``
    on_question: Literal["answer", "park"] = "answer"


class ReviewerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The reviewer model that judges approvals in sessions of policy ``reviewer``."""

    #: a configured provider's name (None: the session's own provider)
    provider: str | None = None
    #: its model (None: the session's model); a small, cheap model is what it is for
    model: str | None = None
    #: a verdict ``approve`` with a risk below this (0-100) approves; else the user is asked
    risk_threshold: int = 40
    #: the reviewer's answer must come within this many seconds, else the user is asked
    timeout_s: float = 30.0
    #: denials in a row that park the session
    denials_to_park: int = 3


class RetentionConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How long the log keeps the events of finished sessions (closed or deleted ones).

    Nothing is trimmed unless one limit is set. A closed session stays listed with its items
    (they are in the state's snapshot); only its stored events go, so its log download then
    holds only what came after the trim. A deleted session's events all go.
    """

    #: a closed session's events go once it has been untouched this many days
    days: float | None = None
    #: keep the events of at most this many closed sessions, the most recently active
    finished_sessions: int | None = None
    #: how often to look, in seconds
    every_s: float = 3600.0

    @property
    def enabled(self) -> bool:
        return self.days is not None or self.finished_sessions is not None


class TelegramConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The Telegram channel (``channels/telegram.py``). The token itself never lives here: it
    is read from ``token_env`` or pasted in the UI (stored in ``DATA_DIR/telegram.json``)."""

    token_env: str = "CODEY_TELEGRAM_TOKEN"
    #: the Bot API's root; the test kit's ``codey-bot-api`` in tests
    api_base: str = "https://api.telegram.org"
    #: seconds a getUpdates long poll waits for news
    poll_timeout_s: float = 25.0


class PushConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Web Push (``push/``). The VAPID key pair is made by the server and kept in
    ``DATA_DIR/push.json`` (among replicas a row sealed with the cluster's key)."""

    #: the VAPID ``sub`` claim push services may use to reach the server's operator
    #: ("": the server's public URL when it is https, else a placeholder address)
    subject: str = ""
    #: accept ``http://`` push endpoints; real push services are https: only the test kit's
    #: push service (``codey-push-service``) needs this
    allow_http_endpoints: bool = False
    #: seconds a push service may keep a notification for an offline device
    ttl_s: int = 3600


class SearchConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where ``web_search`` sends its queries (``agent/web/search.py``). The key itself never
    lives here: it is read from the environment variable ``api_key_env``, as a provider's."""

    #: ``none`` (web_search answers that it is not set up), ``searxng`` or ``brave``
    kind: Literal["none", "searxng", "brave"] = "none"
    #: the SearXNG instance's root, or the Brave Search API's
    url: str = ""
    api_key_env: str | None = None
    timeout_s: float = 20.0


class WebConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The web tools, run by the server (``agent/web/``): what ``web_fetch`` may reach and
    read, and ``web_search``'s backend."""

    #: networks a fetch may reach although they are loopback, private, link-local, …
    #: (``["10.1.0.0/16"]``: an intranet wiki); none by default
    fetch_allow: list[str] = msgspec.field(default_factory=list)
    #: bytes of a fetched body read, at most
    fetch_max_bytes: int = 2 * 1024 * 1024
    #: seconds a whole fetch (redirects included) may take
    fetch_timeout_s: float = 30.0
    search: SearchConfig = msgspec.field(default_factory=SearchConfig)


def default_roles() -> dict[str, RoleConfig]:
    return {
        "explorer": RoleConfig(
            description="Finds things out: reads files and runs read-only commands, changes "
                        "nothing. Give it a precise question; it answers with what it found.",
            read_only=True, turn_cap=20, policy="suggest"),
        "developer": RoleConfig(
            description="Does a well-defined piece of work with every tool, under this "
                        "session's approval policy, and reports what it changed.",
            turn_cap=40),
    }


def _loopback_url(url: str) -> bool:
    """Whether ``url``'s host is this machine's loopback (``localhost``, 127.0.0.0/8, ::1)."""
    host = (urlsplit(url).hostname or "").strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Settings(msgspec.Struct, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8765
    data_dir: Path = msgspec.field(default_factory=lambda: Path.home() / ".codey" / "server")
    web_dir: Path | None = None  # None: the web/ shipped with the package (or the repo's)
    #: write a state snapshot once this many events were applied since the last one
    snapshot_every: int = 5000
    #: frames queued for one browser before it is closed with 4008 and must resume
    client_queue_max: int = 256
    #: seconds one frame to a browser may take to go out before the browser counts as not
    #: reading and is closed with 4008
    client_send_timeout_s: float = 15.0
    #: seconds a worker may send nothing (it beats every 5 s) before it counts as unreachable
    #: and its socket is closed with 4408
    worker_silence_s: float = 15.0
    #: a schedule's run missed while the server was down still runs at start if it is at most
    #: this many seconds late; older ones are recorded as skipped
    schedule_grace_s: float = 300.0
    #: the schedules' clock: a file holding unix seconds (tests), else the system's
    clock_file: Path | None = None
    #: ``postgresql://…``: the event log in PostgreSQL; None: SQLite in the data dir
    database_url: str | None = None
    #: this server's name among replicas on one database (default: host name and a random
    #: suffix, new at each start)
    replica_id: str | None = None
    #: among replicas: the file holding the key that seals provider logins in the database
    #: (``$CODEY_SECRET_KEY`` wins over it; docs/security.md)
    secret_key_file: Path | None = None
    #: events per catch-up frame
    catchup_batch: int = 2000
    providers: list[ProviderConfig] = msgspec.field(default_factory=list)
    default_provider: str | None = None
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    auth_required: bool = True
    tls: bool = False  # set when a TLS reverse proxy fronts the server
    public_url: str | None = None  # the URL browsers use, when behind a proxy
    #: addresses or networks of the reverse proxies in front (``["127.0.0.1", "10.0.0.0/8"]``):
    #: only a request from one of them has its ``X-Forwarded-For`` believed, and the rate
    #: limits then count the client's address from it (``http/clientaddr.py``); none by default
    trusted_proxies: list[str] = msgspec.field(default_factory=list)
    action_timeout_s: float = 900.0
    turn_iteration_cap: int = 50
    #: a session's goal (``/goal``) is given up after this many turns that did not meet it,
    #: unless the goal sets its own cap
    goal_max_turns: int = 10
    #: an approval nobody decides in this many seconds expires (None: never)
    approval_timeout_s: float | None = None
    #: roles the model can delegate to (sub-agents)
    roles: dict[str, RoleConfig] = msgspec.field(default_factory=default_roles)
    log_level: str = "info"
    #: ``POST /api/workers/{id}/actions`` runs an action with no approval and no event in the
    #: log; it exists for benchmarks and tests, so it is off unless the server is started
    #: with ``--direct-actions``
    direct_actions: bool = False
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    telegram: TelegramConfig = msgspec.field(default_factory=TelegramConfig)
    push: PushConfig = msgspec.field(default_factory=PushConfig)
    attention: AttentionConfig = msgspec.field(default_factory=AttentionConfig)
    reviewer: ReviewerConfig = msgspec.field(default_factory=ReviewerConfig)
    web: WebConfig = msgspec.field(default_factory=WebConfig)
    #: checkpoints (issue 38): files over this size are left out of a turn's checkpoint
    checkpoint_max_file_bytes: int = 10 * 1024 * 1024
    #: the checkpoints kept per session: its last this many turns' (0: all of them, until
    #: the session is deleted or archived)
    checkpoints_keep: int = 0

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
        if not self.auth_required and self.public_url and not _loopback_url(self.public_url):
            # a public URL means browsers (and the MCP endpoint, and Telegram's webhook) come
            # from elsewhere: without auth anyone there could make MCP tokens and pairing codes
            raise ConfigError(
                f"refusing --no-auth with the public URL {self.public_url}: anyone who reaches "
                "it could drive your workers; --no-auth is for a loopback-only server")
        for entry in self.trusted_proxies:
            try:
                # strict: 10.0.0.1/8 is a typo for 10.0.0.0/8 or 10.0.0.1, not a guess to make
                ipaddress.ip_network(entry.strip(), strict=True)
            except ValueError as err:
                raise ConfigError(f"trusted_proxies: {entry!r} is not an IP address or network "
                                  f"such as 10.0.0.0/8 ({err})") from None
        if self.schedule_grace_s < 30:
            # a live server's own tick is a second or two late: less would skip its own runs
            raise ConfigError("schedule_grace_s must be at least 30")
        if self.worker_silence_s < 1.5:
            raise ConfigError("worker_silence_s must be at least 1.5 (three heartbeats)")
        r = self.retention
        if (r.days is not None and r.days < 0) or (
                r.finished_sessions is not None and r.finished_sessions < 0) or r.every_s <= 0:
            raise ConfigError("retention: days and finished_sessions must be 0 or more, "
                              "every_s more than 0")
        if not 0 <= self.reviewer.risk_threshold <= 100:
            raise ConfigError("reviewer.risk_threshold must be between 0 and 100")
        if self.reviewer.timeout_s <= 0 or self.reviewer.denials_to_park < 1:
            raise ConfigError("reviewer: timeout_s must be more than 0, denials_to_park 1 or more")
        a = self.attention
        if any(t is not None and t < 0 for t in (a.nudge_after_s, a.act_after_s)):
            raise ConfigError("attention: nudge_after_s and act_after_s must be 0 or more")
        names = {p.name for p in self.providers}
        if len(names) != len(self.providers):
            raise ConfigError("provider names must be unique")
        if self.default_provider and self.default_provider not in names:
            raise ConfigError(f"default provider {self.default_provider!r} is not configured")
        for p in self.providers:
            if p.fallback is not None:
                if p.fallback.provider not in names:
                    raise ConfigError(f"provider {p.name!r}: fallback provider "
                                      f"{p.fallback.provider!r} is not configured")
                if p.fallback.provider == p.name and not p.fallback.model:
                    raise ConfigError(f"provider {p.name!r}: a fallback to itself needs "
                                      "another model")
            if p.thinking_budget is not None and p.thinking_budget < 1024:
                raise ConfigError(f"provider {p.name!r}: thinking_budget must be at least 1024 "
                                  "tokens (Anthropic's minimum)")
            if not 0.1 <= p.compact_at <= 1.0:
                raise ConfigError(f"provider {p.name!r}: compact_at must be between 0.1 and 1")
            if p.max_connecting < 1:
                raise ConfigError(f"provider {p.name!r}: max_connecting must be at least 1")
            windows = [p.context_window or 1024, *p.context_windows.values()]
            if min(windows) < 1024:
                raise ConfigError(f"provider {p.name!r}: a context window under 1024 tokens "
                                  "leaves no room to work")
        for entry in self.web.fetch_allow:
            try:
                ipaddress.ip_network(entry.strip(), strict=True)
            except ValueError as err:
                raise ConfigError(f"web.fetch_allow: {entry!r} is not an IP address or network "
                                  f"such as 10.1.0.0/16 ({err})") from None
        if self.web.fetch_max_bytes < 1024 or self.web.fetch_timeout_s <= 0:
            raise ConfigError("web: fetch_max_bytes must be at least 1024, fetch_timeout_s "
                              "more than 0")
        search = self.web.search
        if (search.kind == "searxng" or search.url) and not search.url.startswith(
                ("http://", "https://")):
            raise ConfigError("web.search.url must be the backend's http:// or https:// URL "
                              "(a SearXNG instance's; Brave's has a default)")
        return warnings


class _ConfigFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    providers: list[ProviderConfig] = msgspec.field(default_factory=list)
    default_provider: str | None = None
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    trusted_proxies: list[str] = msgspec.field(default_factory=list)
    secret_key_file: Path | None = None
    snapshot_every: int | None = None
    client_queue_max: int | None = None
    client_send_timeout_s: float | None = None
    worker_silence_s: float | None = None
    schedule_grace_s: float | None = None
    turn_iteration_cap: int | None = None
    goal_max_turns: int | None = None
    action_timeout_s: float | None = None
    approval_timeout_s: float | None = None
    #: more roles, or changed ones (merged over the defaults by name)
    roles: dict[str, RoleConfig] | None = None
    retention: RetentionConfig | None = None
    telegram: TelegramConfig | None = None
    push: PushConfig | None = None
    attention: AttentionConfig | None = None
    reviewer: ReviewerConfig | None = None
    web: WebConfig | None = None
    checkpoint_max_file_bytes: int | None = None
    checkpoints_keep: int | None = None


def _where(raw: bytes, message: str) -> str:
    """msgspec's "(byte N)" as a line and column the user can go to."""
    match = re.search(r"\(byte (\d+)\)", message)
    if match is None:
        return message
    offset = min(int(match.group(1)), len(raw))
    before = raw[:offset]
    line = before.count(b"\n") + 1
    column = offset - (before.rfind(b"\n") + 1) + 1
    text = message[:match.start()].rstrip()
    return f"line {line}, column {column}: {text}"


def load_config_file(settings: Settings, path: Path) -> Settings:
    """Merge a JSON config file into ``settings``; a clear ConfigError if it is malformed."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return settings
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it: {err.strerror or err}") from None
    if not raw.strip():
        raise ConfigError(f"{path} is empty: write a JSON object there (see the README's "
                          "\"Model providers\"), or remove the file")
    try:
        cfg = msgspec.json.decode(raw, type=_ConfigFile)
    except msgspec.ValidationError as err:
        raise ConfigError(f"{path}: {err}") from None
    except msgspec.DecodeError as err:
        raise ConfigError(f"{path}: {_where(raw, str(err))}") from None
    changes: dict[str, object] = {
        "providers": cfg.providers or settings.providers,
        "default_provider": cfg.default_provider or settings.default_provider,
        "allowed_origins": settings.allowed_origins + cfg.allowed_origins,
        "allowed_hosts": settings.allowed_hosts + cfg.allowed_hosts,
        "trusted_proxies": settings.trusted_proxies + cfg.trusted_proxies,
    }
    if cfg.secret_key_file is not None:
        # relative to the config file, as a reader of that file would take it
        changes["secret_key_file"] = path.parent / cfg.secret_key_file.expanduser()
    if cfg.telegram is not None:
        changes["telegram"] = cfg.telegram
    if cfg.push is not None:
        changes["push"] = cfg.push
    if cfg.roles:
        changes["roles"] = {**settings.roles, **cfg.roles}
    for name in ("snapshot_every", "client_queue_max", "client_send_timeout_s",
                 "worker_silence_s", "schedule_grace_s",
                 "turn_iteration_cap", "goal_max_turns",
                 "action_timeout_s", "approval_timeout_s", "retention", "attention",
                 "reviewer", "web", "checkpoint_max_file_bytes", "checkpoints_keep"):
        value = getattr(cfg, name)
        if value is not None:
            changes[name] = value
    return msgspec.structs.replace(settings, **changes)
