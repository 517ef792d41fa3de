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

__all__ = ["expand", "model_for", "split_arguments"]

_PLACEHOLDER = re.compile(r"\$(\$|ARGUMENTS\b|[1-9])")


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
