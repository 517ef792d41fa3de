"""Prompt files (custom slash commands), read on this machine for ``list_prompt_files``.

Claude Code keeps them in ``.claude/commands/``, Codex in ``.codex/prompts/``, Codey in
``.codey/commands/``; each of the project (the session's workdir) and of the user (``~`` for
the first two, ``$CODEY_HOME/commands`` for Codey's own). A file ``a/b.md`` under one of them is
the command ``/a:b``, as Claude Code names them. A project file comes before a user file of the
same name (the nearer one wins), and the folders are read in the order above.

Files are read through the one confined file API (:class:`codey_worker.files.Tree`) opened at
the folder they belong to: a command, or a folder of commands, that is a symlink leading out of
it is refused with a warning, never read into a prompt (a repository chooses its symlinks).
Each file is capped at :data:`MAX_FILE_BYTES`, the list at :data:`MAX_FILES`. Garbage front
matter is a warning, not a failure: the command is listed with its body and no metadata.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

from codey_protocol.worker import PromptFile, PromptFiles
from codey_worker.confine import ActionRefused
from codey_worker.files import Boundary, Tree

__all__ = ["MAX_FILES", "MAX_FILE_BYTES", "list_prompt_files", "parse_prompt_file"]

MAX_FILE_BYTES = 32 * 1024
MAX_FILES = 200
MAX_DEPTH = 4  # namespaces deeper than this are not walked
MAX_FIELD = 1024

#: (folder under the project, folder under ``~``) in the order they are read; Codey's own user
#: folder is ``$CODEY_HOME/commands``
PROJECT_DIRS = (".claude/commands", ".codex/prompts", ".codey/commands")
USER_DIRS = (".claude/commands", ".codex/prompts")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(str(v) for v in value)[:MAX_FIELD]
    return " ".join(str(value).split())[:MAX_FIELD]


def _tools(value: Any) -> list[str]:
    """``allowed-tools`` as Claude Code takes it: a list, or one string split at commas."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    return [t for t in (str(x).strip() for x in items) if t][:100]


def parse_prompt_file(text: str) -> tuple[dict[str, Any], str, str | None]:
    """(front matter, body, problem) of a prompt file's text. No front matter: ``{}`` and
    the whole text. A front matter that is not a YAML mapping: ``{}``, the text after it, and
    what is wrong with it (the caller warns; the command still works)."""
    if not text.startswith("---"):
        return {}, text, None
    end = text.find("\n---", 3)
    if end < 0:
        return {}, text, "the front matter is not closed with ---"
    after = text.find("\n", end + 4)
    body = "" if after < 0 else text[after + 1:]
    import yaml  # only when a prompt file has front matter: it is 20 ms and a few MB

    try:
        data = yaml.safe_load(text[3:end])
    except yaml.YAMLError as exc:
        return {}, body, f"the front matter is not YAML ({str(exc).splitlines()[0]})"
    if data is None:
        return {}, body, None
    if not isinstance(data, dict):
        return {}, body, "the front matter is not a mapping"
    return data, body, None


