"""``remember``: add a note to the project's memory (the session's repository, on its worker:
:mod:`codey_server.core.memory`).

Adding is idempotent: a note the memory already holds (a line of it, compared without case,
spacing, list marker or final full stop) is not added again. A model that notes the same
convention in two sessions, or a prompt run twice (a schedule, a fork), used to leave it there
twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    BadToolCall,
    Display,
    Finish,
    ServerCall,
    ServerTool,
    obj,
    string,
)
from codey_server.core.decide import MEMORY_MAX
from codey_server.core.memory import memory_text, memory_written

__all__ = ["REMEMBER", "NoteArgs"]


@dataclass(frozen=True, slots=True)
class NoteArgs:
    note: str


class Remember(ServerTool[NoteArgs]):
    name = "remember"
    guide = ("`remember` keeps a short note for later sessions in this project (a "
             "convention, a command that works, a pitfall).")
    display = Display("Remember", "memory", "memory")
    description = ("Add a short note to this project's memory: it is part of the "
                   "instructions of every later session in this repository (or this folder, "
                   "outside one). Keep notes durable and brief (conventions, commands, "
                   "pitfalls), one fact per call.")
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
        text = memory_text(call.state, s)
        if any(_same_note(line, args.note) for line in text.splitlines()):
            return Finish("done", "already in the project memory: nothing added")
        text = (text.rstrip("\n") + "\n" if text.strip() else "") + f"- {args.note}"
        if len(text) > MEMORY_MAX:
            return Finish("failed", f"error: the project memory is full ({MEMORY_MAX // 1024} "
                                    "KiB); ask the user to tidy it in the session's Memory "
                                    "panel", fields={"error": "the project memory is full"})
        # kept for the repository (the folders' older notes it was shown with go along)
        return Finish("done", "noted in the project memory",
                      [(s.session_id, e) for e in memory_written(call.state, s, text)])


def _key(note: str) -> str:
    words = " ".join(note.split()).casefold()
    if words[:2] in ("- ", "* "):
        words = words[2:]
    return words.rstrip(". ")


def _same_note(line: str, note: str) -> bool:
    """``line`` of the memory says ``note`` (as a list item or not)."""
    return bool(note.strip()) and _key(line) == _key(note)


REMEMBER = Remember()
