"""``apply_patch``: edit files with a patch in Codex's apply_patch format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.approvals import asks_for_edit, patch_paths
from codey_server.agent.tools.base import (
    SANDBOXED,
    Ask,
    Display,
    Gate,
    Sandboxing,
    Settled,
    WorkerTool,
    obj,
    string,
)

__all__ = ["APPLY_PATCH", "PatchArgs"]


@dataclass(frozen=True, slots=True)
class PatchArgs:
    patch: str


class ApplyPatch(WorkerTool[PatchArgs]):
    name = "apply_patch"
    guide = ("`apply_patch` changes files with a patch: several edits or files at once, new "
             "files, moves and deletions; all of it applies or none does.")
    display = Display("Edit files", "patch", "patch")
    description = (
        "Edit files with a patch in the apply_patch format: "
        "*** Begin Patch / *** Add File: p / *** Update File: p (optionally *** Move "
        "to: q) / *** Delete File: p / @@ context / ' ', '-', '+' lines / *** End Patch. "
        "Unlike Codex's apply_patch: (1) all or nothing: if any part fails, no file is "
        "changed, so fix the patch and send all of it again; (2) *** Add File refuses a "
        "path that already exists: use *** Update File, or *** Delete File then *** Add "
        "File in one patch; (3) *** Move to refuses a destination that already exists.")
    parameters = obj({"input": {"type": "string", "description": "the whole patch"}}, ["input"])
    editor = "apply_patch"

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> PatchArgs:
        return PatchArgs(string(args, "input") or "")

    def ask(self, args: PatchArgs, gate: Gate) -> Ask | None:
        if asks_for_edit(gate.policy, patch_paths(args.patch)):
            return Ask("patch", patch=args.patch)
        return None

    def shows(self, args: PatchArgs) -> dict[str, Any]:
        return {"patch": args.patch}

    def action(self, args: PatchArgs, action_id: str, session_id: str,
               workdir: str, *, sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.ApplyPatch(action_id=action_id, session_id=session_id, workdir=workdir,
                             patch=args.patch)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.PatchResult):
            return super().reads(outcome)
        lines = [f"{f.op} {f.path}" + (f" -> {f.moved_to}" if f.moved_to else "")
                 + f" (+{f.added} -{f.removed})" for f in outcome.files]
        return "patch applied:\n" + "\n".join(lines)

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if not isinstance(outcome, wk.PatchResult):
            return super().settle(outcome, stream_truncated)
        return "done", self.reads(outcome), {"diff": outcome.diff, "files": outcome.files}


APPLY_PATCH = ApplyPatch()
