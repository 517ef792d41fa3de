"""Slash commands from prompt files: the substitution of a command's arguments into its body,
and which configured model a prompt file's ``model`` names. Pure: no I/O.

Substitution follows Claude Code's custom commands and Codex's custom prompts: ``$ARGUMENTS``
is everything typed after the command; ``$1`` … ``$9`` are its words (shell quoting groups
words: ``/fix "two words" x`` gives ``$1`` = ``two words``); ``$$`` is a literal ``$``. A body
that uses none of them gets the arguments appended on a line ``ARGUMENTS: …``, as Claude Code
does, so nothing the user typed is dropped.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

__all__ = ["CLAUDE_TOOLS", "allows", "expand", "model_for", "split_arguments",
           "tools_for_command"]

_PLACEHOLDER = re.compile(r"\$(\$|ARGUMENTS\b|[1-9])")

#: Claude Code's tool names (a prompt file's ``allowed-tools``) as Codey's tools: the
#: reverse of the worker's hook names (``codey_worker.hooks.CLAUDE_NAMES``), plus the web
CLAUDE_TOOLS: dict[str, tuple[str, ...]] = {
    "Bash": ("shell", "exec", "write_stdin", "kill"),
    "Edit": ("edit", "apply_patch"),
    "MultiEdit": ("edit", "apply_patch"),
    "Write": ("write_file", "apply_patch"),
    "NotebookEdit": ("edit", "apply_patch"),
    "Read": ("read_file", "view_image"),
    "Grep": ("grep",),
    "Glob": ("glob",),
    "LS": ("list_dir",),
    "TodoWrite": ("update_plan",),
    "Task": ("delegate",),
    "WebFetch": ("web_fetch",),
    "WebSearch": ("web_search",),
}


def split_arguments(arguments: str) -> list[str]:
    """The words of ``arguments``, shell-quoted groups kept together; unbalanced quotes fall
    back to splitting at white space."""
    try:
        return shlex.split(arguments)
    except ValueError:
        return arguments.split()


def expand(body: str, arguments: str) -> str:
    """The prompt ``body`` with ``arguments`` substituted (see the module docstring)."""
    arguments = arguments.strip()
    words = split_arguments(arguments)
    used = False

    def fill(match: re.Match[str]) -> str:
        nonlocal used
        token = match.group(1)
        if token == "$":
            return "$"
        used = True
        if token == "ARGUMENTS":
            return arguments
        index = int(token) - 1
        return words[index] if index < len(words) else ""

    text = _PLACEHOLDER.sub(fill, body).strip()
    if arguments and not used:
        text = f"{text}\n\nARGUMENTS: {arguments}" if text else arguments
    return text


def model_for(wanted: str, providers: Iterable[tuple[str, Iterable[str]]],
              current: tuple[str, str]) -> tuple[str, str] | None:
    """The (provider, model) a prompt file's ``model`` names among ``providers`` ((name, its
    models)): the session's own provider first, then the others in order; an exact model name
    wins over one that only contains it (``haiku`` finds ``claude-haiku-4``). None: no
    configured model matches (the prompt then runs on the session's model)."""
    wanted = wanted.strip()
    if not wanted:
        return None
    ordered = sorted(((name, list(models)) for name, models in providers),
                     key=lambda p: p[0] != current[0])
    for exact in (True, False):
        for name, models in ordered:
            for model in models:
                if model == wanted if exact else wanted.lower() in model.lower():
                    return name, model
    return None


def tools_for_command(allowed: Iterable[str],
                      ours: Iterable[str]) -> tuple[list[str], list[str]]:
    """A prompt file's ``allowed-tools`` as the Codey tools a turn offers: Claude Code's names
    (``Bash``, ``Edit``, …; a rule in parentheses, ``Bash(git add:*)``, allows the whole
    tool: Codey's approval policy still asks), Codey's own names (``ours``), and MCP tools
    (``mcp__<server>__<tool>``, or ``mcp__<server>`` for all of a server's; Codey names them
    the same). Returns (the tools, sorted; the entries not understood, ignored)."""
    known = set(ours)
    tools: set[str] = set()
    ignored: list[str] = []
    for entry in allowed:
        name = entry.split("(", 1)[0].strip()
        if not name:
            continue
        if name in CLAUDE_TOOLS:
            tools.update(t for t in CLAUDE_TOOLS[name] if t in known)
        elif name in known or (name.startswith("mcp__") and name.count("__") >= 2):
            tools.add(name)
        elif name.startswith("mcp__") and len(name) > 5:
            tools.add(f"{name}__*")  # every tool of that server
        else:
            ignored.append(entry)
    return sorted(tools), ignored


def allows(tools: Iterable[str], name: str) -> bool:
    """Whether a turn's tools (:func:`tools_for_command`) include the tool ``name``."""
    return any(name == t or (t.endswith("__*") and name.startswith(t[:-1])) for t in tools)
