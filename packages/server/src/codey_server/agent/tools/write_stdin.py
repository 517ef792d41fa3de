"""``write_stdin``: send input to a process of the session (``exec``), or poll it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.tools.base import (
    SANDBOXED,
    BadToolCall,
    Gate,
    Sandboxing,
    Settled,
    WorkerTool,
    obj,
    string,
)
from codey_server.agent.tools.exec import (
    MAX_YIELD_MS,
    exec_text,
    output_fields,
    process_read,
    yield_ms,
)
from codey_server.core.fold import find_process

__all__ = ["WRITE_STDIN", "WriteStdinArgs", "foreign_process", "gone_events"]

DEFAULT_YIELD_MS = 250


@dataclass(frozen=True, slots=True)
class WriteStdinArgs:
    process_id: str
    input: str = ""
    yield_ms: int = DEFAULT_YIELD_MS
    close_stdin: bool = False


def foreign_process(process_id: str, gate: Gate) -> str | None:
    """Why a call on ``process_id`` is refused: it is not a process of this session (another
    session's, or made up), or it is gone. None: it is this session's."""
    status = gate.processes.get(process_id)
    if status is None:
        return (f"refused: {process_id} is not a process of this session; exec starts one "
                "and returns its id")
    if status == "gone":
        return (f"refused: {process_id} is gone (its worker restarted or the session was "
                "stopped); start it again with exec")
    return None


def gone_events(process_id: str, code: str, session: SessionInfo) -> list[ev.Event]:
    """The worker does not know the process (``process_gone``): it is gone."""
    known = find_process(session, process_id)
    if code != "process_gone" or known is None or known.status in ("ended", "gone"):
        return []
    return [ev.ProcessEnded(process_id=process_id,
                            stopped_by=known.stop_by if known.status == "stopping" else "gone")]


class WriteStdin(WorkerTool[WriteStdinArgs]):
    name = "write_stdin"
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

    def refuses(self, args: WriteStdinArgs, gate: Gate) -> str | None:
        return foreign_process(args.process_id, gate)

    # a process the session started was approved when it started: no new approval

    def shows(self, args: WriteStdinArgs) -> dict[str, Any]:
        return {"path": args.process_id}

    def action(self, args: WriteStdinArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        return wk.ExecWrite(action_id=action_id, session_id=session_id,
                            process_id=args.process_id, input=args.input,
                            yield_ms=args.yield_ms, close_stdin=args.close_stdin)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.ExecOutput):
            return super().reads(outcome)
        return exec_text(outcome)

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if not isinstance(outcome, wk.ExecOutput):
            return super().settle(outcome, stream_truncated)
        return "done", self.reads(outcome), output_fields(outcome)

    def events(self, args: WriteStdinArgs, outcome: wk.ActionOutcome, item: ev.ToolCall,
               session: SessionInfo) -> list[ev.Event]:
        return process_read(outcome, session) if isinstance(outcome, wk.ExecOutput) else []

    def error_events(self, args: WriteStdinArgs, code: str, item: ev.ToolCall,
                     session: SessionInfo) -> list[ev.Event]:
        return gone_events(args.process_id, code, session)


WRITE_STDIN = WriteStdin()
