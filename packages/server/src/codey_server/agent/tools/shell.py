"""``shell``: run a command (an argv list) in the session's workdir."""

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
    Gate,
    Sandboxing,
    Settled,
    WorkerTool,
    cap,
    integer,
    obj,
    string,
)

__all__ = ["ITEM_OUTPUT_CAP", "SHELL", "ShellArgs"]

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
               "outside the sandbox, call shell again with the same command, \"escalate\": true "
               "and a one-sentence \"justification\": the user is asked.]")


class Shell(WorkerTool[ShellArgs]):
    name = "shell"
    description = ("Run a command in the session's workdir. `command` is an argv list "
                   "(no shell string); use [\"bash\", \"-lc\", \"...\"] when you need a shell.")
    parameters = obj({"command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                      "workdir": {"type": "string",
                                  "description": "relative to the session workdir"},
                      "timeout_ms": {"type": "integer", "minimum": 1},
                      "escalate": {"type": "boolean",
                                   "description": "run outside the sandbox (the user is "
                                                  "asked, whatever the approval policy): only "
                                                  "when the sandbox stops the command"},
                      "justification": {"type": "string",
                                        "description": "with escalate: why, in one sentence"}},
                     ["command"])
    in_plan_mode = True
    for_readers = True
    runs_commands = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> ShellArgs:
        cmd = args.get("command")
        if isinstance(cmd, str):
            raise BadToolCall("`command` must be an argv list, e.g. [\"ls\", \"-la\"], "
                              "not a string")
        if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise BadToolCall("`command` must be a non-empty list of strings")
        timeout_ms = integer(args, "timeout_ms", None, 1)
        escalate = args.get("escalate", False)
        if not isinstance(escalate, bool):
            raise BadToolCall("`escalate` must be true or false")
        justification = args.get("justification") or ""
        if not isinstance(justification, str):
            raise BadToolCall("`justification` must be a string")
        if escalate and not justification.strip():
            raise BadToolCall("`escalate` needs a `justification`: say in one sentence why "
                              "the command must run outside the sandbox")
        return ShellArgs(cmd, cwd=string(args, "workdir", required=False),
                         timeout_s=min(timeout_ms / 1000, 3600) if timeout_ms else 600.0,
                         escalate=escalate, justification=" ".join(justification.split())[:500])

    def looks_only(self, args: ShellArgs) -> bool:
        return not args.escalate and is_known_safe(args.command, args.cwd)

    def ask(self, args: ShellArgs, gate: Gate) -> Ask | None:
        # leaving the sandbox asks under every policy, unless the session chose none (on a
        # machine without a sandbox too: it never runs bare without the user's word)
        if args.escalate and gate.sandbox_mode != "full-access":
            if asks_to_escalate(args.command, gate.escalated_prefixes):
                return Ask("escalate", command=args.command, reason=args.justification)
            return None
        if asks_for_command(gate.policy, args.command, gate.approved_prefixes,
                            sandboxed=gate.sandboxed, cwd=args.cwd):
            return Ask("command", command=args.command)
        return None

    def shows(self, args: ShellArgs) -> dict[str, Any]:
        return {"command": args.command}

    def action(self, args: ShellArgs, action_id: str, session_id: str, workdir: str, *,
               sandbox: Sandboxing = SANDBOXED) -> wk.ActionMessage:
        # an escalation reaches here only once the user approved it (or it is the session's
        # own full access)
        run = Sandboxing("full-access", True) if args.escalate else sandbox
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
        text = cap(f"{head}{note}\n{output}".rstrip("\n"))
        if outcome.sandbox_denied:
            text += DENIED_HINT.format(
                hint=outcome.sandbox_hint or "denied", network=" and the network is off"
                if "network" in outcome.sandbox_hint.lower()
                or "connect" in outcome.sandbox_hint.lower()
                or "resolve" in outcome.sandbox_hint.lower() else "")
        return text

    def settle(self, outcome: wk.ActionOutcome, stream_truncated: bool) -> Settled:
        if not isinstance(outcome, wk.CommandResult):
            return super().settle(outcome, stream_truncated)
        fields: dict[str, Any] = {"exit_code": outcome.exit_code,
                                  "truncated": outcome.truncated or stream_truncated}
        if stream_truncated or outcome.truncated:
            fields["output"] = (outcome.stdout + outcome.stderr)[:2 * ITEM_OUTPUT_CAP]
        return ("done" if outcome.exit_code == 0 else "failed"), self.reads(outcome), fields


SHELL = Shell()
