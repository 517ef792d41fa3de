"""load_context: AGENTS.md files in order, skills from front matter, the environment."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from codey_worker.context import MAX_FILE_BYTES, load_context


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _load(workdir: Path, roots: list[Path], home: Path):  # type: ignore[no-untyped-def]
    return asyncio.run(load_context(workdir, roots, home))


def test_agents_files_from_home_then_root_down_to_the_workdir(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "src"
    workdir = root / "company" / "app" / "backend"
    workdir.mkdir(parents=True)
    _write(home / "AGENTS.md", "Always answer in English.")
    _write(root / "AGENTS.md", "Root rules.")
    _write(root / "company" / "app" / "AGENTS.md", "App rules.")
    _write(workdir / "AGENTS.md", "Backend rules.")
    _write(tmp_path / "AGENTS.md", "Outside the root: never read.")
    ctx = _load(workdir, [root], home)
    assert [(f.scope, f.text) for f in ctx.instructions] == [
        ("user", "Always answer in English."), ("project", "Root rules."),
        ("project", "App rules."), ("project", "Backend rules.")]
    assert ctx.instructions[1].path == str(root / "AGENTS.md")
    assert ctx.warnings == []


def test_big_and_symlinked_instructions(tmp_path: Path) -> None:
    home, workdir = tmp_path / "home", tmp_path / "w"
    _write(workdir / "AGENTS.md", "x" * (MAX_FILE_BYTES + 10))
    secret = _write(tmp_path / "secret.txt", "do not read")
    (home).mkdir()
    (home / "AGENTS.md").symlink_to(secret)
    ctx = _load(workdir, [workdir], home)
    [only] = ctx.instructions
    assert only.truncated and len(only.text) == MAX_FILE_BYTES
    assert any("symlink" in w for w in ctx.warnings)
    assert all("do not read" not in f.text for f in ctx.instructions)


def test_skills_with_front_matter_and_malformed_ones(tmp_path: Path) -> None:
    home, workdir = tmp_path / "home", tmp_path / "w"
    workdir.mkdir()
    _write(home / "skills" / "release" / "SKILL.md",
           "---\nname: release\ndescription: How to cut a release.\n---\nSteps…")
    _write(workdir / ".codey" / "skills" / "db" / "SKILL.md",
           "---\nname: db-migrations\ndescription: >\n  Write and check\n  migrations.\n---\n")
    _write(workdir / ".agents" / "skills" / "broken" / "SKILL.md", "no front matter here")
    _write(workdir / ".agents" / "skills" / "bad-yaml" / "SKILL.md",
           "---\nname: [unclosed\n---\n")
    _write(workdir / ".agents" / "skills" / "dup" / "SKILL.md",
           "---\nname: release\ndescription: again\n---\n")
    ctx = _load(workdir, [workdir], home)
    assert [(s.name, s.scope, s.description) for s in ctx.skills] == [
        ("release", "user", "How to cut a release."),
        ("db-migrations", "project", "Write and check migrations.")]
    assert ctx.skills[1].path == str(workdir / ".codey" / "skills" / "db" / "SKILL.md")
    warned = " ".join(ctx.warnings)
    assert "broken" in warned and "bad-yaml" in warned and "another skill" in warned


def test_environment_with_git(tmp_path: Path) -> None:
    workdir = tmp_path / "repo"
    workdir.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "feature/x"], cwd=workdir, check=True)
    ctx = _load(workdir, [workdir], tmp_path / "home")
    env = ctx.environment
    assert env.git_branch == "feature/x" and env.git_dirty is False
    assert env.workdir == str(workdir) and env.os and env.date and env.timezone
    (workdir / "new.txt").write_text("x")
    assert _load(workdir, [workdir], tmp_path / "home").environment.git_dirty is True


def test_the_repository_of_a_folder_is_its_main_checkout(tmp_path: Path) -> None:
    """The project memory is kept per repository: a subfolder and a linked worktree name the
    main checkout's folder."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    for argv in (["init", "-q", "-b", "main"], ["-c", "user.name=x", "-c", "user.email=y",
                                                "commit", "-q", "--allow-empty", "-m", "i"],
                 ["worktree", "add", "-q", "-b", "codey/w", str(tmp_path / "wt")]):
        subprocess.run(["git", *argv], cwd=repo, check=True, env=env)
    home = tmp_path / "home"
    for folder in (repo, repo / "pkg", tmp_path / "wt"):
        assert _load(folder, [tmp_path], home).environment.repo_root == str(repo), folder


def test_environment_outside_a_repository(tmp_path: Path) -> None:
    env = _load(tmp_path, [tmp_path], tmp_path / "home").environment
    assert env.git_branch is None and env.git_dirty is None and env.repo_root is None
