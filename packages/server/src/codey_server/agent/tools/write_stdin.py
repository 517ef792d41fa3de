"""``write_stdin``: send input to a process of the session (``exec``), or poll it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    SANDBOXED,
    BadToolCall,
    Display,
    Sandboxing,
    obj,
    string,
)
from codey_server.agent.tools.exec import MAX_YIELD_MS, OnProcess, yield_ms

__all__ = ["WRITE_STDIN", "WriteStdinArgs"]

DEFAULT_YIELD_MS = 250


@dataclass(frozen=True, slots=True)
class WriteStdinArgs:
    process_id: str
    input: str = ""
    yield_ms: int = DEFAULT_YIELD_MS
    close_stdin: bool = False


class WriteStdin(OnProcess[WriteStdinArgs]):
    name = "write_stdin"
    display = Display("Input to process", "process", "process", content="input")
    description = (
        "Send `input` to a process you started with exec (its stdin, or its terminal when "
        "started with tty: \"\\u0003\" is Ctrl-C there), then wait `yield_ms` (default 250, at "
        "most 30000) and return the output it wrote since it was last read. Empty `input` "
        "only polls: use it to watch a server or a long run, with a longer yield_ms rather "
        "than many quick polls. End lines with \"\\n\" as if pressing Enter. `close_stdin` "
        "ends its input. Only processes of this session; a process that has ended can "
        "still be read once.")
    parameters = obj({
        "process_id": {"type": "string", "description": "the id exec returned"},
        "input": {"type": "string", "description": "what to send (empty: only poll)"},
        "yield_ms": {"type": "integer", "minimum": 0, "maximum": MAX_YIELD_MS},
        "close_stdin": {"type": "boolean"},
    }, ["process_id"])

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> WriteStdinArgs:
        text = args.get("input", "")
        if not isinstance(text, str):
            raise BadToolCall("`input` must be a string")
        close = args.get("close_stdin", False)
        if not isinstance(close, bool):
            raise BadToolCall("`close_stdin` must be true or false")
        return WriteStdinArgs(string(args, "process_id") or "", text,
                              yield_ms(args, DEFAULT_YIELD_MS), close)

    # a process the session started was approved when it started: no new approval

    def action(self, args: WriteStdinArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.ExecWrite(action_id=action_id, session_id=session_id,
                            process_id=args.process_id, input=args.input,
                            yield_ms=args.yield_ms, close_stdin=args.close_stdin)


WRITE_STDIN = WriteStdin()