def _read(tree: Tree, rel: str) -> tuple[str, bool]:
    """(text, truncated) of the regular file ``rel``, reached without following a symlink."""
    spot = tree.locate(rel, follow=False)
    try:
        fd = tree.open_file(spot, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a symlink
            raise ValueError("it is a symlink") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("it is not a regular file")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    return data[:MAX_FILE_BYTES].decode("utf-8", errors="replace"), len(data) > MAX_FILE_BYTES


def _walk(tree: Tree, rel: str, depth: int, shown: Path,
          warnings: list[str]) -> list[tuple[str, str]]:
    """(command name, path relative to the tree) of every ``.md`` under ``rel``, sorted."""
    try:
        spot = tree.locate(rel)  # a symlinked folder must stay inside the tree
        fd = tree.open_listing(spot)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except ActionRefused as exc:
        if exc.code != "not_found":
            warnings.append(f"{shown / rel if rel != '.' else shown}: skipped ({exc.message})")
        return []
    except OSError as exc:
        warnings.append(f"{shown / rel}: skipped ({exc.strerror or exc})")
        return []
    try:
        with os.scandir(fd) as it:
            entries = sorted((e.name, e.is_dir(follow_symlinks=False),
                              e.is_symlink()) for e in it)
    except OSError:
        return []
    finally:
        os.close(fd)
    out: list[tuple[str, str]] = []
    for name, is_dir, is_link in entries:
        if name.startswith("."):
            continue
        child = name if rel == "." else f"{rel}/{name}"
        if is_dir or (is_link and not name.endswith(".md")):
            # a linked namespace folder is walked only where it leads inside the tree
            if depth < MAX_DEPTH:
                out += [(f"{name}:{cmd}", path)
                        for cmd, path in _walk(tree, child, depth + 1, shown, warnings)]
        elif name.endswith(".md") and len(name) > 3:
            if is_link:
                warnings.append(f"{shown / child}: skipped (it is a symlink)")
                continue
            out.append((name[:-3], child))
    return out


def _places(workdir: Path, home: Path, user_home: Path) -> list[tuple[Path, str, str, bool]]:
    """(folder a tree is opened at, the commands folder in it, scope, inside the hidden list).
    The project's are walked from the workdir, so a symlinked folder must lead inside it. The
    user's are the user's own and sit in folders the sandbox hides from the model (``~/.claude``
    holds credentials): each is opened itself, resolved (a dotfiles manager links them), with
    the hidden list lifted for it alone, as ``$CODEY_HOME`` is for its AGENTS.md."""
    places = [(workdir, d, "project", False) for d in PROJECT_DIRS]
    for folder in [user_home / d for d in USER_DIRS] + [home / "commands"]:
        places.append((Path(os.path.realpath(folder)), ".", "user", True))
    return places


def _list(workdir: Path, home: Path, user_home: Path, boundary: Boundary) -> PromptFiles:
    files: list[PromptFile] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for root, base, scope, in_home in _places(workdir, home, user_home):
        try:
            tree = Tree.open(root, boundary, inside_hidden=in_home)
        except ActionRefused:
            continue
        with tree:
            for name, rel in _walk(tree, base, 1, root, warnings):
                path = root / rel
                if name in seen:
                    continue  # the nearer one (project before user) is already listed
                if len(files) >= MAX_FILES:
                    warnings.append(f"more than {MAX_FILES} prompt files: the rest are not "
                                    "listed")
                    return PromptFiles(files=files, warnings=warnings)
                try:
                    text, truncated = _read(tree, rel)
                except (OSError, ValueError) as exc:
                    warnings.append(f"{path}: skipped ({exc})")
                    continue
                except ActionRefused as exc:
                    warnings.append(f"{path}: skipped ({exc.message})")
                    continue
                meta, body, problem = parse_prompt_file(text)
                if problem:
                    warnings.append(f"{path}: {problem}; listed without it")
                if truncated:
                    warnings.append(f"{path}: cut at {MAX_FILE_BYTES // 1024} KiB")
                seen.add(name)
                files.append(PromptFile(
                    name=name, body=body, path=str(path), scope=scope,  # type: ignore[arg-type]
                    description=_text(meta.get("description")),
                    argument_hint=_text(meta.get("argument-hint")),
                    model=_text(meta.get("model")),
                    allowed_tools=_tools(meta.get("allowed-tools")),
                    truncated=truncated))
    return PromptFiles(files=files, warnings=warnings)


async def list_prompt_files(workdir: Path, home: Path, user_home: Path | None = None,
                            boundary: Boundary | None = None) -> PromptFiles:
    """The prompt files for ``workdir`` (a real, allowed directory). ``home``: the worker's
    ``$CODEY_HOME``; ``user_home``: the user's home (default ``~``, resolved)."""
    user = user_home if user_home is not None else Path(os.path.realpath(Path.home()))
    boundary = boundary if boundary is not None else Boundary.default()
    return await asyncio.get_running_loop().run_in_executor(
        None, _list, workdir, home, user, boundary)
