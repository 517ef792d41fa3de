"""Goals, without I/O: a session works towards a condition, checked after each of its turns.

``/goal <condition>`` (the browser's ``set_goal``; ``goal`` of ``create_session``) sets it:

- ``$ argv`` (``/goal $ pytest -q``): met when that command exits 0, run in the session's
  sandbox on its worker (never outside it: a check is a gate, and a hostile repository's test
  configuration must not get out through it);
- anything else: met when the model calls ``goal_met`` with its evidence and a model judging
  that evidence against the condition agrees.

After a turn ends (the session ``idle``, its last item not a prompt still to run), the goal is
*due* (:func:`due`): the agent's goal runner carries the check out and hands back a
:class:`CheckDone`, which :func:`checked` turns into ``goal_checked`` and then ``goal_met``, or
``goal_given_up`` at the cap of turns, or the next turn's prompt: what failed, trimmed. A
session that stops any other way (an error, an interrupt, its budget, closed) gives its goal up
(:func:`stopped`). Nothing here keeps a timer or a task: what is due follows from the folded
state alone, so a restart between two turns goes on from the log.

This module holds the decisions and the fold of the goal events; the runner is
``codey_server.agent.goals``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import GoalInfo, SessionInfo, State
from codey_server.core.rules import CommandRejected, Context, Decided, Decider, FoldHandler

__all__ = ["COMMANDS", "FOLD", "GOAL_ORIGIN", "GOAL_TOOL", "MAX_TURNS_LIMIT", "OUTPUT_KEPT",
           "CheckDone", "Due", "checked", "describe", "due", "goal_events", "parse_goal",
           "set_goal", "stopped", "trim"]

#: the ``origin`` of the prompts a goal writes (its first, and each one after a failed check)
GOAL_ORIGIN = "goal"
#: the model's tool that claims a judged goal is met
GOAL_TOOL = "goal_met"
#: characters of a check's output kept in ``goal_checked`` and told to the model
OUTPUT_KEPT = 4000
#: a goal's cap of turns, at most
MAX_TURNS_LIMIT = 100
#: the words that clear a goal (``/goal clear``)
CLEAR_WORDS = ("", "clear", "off", "none", "stop")
#: statuses in which a goal waits (a turn runs, or asks something of the user); any other
#: but idle stops the loop (error, interrupted, closed, a budget reached)
_GOING: tuple[str, ...] = ("idle", "running", "waiting_approval", "waiting_worker",
                           "waiting_user")


def parse_goal(text: str) -> tuple[str, list[str] | None]:
    """The condition as it will show, and the check's argv (None: judged). ``$ argv`` is a
    command, split as a POSIX shell would split it but never run by one."""
    t = text.strip()
    if not t.startswith("$"):
        return t, None
    try:
        argv = shlex.split(t[1:])
    except ValueError:  # an unclosed quote: its words as they stand (the run says the rest)
        argv = t[1:].split()
    if not argv:
        raise CommandRejected("bad_request", "the goal's command is empty: /goal $ pytest -q")
    return t, argv


def trim(text: str, limit: int = OUTPUT_KEPT) -> str:
    """``text`` in at most about ``limit`` characters: a quarter from its head, the rest from
    its tail (where a test run says what failed)."""
    if len(text) <= limit:
        return text
    head, tail = limit // 4, limit - limit // 4
    return f"{text[:head]}\n… [{len(text) - head - tail} characters cut] …\n{text[-tail:]}"


def describe(goal: GoalInfo) -> str:
    """How the goal is checked, in words for the model."""
    if goal.command is not None:
        return (f"after each of your turns `{shlex.join(goal.command)}` runs in the session's "
                "sandbox; the goal is met when it exits 0")
    return (f"when you have met it, call the `{GOAL_TOOL}` tool with your evidence (what you "
            "did and how you verified it); a reviewer judges the evidence after your turn")


def _prompt(s: SessionInfo, ctx: Context, text: str) -> ev.Event:
    # as a user's prompt: queued while a turn runs or a question of the model waits
    busy = s.status in ("running", "waiting_approval", "waiting_worker") or any(
        q.status == "pending" for q in s.questions.values())
    return ev.SessionItemAppended(item=ev.UserMessage(
        id=ctx.new_id("itm"), ts=ctx.now(), text=text, queued=busy, origin=GOAL_ORIGIN))


def goal_events(s: SessionInfo, text: str, max_turns: int | None, ctx: Context, *,
                code: str = "conflict") -> list[ev.Event]:
    """Set the goal ``text`` on ``s``: ``goal_set`` and the prompt that tells the model (queued
    when a turn runs). Raises :class:`CommandRejected` for a goal that cannot be: ``code``
    for one this session cannot take (``bad_request`` for a session being created, whose
    fields say it), ``bad_request`` for a ``$`` without a command or a cap out of bounds."""
    condition, argv = parse_goal(text)
    cap = max_turns if max_turns is not None else ctx.goal_max_turns
    if not 1 <= cap <= MAX_TURNS_LIMIT:
        raise CommandRejected("bad_request",
                              f"a goal's turns must be between 1 and {MAX_TURNS_LIMIT}")
    if argv is None and s.agent is not None:
        raise CommandRejected(code, f"an external agent cannot call {GOAL_TOOL}: give the goal "
                                    "a command (/goal $ pytest -q)")
    if s.read_only or s.parent_id is not None:
        raise CommandRejected(code, "a read-only session or a sub-agent takes no goal")
    goal_set = ev.GoalSet(goal_id=ctx.new_id("goal"), condition=condition, command=argv,
                          max_turns=cap)
    goal = GoalInfo(goal_id=goal_set.goal_id, condition=condition, command=argv,
                    max_turns=cap)
    told = (f"Your goal for this session: {condition}\n\nHow it is checked: {describe(goal)}. "
            f"Until it is met, each check that fails starts a new turn with what failed (at "
            f"most {cap} turns). Work towards it now.")
    return [goal_set, _prompt(s, ctx, told)]


def set_goal(state: State, c: cl.SetGoal, ctx: Context) -> Decided:
    """``/goal <condition>`` (or ``/goal clear``)."""
    s = state.sessions.get(c.session_id)
    if s is None:
        raise CommandRejected("not_found", f"no session {c.session_id!r}")
    if s.status == "closed":
        raise CommandRejected("conflict", "the session is closed")
    if c.condition.strip().lower() in CLEAR_WORDS:
        if s.goal is None or s.goal.status != "active":
            raise CommandRejected("conflict", "the session has no goal to clear")
        return [(s.session_id, ev.GoalGivenUp(goal_id=s.goal.goal_id,
                                              reason="cleared by the user"))]
    if s.worktree is not None and s.worktree.status == "removed":
        raise CommandRejected("conflict", "its worktree was removed: no turn runs there")
    return [(s.session_id, e) for e in goal_events(s, c.condition, c.max_turns, ctx)]


# the runner's decisions ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Due:
    """A check the goal needs now: run ``command``, or judge ``evidence`` (None: the model
    did not call ``goal_met`` this turn). ``after_item``: the session's last item."""

    session_id: str
    goal_id: str
    kind: Literal["command", "judge"]
    after_item: str
    command: list[str] | None = None
    evidence: str | None = None


