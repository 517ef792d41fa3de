"""``remember``: add a note to the project's memory (the session's worker and workdir)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.instructions import memory_of
from codey_server.agent.tools.base import (
    BadToolCall,
    Finish,
    ServerCall,
    ServerTool,
    obj,
    string,
)
from codey_server.core.decide import MEMORY_MAX

__all__ = ["REMEMBER", "NoteArgs"]


@dataclass(frozen=True, slots=True)
class NoteArgs:
    note: str


class Remember(ServerTool[NoteArgs]):
    name = "remember"
    description = ("Add a short note to this project's memory: it is part of the "
                   "instructions of every later session in this workdir. Keep notes durable "
                   "and brief (conventions, commands, pitfalls), one fact per call.")
    parameters = obj({"note": {"type": "string"}}, ["note"])
    in_plan_mode = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> NoteArgs:
        note = " ".join((string(args, "note") or "").split())
        if len(note) > 500:
            raise BadToolCall("a note holds at most 500 characters: keep it brief")
        return NoteArgs(note)

    def start(self, args: NoteArgs, call: ServerCall) -> Finish:
        s = call.session
        text = memory_of(call.state, s)
        text = (text.rstrip("\n") + "\n" if text.strip() else "") + f"- {args.note}"
        if len(text) > MEMORY_MAX:
            return Finish("failed", f"error: the project memory is full ({MEMORY_MAX // 1024} "
                                    "KiB); ask the user to tidy it in the session's Memory "
                                    "panel", fields={"error": "the project memory is full"})
        return Finish("done", "noted in the project memory", [(s.session_id, ev.MemoryUpdated(
            worker_id=s.worker_id, workdir=s.workdir, text=text))])


REMEMBER = Remember()
