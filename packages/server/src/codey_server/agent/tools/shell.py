"""``shell``: run a command (an argv list) in the session's workdir.

This module also holds what the command tools (``shell`` and ``exec``) share: the argv and
escalation arguments, the approval rule, where an escalated command runs, and what the model
is told when the sandbox stopped one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.approvals import (
    asks_for_command,
    asks_to_escalate,
    hardened_env,
    is_known_safe,
)
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

__all__ = ["ESCALATION_PARAMETERS", "ITEM_OUTPUT_CAP", "SHELL", "ShellArgs", "argv_of",
           "command_ask", "denied_hint", "escalation", "runs_in"]

#: streamed command output kept in one item; the final result replaces it with head + tail
ITEM_OUTPUT_CAP = 256 * 1024


@dataclass(frozen=True, slots=True)
class ShellArgs:
    command: list[str]
    #: relative to the session's workdir
    cwd: str | None = None
    timeout_s: float = 600.0
    #: run outside the sandbox (the user is asked, under every policy)
    escalate: bool = False
    #: why it must leave the sandbox, shown to the user
    justification: str = ""


#: what the model is told when the sandbox stopped a command
DENIED_HINT = ("\n[the sandbox stopped this: {hint}. The session's commands cannot write outside "
               "the workdir (nor in .git or .codey){network}. If this command really must run "
               "outside the sandbox, call {tool} again with the same command, \"escalate\": "
               "true and a one-sentence \"justification\": the user is asked.]")

#: the arguments a command tool takes to leave the sandbox
ESCALATION_PARAMETERS: dict[str, Any] = {
    "escalate": {"type": "boolean",
                 "description": "run outside the sandbox (the user is asked, whatever the "
                                "approval policy): only when the sandbox stops the command"},
    "justification": {"type": "string", "description": "with escalate: why, in one sentence"},
}


def argv_of(args: dict[str, Any], example: str) -> list[str]:
    """The ``command`` argument: a non-empty argv list (``example``: one, as JSON)."""
    cmd = args.get("command")
    if isinstance(cmd, str):
        raise BadToolCall(f"`command` must be an argv list, e.g. {example}, not a string")
    if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
        raise BadToolCall("`command` must be a non-empty list of strings")
    return cmd


def escalation(args: dict[str, Any]) -> tuple[bool, str]:
    """``escalate`` and its ``justification`` (one line, at most 500 characters)."""
    escalate = args.get("escalate", False)
    if not isinstance(escalate, bool):
        raise BadToolCall("`escalate` must be true or false")
    justification = args.get("justification") or ""
    if not isinstance(justification, str):
        raise BadToolCall("`justification` must be a string")
    if escalate and not justification.strip():
        raise BadToolCall("`escalate` needs a `justification`: say in one sentence why the "
                          "command must run outside the sandbox")
    return escalate, " ".join(justification.split())[:500]


def command_ask(command: list[str], escalate: bool, justification: str, gate: Gate, *,
                sandboxed: bool, cwd: str | None = None) -> Ask | None:
    """A command tool's approval: leaving the sandbox asks under every policy, unless the
    session chose none (on a machine without a sandbox too: nothing runs bare without the
    user's word) or a prefix of it left the sandbox for the session; otherwise as
    :func:`~codey_server.agent.approvals.asks_for_command` says (``sandboxed``: a known-safe
    command may go ahead)."""
    if escalate and gate.sandbox_mode != "full-access":
        if asks_to_escalate(command, gate.escalated_prefixes):
            return Ask("escalate", command=command, reason=justification)
        return None
    if asks_for_command(gate.policy, command, gate.approved_prefixes, sandboxed=sandboxed,
                        cwd=cwd):
        return Ask("command", command=command)
    return None


def runs_in(escalate: bool, sandbox: Sandboxing) -> Sandboxing:
    """Where a command runs: an escalation (approved by now, or the session's own full
    access) outside the sandbox with the network, else in the session's sandbox."""
    return Sandboxing("full-access", True) if escalate else sandbox


def denied_hint(outcome: wk.CommandResult | wk.ExecOutput, tool: str) -> str:
    """What the model is told when the worker saw the sandbox stop the command ("" when not)."""
    if not outcome.sandbox_denied:
        return ""
    hint = outcome.sandbox_hint.lower()
    network = any(w in hint for w in ("network", "connect", "resolve"))
    return DENIED_HINT.format(hint=outcome.sandbox_hint or "denied", tool=tool,
                              network=" and the network is off" if network else "")


class Shell(WorkerTool[ShellArgs]):
    name = "shell"
    guide = ("`shell` runs a command that finishes by itself (tests, builds, git, package "
             "managers). `command` is an argv list; use [\"bash\", \"-lc\", \"...\"] only "
             "when you need pipes, redirection or globbing.")
    display = Display("Command", "shell", "command")
    description = ("Run a command in the session's workdir. `command` is an argv list "
                   "(no shell string); use [\"bash\", \"-lc\", \"...\"] when you need a shell.")
    parameters = obj({"command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                      "workdir": {"type": "string",
                                  "description": "relative to the session workdir"},
                      "timeout_ms": {"type": "integer", "minimum": 1},
                      **ESCALATION_PARAMETERS},
                     ["command"])
    in_plan_mode = True
    for_readers = True
    runs_commands = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> ShellArgs:
        cmd = argv_of(args, '["ls", "-la"]')
        timeout_ms = integer(args, "timeout_ms", None, 1)
        escalate, justification = escalation(args)
        return ShellArgs(cmd, cwd=string(args, "workdir", required=False),
                         timeout_s=min(timeout_ms / 1000, 3600) if timeout_ms else 600.0,
                         escalate=escalate, justification=justification)

    def looks_only(self, args: ShellArgs) -> bool:
        return not args.escalate and is_known_safe(args.command, args.cwd)

    def escalates(self, args: ShellArgs) -> bool:
        return args.escalate

    def ask(self, args: ShellArgs, gate: Gate) -> Ask | None:
        return command_ask(args.command, args.escalate, args.justification, gate,
                           sandboxed=gate.sandboxed, cwd=args.cwd)

    def shows(self, args: ShellArgs) -> dict[str, Any]:
        return {"command": args.command}

    def action(self, args: ShellArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        run = runs_in(args.escalate, sandbox)
        return wk.RunCommand(action_id=action_id, session_id=session_id, argv=args.command,
                             workdir=workdir, cwd=args.cwd, timeout_s=args.timeout_s,
                             env=hardened_env(args.command), sandbox=run.mode,
                             network=run.network)

    def reads(self, outcome: wk.ActionOutcome) -> str:
        if not isinstance(outcome, wk.CommandResult):
            return super().reads(outcome)
        output = outcome.stdout + (("\n" if outcome.stdout and outcome.stderr else "")
                                   + outcome.stderr if outcome.stderr else "")
        if outcome.timed_out:
            head = "the command timed out and was killed"
        elif outcome.worker_stopped:
            head = (f"the command did not finish: the worker stopped "
                    f"({outcome.worker_stopped}) while it ran, and stopped it")
        elif outcome.cancelled:
            head = "the command was cancelled"
        elif outcome.exit_code is None:
            head = f"the command was killed by signal {outcome.signal}"
        else:
            head = f"exit code: {outcome.exit_code}"
        note = " (output truncated)" if outcome.truncated else ""
        return cap(f"{head}{note}\n{output}".rstrip("\n")) + denied_hint(outcome, "shell")

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if not isinstance(outcome, wk.CommandResult):
            return super().settle(outcome, stream_truncated)
        fields: dict[str, Any] = {"exit_code": outcome.exit_code,
                                  "truncated": outcome.truncated or stream_truncated}
        if stream_truncated or outcome.truncated:
            fields["output"] = (outcome.stdout + outcome.stderr)[:2 * ITEM_OUTPUT_CAP]
        return ("done" if outcome.exit_code == 0 else "failed"), self.reads(outcome), fields


SHELL = Shell()
