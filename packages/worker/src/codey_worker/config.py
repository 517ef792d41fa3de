"""The worker's files under ``$CODEY_HOME`` (default ``~/.codey``).

* ``worker.json`` (mode 0600) — who this machine is: :class:`Identity` (worker id, server URL,
  Ed25519 private key, credential). Written once pairing succeeds, deleted by ``unpair``.
* ``worker-config.json`` — what the machine's owner allows: :class:`WorkerConfig`
  (``allowed_roots``, ``denied_commands``, ``denied_mcp_tools``, ``mcp_servers``,
  ``acp_agents``, ``terminal``, ``sandbox``, ``worktrees_dir``). Missing file → defaults
  (roots = the home directory, nothing denied, no MCP servers, the sandbox's default hidden
  paths, worktrees in ``~/.codey-worktrees``).
* ``actions/`` — the exactly-once record store (:mod:`codey_worker.records`).

Loading raises :class:`ConfigError` with a message that names the file and the bad field.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codey_worker.acp import AcpAgentConfig
from codey_worker.errors import WorkerError
from codey_worker.home import codey_home
from codey_worker.policy import LocalPolicy
from codey_worker.sandbox import SandboxSettings

__all__ = [
    "CONFIG_FILE",
    "IDENTITY_FILE",
    "ConfigError",
    "Identity",
    "McpServerConfig",
    "WorkerConfig",
    "codey_home",
    "delete_identity",
    "load_config",
    "load_identity",
    "records_path",
    "resolve_server",
    "save_identity",
]

IDENTITY_FILE = "worker.json"
CONFIG_FILE = "worker-config.json"


class ConfigError(WorkerError):
    """A worker file that cannot be read or does not have the expected shape."""


def records_path(home: Path) -> Path:
    """Where the exactly-once action records live."""
    return home / "actions" / "records.sqlite3"


def resolve_server(flag: str | None, identity: Identity | None,
                   env: dict[str, str] | None = None) -> str | None:
    """The server URL: ``--server``, else ``$CODEY_SERVER``, else worker.json's; no trailing /."""
    source = os.environ if env is None else env
    url = flag or source.get("CODEY_SERVER") or (identity.server if identity else None)
    return url.rstrip("/") if url else None


# ---------------------------------------------------------------------------------------------
# worker.json


@dataclass(frozen=True)
class Identity:
    """The paired machine: what ``worker.json`` holds.

    ``private_key`` is the Ed25519 private key as base64url of its raw 32 bytes.
    """

    worker_id: str
    server: str
    private_key: str
    credential: str

    def to_json(self) -> dict[str, str]:
        return {
            "worker_id": self.worker_id,
            "server": self.server,
            "private_key": self.private_key,
            "credential": self.credential,
        }


def load_identity(home: Path) -> Identity | None:
    """The identity in ``home/worker.json``; None when the file does not exist.

    Raises ConfigError for a file that is not JSON or misses a field.
    """
    path = home / IDENTITY_FILE
    data = _read_json(path)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    values: dict[str, str] = {}
    for name in ("worker_id", "server", "private_key", "credential"):
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{path}: field {name!r} is missing or not a string; "
                              "run `codey-worker unpair` and pair again")
        values[name] = value
    return Identity(**values)