def _last_item(s: SessionInfo) -> str:
    return s.items[-1].id if s.items else ""


def _since(s: SessionInfo, item_id: str) -> list[ev.Item]:
    """The items after ``item_id`` (all of them when it is gone or "")."""
    for i in range(len(s.items) - 1, -1, -1):
        if s.items[i].id == item_id:
            return s.items[i + 1:]
    return list(s.items)


def _evidence(call: ev.ToolCall) -> str:
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return call.arguments
    if isinstance(args, dict) and isinstance(args.get("evidence"), str):
        return str(args["evidence"])
    return call.arguments


def due(s: SessionInfo) -> Due | None:
    """The check ``s``'s goal needs now, if any: its goal is active, its turn ended (idle, and
    its last item is not a prompt about to run; no plan waits for the user's approval) and
    that turn was not checked yet."""
    g = s.goal
    if g is None or g.status != "active" or s.status != "idle" or not s.items:
        return None
    if s.plan_status == "proposed":
        return None  # its plan waits for the user's approval: no turn was meant to do it yet
    last = s.items[-1]
    if last.id == g.checked_item or isinstance(last, ev.UserMessage):
        return None
    if g.command is not None:
        return Due(s.session_id, g.goal_id, "command", last.id, command=list(g.command))
    claims = [i for i in _since(s, g.checked_item)
              if isinstance(i, ev.ToolCall) and i.name == GOAL_TOOL]
    return Due(s.session_id, g.goal_id, "judge", last.id,
               evidence=_evidence(claims[-1]) if claims else None)


@dataclass(frozen=True, slots=True)
class CheckDone:
    """How a check went: ``met``, and what it saw (the command's output, the judge's reason).
    ``give_up``: why the goal cannot be checked at all (no sandbox on the machine)."""

    due: Due
    met: bool
    output: str = ""
    exit_code: int | None = None
    give_up: str = ""


