"""Prompt files (slash commands): where they are read, their names and front matter, and the
confinement: a repository's symlink out of its folders is refused, never read."""

from __future__ import annotations

import asyncio
from pathlib import Path

from codey_protocol.worker import PromptFiles
from codey_worker.prompts import MAX_FILE_BYTES, list_prompt_files, parse_prompt_file


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _list(workdir: Path, home: Path, user: Path) -> PromptFiles:
    return asyncio.run(list_prompt_files(workdir, home, user))


def test_parse_front_matter_body_and_garbage() -> None:
    meta, body, problem = parse_prompt_file(
        "---\ndescription: Fix an issue\nargument-hint: [issue]\nmodel: haiku\n"
        "allowed-tools: Bash(git add:*), Read\n---\nFix issue $1.\n")
    assert meta["description"] == "Fix an issue" and meta["model"] == "haiku"
    assert body == "Fix issue $1.\n" and problem is None
    assert parse_prompt_file("Just a body") == ({}, "Just a body", None)
    meta, body, problem = parse_prompt_file("---\n: : [\n---\nbody\n")
    assert meta == {} and body == "body\n" and problem and "not YAML" in problem
    meta, body, problem = parse_prompt_file("---\n- a list\n---\nbody")
    assert meta == {} and body == "body" and problem == "the front matter is not a mapping"
    assert parse_prompt_file("---\nnever closed")[2] == "the front matter is not closed with ---"


def test_project_user_and_codey_home_folders_with_namespaces(tmp_path: Path) -> None:
    workdir, home, user = tmp_path / "w", tmp_path / "u" / ".codey", tmp_path / "u"
    workdir.mkdir()
    _write(workdir / ".claude/commands/review.md",
           "---\ndescription: Review the diff\nargument-hint: '[focus]'\nmodel: m-small\n"
           "allowed-tools: [Read, Grep]\n---\nReview $ARGUMENTS")
    _write(workdir / ".claude/commands/frontend/component.md", "Make a component $1")
    _write(workdir / ".codex/prompts/deploy.md", "Deploy to $1")
    _write(workdir / ".codey/commands/a/b/c.md", "deep")
    _write(user / ".claude/commands/review.md", "the user's review: the project's wins")
    _write(user / ".codex/prompts/standup.md", "---\ndescription: Standup notes\n---\nNotes")
    _write(home / "commands/mine.md", "Codey's own")
    _write(workdir / ".claude/commands/notes.txt", "not a command")
    found = _list(workdir, home, user)
    by_name = {f.name: f for f in found.files}
    assert list(by_name) == ["frontend:component", "review", "deploy", "a:b:c", "standup",
                             "mine"]
    review = by_name["review"]
    assert (review.scope, review.description, review.argument_hint, review.model,
            review.allowed_tools, review.body) == (
        "project", "Review the diff", "[focus]", "m-small", ["Read", "Grep"],
        "Review $ARGUMENTS")
    assert by_name["standup"].scope == "user" and by_name["mine"].scope == "user"
    assert by_name["frontend:component"].path == str(
        workdir / ".claude/commands/frontend/component.md")
    assert found.warnings == []


def test_symlinks_out_are_refused_and_big_files_cut(tmp_path: Path) -> None:
    workdir, user = tmp_path / "w", tmp_path / "u"
    secret = _write(tmp_path / "secret.md", "THE SECRET")
    outside = tmp_path / "elsewhere"
    _write(outside / "leak.md", "THE OTHER SECRET")
    (workdir / ".claude/commands").mkdir(parents=True)
    (workdir / ".claude/commands/steal.md").symlink_to(secret)
    (workdir / ".claude/commands/ns").symlink_to(outside)  # a namespace folder out
    (workdir / ".codex").mkdir()
    (workdir / ".codex/prompts").symlink_to(outside)  # the whole folder out
    _write(workdir / ".codey/commands/big.md", "x" * (MAX_FILE_BYTES + 100))
    found = _list(workdir, user / ".codey", user)
    assert [f.name for f in found.files] == ["big"]
    assert found.files[0].truncated and len(found.files[0].body) == MAX_FILE_BYTES
    assert all("SECRET" not in f.body for f in found.files)
    text = "\n".join(found.warnings)
    assert "steal.md: skipped (it is a symlink)" in text
    assert ".codex/prompts: skipped" in text
    assert "cut at 32 KiB" in text


def test_garbage_front_matter_is_listed_with_a_warning(tmp_path: Path) -> None:
    workdir, user = tmp_path / "w", tmp_path / "u"
    _write(workdir / ".claude/commands/odd.md", "---\ndescription: [unclosed\n---\nStill works")
    _write(workdir / ".claude/commands/bin.md", "---\n\x00\x01\x02\n---\nbinary-ish")
    found = _list(workdir, user / ".codey", user)
    assert {f.name: f.body for f in found.files} == {"bin": "binary-ish", "odd": "Still works"}
    assert all(f.description == "" for f in found.files)
    assert len(found.warnings) == 2 and all("listed without it" in w for w in found.warnings)


def test_a_linked_user_folder_is_read_but_not_a_link_out_of_it(tmp_path: Path) -> None:
    workdir, user = tmp_path / "w", tmp_path / "u"
    workdir.mkdir()
    dotfiles = tmp_path / "dotfiles" / "commands"
    _write(dotfiles / "standup.md", "Standup notes")
    (user / ".claude").mkdir(parents=True)
    (user / ".claude" / "commands").symlink_to(dotfiles)  # a dotfiles manager's link
    (dotfiles / "leak.md").symlink_to(_write(tmp_path / "key.md", "THE KEY"))
    found = _list(workdir, user / ".codey", user)
    assert [(f.name, f.scope, f.body) for f in found.files] == [
        ("standup", "user", "Standup notes")]
    assert [w for w in found.warnings if "leak.md: skipped (it is a symlink)" in w]
