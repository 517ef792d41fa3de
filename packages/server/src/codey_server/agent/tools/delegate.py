"""``delegate``: hand a task to a sub-agent, a child session whose final answer is the result.

The call appends the child session (``session_created`` with ``parent_id``, ``parent_item``
— this call's item — ``role``, ``read_only``, ``turn_cap``) and its first prompt; the agent
service starts the child's turn like any other. Every delegate call of one answer is started
before any is waited for (:attr:`~Delegate.parallel`), so sub-agents work in parallel. After
a restart the call finds its child again by ``parent_item``. Offered only where roles are
configured, and never to a sub-agent.

A sub-agent never gets more than its parent: it works in the parent's sandbox mode and network
toggle, under the narrower of the parent's approval policy and its role's. Its folder is the
parent's, or one below it; any other folder (``..`` and absolute paths are resolved first, as
text) or another machine waits for the user's approval under every policy, ``full-auto``
included: the sub-agent's sandbox makes its folder writable, so the folder is a grant only the
user gives.

The server sees paths as text: a folder below the workdir that is a symlink out of it passes
this check. Resolving the child's folder beneath the parent's is the worker's part.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.tools.base import (
    Ask,
    Display,
    Finish,
    ForChild,
    Gate,
    ServerCall,
    ServerTool,
    ToolSpec,
    Waiting,
    obj,
    string,
)

__all__ = ["DELEGATE", "DELEGATE_RESULT_CAP", "DelegateArgs", "child_workdir", "narrower_policy",
           "within"]

#: a sub-agent's answer given back to the delegating model, at most
DELEGATE_RESULT_CAP = 24_000
#: approval policies from the narrowest (asks the most) to the widest
_POLICIES: tuple[ev.ApprovalPolicy, ...] = ("suggest", "auto-edit", "full-auto")


def child_workdir(parent: str, asked: str | None) -> str:
    """The sub-agent's folder: the parent's when none is asked, else ``asked`` read from the
    parent's folder (a relative path is taken below it) with ``.`` and ``..`` folded away."""
    if not asked:
        return parent
    return posixpath.normpath(posixpath.join(parent, asked))


