"""The one hidden list: what nothing done for a session may read, list or write.

The sandbox mounts an empty folder (or ``/dev/null``) over each of these for every command it
wraps, the worker's own git runs under the same sandbox, and the confined file API
(:mod:`codey_worker.files`) refuses them by their real path: one list, three users, so a tool
cannot see what a command is shown as empty.

The list is the owner's (``worker-config.json`` → ``sandbox.hidden_paths`` replaces
:data:`DEFAULT_HIDDEN_PATHS`), plus what is hidden whatever it says (:data:`ALWAYS_HIDDEN`,
``$CODEY_HOME``). Paths may use ``~``, ``$VAR`` and ``$UID``; one whose variable is unset is
skipped (there is nothing there to hide).

Unix sockets are the other way out of a sandbox without a network: a socket file is reachable
by path whatever the network namespace. :func:`unix_sockets` finds the ones under ``/run``
(the system bus, a database's socket, a container engine's) for the sandbox to cover when a
session's network is off.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "ALWAYS_HIDDEN",
    "DEFAULT_HIDDEN_PATHS",
    "SocketScan",
    "expand",
    "expand_all",
    "unix_sockets",
]

#: credentials by another name, and what leads out of the sandbox: hidden from every command,
#: file tool and git run for a session unless the owner's ``sandbox.hidden_paths`` says
#: otherwise
DEFAULT_HIDDEN_PATHS: tuple[str, ...] = (
    # keys and tokens
    "~/.ssh", "~/.gnupg", "~/.aws", "~/.azure", "~/.config/gcloud", "~/.config/gh",
    "~/.config/hub", "~/.netrc", "~/.git-credentials", "~/.config/git/credentials",
    "~/.npmrc", "~/.yarnrc", "~/.pypirc", "~/.cargo/credentials", "~/.cargo/credentials.toml",
    "~/.gem/credentials", "~/.pgpass", "~/.my.cnf", "~/.docker", "~/.kube", "~/.vault-token",
    "~/.terraform.d/credentials.tfrc.json", "~/.password-store", "~/.local/share/keyrings",
    "~/.config/op", "~/.codex", "~/.claude", "~/.claude.json",
    # browser profiles (cookies, saved passwords)
    "~/.mozilla", "~/.config/google-chrome", "~/.config/chromium", "~/.config/BraveSoftware",
    "~/.config/microsoft-edge", "~/.config/vivaldi", "~/snap/firefox", "~/snap/chromium",
    "~/Library/Application Support/Google/Chrome", "~/Library/Application Support/Firefox",
    "~/Library/Keychains", "~/Library/Cookies",
    # shell and REPL histories (pasted passwords, tokens on command lines)
    "~/.bash_history", "~/.zsh_history", "~/.histfile", "~/.local/share/fish/fish_history",
    "~/.python_history", "~/.psql_history", "~/.mysql_history", "~/.node_repl_history",
    "~/.sqlite_history", "~/.rediscli_history",
    # the session's runtime dir holds agent sockets (ssh, gpg, keyring) and the user's bus
    # (``systemd-run --user`` would run a command outside the sandbox): hidden under its
    # usual name too, for a worker started where XDG_RUNTIME_DIR is unset (cron, sudo, a
    # system service)
    "$XDG_RUNTIME_DIR", "/run/user/$UID",
    # docker's socket is root on the machine for anyone who can connect to it
    "/run/docker.sock", "/var/run/docker.sock",
)  # fmt: skip

#: hidden whatever the owner's list says: the user's bus and agents (a way out of any sandbox)
ALWAYS_HIDDEN: tuple[str, ...] = ("$XDG_RUNTIME_DIR", "/run/user/$UID")


def expand(path: str) -> Path | None:
    """``~``, ``$VAR`` and ``$UID`` expanded and the result resolved; None when a variable is
    unset or the result is not absolute."""
    text = path.replace("$UID", str(os.getuid())) if hasattr(os, "getuid") else path
    expanded = os.path.expandvars(os.path.expanduser(text))
    if "$" in expanded or not os.path.isabs(expanded):
        return None
    return Path(os.path.realpath(expanded))


def expand_all(paths: Iterable[str]) -> list[Path]:
    """Each path :func:`expand`-ed, the unset ones left out, each once."""
    return list(dict.fromkeys(p for p in map(expand, paths) if p is not None))


#: folders a socket scan does not enter: hidden whole anyway, or too big to walk each time
_SCAN_SKIP = frozenset({"/run/user", "/run/udev", "/run/systemd/journal", "/run/lock"})
_SCAN_DEPTH = 3
_SCAN_MAX = 64


def unix_sockets(root: str = "/run", depth: int = _SCAN_DEPTH,
                 limit: int = _SCAN_MAX) -> tuple[Path, ...]:
    """The Unix socket files under ``root`` (``/run``: where system services put theirs),
    at most ``depth`` folders down and ``limit`` of them; symlinks are not followed."""
    found: list[Path] = []

    def walk(folder: str, level: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if len(found) >= limit:
                return
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISSOCK(mode):
                found.append(Path(entry.path))
            elif stat.S_ISDIR(mode) and level < depth and entry.path not in _SCAN_SKIP:
                walk(entry.path, level + 1)

    walk(root, 1)
    return tuple(sorted(found))


class SocketScan:
    """:func:`unix_sockets`, looked again at most every ``ttl_s`` seconds: a service started
    after the worker gets its socket covered within that time, and a command does not pay
    for a walk of ``/run`` each time (a scan costs ~0.1-0.3 ms)."""

    def __init__(self, root: str = "/run", ttl_s: float = 5.0) -> None:
        self.root = root
        self.ttl_s = ttl_s
        self._at = -ttl_s
        self._found: tuple[Path, ...] = ()

    def sockets(self) -> tuple[Path, ...]:
        now = time.monotonic()
        if now - self._at >= self.ttl_s:
            self._found = unix_sockets(self.root)
            self._at = now
        return self._found