def _not_met_prompt(g: GoalInfo, d: CheckDone, attempt: int) -> str:
    head = f"The goal is not met yet (check {attempt} of {g.max_turns})"
    if g.command is not None:
        code = "did not run" if d.exit_code is None else f"exited {d.exit_code}"
        body = (f"{head}: `{shlex.join(g.command)}` {code}. Its output (trimmed):\n\n```\n"
                f"{trim(d.output)}\n```")
    else:
        body = f"{head}: {trim(d.output)}"
    return (f"{body}\n\nKeep working towards the goal: {g.condition}\n({describe(g)}.)")


def checked(state: State, d: CheckDone, ctx: Context) -> Decided:
    """Record a check and what follows from it: met; given up (the cap, or ``give_up``); or
    the next turn's prompt. Nothing when the session moved on since the check began (a prompt,
    another turn, a new goal): the next turn's end is checked instead."""
    s = state.sessions.get(d.due.session_id)
    if s is None or s.goal is None:
        return []
    g = s.goal
    if g.goal_id != d.due.goal_id or g.status != "active" or s.status != "idle" or \
            _last_item(s) != d.due.after_item or g.checked_item == d.due.after_item:
        return []
    attempt = g.attempts + 1
    out: list[ev.Event] = [ev.GoalChecked(
        goal_id=g.goal_id, attempt=attempt, met=d.met, by=d.due.kind, output=trim(d.output),
        exit_code=d.exit_code, after_item=d.due.after_item)]
    if d.met:
        out.append(ev.GoalMet(goal_id=g.goal_id, reason=(
            "its command exited 0" if g.command is not None
            else f"the reviewer agreed: {trim(d.output, 500)}") + f" (check {attempt})"))
    elif d.give_up:
        out.append(ev.GoalGivenUp(goal_id=g.goal_id, reason=d.give_up))
    elif attempt >= g.max_turns:
        out.append(ev.GoalGivenUp(goal_id=g.goal_id, reason=(
            f"not met after {attempt} turns (the cap is {g.max_turns})")))
    else:
        out.append(_prompt(s, ctx, _not_met_prompt(g, d, attempt)))
    return [(s.session_id, e) for e in out]


def stopped(state: State, session_id: str, ctx: Context) -> Decided:
    """Give the goal up when its session stopped other than by finishing a turn (an error, an
    interrupt, its budget reached, closed): the loop goes on only while turns end idle. Not
    while a prompt waits to start a turn there (a goal set on a stopped session)."""
    s = state.sessions.get(session_id)
    if s is None or s.goal is None or s.goal.status != "active" or s.status in _GOING:
        return []
    if s.items and isinstance(s.items[-1], ev.UserMessage):
        return []  # a prompt (the goal's own, a retry's) is about to start a turn
    why = f"the session stopped ({s.status}{': ' + s.status_reason if s.status_reason else ''})"
    return [(session_id, ev.GoalGivenUp(goal_id=s.goal.goal_id, reason=why))]


COMMANDS: Mapping[type[Any], Decider] = {cl.SetGoal: set_goal}


# the fold -----------------------------------------------------------------------------------


def _session(state: State, env: ev.Envelope) -> SessionInfo | None:
    """As ``core.fold.session_of``: the session, its last activity moved to the event's time."""
    s = state.sessions.get(env.session_id) if env.session_id is not None else None
    if s is not None:
        s.updated_at = env.ts
    return s


def _goal_set(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.GoalSet)
    s = _session(state, env)
    if s is not None:
        s.goal = GoalInfo(goal_id=e.goal_id, condition=e.condition,
                          command=list(e.command) if e.command is not None else None,
                          max_turns=e.max_turns, checked_item=_last_item(s), set_at=env.ts,
                          updated_at=env.ts)


def _goal_checked(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.GoalChecked)
    s = _session(state, env)
    if s is not None and s.goal is not None and s.goal.goal_id == e.goal_id:
        g = s.goal
        g.attempts = e.attempt
        g.last_met = e.met
        g.last_output = e.output
        g.last_exit_code = e.exit_code
        g.checked_item = e.after_item
        g.updated_at = env.ts


def _goal_ended(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.GoalMet | ev.GoalGivenUp)
    s = _session(state, env)
    if s is not None and s.goal is not None and s.goal.goal_id == e.goal_id:
        s.goal.status = "met" if isinstance(e, ev.GoalMet) else "given_up"
        s.goal.reason = e.reason
        s.goal.updated_at = env.ts


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.GoalSet: _goal_set,
    ev.GoalChecked: _goal_checked,
    ev.GoalMet: _goal_ended,
    ev.GoalGivenUp: _goal_ended,
}
