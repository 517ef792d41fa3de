"""``write_file``: write a whole file of the workdir."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.approvals import asks_for_edit
from codey_server.agent.tools.base import (
    SANDBOXED,
    Ask,
    BadToolCall,
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

    def action(self, args: WriteArgs, action_id: str, session_id: str,
               workdir: str, *, sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.WriteFile(action_id=action_id, session_id=session_id, workdir=workdir,
                            path=args.path, content=args.content)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.WriteResult):
            return super().reads(outcome)
        return f"wrote {outcome.bytes_written} bytes to {outcome.path}"


WRITE_FILE = WriteFile()
