"""A session's files over three turns, for the checkpoint and rewind tests (integration and
e2e): a folder (a repository, a plain folder, or the base of a worktree session) with a
tracked file to patch, one to delete and an ignored one; the scripted model's turns that
write an untracked file and a binary, patch, and delete; and reading the files back."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

__all__ = ["BINARY", "PATCH", "call", "file_turn_steps", "files", "git", "make_folder"]

#: a command that writes a binary file (one of turn one's changes)
BINARY = "import sys; open('pic.bin', 'wb').write(bytes(range(256)) * 4)"
#: turn two's patch of ``a.txt``
PATCH = """*** Begin Patch
*** Update File: a.txt
@@
 one
-two
+TWO
 three
*** End Patch"""


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """One tool call of a scripted reply."""
    return {"name": name, "arguments": arguments}


def file_turn_steps() -> list[dict[str, Any]]:
    """The scripted model's steps of the three changing turns: "turn one" writes the untracked
    ``notes.md`` and the binary ``pic.bin``, "turn two" patches ``a.txt``, "turn three" deletes
    ``gone.txt``, rewrites the ignored ``debug.log`` and changes ``pic.bin``."""
    return [
        {"match": {"user": "turn one"}, "reply": {"calls": [
            call("write_file", path="notes.md", content="untracked\n"),
            call("shell", command=["python3", "-c", BINARY])]}},
        {"match": {"user": "turn two"}, "reply": {"calls": [call("apply_patch", input=PATCH)]}},
        {"match": {"user": "turn three"}, "reply": {"calls": [call("shell", command=[
            "sh", "-c", "rm gone.txt && echo after > debug.log && echo changed > pic.bin"])]}},
    ]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path → bytes), but git's and Codey's own."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if rel.split("/")[0] in (".git", ".codey") or not path.is_file():
            continue
        found[rel] = path.read_bytes()
    return found


def make_folder(folder: Path, kind: str = "repo") -> Path:
    """``folder`` with ``a.txt``, ``gone.txt`` and ``.gitignore`` (``*.log``), committed unless
    ``kind`` is "plain", and the ignored ``debug.log``."""
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("one\ntwo\nthree\n")
    (folder / "gone.txt").write_text("to be deleted\n")
    (folder / ".gitignore").write_text("*.log\n")
    if kind != "plain":
        git(folder, "init", "-q", "-b", "main")
        git(folder, "config", "user.name", "Tester")
        git(folder, "config", "user.email", "t@example.com")
        git(folder, "add", "-A")
        git(folder, "commit", "-qm", "start")
    (folder / "debug.log").write_text("before\n")  # ignored (and, in a worktree, not there)
    return folder
