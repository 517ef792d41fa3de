"""``list_dir``: list a directory of the workdir."""

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

__all__ = ["LIST_DIR", "ListArgs"]


@dataclass(frozen=True, slots=True)
class ListArgs:
    path: str = "."
    depth: int = 1


class ListDir(WorkerTool[ListArgs]):
    name = "list_dir"
    guide = "`list_dir` shows a folder's tree."
    display = Display("List folder", "file")
    description = "List a directory of the workdir (skips .git)."
    parameters = obj({"path": {"type": "string"}, "depth": {"type": "integer", "minimum": 1,
                                                            "maximum": 5}}, [])
    read_only = True
    in_plan_mode = True
    for_readers = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> ListArgs:
        return ListArgs(string(args, "path", required=False) or ".",
                        depth=min(integer(args, "depth", 1, 1) or 1, 5))

    def shows(self, args: ListArgs) -> dict[str, Any]:
        return {"path": args.path}

    def action(self, args: ListArgs, action_id: str, session_id: str,
               workdir: str, *, sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.ListDir(action_id=action_id, session_id=session_id, workdir=workdir,
                          path=args.path, depth=args.depth)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.DirListing):
            return super().reads(outcome)
        rows = [e.path + ("/" if e.kind == "dir" else "") for e in outcome.entries]
        note = "\n… (truncated)" if outcome.truncated else ""
        return cap("\n".join(rows) + note) if rows else "(empty directory)"


LIST_DIR = ListDir()
