"""``glob``: the workdir's paths matching a glob pattern, newest first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    SANDBOXED,
    BadToolCall,
    Display,
    Sandboxing,
    WorkerTool,
    cap,
    integer,
    obj,
    string,
)

__all__ = ["GLOB", "MAX_RESULTS", "GlobArgs"]

#: the most paths one call may ask for
MAX_RESULTS = 2000


@dataclass(frozen=True, slots=True)
class GlobArgs:
    pattern: str
    path: str = "."
    hidden: bool = False
    max_results: int = 500


class Glob(WorkerTool[GlobArgs]):
    name = "glob"
    guide = "`glob` lists files matching a name pattern such as **/*.py, newest first."
    display = Display("Find files", "search", "search", result_label="Files")
    description = (
        "Find files by name: the workdir's paths matching a glob pattern (\"**/*.py\", "
        "\"src/**/test_*.ts\", \"*.md\"; relative to `path`), the most recently modified "
        "first. Use it to see what exists before reading; use `grep` to search inside "
        "files. What .gitignore ignores and hidden files are left out (unless `hidden`). "
        "At most `max_results` paths (500); the answer says when there were more.")
    parameters = obj({
        "pattern": {"type": "string", "description": "the glob pattern"},
        "path": {"type": "string", "description": "folder to search from, relative to the "
                                                  "workdir (default: the workdir)"},
        "hidden": {"type": "boolean", "description": "include hidden files and folders"},
        "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
    }, ["pattern"])
    read_only = True
    in_plan_mode = True
    for_readers = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> GlobArgs:
        hidden = args.get("hidden", False)
        if not isinstance(hidden, bool):
            raise BadToolCall("`hidden` must be true or false")
        return GlobArgs(string(args, "pattern") or "",
                        path=string(args, "path", required=False) or ".", hidden=hidden,
                        max_results=min(integer(args, "max_results", 500, 1) or 500,
                                        MAX_RESULTS))

    def shows(self, args: GlobArgs) -> dict[str, Any]:
        return {"path": args.path}

    def action(self, args: GlobArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.Glob(action_id=action_id, session_id=session_id, workdir=workdir,
                       pattern=args.pattern, path=args.path, hidden=args.hidden,
                       max_results=args.max_results)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.GlobResult):
            return super().reads(outcome)
        if not outcome.paths:
            return "no files match"
        text = "\n".join(outcome.paths)
        if outcome.truncated:
            text += (f"\n… [more paths match: only the {len(outcome.paths)} newest are shown; "
                     "narrow the pattern or `path`]")
        return cap(text)


GLOB = Glob()
