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

Files are read through the one confined file API (:class:`codey_worker.files.Tree`), from
the folder they belong to, and must be regular files reached without a symlink: an
``AGENTS.md`` that points elsewhere (at a key, say) is skipped with a warning rather than read
into a prompt. The git branch comes from the worker's one hardened, sandboxed git runner
(:class:`codey_worker.git.GitRunner`): a repository the model made or shaped (a ``git init``
and an fsmonitor in its config) runs nothing on the worker.
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
from codey_worker.confine import ActionRefused
from codey_worker.files import Boundary, Tree
from codey_worker.git import GitRunner, repo_root

__all__ = ["MAX_FILE_BYTES", "MAX_SKILLS", "MAX_TOTAL_BYTES", "load_context"]

MAX_FILE_BYTES = 32 * 1024
MAX_TOTAL_BYTES = 96 * 1024
MAX_SKILLS = 100
MAX_DESCRIPTION = 1024

SKILL_DIRS = (".codey/skills", ".agents/skills")


def _read(tree: Tree, rel: str, cap: int) -> tuple[str, bool] | None:
    """(text, truncated) of the regular file ``rel`` of ``tree``, reached without following a
    symlink; None if there is no such file. Raises OSError/ValueError for one that cannot be
    read as text, ActionRefused for one outside or hidden."""
    try:
        spot = tree.locate(rel, follow=False)
        fd = tree.open_file(spot, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except IsADirectoryError:
        raise ValueError("it is not a regular file") from None
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


def _instructions(workdir: Path, roots: list[Path], home: Path, boundary: Boundary,
                  warnings: list[str]) -> list[InstructionFile]:
    out: list[InstructionFile] = []
    total = 0
    chain = _chain(workdir, roots)
    places = [(home, "AGENTS.md", "user", True)]
    places += [(chain[0], os.path.relpath(d / "AGENTS.md", chain[0]), "project", False)
               for d in chain]
    for root, rel, scope, in_home in places:
        path = root / rel
        left = MAX_TOTAL_BYTES - total
        if left <= 0:
            warnings.append(f"{path}: not read, the instructions already fill "
                            f"{MAX_TOTAL_BYTES // 1024} KiB")
            continue
        try:
            with Tree.open(root, boundary, inside_hidden=in_home) as tree:
                found = _read(tree, rel, min(MAX_FILE_BYTES, left))
        except (OSError, ValueError) as exc:
            warnings.append(f"{path}: skipped ({exc})")
            continue
        except ActionRefused as exc:
            if exc.code != "not_found":
                warnings.append(f"{path}: skipped ({exc.message})")
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


def _skill_folders(tree: Tree, rel: str) -> list[str]:
    """The folders (not symlinks) directly in ``rel`` of ``tree``, sorted; [] without one."""
    try:
        spot = tree.locate(rel, follow=False)
        if spot.name:
            if not stat.S_ISDIR(tree.lstat(spot).st_mode):
                return []
            spot = tree.locate(rel)
        fd = tree.open_listing(spot)
    except (OSError, ActionRefused):
        return []
    try:
        with os.scandir(fd) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    finally:
        os.close(fd)


def _skills(workdir: Path, home: Path, boundary: Boundary,
            warnings: list[str]) -> list[SkillInfo]:
    out: list[SkillInfo] = []
    seen: set[str] = set()
    bases = [(home, "skills", "user", True)] + [(workdir, d, "project", False)
                                                 for d in SKILL_DIRS]
    for root, base, scope, in_home in bases:
        try:
            tree = Tree.open(root, boundary, inside_hidden=in_home)
        except ActionRefused:
            continue
        with tree:
            for folder in _skill_folders(tree, base):
                rel = f"{base}/{folder}/SKILL.md"
                path = root / rel
                try:
                    found = _read(tree, rel, MAX_FILE_BYTES)
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
                except ActionRefused as exc:
                    warnings.append(f"skill {path}: skipped ({exc.message})")
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


def _shell() -> str:
    shell = os.environ.get("SHELL", "")
    if not shell:
        try:
            import pwd

            shell = pwd.getpwuid(os.getuid()).pw_shell
        except (ImportError, KeyError):
            shell = os.environ.get("COMSPEC", "")
    return shell


async def environment(workdir: Path, git: GitRunner,
                      session_id: str | None = None) -> Environment:
    branch, dirty = await git.status(workdir, session_id)
    root = repo_root(workdir)
    now = datetime.datetime.now().astimezone()
    return Environment(
        os=platform.system(), os_version=platform.release(), shell=_shell(),
        workdir=str(workdir), git_branch=branch, git_dirty=dirty,
        repo_root=str(root) if root is not None else None,
        date=now.isoformat(timespec="minutes"), timezone=now.tzname() or "")


async def load_context(workdir: Path, roots: list[Path], home: Path,
                       git: GitRunner | None = None, boundary: Boundary | None = None,
                       session_id: str | None = None) -> ProjectContext:
    """Everything above for ``workdir`` (a real, allowed directory). ``git``: the worker's
    runner (default: one without a sandbox); ``boundary``: its hidden list (default: the
    default list); ``session_id``: whose warm box git may run in."""
    warnings: list[str] = []
    loop = asyncio.get_running_loop()
    boundary = boundary if boundary is not None else Boundary.default()
    instructions = await loop.run_in_executor(None, _instructions, workdir, roots, home,
                                              boundary, warnings)
    skills = await loop.run_in_executor(None, _skills, workdir, home, boundary, warnings)
    return ProjectContext(instructions=instructions, skills=skills,
                          environment=await environment(workdir, git or GitRunner(None),
                                                        session_id),
                          warnings=warnings)
