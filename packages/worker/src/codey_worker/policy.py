"""The worker owner's local policy: the last line of defence, whatever the server sends.

Loaded from the worker's config dict::

    {"allowed_roots": ["~/src", "/srv/work"],     # default: [home directory]
     "denied_commands": ["rm", "sudo", "curl"],   # default: []
     "denied_mcp_tools": ["git.git_push", "github.*", "delete_*"],   # default: []
     "worktrees_dir": "~/.codey-worktrees"}      # the default

``allowed_roots`` bounds every workdir; ``worktrees_dir`` is where the worker makes the
sessions' git worktrees (``workspace_create``), and counts as one more allowed root, so a
session can work in its worktree whatever the roots say (it holds only worktrees of
repositories inside the roots, made by the worker); ``denied_commands`` are program names
(basenames). A command is refused when its program is denied, when a wrapper (``env``,
``sudo``, ``xargs``, ``timeout``, ...) is asked to run a denied program, or when a shell
(``bash -c``/``sh -c``/...) is given a script in which *any word* is a denied name. The shell
rule is deliberately crude: ``bash -c 'echo rm'`` is refused when ``rm`` is denied. A policy
that lets a shell script through because it could not parse it would be no policy. While any
command is denied, an action's ``env`` may not set names that make a shell or the dynamic
loader run code of their own (``BASH_FUNC_*`` exported functions, ``LD_*``/``DYLD_*``,
``BASH_ENV``, ``ENV``, ``PS4``, ``SHELLOPTS``, ``BASHOPTS``, ``PROMPT_COMMAND``), or git run
a program or settings of their own (``GIT_SSH_COMMAND``, ``GIT_CONFIG_PARAMETERS``, a
``GIT_CONFIG_KEY_<n>`` other than the worker's own hardening, ...):
:meth:`LocalPolicy.check_env`.

``denied_mcp_tools`` are shell-style patterns over ``server.tool`` (``git.git_push``,
``github.*``); a pattern without a dot names a tool on any server (``delete_*``). A denied
tool is left out of the tools reported to the server and refused if called anyway.

It is a guard against the ordinary commands a model sends, not a sandbox: a program that is
allowed (``python -c``, a script file) can still run anything its user may run.

Whatever the policy, a command whose arguments name a protected path is refused
(:func:`check_protected_args`): ``$CODEY_HOME`` (the worker's key and records) and any
process's ``/proc/<pid>/environ`` (the worker's own holds its provider keys). Inside the OS
sandbox those are not there to read anyway; outside it (``full-access``, an escalated command)
this is the one check that stands, and like the rest of this module it reads words, so a
program that builds the path itself gets past it: that is what the sandbox is for.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codey_protocol.worker import GIT_HARDENING
from codey_worker.confine import ActionRefused, Root, check_root, within

SHELLS = frozenset(
    {
        "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "busybox", "rbash", "tcsh",
        "csh", "rc", "elvish", "nu", "pwsh",
    }
)  # fmt: skip
# Programs whose job is to run another program named in their arguments.
WRAPPERS = frozenset(
    {
        "env", "sudo", "doas", "nice", "nohup", "timeout", "xargs", "time", "command", "exec",
        "stdbuf", "setsid", "chroot", "ionice", "taskset", "unbuffer", "watch", "strace", "su",
        "runuser", "flock", "chrt", "script", "parallel", "find", "setarch", "prlimit",
        "unshare", "nsenter", "systemd-run", "firejail", "linux32", "linux64",
    }
)  # fmt: skip
# Everything a shell treats as a separator or quoting; what is left are candidate words.
_SCRIPT_SPLIT = re.compile(r"[\s;&|()<>`'\"$={}\\!]+")
_UNQUOTE = re.compile(r"['\"\\]")
#: environment names that make a shell or the loader run code not named in argv
_CODE_ENV_PREFIXES = ("BASH_FUNC_", "LD_", "DYLD_")
_CODE_ENV_NAMES = frozenset(
    {"BASH_ENV", "ENV", "PS4", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND",
     # git's: a program it runs (ssh, diff, pager, editor, askpass, proxy, its own commands,
     # hooks copied by git init), or settings read from elsewhere, which can name one
     "GIT_SSH", "GIT_SSH_COMMAND", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR",
     "GIT_SEQUENCE_EDITOR", "GIT_ASKPASS", "GIT_PROXY_COMMAND", "GIT_EXEC_PATH",
     "GIT_TEMPLATE_DIR", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"}
)
#: git's settings by environment (GIT_CONFIG_COUNT): a key may make git run a program
#: (core.fsmonitor, diff.external, core.sshCommand, alias.*, ...); only the worker's own
#: hardening (which the server sends with git) passes while commands are denied
_GIT_CONFIG_KEY_NAME = re.compile(r"GIT_CONFIG_KEY_[0-9]+")
_HARDENING_KEYS = frozenset(key.lower() for key, _ in GIT_HARDENING)


#: where the sessions' worktrees go unless ``worktrees_dir`` says otherwise: outside
#: ``$CODEY_HOME`` (which every action and the sandbox hide: a worktree there would need a
#: hole in each of those walls), and inside the default root, the home directory
DEFAULT_WORKTREES_DIR = "~/.codey-worktrees"


_PROC_ENVIRON = re.compile(r"/proc/[^\s]*environ")
#: what splits a shell script's words (a path is what is left between them)
_PATH_SPLIT = re.compile(r"[\s;&|()<>`'\"={}\\!,:]+")


def check_protected_args(argv: Sequence[str], cwd: Path, home: Path) -> None:
    """Refuse (``protected_path``) an argv one of whose words names ``home`` (``$CODEY_HOME``,
    as written, as ``~``-relative or relative to ``cwd``, or ``$CODEY_HOME`` itself) or a
    ``/proc/.../environ``: a "read-only" ``cat`` would hand the worker's key to the model.
    (No workdir lies inside ``home``: :func:`~codey_worker.confine.check_protected`.)"""
    real_home = os.path.realpath(home)
    for arg in argv:
        if _PROC_ENVIRON.search(arg):
            raise ActionRefused("protected_path", "a process's environment (/proc/<pid>/environ) "
                                "is not for commands to read: the worker's holds its keys")
        if "CODEY_HOME" in arg:
            raise ActionRefused("protected_path", "$CODEY_HOME is the worker's own folder "
                                "(its key and records): commands do not reach it")
        for word in _PATH_SPLIT.split(arg):
            if not word or not ("/" in word or word.startswith((".", "~"))):
                continue
            path = os.path.realpath(os.path.join(cwd, os.path.expanduser(word)))
            if within(path, real_home):
                raise ActionRefused("protected_path", f"{word} is inside $CODEY_HOME, the "
                                    "worker's own folder (its key and records): commands do "
                                    "not reach it")


@dataclass(frozen=True)
class LocalPolicy:
    """Allowed workdir roots and denied program names. Build it with :meth:`from_config`."""

    allowed_roots: list[Path]
    denied_commands: list[str] = field(default_factory=list)
    denied_mcp_tools: list[str] = field(default_factory=list)
    #: the sessions' git worktrees (``workspaces.py``); an allowed root too. None: this
    #: worker makes none (``workspace_create`` is refused)
    worktrees_dir: Path | None = None
    #: the roots pinned once (real path and directory identity): a root repointed later —
    #: say by a command the server ran — cannot widen what is allowed, and no action pays
    #: for resolving the roots again
    pinned_roots: tuple[Root, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        roots = [*self.allowed_roots, *([self.worktrees_dir] if self.worktrees_dir else [])]
        object.__setattr__(self, "pinned_roots", tuple(Root.pin(r) for r in roots))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LocalPolicy:
        """Read ``allowed_roots`` (default: the home directory), ``denied_commands``,
        ``denied_mcp_tools`` and ``worktrees_dir`` (default ``~/.codey-worktrees``).

        ``~`` in roots is expanded. Raises ``ValueError`` for a malformed config.
        """
        roots_raw = config.get("allowed_roots")
        if roots_raw is None:
            roots_raw = [str(Path.home())]
        denied_raw = config.get("denied_commands") or []
        if not isinstance(roots_raw, list) or not all(isinstance(r, str) for r in roots_raw):
            raise ValueError("allowed_roots must be a list of paths")
        if not isinstance(denied_raw, list) or not all(isinstance(d, str) for d in denied_raw):
            raise ValueError("denied_commands must be a list of program names")
        mcp_raw = config.get("denied_mcp_tools") or []
        if not isinstance(mcp_raw, list) or not all(isinstance(d, str) and d.strip()
                                                    for d in mcp_raw):
            raise ValueError("denied_mcp_tools must be a list of tool names or patterns "
                             "(server.tool, server.*, tool)")
        worktrees_raw = config.get("worktrees_dir", DEFAULT_WORKTREES_DIR)
        if not isinstance(worktrees_raw, str) or \
                not os.path.isabs(os.path.expanduser(worktrees_raw)):
            raise ValueError("worktrees_dir must be an absolute path (~ is allowed)")
        roots = [Path(os.path.expanduser(r)) for r in roots_raw]
        return cls(allowed_roots=roots, denied_commands=list(denied_raw),
                   denied_mcp_tools=[d.strip() for d in mcp_raw],
                   worktrees_dir=Path(os.path.expanduser(worktrees_raw)))

    def check_workdir(self, path: str | Path) -> Path:
        """Return the real path of ``path``; refuse (``outside_allowed_roots``) if not allowed."""
        return check_root(path, self.pinned_roots)

    def check_not_gone(self, real: Path) -> None:
        """Refuse (``worktree_gone``) a workdir (a real path) that lies inside the worktrees
        folder and is not there: only a worktree the worker made goes there, so this one was
        removed. A session that goes on in it must not get an empty folder in its place
        ("Ran 0 tests … OK", issue 33): it is made again from its branch, or not at all."""
        if self.worktrees_dir is None or os.path.lexists(real):
            return
        worktrees = Path(os.path.realpath(self.worktrees_dir))
        if real != worktrees and worktrees in real.parents:
            raise ActionRefused("worktree_gone", f"{real} is gone: it was a worktree in this "
                                f"worker's worktrees folder ({worktrees}), removed since. "
                                "Nothing was run and no empty folder was made in its place; "
                                "make the worktree again from its branch, or fork the session "
                                "into a new worktree")

    def check_command(self, argv: Sequence[str]) -> None:
        """Refuse (``denied_command``) an argv that would run a denied program.

        Raises ``ActionRefused("bad_request")`` for an empty argv.
        """
        if not argv:
            raise ActionRefused("bad_request", "argv is empty")
        denied = {os.path.basename(d) for d in self.denied_commands if d.strip()}
        if not denied:
            return
        for word in _program_words(list(argv)):
            if word in denied:
                raise ActionRefused(
                    "denied_command",
                    f"the worker's local policy denies the command {word!r} "
                    f"(in: {' '.join(argv)[:200]})",
                )


    def mcp_tool_denied(self, server: str, tool: str) -> bool:
        """True when ``denied_mcp_tools`` names ``tool`` of MCP server ``server``."""
        qualified = f"{server}.{tool}"
        return any(fnmatch.fnmatchcase(qualified if "." in pattern else tool, pattern)
                   for pattern in self.denied_mcp_tools)

    def check_mcp_tool(self, server: str, tool: str) -> None:
        """Refuse (``denied_mcp_tool``) a call of a tool the owner denied."""
        if self.mcp_tool_denied(server, tool):
            raise ActionRefused("denied_mcp_tool",
                                f"the worker's local policy denies the MCP tool {tool!r} "
                                f"of {server!r}")

    def check_env(self, env: Mapping[str, str]) -> None:
        """Refuse (``denied_command``) an action ``env`` that could run code argv does not
        name — exported bash functions (``BASH_FUNC_*``), ``LD_*``/``DYLD_*`` loader variables,
        ``BASH_ENV``, ``ENV``, ``PS4``, ``SHELLOPTS``, ``BASHOPTS``, ``PROMPT_COMMAND``, git's
        program and config variables (``GIT_SSH_COMMAND``, ``GIT_EXTERNAL_DIFF``,
        ``GIT_CONFIG_PARAMETERS``, ...) and a ``GIT_CONFIG_KEY_<n>`` naming any setting but
        those of :data:`~codey_protocol.worker.GIT_HARDENING` — while the policy denies any
        command (with nothing denied there is nothing to get round)."""
        if not any(d.strip() for d in self.denied_commands):
            return
        for name, value in env.items():
            if name.startswith(_CODE_ENV_PREFIXES) or name in _CODE_ENV_NAMES:
                raise ActionRefused(
                    "denied_command",
                    f"the worker's local policy denies commands, so the action's env may not "
                    f"set {name!r}: it can make a shell, git or the loader run other code",
                )
            if _GIT_CONFIG_KEY_NAME.fullmatch(name) and value.lower() not in _HARDENING_KEYS:
                raise ActionRefused(
                    "denied_command",
                    f"the worker's local policy denies commands, so the action's env may not "
                    f"set git's {value!r} ({name}): a git setting can make git run other code",
                )


def _program_words(argv: list[str], depth: int = 0) -> Iterator[str]:
    """Basenames of every word that could name the program ``argv`` ends up running."""
    if not argv or depth > 8:
        return
    name = os.path.basename(argv[0])
    yield name
    if name in SHELLS:
        if name == "pwsh":
            # PowerShell's options are case-insensitive and abbreviable, and -EncodedCommand
            # carries the script in base64: every argument (and its decoding) is a script
            for arg in argv[1:]:
                for text in (arg, _UNQUOTE.sub("", arg), _decode_pwsh(arg)):
                    for word in _SCRIPT_SPLIT.split(text):
                        if word:
                            yield os.path.basename(word)
        elif _runs_script(argv[1:]):
            # Options may take arguments (``-o pipefail``), so rather than find *the* script,
            # every argument is read as if it were one.
            # A second reading with quotes and backslashes deleted catches ``r''m`` and ``r\\m``.
            for arg in argv[1:]:
                for text in (arg, _UNQUOTE.sub("", arg)):
                    for word in _SCRIPT_SPLIT.split(text):
                        if word:
                            yield os.path.basename(word)
        elif name == "busybox":
            yield from _program_words(argv[1:], depth + 1)
    elif name in WRAPPERS:
        # Conservative: any argument of a wrapper may be the program it runs.
        for i, arg in enumerate(argv[1:], start=1):
            yield os.path.basename(arg.split("=", 1)[-1])
            # wrappers like ``env -S``, ``watch``, ``script -c``, ``flock -c``, ``su -c`` take
            # a whole command line as one argument: read every word of it too
            for text in (arg, _UNQUOTE.sub("", arg)):
                for word in _SCRIPT_SPLIT.split(text):
                    if word:
                        yield os.path.basename(word)
            if os.path.basename(arg) in SHELLS | WRAPPERS:
                yield from _program_words(argv[i:], depth + 1)
                return


def _decode_pwsh(arg: str) -> str:
    """``arg`` read as a ``pwsh -EncodedCommand`` script (base64 of UTF-16LE); "" if it is not."""
    try:
        return base64.b64decode(arg, validate=True).decode("utf-16-le")
    except (ValueError, UnicodeDecodeError):
        return ""


def _runs_script(args: list[str]) -> bool:
    """True when a shell's arguments include ``-c`` (alone or in a cluster like ``-lc``)."""
    for arg in args:
        if arg.startswith("--command"):
            return True
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return True
    return False


__all__ = ["DEFAULT_WORKTREES_DIR", "SHELLS", "WRAPPERS", "LocalPolicy"]
