"""The approval policies: which calls must wait for the user, under which policy.

Each tool's approval rule (:meth:`~codey_server.agent.tools.base.Tool.ask`) is built from
these: :func:`asks_for_command` (``shell``), :func:`asks_for_edit` (``apply_patch``,
``write_file``), :func:`asks_for_mcp` (MCP tools); reads and the server's own tools never ask.

``suggest``: every command and every write asks, except known-safe read-only commands.
``auto-edit``: patches and writes inside the workdir go ahead; commands ask (safe ones don't).
``full-auto``: nothing asks (the worker's local policy still applies).
A command the user approved "for this session" is remembered as its exact argv; any later
command that starts with that argv goes ahead.

A command is known-safe (goes ahead under ``suggest`` and ``auto-edit``, and may run in plan
mode) only when it runs in the worker's OS sandbox: there, a "read-only" command that reads a
secret finds it hidden, and one that would run code from the repository (git's
``core.fsmonitor``) cannot have planted it. git is known-safe only from the workdir's root, and
runs with :data:`GIT_HARDENING_ENV`: a folder laid out as a git directory deeper in the tree
(``vendor/evil`` with a ``config`` of its own) is never the repository it reads.

Leaving the sandbox for one command (:func:`asks_to_escalate`) waits for the user under every
policy, ``full-auto`` included; "for this session" remembers that command's prefix apart from
the approved prefixes (approving a command never lets it leave the sandbox).

MCP tools go by the danger level their server's annotations give (:func:`mcp_danger`), as
agendo's danger levels do:

=============  ===========================================  =========  =========  ==========
level          annotations                                  suggest    auto-edit  full-auto
=============  ===========================================  =========  =========  ==========
read-only      ``readOnlyHint: true``                       goes       goes       goes
additive       not read-only, ``destructiveHint: false``    asks       goes       goes
destructive    anything else (MCP's defaults: destructive)  asks       asks       goes
=============  ===========================================  =========  =========  ==========

An additive tool goes ahead under ``auto-edit`` as an edit inside the workdir does. The hints
come from MCP servers the worker's owner configured; a server that lies about them is one the
owner chose to run (docs/worker.md says what the worker can and cannot enforce).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Literal

from codey_protocol import worker as wk
from codey_protocol.worker import GIT_HARDENING

__all__ = ["GIT_HARDENING_ENV", "McpDanger", "asks_for_command", "asks_for_edit", "asks_for_mcp",
           "asks_to_escalate", "hardened_env", "is_known_safe", "mcp_danger", "mcp_tool_of",
           "patch_paths", "path_inside"]

McpDanger = Literal["read_only", "additive", "destructive"]

_SAFE_PLAIN = {"ls", "cat", "pwd"}
_SAFE_GIT = {"status", "diff", "log"}
# flags that make git write files, run programs, or change config
_GIT_UNSAFE_FLAGS = ("--output", "--ext-diff", "-c", "--exec-path", "--upload-pack",
                     "--config", "--textconv", "-o")
# flags that make rg / grep run other programs (or read decompressed data through them)
_SEARCH_UNSAFE_FLAGS = ("--pre", "--pre-glob", "-z", "--search-zip", "--hostname-bin")


#: the settings every known-safe git command runs with (git's own ``GIT_CONFIG_COUNT``
#: overrides, above any repository's config): no fsmonitor hook, no hooks at all, and no
#: bare repository found by walking up (a folder laid out as one is not a repository).
#: A worker adds them to every command it runs for the model (it merges them after these,
#: and accepts GIT_CONFIG_KEY_<n> past its secret filter); sent with ``git`` all the same,
#: so the known-safe rule does not rest on the worker's version alone.
GIT_HARDENING_ENV: dict[str, str] = {
    "GIT_CONFIG_COUNT": str(len(GIT_HARDENING)),
    **{f"GIT_CONFIG_KEY_{n}": k for n, (k, _) in enumerate(GIT_HARDENING)},
    **{f"GIT_CONFIG_VALUE_{n}": v for n, (_, v) in enumerate(GIT_HARDENING)},
}


def _at_root(cwd: str | None) -> bool:
    return cwd is None or posixpath.normpath(cwd) in (".", "")


def hardened_env(argv: Sequence[str]) -> dict[str, str]:
    """The environment a command runs with beyond the worker's: git's hardening for git."""
    return dict(GIT_HARDENING_ENV) if argv and posixpath.basename(argv[0]) == "git" else {}


def is_known_safe(argv: Sequence[str], cwd: str | None = None) -> bool:
    """True for a conservative list of read-only commands (never a shell). ``cwd``: the
    command's folder relative to the workdir (None: the workdir itself)."""
    if not argv:
        return False
    prog = posixpath.basename(argv[0])
    args = list(argv[1:])
    if prog in _SAFE_PLAIN:
        return all(not a.startswith("--output") for a in args)
    if prog == "git":
        # deeper in the tree, "the repository" may be any folder laid out as one
        if not args or args[0] not in _SAFE_GIT or not _at_root(cwd):
            return False
        return not any(a == f or a.startswith(f + "=") for a in args[1:] for f in _GIT_UNSAFE_FLAGS)
    if prog in ("rg", "grep"):
        for a in args:
            if any(a == f or a.startswith(f + "=") for f in _SEARCH_UNSAFE_FLAGS):
                return False
            # short-flag bundles like -zn hide -z
            if prog == "rg" and a.startswith("-") and not a.startswith("--") and "z" in a[1:]:
                return False
        return True
    return False