def within(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it, as normalised text (``..`` cannot climb out)."""
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def narrower_policy(parent: str, role: str) -> ev.ApprovalPolicy:
    """The approval policy that asks more of the two (an unknown one counts as ``suggest``)."""
    rank: dict[str, int] = {p: n for n, p in enumerate(_POLICIES)}
    return _POLICIES[min(rank.get(parent, 0), rank.get(role, 0))]


@dataclass(frozen=True, slots=True)
class DelegateArgs:
    role: str
    task: str
    worker_id: str | None = None
    workdir: str | None = None


class Delegate(ServerTool[DelegateArgs]):
    name = "delegate"
    guide = ("`delegate` hands a self-contained task to a sub-agent with a role; "
             "independent tasks delegated in one answer run in parallel, and each sub-agent's "
             "final answer comes back to you.")
    display = Display("Sub-agent", "agent", "delegate", busy="waiting for a sub-agent")
    parallel = True

    def spec(self) -> ToolSpec:
        return self.spec_for({})

    def spec_for(self, roles: Mapping[str, str]) -> ToolSpec:
        """The tool as offered with these roles (name → description)."""
        listing = "; ".join(f"`{name}`: {text}" for name, text in roles.items())
        return ToolSpec(
            "delegate", "Hand a task to a sub-agent that works in its own session and answers "
            "with its result. Several delegate calls in one answer run in parallel. Roles: "
            + listing,
            obj({"role": {"type": "string", "enum": list(roles)},
                 "task": {"type": "string", "description": "everything it needs to know: it "
                          "does not see this conversation"},
                 "workdir": {"type": "string", "description": "its folder (default: this "
                             "session's); a folder below this session's goes at once, any "
                             "other waits for the user's approval"},
                 "worker_id": {"type": "string", "description": "another machine's worker id "
                               "(default: this session's; another machine waits for the "
                               "user's approval)"}}, ["role", "task"]),
            self.guide)

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> DelegateArgs:
        return DelegateArgs((string(args, "role") or "").strip(),
                            (string(args, "task") or "").strip(),
                            worker_id=string(args, "worker_id", required=False),
                            workdir=string(args, "workdir", required=False))

    def ask(self, args: DelegateArgs, gate: Gate) -> Ask | None:
        # under every policy: full-auto lets the model act inside what the session was given,
        # and another folder or machine is more than that
        other_machine = args.worker_id is not None and args.worker_id != gate.worker_id
        workdir = child_workdir(gate.workdir, args.workdir)
        if not other_machine and within(workdir, gate.workdir):
            return None
        if other_machine:
            worker = gate.workers.get(args.worker_id or "")
            host = f"{worker.hostname} ({args.worker_id})" if worker else args.worker_id
            where = f"on another machine, {host}, in {workdir}"
        else:
            where = f"in {workdir}, outside this session's folder {gate.workdir}"
        task = " ".join(args.task.split())
        return Ask("delegate", path=workdir,
                   reason=f"a {args.role} sub-agent {where}, able to change files there: "
                          f"{task}"[:600])

    def start(self, args: DelegateArgs, call: ServerCall) -> Finish | Waiting:
        s, item = call.session, call.item
        child = _child_of(call)
        if child is not None:
            return Waiting(ForChild(child.session_id))
        role = call.roles.get(args.role)
        problem = None
        if not call.can_delegate:
            problem = "a sub-agent cannot delegate further"
        elif role is None:
            problem = f"no role {args.role!r}; the roles are: " + ", ".join(call.roles)
        elif not args.task:
            problem = "`task` must say what to do"
        worker_id = args.worker_id or s.worker_id
        worker = call.state.workers.get(worker_id)
        if problem is None and (worker is None or worker.revoked):
            problem = f"no usable worker {worker_id!r}"
        if problem is not None:
            return Finish("failed", f"error: {problem}", fields={"error": problem})
        assert role is not None
        child_id = call.new_id("ses")
        # never wider than the parent: a role's policy only narrows it, and the sandbox and
        # network are the parent's own
        policy = narrower_policy(s.policy, s.policy if role.policy == "parent" else role.policy)
        return Waiting(ForChild(child_id), [
            (child_id, ev.SessionCreated(
                title=f"{args.role}: {' '.join(args.task.split())[:60]}",
                worker_id=worker_id, workdir=child_workdir(s.workdir, args.workdir),
                provider=s.provider, model=s.model,
                policy=policy,
                parent_id=s.session_id, parent_item=item.id, role=args.role,
                read_only=role.read_only, turn_cap=role.turn_cap,
                sandbox=s.sandbox, network=s.network)),
            (child_id, ev.SessionItemAppended(item=ev.UserMessage(
                id=call.new_id("itm"), ts=call.now, text=args.task))),
            (s.session_id, ev.SessionItemUpdated(item_id=item.id, status="running")),
        ])

    def resume(self, args: DelegateArgs, call: ServerCall) -> Finish:
        status, result = _child_result(_child_of(call), args.role)
        return Finish(status, result)


def _child_of(call: ServerCall) -> SessionInfo | None:
    return next((c for c in call.state.sessions.values()
                 if c.parent_id == call.session.session_id
                 and c.parent_item == call.item.id), None)


def _child_result(child: SessionInfo | None, role: str) -> tuple[ev.ToolStatus, str]:
    """The delegate call's status and result from its sub-agent's session."""
    if child is None:
        return "failed", f"error: the {role} session is gone"
    answer = next((i.text for i in reversed(child.items)
                   if isinstance(i, ev.AssistantMessage) and i.text and not i.partial), "")
    if len(answer) > DELEGATE_RESULT_CAP:
        answer = answer[:DELEGATE_RESULT_CAP] + "\n… (cut)"
    if child.status == "error":
        error = next((i.message for i in reversed(child.items)
                      if isinstance(i, ev.ErrorItem)), child.status_reason)
        return "failed", f"the {role} failed: {error}"
    if child.status in ("interrupted", "closed"):
        return "cancelled", f"the {role} was stopped ({child.status_reason or child.status})" \
            + (f"; its last answer:\n{answer}" if answer else "")
    if child.status == "waiting_user":
        return "done", f"the {role} stopped before finishing ({child.status_reason}); its " \
                       f"last answer:\n{answer}"
    return "done", f"the {role} finished:\n{answer or '(no answer)'}"


DELEGATE = Delegate()
