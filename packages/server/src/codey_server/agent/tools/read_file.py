"""``read_file``: read a text file of the workdir, optionally a range of lines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    SANDBOXED,
    Display,
    Sandboxing,
    WorkerTool,
    cap,
    integer,
    obj,
    string,
)

__all__ = ["READ_FILE", "ReadArgs"]


@dataclass(frozen=True, slots=True)
class ReadArgs:
    path: str
    offset: int = 0
    limit: int | None = None


class ReadFile(WorkerTool[ReadArgs]):
    name = "read_file"
    guide = ("`read_file` reads a file, its lines numbered; read a long one in pieces with "
             "offset and limit.")
    display = Display("Read file", "file", result="file")
    description = (
        "Read a text file of the workdir. Each line comes back numbered (`   12\\tcode`; "
        "the number and tab are not part of the file: leave them out of edits). `offset` is "
        "the first line to read (0-based), `limit` how many: read a long file in pieces. Use "
        "`grep` to find where to look first. Binary files are not shown; images: "
        "`view_image`.")
    parameters = obj({"path": {"type": "string"}, "offset": {"type": "integer", "minimum": 0},
                      "limit": {"type": "integer", "minimum": 1}}, ["path"])
    read_only = True
    in_plan_mode = True
    for_readers = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> ReadArgs:
        return ReadArgs(string(args, "path") or "", offset=integer(args, "offset", 0, 0) or 0,
                        limit=integer(args, "limit", None, 1))

    def shows(self, args: ReadArgs) -> dict[str, Any]:
        return {"path": args.path}

    def action(self, args: ReadArgs, action_id: str, session_id: str,
               workdir: str, *, sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.ReadFile(action_id=action_id, session_id=session_id, workdir=workdir,
                           path=args.path, offset=args.offset, limit=args.limit)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.FileContent):
            return super().reads(outcome)
        if outcome.binary:
            return f"{outcome.path} is a binary file ({outcome.size} bytes)"
        return cap(numbered(outcome))


def numbered(outcome: wk.FileContent) -> str:
    """The lines with their numbers (as ``cat -n``: right-aligned, a tab), and a last line
    saying what was left out, so the model knows to read on."""
    offset = outcome.offset
    lines = outcome.content.splitlines()
    if not lines:
        return (f"({outcome.path} is empty)" if outcome.total_lines == 0 else
                f"(no lines from line {offset + 1}: {outcome.path} has "
                f"{outcome.total_lines} lines)")
    width = max(6, len(str(offset + len(lines))))
    text = "\n".join(f"{n:>{width}}\t{line}"
                     for n, line in enumerate(lines, start=offset + 1))
    last = offset + len(lines)
    if outcome.truncated or last < outcome.total_lines:
        text += (f"\n… [lines {last + 1}–{outcome.total_lines} not shown: read them with "
                 f"offset={last}]")
    return text


READ_FILE = ReadFile()