def path_inside(path: str) -> bool:
    """True when a patch/write path stays inside the workdir by its text alone.

    The worker confines every path by realpath anyway; this only decides whether to ask.
    """
    if not path or path.startswith(("/", "~")) or "\\" in path:
        return False
    parts = posixpath.normpath(path).split("/")
    # .git/config can make "safe" git commands run programs (core.fsmonitor, diff.external)
    return ".." not in parts and not any(p.lower() == ".git" for p in parts)


def patch_paths(patch: str) -> list[str]:
    """The paths a patch adds, deletes, updates or moves to."""
    paths = []
    for line in patch.splitlines():
        stripped = line.strip()
        for marker in ("*** Add File:", "*** Delete File:", "*** Update File:", "*** Move to:"):
            if stripped.startswith(marker):
                paths.append(stripped[len(marker):].strip())
    return paths


def mcp_tool_of(capabilities: wk.Capabilities | None, server: str | None,
                tool: str | None) -> wk.McpTool | None:
    """The tool ``server``/``tool`` as the worker reported it, or None."""
    for info in (capabilities.mcp_servers if capabilities else []):
        if info.name == server:
            for listed in info.tools:
                if listed.name == tool:
                    return listed
    return None


def mcp_danger(tool: wk.McpTool | None) -> McpDanger:
    """The danger level of an MCP tool, from its hints (unknown tool: destructive).

    MCP's own defaults: a tool is not read-only and is destructive unless it says otherwise;
    ``destructiveHint`` means something only for a tool that is not read-only.
    """
    if tool is None:
        return "destructive"
    if tool.read_only_hint is True:
        return "read_only"
    if tool.destructive_hint is False:
        return "additive"
    return "destructive"


def _has_prefix(argv: Sequence[str], prefixes: Sequence[Sequence[str]]) -> bool:
    argv = list(argv)
    return any(len(p) <= len(argv) and argv[:len(p)] == list(p) for p in prefixes if p)


def asks_for_command(policy: str, argv: Sequence[str],
                     approved_prefixes: Sequence[Sequence[str]] = (), *,
                     sandboxed: bool = True, cwd: str | None = None) -> bool:
    """Whether a command waits for the user: not under ``full-auto``, not when it is
    known-safe and runs in the sandbox, not when it starts with a prefix approved for the
    session."""
    if policy == "full-auto" or (sandboxed and is_known_safe(argv, cwd)):
        return False
    return not _has_prefix(argv, approved_prefixes)


def asks_to_escalate(argv: Sequence[str], escalated_prefixes: Sequence[Sequence[str]] = (),
                     ) -> bool:
    """Whether running ``argv`` outside the sandbox waits for the user: always (every
    policy), unless the user let a prefix of it leave the sandbox for this session."""
    return not _has_prefix(argv, escalated_prefixes)


def asks_for_edit(policy: str, paths: Sequence[str]) -> bool:
    """Whether a change to the files at ``paths`` waits for the user: always under
    ``suggest``; under ``auto-edit`` unless every path stays inside the workdir."""
    if policy == "full-auto":
        return False
    if policy == "auto-edit":
        return not paths or not all(path_inside(p) for p in paths)
    return True


def asks_for_mcp(policy: str, tool: wk.McpTool | None) -> bool:
    """Whether a call of this MCP tool (as its worker listed it) waits for the user."""
    if policy == "full-auto":
        return False
    danger = mcp_danger(tool)
    return danger == "destructive" or (danger == "additive" and policy != "auto-edit")
