"""``kill``: stop a process of the session (``exec``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    SANDBOXED,
    Display,
    Sandboxing,
    obj,
    string,
)
from codey_server.agent.tools.exec import OnProcess

__all__ = ["KILL", "KillArgs"]


@dataclass(frozen=True, slots=True)
class KillArgs:
    process_id: str


class Kill(OnProcess[KillArgs]):
    name = "kill"
    display = Display("Stop process", "process", "process")
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

    def action(self, args: KillArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.ExecKill(action_id=action_id, session_id=session_id,
                           process_id=args.process_id)


KILL = Kill()