def save_identity(home: Path, identity: Identity) -> Path:
    """Write ``worker.json`` atomically with mode 0600 (the key never exists world-readable)."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = home / IDENTITY_FILE
    fd, tmp = tempfile.mkstemp(dir=home, prefix=".worker.", suffix=".tmp")  # mkstemp: 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(identity.to_json(), f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def delete_identity(home: Path) -> bool:
    """Delete ``worker.json``; False when there was none."""
    try:
        (home / IDENTITY_FILE).unlink()
    except FileNotFoundError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# worker-config.json


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server: a stdio one, ``command`` with ``args``, started in the session's
    workdir with the environment commands get (``shell.build_env``) plus ``env``, as the owner
    wrote it; or a streamable-HTTP one at ``url``, sent ``headers`` (e.g. Codey's own
    ``/mcp`` with ``Authorization: Bearer cmcp_...``)."""

    name: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: a stdio server runs in the OS sandbox (``sandbox.py``; the workdir writable) unless
    #: the owner says ``"sandbox": false``; with the network unless ``"network": false``
    sandbox: bool = True
    network: bool = True
    #: what this server may also write in the sandbox (say ``~/.cache/uv`` for a ``uvx``
    #: server), as written; commands do not get these
    writable_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerConfig:
    """The owner's local settings. Build with :func:`load_config` or :meth:`from_dict`."""

    policy: LocalPolicy
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    #: the web terminal: a full shell on this machine from the browser (off by default)
    terminal: bool = False
    #: external coding agents spoken to over ACP (``acp.py``), by name
    acp_agents: dict[str, AcpAgentConfig] = field(default_factory=dict)
    #: what sandboxed commands may not see (``hidden_paths``) and may also write
    #: (``writable_paths``)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)

    @property
    def allowed_roots(self) -> list[Path]:
        return list(self.policy.allowed_roots)

    @classmethod
    def from_dict(cls, data: Any, source: str = CONFIG_FILE) -> WorkerConfig:
        """Validate a parsed config; raises ConfigError naming ``source`` and the field."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object")
        known = {"allowed_roots", "denied_commands", "denied_mcp_tools", "mcp_servers",
                 "terminal", "acp_agents", "sandbox", "worktrees_dir"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {', '.join(unknown)}; "
                              f"expected {', '.join(sorted(known))}")
        try:
            policy = LocalPolicy.from_config(data)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        terminal = data.get("terminal", False)
        if not isinstance(terminal, bool):
            raise ConfigError(f"{source}: terminal: expected true or false")
        agents = {name: AcpAgentConfig(name=name, command=spec.command, args=spec.args,
                                       env=spec.env)
                  for name, spec in _mcp_servers(data.get("acp_agents"), source,
                                                 "acp_agents").items()}
        return cls(policy=policy, mcp_servers=_mcp_servers(data.get("mcp_servers"), source),
                   terminal=terminal, acp_agents=agents,
                   sandbox=_sandbox_settings(data.get("sandbox"), source))


def _sandbox_settings(raw: Any, source: str) -> SandboxSettings:
    """``sandbox``: ``hidden_paths`` (replaces the defaults when given) and
    ``writable_paths``, each a list of paths (``~`` and ``$VAR`` expanded when used)."""
    if raw is None:
        return SandboxSettings()
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: sandbox must be an object with hidden_paths and/or "
                          "writable_paths")
    extra = sorted(set(raw) - {"hidden_paths", "writable_paths"})
    if extra:
        raise ConfigError(f"{source}: sandbox: unknown field(s) {', '.join(extra)}; "
                          "expected hidden_paths, writable_paths")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("hidden_paths", "writable_paths"):
        value = raw.get(key)
        if value is not None:
            lists[key] = _path_list(value, f"{source}: sandbox.{key}")
    return SandboxSettings(**lists)


def _path_list(value: Any, where: str) -> tuple[str, ...]:
    """A list of absolute paths as written (``~`` and ``$VARIABLE`` allowed)."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where} must be a list of paths")
    for path in value:
        expanded = os.path.expanduser(path)
        if not (os.path.isabs(expanded) or expanded.startswith("$")):
            raise ConfigError(f"{where}: {path!r} is not an absolute path "
                              "(~ and $VARIABLE are allowed)")
    return tuple(value)


def _mcp_servers(raw: Any, source: str,
                 key: str = "mcp_servers") -> dict[str, McpServerConfig]:
    """``mcp_servers`` (or ``acp_agents``, the same shape): name → command, args, env."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {key} must be an object of name -> server")
    servers: dict[str, McpServerConfig] = {}
    for name, spec in raw.items():
        where = f"{source}: {key}.{name}"
        if not name or not isinstance(spec, dict):
            raise ConfigError(f"{where} must be an object with a command")
        command = spec.get("command")
        args = spec.get("args", [])
        env = spec.get("env", {})
        url, headers = spec.get("url"), spec.get("headers", {})
        boxed, network = spec.get("sandbox", True), spec.get("network", True)
        if url is not None and key == "mcp_servers":
            if command is not None or not isinstance(url, str) or \
                    not url.startswith(("http://", "https://")):
                raise ConfigError(f"{where}: give either a command or an http(s) url")
            if not isinstance(headers, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
                raise ConfigError(f"{where}.headers must be an object of string -> string")
            extra = sorted(set(spec) - {"url", "headers"})
            if extra:
                raise ConfigError(f"{where}: unknown field(s) {', '.join(extra)}")
            servers[name] = McpServerConfig(name=name, url=url, headers=dict(headers))
            continue
        if not isinstance(command, str) or not command:
            raise ConfigError(f"{where}.command must be a non-empty string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"{where}.args must be a list of strings")
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ConfigError(f"{where}.env must be an object of string -> string")
        allowed = {"command", "args", "env"} | ({"sandbox", "network", "writable_paths"}
                                                 if key == "mcp_servers" else set())
        extra = sorted(set(spec) - allowed)
        if extra:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(extra)}")
        if not isinstance(boxed, bool) or not isinstance(network, bool):
            raise ConfigError(f"{where}: sandbox and network must be true or false")
        writable = _path_list(spec.get("writable_paths", []), f"{where}.writable_paths")
        servers[name] = McpServerConfig(name=name, command=command, args=list(args),
                                        env=dict(env), sandbox=boxed, network=network,
                                        writable_paths=writable)
    return servers


def load_config(home: Path) -> WorkerConfig:
    """``home/worker-config.json`` validated, or the defaults when the file does not exist."""
    path = home / CONFIG_FILE
    data = _read_json(path)
    config = WorkerConfig.from_dict({} if data is None else data, source=str(path))
    worktrees = config.policy.worktrees_dir
    if worktrees is not None and (os.path.realpath(worktrees) + "/").startswith(
            os.path.realpath(home) + "/"):
        # every action and the sandbox hide $CODEY_HOME: a worktree there could not be used
        raise ConfigError(f"{path}: worktrees_dir {worktrees} is inside {home}, the "
                          "worker's own folder, which no session may work in")
    return config


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
