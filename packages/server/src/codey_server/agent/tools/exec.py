"""``exec``: start a command that outlives the call (a dev server, a watcher, a REPL, a long
test run), in the session's sandbox, and answer after a short wait with its output so far.

The process belongs to the session: ``write_stdin`` reads and writes it, ``kill`` stops it,
the session's processes panel lists it (``process_started`` …), and it stops when the session
is interrupted or closed, or its sandbox is narrowed below what it runs with
(``core/toggles.py``). Approved, sandboxed and escalated exactly as ``shell`` is.

This module also holds what the three process tools share: how an ``exec_output`` reads to
the model, and the process events it makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.approvals import hardened_env
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
    integer,
    obj,
    string,
)
from codey_server.agent.tools.shell import (
    ESCALATION_PARAMETERS,
    ITEM_OUTPUT_CAP,
    argv_of,
    command_ask,
    denied_hint,
    escalation,
    runs_in,
)
from codey_server.core.fold import find_process
from codey_server.core.processes import stopper
from codey_server.core.toggles import stops_at_start

__all__ = ["EXEC", "MAX_YIELD_MS", "ExecArgs", "OnProcess", "exec_text", "foreign_process",
           "gone_events", "process_end", "process_read", "stopper"]

#: the longest a call waits for output (the worker's own limit)
MAX_YIELD_MS = 30_000
DEFAULT_YIELD_MS = 1000


@dataclass(frozen=True, slots=True)
class ExecArgs:
    command: list[str]
    cwd: str | None = None
    tty: bool = False
    yield_ms: int = DEFAULT_YIELD_MS
    #: stop it after this long (None: when killed, or the session stops it)
    timeout_s: float | None = None
    escalate: bool = False
    justification: str = ""


def yield_ms(args: dict[str, Any], default: int) -> int:
    return min(integer(args, "yield_ms", default, 0) or 0, MAX_YIELD_MS)


class Exec(WorkerTool[ExecArgs]):
    name = "exec"
    guide = ("`exec` starts something that keeps running (a dev server, a watcher, a REPL, a "
             "long test run you want to check on) and returns after a short wait with its "
             "process id: read or type into it with `write_stdin`, and stop it with `kill` "
             "once you no longer need it.")
    display = Display("Process", "process", "process")
    description = (
        "Start a command that keeps running after this call returns (a dev server, a "
        "watcher, a REPL, a long test run to check on). `command` is an argv list, as for "
        "shell. Waits `yield_ms` (default 1000, at most 30000) or until it ends, then "
        "returns its output so far, whether it still runs (or its exit code) and its "
        "process id: write_stdin sends input or, empty, polls for new output; kill stops "
        "it. `tty` for programs that want a terminal (a REPL). Prefer shell for commands "
        "that finish on their own. Runs in the session's sandbox; asks for approval as "
        "shell does, but no command counts as read-only here. With the session's network "
        "off each command has a network of its own: a server started here is reachable "
        "only from inside its own command, so ask the user to turn the network on to test "
        "against it. It stops when you kill it, the session is interrupted or closed, or "
        "the user turns off access it has; it keeps the sandbox it started in, so restart "
        "it after the network is turned on. "
        "Unread output is kept up to 1 MiB.")
    parameters = obj({
        "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "workdir": {"type": "string", "description": "relative to the session workdir"},
        "tty": {"type": "boolean", "description": "run it in a pseudo-terminal"},
        "yield_ms": {"type": "integer", "minimum": 0, "maximum": MAX_YIELD_MS,
                     "description": "how long to wait for output before returning"},
        "timeout_ms": {"type": "integer", "minimum": 1,
                       "description": "stop it after this long (default: never)"},
        **ESCALATION_PARAMETERS,
    }, ["command"])
    runs_commands = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> ExecArgs:
        cmd = argv_of(args, '["npm", "run", "dev"]')
        tty = args.get("tty", False)
        if not isinstance(tty, bool):
            raise BadToolCall("`tty` must be true or false")
        timeout_ms = integer(args, "timeout_ms", None, 1)
        escalate, justification = escalation(args)
        return ExecArgs(cmd, cwd=string(args, "workdir", required=False), tty=tty,
                        yield_ms=yield_ms(args, DEFAULT_YIELD_MS),
                        timeout_s=timeout_ms / 1000 if timeout_ms else None,
                        escalate=escalate, justification=justification)

    def escalates(self, args: ExecArgs) -> bool:
        return args.escalate

    def ask(self, args: ExecArgs, gate: Gate) -> Ask | None:
        # shell's rule: leaving the sandbox asks under every policy (unless the session chose
        # full access), a command approved for the session goes ahead, full-auto asks
        # nothing. But no process is "known-safe": it lives on and reads what write_stdin
        # sends without asking again (`git log` in a terminal opens a pager, and a pager
        # runs `!command`), so starting one asks under suggest and auto-edit.
        return command_ask(args.command, args.escalate, args.justification, gate,
                           sandboxed=False)

    def shows(self, args: ExecArgs) -> dict[str, Any]:
        return {"command": args.command}

    def action(self, args: ExecArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        run = runs_in(args.escalate, sandbox)
        return wk.ExecStart(action_id=action_id, session_id=session_id, argv=args.command,
                            workdir=workdir, cwd=args.cwd, env=hardened_env(args.command),
                            tty=args.tty, yield_ms=args.yield_ms, timeout_s=args.timeout_s,
                            sandbox=run.mode, network=run.network,
                            # its tail, ports and end for the processes panel (core/tails.py)
                            live=True)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.ExecOutput):
            return super().reads(outcome)
        return exec_text(outcome, started=True)

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if not isinstance(outcome, wk.ExecOutput):
            return super().settle(outcome, stream_truncated)
        failed = not outcome.running and outcome.exit_code != 0
        return ("failed" if failed else "done"), self.reads(outcome), output_fields(outcome)

    def events(self, args: ExecArgs, outcome: wk.ActionOutcome, item: ev.ToolCall,
               session: SessionInfo) -> list[ev.Event]:
        if not isinstance(outcome, wk.ExecOutput) or not outcome.process_id:
            return []
        # the call's action is still pending here: it says what the process runs with
        pending = session.pending_actions.get(item.action_id or "")
        action = pending.action if pending is not None else None
        run = action if isinstance(action, wk.ExecStart) else None
        started: list[ev.Event] = [ev.ProcessStarted(
            process_id=outcome.process_id, item_id=item.id, worker_id=session.worker_id,
            argv=args.command, cwd=args.cwd, tty=args.tty, output=outcome.output,
            sandbox=run.sandbox if run is not None else None,
            network=run.network if run is not None else None)]
        if not outcome.running:
            started.append(process_end(outcome, None, read=False))
        elif pending is not None and stops_at_start(pending, session):
            # the user narrowed the settings while it was starting: it would have been
            # stopped had it been running then, so it is now
            started.append(ev.ProcessStopRequested(process_id=outcome.process_id,
                                                   by="settings"))
        return started


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


class _HasProcess(Protocol):
    @property
    def process_id(self) -> str: ...


P = TypeVar("P", bound=_HasProcess)


class OnProcess(WorkerTool[P]):
    """A tool on a process the session started (``write_stdin``, ``kill``): refused for
    another session's process or a gone one, shown by its id, read as the process's state
    and new output; a ``process_gone`` answer records it gone. No new approval: the process
    was approved when it started."""

    def refuses(self, args: P, gate: Gate) -> str | None:
        return foreign_process(args.process_id, gate)

    def shows(self, args: P) -> dict[str, Any]:
        return {"path": args.process_id}

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.ExecOutput):
            return super().reads(outcome)
        return exec_text(outcome)

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if not isinstance(outcome, wk.ExecOutput):
            return super().settle(outcome, stream_truncated)
        return "done", self.reads(outcome), output_fields(outcome)

    def events(self, args: P, outcome: wk.ActionOutcome, item: ev.ToolCall,
               session: SessionInfo) -> list[ev.Event]:
        return process_read(outcome, session) if isinstance(outcome, wk.ExecOutput) else []

    def error_events(self, args: P, code: str, item: ev.ToolCall,
                     session: SessionInfo) -> list[ev.Event]:
        return gone_events(args.process_id, code, session)


def output_fields(outcome: wk.ExecOutput) -> dict[str, Any]:
    """What a process call's item shows: the output it read, and the exit code once ended."""
    fields: dict[str, Any] = {"output": outcome.output[:ITEM_OUTPUT_CAP],
                              "truncated": outcome.truncated}
    if not outcome.running and outcome.exit_code is not None:
        fields["exit_code"] = outcome.exit_code
    return fields


