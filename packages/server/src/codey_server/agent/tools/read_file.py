"""``read_file``: read a text file of the workdir, optionally a range of lines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    SANDBOXED,
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
    description = "Read a text file of the workdir, optionally a range of lines."
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
        note = "\n… (truncated)" if outcome.truncated else ""
        return cap(outcome.content + note)


READ_FILE = ReadFile()
