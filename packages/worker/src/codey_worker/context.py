"""What applies to a workdir, read on this machine for the server's ``load_context`` action.

- Project instructions: ``$CODEY_HOME/AGENTS.md`` (the user's own), then every ``AGENTS.md``
  from the allowed root that holds the workdir down to the workdir, outermost first. Each is
  capped at :data:`MAX_FILE_BYTES`, all of them at :data:`MAX_TOTAL_BYTES`.
- Skills: folders with a ``SKILL.md`` whose YAML front matter has a ``name`` and a
  ``description``, under ``$CODEY_HOME/skills/``, ``<workdir>/.codey/skills/`` and
  ``<workdir>/.agents/skills/``. Only the name, description and path go to the server; the
  model reads a skill's body with the file tools when it needs it. A malformed one is skipped
  with a warning, never a failure.
- The environment: OS and version, the user's shell, the workdir, the git branch and whether
  the tree is dirty, the local date and time zone.

Files are opened without following symlinks and must be regular files: an ``AGENTS.md`` that
points elsewhere (at a key, say) is skipped with a warning rather than read into a prompt.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import platform
import stat
from pathlib import Path
from typing import Any

from codey_protocol.worker import Environment, InstructionFile, ProjectContext, SkillInfo

__all__ = ["MAX_FILE_BYTES", "MAX_SKILLS", "MAX_TOTAL_BYTES", "load_context"]

MAX_FILE_BYTES = 32 * 1024
MAX_TOTAL_BYTES = 96 * 1024
MAX_SKILLS = 100
MAX_DESCRIPTION = 1024
GIT_TIMEOUT_S = 3.0

SKILL_DIRS = (".codey/skills", ".agents/skills")


def _read(path: Path, cap: int) -> tuple[str, bool] | None:
    """(text, truncated) of a regular file, read without following a symlink; None if there
    is no such file. Raises OSError/ValueError for one that cannot be read as text."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a symlink
            raise ValueError("it is a symlink") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("it is not a regular file")
        data = os.read(fd, cap + 1)
    finally:
        os.close(fd)
    truncated = len(data) > cap
    text = data[:cap].decode("utf-8", errors="replace")
    return text, truncated


def _chain(workdir: Path, roots: list[Path]) -> list[Path]:
    """The directories from the deepest allowed root holding ``workdir`` down to it."""
    holders = [r for r in roots if workdir == r or r in workdir.parents]
    top = max(holders, key=lambda r: len(r.parts)) if holders else workdir
    chain = [workdir]
    here = workdir
    while here != top and here.parent != here:
        here = here.parent
        chain.append(here)
    return list(reversed(chain))


def _instructions(workdir: Path, roots: list[Path], home: Path,
                  warnings: list[str]) -> list[InstructionFile]:
    out: list[InstructionFile] = []
    total = 0
    places = [(home / "AGENTS.md", "user")]
    places += [(d / "AGENTS.md", "project") for d in _chain(workdir, roots)]
    for path, scope in places:
        left = MAX_TOTAL_BYTES - total
        if left <= 0:
            warnings.append(f"{path}: not read, the instructions already fill "
                            f"{MAX_TOTAL_BYTES // 1024} KiB")
            continue
        try:
            found = _read(path, min(MAX_FILE_BYTES, left))
        except (OSError, ValueError) as exc:
            warnings.append(f"{path}: skipped ({exc})")
            continue
        if found is None:
            continue
        text, truncated = found
        total += len(text.encode())
        out.append(InstructionFile(path=str(path), text=text, truncated=truncated,
                                   scope=scope))  # type: ignore[arg-type]
        if truncated:
            warnings.append(f"{path}: cut at {MAX_FILE_BYTES // 1024} KiB")
    return out


def _front_matter(text: str) -> dict[str, Any]:
    if not text.startswith("---"):
        raise ValueError("no front matter (the file must start with ---)")
    end = text.find("\n---", 3)
    if end < 0:
        raise ValueError("the front matter is not closed with ---")
    import yaml  # only when a skill exists: it is 20 ms and a few MB of an idle worker

    try:
        data = yaml.safe_load(text[3:end])
    except yaml.YAMLError as exc:
        raise ValueError(f"the front matter is not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError("the front matter is not a mapping")
    return data


def _skills(workdir: Path, home: Path, warnings: list[str]) -> list[SkillInfo]:
    out: list[SkillInfo] = []
    seen: set[str] = set()
    bases = [(home / "skills", "user")] + [(workdir / d, "project") for d in SKILL_DIRS]
    for base, scope in bases:
        try:
            folders = sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            continue
        for folder in folders:
            path = folder / "SKILL.md"
            try:
                found = _read(path, MAX_FILE_BYTES)
                if found is None:
                    continue
                meta = _front_matter(found[0])
                name, description = meta.get("name"), meta.get("description")
                if not isinstance(name, str) or not name.strip():
                    raise ValueError("the front matter has no `name`")
                if not isinstance(description, str) or not description.strip():
                    raise ValueError("the front matter has no `description`")
            except (OSError, ValueError) as exc:
                warnings.append(f"skill {path}: skipped ({exc})")
                continue
            if name in seen:
                warnings.append(f"skill {path}: skipped (another skill is named {name!r})")
                continue
            if len(out) >= MAX_SKILLS:
                warnings.append(f"more than {MAX_SKILLS} skills: the rest are not listed")
                return out
            seen.add(name)
            out.append(SkillInfo(name=name.strip(), description=" ".join(
                description.split())[:MAX_DESCRIPTION], path=str(path),
                scope=scope))  # type: ignore[arg-type]
    return out


async def _git(workdir: Path) -> tuple[str | None, bool | None]:
    """(branch, dirty) from ``git status``; (None, None) outside a repository or without git."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "git", "status", "--porcelain=v1", "--branch", "--untracked-files=normal",
            cwd=workdir, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    except OSError:
        return None, None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GIT_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, None
    if proc.returncode != 0:
        return None, None
    lines = out.decode(errors="replace").splitlines()
    branch = None
    if lines and lines[0].startswith("## "):
        head = lines[0][3:]
        if head.startswith("No commits yet on "):
            branch = head[len("No commits yet on "):]
        elif head.startswith("HEAD (no branch)"):
            branch = "(detached HEAD)"
        else:
            branch = head.split("...", 1)[0].split(" ", 1)[0]
    return branch, any(line and not line.startswith("## ") for line in lines)


def _shell() -> str:
    shell = os.environ.get("SHELL", "")
    if not shell:
        try:
            import pwd

            shell = pwd.getpwuid(os.getuid()).pw_shell
        except (ImportError, KeyError):
            shell = os.environ.get("COMSPEC", "")
    return shell


async def environment(workdir: Path) -> Environment:
    branch, dirty = await _git(workdir)
    now = datetime.datetime.now().astimezone()
    return Environment(
        os=platform.system(), os_version=platform.release(), shell=_shell(),
        workdir=str(workdir), git_branch=branch, git_dirty=dirty,
        date=now.isoformat(timespec="minutes"), timezone=now.tzname() or "")


async def load_context(workdir: Path, roots: list[Path], home: Path) -> ProjectContext:
    """Everything above for ``workdir`` (a real, allowed directory)."""
    warnings: list[str] = []
    loop = asyncio.get_running_loop()
    instructions = await loop.run_in_executor(None, _instructions, workdir, roots, home,
                                              warnings)
    skills = await loop.run_in_executor(None, _skills, workdir, home, warnings)
    return ProjectContext(instructions=instructions, skills=skills,
                          environment=await environment(workdir), warnings=warnings)
