"""``write_file``: write a whole file of the workdir.

Its approval is not blind: before asking, the worker reads the file as it is now
(:meth:`WriteFile.preview`), and the approval — and the call's card, after the decision too —
shows a diff against it, or the whole content of a new file (:meth:`WriteFile.previewed`).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.approvals import asks_for_edit
from codey_server.agent.tools.base import (
    SANDBOXED,
    Ask,
    BadToolCall,
    Display,
    Gate,
    Sandboxing,
    WorkerTool,
    obj,
    string,
)

__all__ = ["WRITE_FILE", "WriteArgs"]


@dataclass(frozen=True, slots=True)
class WriteArgs:
    path: str
    content: str


class WriteFile(WorkerTool[WriteArgs]):
    name = "write_file"
    guide = ("`write_file` creates a file or replaces a whole one; prefer editing for "
             "changes to an existing file.")
    display = Display("Write file", "file", content="content")
    description = "Write a whole file of the workdir (creates parent directories)."
    parameters = obj({"path": {"type": "string"}, "content": {"type": "string"}},
                     ["path", "content"])

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> WriteArgs:
        content = args.get("content")
        if not isinstance(content, str):
            raise BadToolCall("`content` must be a string")
        return WriteArgs(string(args, "path") or "", content)

    def ask(self, args: WriteArgs, gate: Gate) -> Ask | None:
        if asks_for_edit(gate.policy, [args.path]):
            return Ask("write", path=args.path)
        return None

    def shows(self, args: WriteArgs) -> dict[str, Any]:
        return {"path": args.path}

    def preview(self, args: WriteArgs, action_id: str, session_id: str,
                workdir: str) -> wk.ActionMessage | None:
        return wk.ReadFile(action_id=action_id, session_id=session_id, workdir=workdir,
                           path=args.path)

    def previewed(self, args: WriteArgs, ask: Ask, found: wk.ActionOutcome | None,
                  failure: tuple[str, str]) -> tuple[Ask, dict[str, Any]]:
        path, new = args.path, args.content
        lines = _count_lines(new)
        if isinstance(found, wk.FileContent) and not found.binary and not found.truncated:
            diff = file_diff(path, found.content, new)
            if not diff:
                reason = f"leaves {path} as it is: it already holds this content"
            else:
                added, removed = _counts(diff)
                reason = f"changes {path} (+{added} −{removed})"
        else:
            diff = file_diff(path, None, new)
            if isinstance(found, wk.FileContent):
                what = (f"a binary file of {found.size} bytes" if found.binary
                        else f"a file too large to compare ({found.size} bytes)")
                reason = f"replaces {path}, {what}, with {lines} lines"
            elif failure[0] == "not_found":
                reason = f"creates {path} ({lines} lines)"
            else:
                reason = (f"writes {lines} lines to {path}; the file as it is now could not "
                          f"be read ({failure[1]}), so this is the whole new content")
        return dataclasses.replace(ask, patch=diff, reason=reason), {"diff": diff}

    def action(self, args: WriteArgs, action_id: str, session_id: str,
               workdir: str, *, sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.WriteFile(action_id=action_id, session_id=session_id, workdir=workdir,
                            path=args.path, content=args.content)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.WriteResult):
            return super().reads(outcome)
        return f"wrote {outcome.bytes_written} bytes to {outcome.path}"


#: the most of a diff shown (the whole content is in the call's arguments)
DIFF_CAP = 256 * 1024
_NO_NEWLINE = "\\ No newline at end of file\n"


def file_diff(path: str, old: str | None, new: str) -> str:
    """The unified diff that turns ``old`` (None: no file) into ``new``, with ``a/`` and
    ``b/`` paths (``/dev/null`` for a new file) and ``\\ No newline at end of file`` where it
    applies, as ``git diff`` spells it; "" when nothing changes. Cut at :data:`DIFF_CAP`."""
    before = old.splitlines(keepends=True) if old else []
    after = new.splitlines(keepends=True)
    out: list[str] = []
    size = 0
    for line in difflib.unified_diff(before, after, "/dev/null" if old is None else f"a/{path}",
                                     f"b/{path}", n=3):
        if not line.endswith("\n"):
            line += "\n" + _NO_NEWLINE
        size += len(line)
        if size > DIFF_CAP:
            out.append(f"… the diff goes on: the whole content is in the call's arguments "
                       f"({len(new)} characters)\n")
            break
        out.append(line)
    return "".join(out)


def _counts(diff: str) -> tuple[int, int]:
    lines = diff.splitlines()
    added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++ "))
    removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("--- "))
    return added, removed


def _count_lines(text: str) -> int:
    return len(text.splitlines())


WRITE_FILE = WriteFile()
