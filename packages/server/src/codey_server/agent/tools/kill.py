"""``kill``: stop a process of the session (``exec``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.tools.base import (
    SANDBOXED,
    Gate,
    Sandboxing,
    Settled,
    WorkerTool,
    obj,
    string,
)
from codey_server.agent.tools.exec import exec_text, output_fields, process_read
from codey_server.agent.tools.write_stdin import foreign_process, gone_events

__all__ = ["KILL", "KillArgs"]


@dataclass(frozen=True, slots=True)
class KillArgs:
    process_id: str


class Kill(WorkerTool[KillArgs]):
    name = "kill"
    description = (
        "Stop a process you started with exec (SIGTERM, then SIGKILL after a few seconds, to "
        "it and everything it started) and return its last output. Stop what you started "
        "once you no longer need it: a dev server after its tests ran, a watcher. Only "
        "processes of this session.")
    parameters = obj({"process_id": {"type": "string", "description": "the id exec returned"}},
                     ["process_id"])

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> KillArgs:
        return KillArgs(string(args, "process_id") or "")

    def refuses(self, args: KillArgs, gate: Gate) -> str | None:
        return foreign_process(args.process_id, gate)

    def shows(self, args: KillArgs) -> dict[str, Any]:
        return {"path": args.process_id}

    def action(self, args: KillArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.ExecKill(action_id=action_id, session_id=session_id,
                           process_id=args.process_id)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.ExecOutput):
            return super().reads(outcome)
        return exec_text(outcome)

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if not isinstance(outcome, wk.ExecOutput):
            return super().settle(outcome, stream_truncated)
        return "done", self.reads(outcome), output_fields(outcome)

    def events(self, args: KillArgs, outcome: wk.ActionOutcome, item: ev.ToolCall,
               session: SessionInfo) -> list[ev.Event]:
        return process_read(outcome, session) if isinstance(outcome, wk.ExecOutput) else []

    def error_events(self, args: KillArgs, code: str, item: ev.ToolCall,
                     session: SessionInfo) -> list[ev.Event]:
        return gone_events(args.process_id, code, session)


KILL = Kill()