def exec_text(outcome: wk.ExecOutput, *, started: bool = False) -> str:
    """How an ``exec_output`` reads to the model: the process's state, then its output."""
    pid = outcome.process_id
    if outcome.running:
        state = f"process {pid} is running"
    elif outcome.exit_code is not None:
        state = f"process {pid} exited with code {outcome.exit_code}"
    else:
        state = f"process {pid} was killed by signal {outcome.signal}"
    if not outcome.running and outcome.stopped_by:
        state += f" (stopped: {outcome.stopped_by.replace('_', ' ')})"
    note = (" (its output was more than the cap: the middle is cut out)"
            if outcome.truncated else "")
    body = outcome.output.rstrip("\n")
    what = "output so far" if started else "new output"
    text = f"{state}{note}\n" + (f"{what}:\n{body}" if body else f"(no {what})")
    if outcome.running and started:
        text += (f"\n[poll or send input with write_stdin(process_id=\"{pid}\"), stop it "
                 "with kill]")
    return cap(text) + denied_hint(outcome, "exec")


def process_read(outcome: wk.ExecOutput, session: SessionInfo) -> list[ev.Event]:
    """The events of an answer about a known process: its new output, and its end."""
    known = find_process(session, outcome.process_id)
    if known is None or known.status in ("ended", "gone"):
        return []
    if outcome.running:
        return [ev.ProcessOutput(process_id=outcome.process_id, output_delta=outcome.output)] \
            if outcome.output else []
    return [process_end(outcome, known.stop_by)]


def process_end(outcome: wk.ExecOutput, stop_by: str | None, *,
                read: bool = True) -> ev.ProcessEnded:
    return ev.ProcessEnded(process_id=outcome.process_id, exit_code=outcome.exit_code,
                           signal=outcome.signal,
                           stopped_by=stopper(outcome.stopped_by, stop_by or ""),
                           output_delta=outcome.output if read else "")


EXEC = Exec()
