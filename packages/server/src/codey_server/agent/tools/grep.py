"""``grep``: search the workdir's files for a regular expression (ripgrep on the worker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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

__all__ = ["GREP", "MAX_CONTEXT", "MAX_MATCHES", "GrepArgs", "globs"]

#: the most matching lines one call may ask for
MAX_MATCHES = 1000
#: the most context lines on either side
MAX_CONTEXT = 20

Mode = Literal["content", "files", "count"]


@dataclass(frozen=True, slots=True)
class GrepArgs:
    pattern: str
    path: str = "."
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    ignore_case: bool = False
    literal: bool = False
    before: int = 0
    after: int = 0
    hidden: bool = False
    mode: Mode = "content"
    max_matches: int = 200


def globs(args: dict[str, Any], key: str) -> list[str]:
    """A glob argument: one pattern, or a list of them."""
    value = args.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(g, str) and g for g in value):
        raise BadToolCall(f"`{key}` must be a glob pattern or a list of them, e.g. \"*.py\"")
    return list(value)


def _flag(args: dict[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if not isinstance(value, bool):
        raise BadToolCall(f"`{key}` must be true or false")
    return value


class Grep(WorkerTool[GrepArgs]):
    name = "grep"
    guide = "`grep` searches the contents of files; narrow it with path and include."
    display = Display("Search", "search", "search", result_label="Matches")
    description = (
        "Search the contents of the workdir's files for a regular expression (ripgrep's "
        "syntax: escape literal braces and parentheses, or set `literal`). Prefer it to "
        "running grep or rg through `shell`: it needs no approval, skips what .gitignore "
        "ignores and hidden files (unless `hidden`), and its answer is bounded. Narrow it "
        "with `path` (a folder or file) and `include`/`exclude` globs (\"*.py\", "
        "\"src/**/*.ts\"). `mode`: \"content\" (matching lines as path:line:text, with "
        "`context` lines around them as path-line-text), \"files\" (only the paths, newest "
        "first) or \"count\" (matches per file). At most `max_matches` lines (200) come "
        "back; the answer says when there were more: narrow the search rather than raise "
        "the cap.")
    parameters = obj({
        "pattern": {"type": "string", "description": "the regular expression"},
        "path": {"type": "string", "description": "folder or file to search, relative to the "
                                                  "workdir (default: the workdir)"},
        "include": {"type": "array", "items": {"type": "string"},
                    "description": "only files matching one of these globs"},
        "exclude": {"type": "array", "items": {"type": "string"},
                    "description": "leave out files matching these globs"},
        "ignore_case": {"type": "boolean"},
        "literal": {"type": "boolean", "description": "the pattern is a plain string"},
        "context": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT,
                    "description": "lines before and after each match"},
        "before": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT},
        "after": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT},
        "hidden": {"type": "boolean", "description": "search hidden files and folders too"},
        "mode": {"type": "string", "enum": ["content", "files", "count"]},
        "max_matches": {"type": "integer", "minimum": 1, "maximum": MAX_MATCHES},
    }, ["pattern"])
    read_only = True
    in_plan_mode = True
    for_readers = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> GrepArgs:
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise BadToolCall("`pattern` must be a non-empty string")
        mode = args.get("mode", "content")
        if mode not in ("content", "files", "count"):
            raise BadToolCall("`mode` must be \"content\", \"files\" or \"count\"")
        context = integer(args, "context", 0, 0) or 0
        before = integer(args, "before", context, 0) or 0
        after = integer(args, "after", context, 0) or 0
        return GrepArgs(
            pattern, path=string(args, "path", required=False) or ".",
            include=globs(args, "include"), exclude=globs(args, "exclude"),
            ignore_case=_flag(args, "ignore_case"), literal=_flag(args, "literal"),
            before=min(before, MAX_CONTEXT), after=min(after, MAX_CONTEXT),
            hidden=_flag(args, "hidden"), mode=mode,
            max_matches=min(integer(args, "max_matches", 200, 1) or 200, MAX_MATCHES))

    def shows(self, args: GrepArgs) -> dict[str, Any]:
        return {"path": args.path}

    def action(self, args: GrepArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.Grep(action_id=action_id, session_id=session_id, workdir=workdir,
                       pattern=args.pattern, path=args.path, include=args.include,
                       exclude=args.exclude, ignore_case=args.ignore_case,
                       literal=args.literal, before=args.before, after=args.after,
                       hidden=args.hidden, mode=args.mode, max_matches=args.max_matches)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.GrepResult):
            return super().reads(outcome)
        return cap(grep_text(outcome))


def grep_text(result: wk.GrepResult) -> str:
    """The answer as the model reads it: ripgrep's own layout (``path:line:text``, context
    as ``path-line-text``, ``--`` between separate runs), then what was left out. The mode
    shows in the result: lines (content), counts (count), or neither (files)."""
    files = result.files
    if not files:
        return "no matches" + (" (the search stopped at its cap)" if result.truncated else "")
    out: list[str] = []
    content = any(f.lines for f in files)
    counting = not content and any(f.count for f in files)
    for f in files:
        if content:
            previous = None
            for line in f.lines:
                if previous is not None and line.line > previous + 1:
                    out.append("--")
                sep = ":" if line.match else "-"
                out.append(f"{f.path}{sep}{line.line}{sep}{line.text}")
                previous = line.line
        elif counting:
            out.append(f"{f.path}: {f.count}")
        else:
            out.append(f.path)
    n = len(files)
    head = f"{n} file{'s' if n != 1 else ''}"
    matched = result.matches or (sum(f.count for f in files) if counting else 0)
    if matched:
        head += f", {matched} matching line{'s' if matched != 1 else ''}"
    text = head + "\n" + "\n".join(out)
    if result.truncated:
        text += ("\n… [more matches not shown: the cap was reached; narrow the pattern, "
                 "`path` or `include` rather than raising `max_matches`]")
    return text


GREP = Grep()
