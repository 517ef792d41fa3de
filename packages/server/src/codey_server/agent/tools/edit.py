"""``edit``: replace an exact string in a file of the workdir (Claude Code's ``Edit``)."""

from __future__ import annotations

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
    Settled,
    WorkerTool,
    cap,
    obj,
    string,
)

__all__ = ["DIFF_SHOWN", "EDIT", "EditArgs", "proposed_diff"]

#: characters of the change's diff the model reads back (the item keeps all of it)
DIFF_SHOWN = 4000


@dataclass(frozen=True, slots=True)
class EditArgs:
    path: str
    old_string: str
    new_string: str
    replace_all: bool = False


def proposed_diff(args: EditArgs) -> str:
    """The change as a unified diff of the two strings alone (no line numbers: the file is
    not read yet), for the user to approve and the transcript to show until the worker's
    real diff replaces it."""
    old = args.old_string.splitlines()
    new = args.new_string.splitlines()
    where = " (every occurrence)" if args.replace_all else ""
    body = [f"-{line}" for line in old] + [f"+{line}" for line in new]
    return "\n".join([f"--- a/{args.path}", f"+++ b/{args.path}", f"@@ edit{where} @@", *body])


class Edit(WorkerTool[EditArgs]):
    name = "edit"
    guide = ("`edit` replaces one exact piece of text in a file (or every copy of it with "
             "replace_all): copy the text exactly as read_file showed it, without the line "
             "numbers, with enough context to be unique.")
    display = Display("Edit file", "patch", path_over_diff=True)
    description = (
        "Change a file by replacing an exact piece of its text: `old_string` becomes "
        "`new_string`. Read the file first and copy `old_string` exactly as it is there, "
        "whitespace and indentation included (without read_file's line numbers). It must "
        "occur exactly once: include enough surrounding lines to make it unique, or set "
        "`replace_all` to change every occurrence (a rename, say). Fails, changing nothing, "
        "when the text is not found or not unique; the error says where to look. Best for "
        "small, targeted changes to existing files; create files with write_file. Returns "
        "the diff of the change.")
    parameters = obj({
        "path": {"type": "string", "description": "the file, relative to the workdir"},
        "old_string": {"type": "string", "description": "the exact text to replace"},
        "new_string": {"type": "string", "description": "the text to put in its place"},
        "replace_all": {"type": "boolean",
                        "description": "replace every occurrence (default: exactly one)"},
    }, ["path", "old_string", "new_string"])
    editor = "edit"

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> EditArgs:
        path = string(args, "path") or ""
        old, new = args.get("old_string"), args.get("new_string")
        if not isinstance(old, str) or not old:
            raise BadToolCall("`old_string` must be the exact, non-empty text to replace "
                              "(to create a file, use write_file)")
        if not isinstance(new, str):
            raise BadToolCall("`new_string` must be a string (empty deletes the text)")
        if old == new:
            raise BadToolCall("`old_string` and `new_string` are the same: nothing to change")
        replace_all = args.get("replace_all", False)
        if not isinstance(replace_all, bool):
            raise BadToolCall("`replace_all` must be true or false")
        return EditArgs(path, old, new, replace_all)

    def ask(self, args: EditArgs, gate: Gate) -> Ask | None:
        # approved like apply_patch: auto-edit lets a change inside the workdir through
        if asks_for_edit(gate.policy, [args.path]):
            return Ask("patch", patch=proposed_diff(args), path=args.path)
        return None

    def shows(self, args: EditArgs) -> dict[str, Any]:
        return {"path": args.path, "patch": proposed_diff(args)}

    def action(self, args: EditArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.Edit(action_id=action_id, session_id=session_id, workdir=workdir,
                       path=args.path, old_string=args.old_string,
                       new_string=args.new_string, replace_all=args.replace_all)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.EditResult):
            return super().reads(outcome)
        n = outcome.replacements
        head = (f"edited {outcome.path}: {n} replacement{'s' if n != 1 else ''} "
                f"(+{outcome.added} -{outcome.removed})")
        return head + ("\n" + cap(outcome.diff, DIFF_SHOWN) if outcome.diff else "")

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if not isinstance(outcome, wk.EditResult):
            return super().settle(outcome, stream_truncated)
        change = wk.FileChange(path=outcome.path, op="update", added=outcome.added,
                               removed=outcome.removed)
        return "done", self.reads(outcome), {"diff": outcome.diff, "files": [change]}


EDIT = Edit()
