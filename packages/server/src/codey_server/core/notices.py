"""What to tell the user, and when: one pure function from ``(state, event)`` to notices.

Every channel that reaches the user outside an open tab says the same things: Web Push
(``codey_server/push/``) and the Telegram channel (``codey_server/channels/``). Both take
their texts, their buttons and whether an approval may be decided from outside the app from
here, so a notification and a chat message cannot drift apart.

    for notice in notices(state, env):    # state: with env folded in (an engine listener's)
        ...                               # a push per device that wants notice.kind

The kinds (:data:`KINDS`) are a table: what Settings offers per device, in this order. An event
type becomes notices through :data:`MAPPERS`; another feature maps its own event by adding one
entry with :func:`register`::

    register(ev.SomethingHappened, lambda state, env: [...])

A budget reached is told as its own notice (``budget``); the status change that follows it is
not told again as a finished turn. The attention ladder's nudge (``attention_nudged``: T1
passed, or the session parked) tells the approval or question that waits again, buttons and
all.

An approval's notice carries decision actions only when it may be decided from a lock screen or
a chat: not when it is risky (:func:`is_risky`: an escalation out of the sandbox, a sub-agent
given another folder or machine, or any approval of a session in ``full-access``), which opens
the app instead. The actions are bound to the approval id and :func:`action_hash`, the hash of
the exact action shown, so a decision sent from a notification that no longer shows the pending
action is refused (:func:`stale_reason`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from codey_protocol import events as ev
from codey_protocol.state import Approval, Question, SessionInfo, State

__all__ = [
    "ANSWERED",
    "APPROVAL_ACTIONS",
    "KINDS",
    "MAPPERS",
    "Kind",
    "Notice",
    "NoticeAction",
    "action_hash",
    "answer_notice",
    "approval_notice",
    "decided_text",
    "failed_notice",
    "is_risky",
    "last_answer",
    "notices",
    "question_notice",
    "register",
    "register_kind",
    "short_id",
    "stale_reason",
]

Decision = Literal["approve", "approve_for_session", "reject"]


@dataclass(frozen=True)
class Kind:
    """A kind of notice, as Settings offers it per device."""

    name: str
    label: str
    #: pushed to a new device unless the user turns it off
    default: bool = True


#: the kinds, in the order Settings lists them (:func:`register_kind` adds one)
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("approval", "An approval is needed"),
    Kind("question", "A question is asked"),
    Kind("failed", "A session failed"),
    Kind("finished", "A turn finished (the first line of the answer)"),
    Kind("budget", "A budget was reached"),
)}


def register_kind(kind: Kind) -> None:
    """Add (or relabel) a kind: Settings offers it from then on."""
    KINDS[kind.name] = kind


@dataclass(frozen=True)
class NoticeAction:
    """A button: the decision it sends, and its label."""

    decision: Decision
    label: str


#: the decision buttons of an approval that may be decided from outside the app
APPROVAL_ACTIONS = (NoticeAction("approve", "Approve"),
                    NoticeAction("approve_for_session", "Approve for session"),
                    NoticeAction("reject", "Reject"))


@dataclass(frozen=True)
class Notice:
    """One thing to tell the user.

    ``title`` and ``body`` are what a notification shows (a lock screen has room for a line or
    two); ``detail`` is the whole text, for a channel with room (a chat). ``key`` says what the
    notice is about (``approval:<id>``, ``question:<id>``, ``answer:<item>``, ``error:<…>``),
    once per thing: a channel that remembers what it sent keeps these keys."""

    kind: str
    session_id: str
    key: str
    title: str
    body: str
    detail: str
    actions: tuple[NoticeAction, ...] = ()
    #: an approval that only the app may decide (see the module)
    risky: bool = False
    approval_id: str = ""
    #: :func:`action_hash` of the approval shown
    action_hash: str = ""

    @property
    def tag(self) -> str:
        """A session's notifications replace each other instead of piling up."""
        return f"codey-session:{self.session_id}"

    @property
    def path(self) -> str:
        """Where the notice leads in the app (after the server's base URL)."""
        return f"/#/session/{self.session_id}"


def short_id(session_id: str) -> str:
    return session_id.removeprefix("ses_")[:8]


# approvals -------------------------------------------------------------------------------------

_WHAT = {"command": "run", "patch": "apply this patch", "write": "write", "mcp": "call",
         "acp": "the agent asks", "escalate": "run outside the sandbox",
         "delegate": "give a sub-agent another folder or machine"}
#: kinds that widen what the session may reach: decided in the app only
_RISKY_KINDS = frozenset({"escalate", "delegate"})


def action_hash(approval: Approval) -> str:
    """A hash of the exact action an approval shows (its kind, argv, path and patch): a
    decision carries it, and one made on another action than the pending one is refused."""
    shown = [approval.approval_id, approval.kind, approval.command, approval.path,
             approval.patch]
    return hashlib.sha256(json.dumps(shown, separators=(",", ":")).encode()).hexdigest()[:32]


def is_risky(session: SessionInfo, approval: Approval) -> bool:
    return approval.kind in _RISKY_KINDS or session.sandbox == "full-access"


def approval_notice(session: SessionInfo, approval: Approval) -> Notice:
    what = _WHAT.get(approval.kind, approval.kind)
    title = f"Approval needed in “{session.title}” ({short_id(session.session_id)}): {what}"
    lines = []
    if approval.command and approval.kind != "acp":  # an agent's is only a kind, no command
        lines.append("$ " + shlex.join(approval.command))  # as a shell would read it
    if approval.path:
        lines.append(approval.path)
    if approval.patch:
        lines.append(approval.patch)
    if approval.reason:
        lines.append(approval.reason)
    risky = is_risky(session, approval)
    body = "\n".join(lines)
    if risky:
        body = (body + "\n" if body else "") + "Open Codey to decide."
    return Notice(kind="approval", session_id=session.session_id,
                  key=f"approval:{approval.approval_id}", title=title, body=body,
                  detail="\n".join([title, *lines]),
                  actions=() if risky else APPROVAL_ACTIONS, risky=risky,
                  approval_id=approval.approval_id, action_hash=action_hash(approval))


_DECIDED = {"approved": "✅ approved", "rejected": "❌ rejected", "expired": "⌛ expired",
            "cancelled": "cancelled", "pending": "pending"}


def decided_text(session: SessionInfo, approval: Approval) -> str:
    """What became of an approval, whoever decided (app, chat or notification)."""
    word = _DECIDED.get(approval.status, approval.status)
    if approval.status == "approved" and approval.command in session.approved_prefixes:
        word += " for the session"
    return word


def stale_reason(state: State, approval_id: str, shown_hash: str) -> str | None:
    """Why a decision sent from a notification must not be applied (None: it may): the
    approval is gone, was decided already, or is not the action the notification showed."""
    for session in state.sessions.values():
        approval = session.approvals.get(approval_id)
        if approval is None:
            continue
        if approval.status != "pending":
            return f"Already decided: {decided_text(session, approval)}"
        if action_hash(approval) != shown_hash:
            return "The action changed since this notification: open Codey to decide"
        if is_risky(session, approval):
            return "This action is decided in the app only: open Codey"
        return None
    return "That approval is gone"


# questions, answers, failures ------------------------------------------------------------------

def question_notice(session: SessionInfo, question: Question) -> Notice:
    body = question.question
    if question.choices:
        body += "\n" + "\n".join(f"- {c}" for c in question.choices)
    title = f"Question from “{session.title}”"
    return Notice(kind="question", session_id=session.session_id,
                  key=f"question:{question.question_id}", title=title, body=body,
                  detail=f"{title}: {body}")


def last_answer(session: SessionInfo) -> ev.AssistantMessage | None:
    """The last finished answer of the model, if the session's last item is one."""
    for item in reversed(session.items):
        if isinstance(item, ev.AssistantMessage):
            return None if item.streaming or item.partial or not item.text else item
        if isinstance(item, (ev.ToolCall, ev.UserMessage)):
            return None
    return None


def answer_notice(session: SessionInfo, answer: ev.AssistantMessage) -> Notice:
    first = next((line.strip() for line in answer.text.splitlines() if line.strip()), "")
    return Notice(kind="finished", session_id=session.session_id, key=f"answer:{answer.id}",
                  title=f"“{session.title}” finished", body=first[:200], detail=answer.text)


def failed_notice(session: SessionInfo) -> Notice:
    errors = [i.id for i in session.items if isinstance(i, ev.ErrorItem)]
    reason = session.status_reason or "the turn failed"
    title = f"Error in “{session.title}”"
    return Notice(kind="failed", session_id=session.session_id,
                  key=f"error:{errors[-1] if errors else session.status_reason}",
                  title=title, body=reason, detail=f"{title}: {reason}")


# events → notices ------------------------------------------------------------------------------

#: the state with the event folded in, the event → what to tell
Mapper = Callable[[State, ev.Envelope], list[Notice]]


def _approval(state: State, env: ev.Envelope) -> list[Notice]:
    e = env.event
    assert isinstance(e, ev.ApprovalRequested)
    s = state.sessions.get(env.session_id or "")
    a = s.approvals.get(e.approval_id) if s is not None else None
    if s is None or a is None or a.status != "pending":
        return []
    return [approval_notice(s, a)]


def _question(state: State, env: ev.Envelope) -> list[Notice]:
    e = env.event
    assert isinstance(e, ev.QuestionAsked)
    s = state.sessions.get(env.session_id or "")
    q = s.questions.get(e.question_id) if s is not None else None
    if s is None or q is None or q.status != "pending":
        return []
    return [question_notice(s, q)]


#: statuses after which the model's last answer is worth telling
ANSWERED = ("idle", "waiting_user")


def _status(state: State, env: ev.Envelope) -> list[Notice]:
    e = env.event
    assert isinstance(e, ev.SessionStatusChanged)
    s = state.sessions.get(env.session_id or "")
    if s is None or s.parent_id:  # a sub-agent's end is its parent's business
        return []
    if e.status == "error":
        return [failed_notice(s)]
    if s.budget_stop is not None:  # stopped at a budget: its own notice says so
        return []
    if e.status in ANSWERED:
        answer = last_answer(s)
        return [answer_notice(s, answer)] if answer is not None else []
    return []


def budget_notice(session: SessionInfo, e: ev.BudgetReached) -> Notice:
    whose = "its budget" if e.scope == "session" else "the day's budget"
    if e.unit == "usd":
        spent = f"${e.spent / 1_000_000:,.2f} of ${e.limit / 1_000_000:,.2f}"
    else:
        spent = f"{e.spent:,} of {e.limit:,} tokens"
    title = f"“{session.title}” reached {whose}"
    body = f"{spent} spent; it waits until the budget is raised"
    return Notice(kind="budget", session_id=session.session_id,
                  key=f"budget:{e.scope}:{e.limit}", title=title, body=body,
                  detail=f"{title}: {body}.")


def _budget(state: State, env: ev.Envelope) -> list[Notice]:
    e = env.event
    assert isinstance(e, ev.BudgetReached)
    s = state.sessions.get(env.session_id or "")
    return [budget_notice(s, e)] if s is not None else []


#: how the attention ladder's nudge titles the wait it tells again
NUDGED = {"t1": "Still waiting", "parked": "Parked, waiting for you",
          "denials": "The reviewer denied 3 in a row; parked"}


def _nudged(state: State, env: ev.Envelope) -> list[Notice]:
    """The ladder wants the user again (T1), or parked the session: the approval or the
    question that waits is told again, with its buttons (it is still answerable, and its
    answer resumes a parked turn), under a title that says why; a key of its own, so a
    channel that remembers what it sent sends it once more."""
    e = env.event
    assert isinstance(e, ev.AttentionNudged)
    s = state.sessions.get(env.session_id or "")
    if s is None:
        return []
    told: Notice | None = None
    if e.target == "approval":
        a = s.approvals.get(e.target_id)
        if a is not None and a.status == "pending":
            told = approval_notice(s, a)
    else:
        q = s.questions.get(e.target_id)
        if q is not None and q.status == "pending":
            told = question_notice(s, q)
    if told is None:
        return []
    title = f"{NUDGED[e.step]}: {told.title}"
    return [replace(told, key=f"{told.key}:{e.step}", title=title,
                    detail=f"{NUDGED[e.step]}. {told.detail}")]


#: event type → what it tells (:func:`register` adds one)
MAPPERS: dict[type[ev.Event], Mapper] = {
    ev.ApprovalRequested: _approval,
    ev.QuestionAsked: _question,
    ev.SessionStatusChanged: _status,
    ev.BudgetReached: _budget,
    ev.AttentionNudged: _nudged,
}


def register(event_type: type[ev.Event], mapper: Mapper) -> None:
    """Map another event type to notices (its kind must be in :data:`KINDS`)."""
    MAPPERS[event_type] = mapper


def notices(state: State, env: ev.Envelope) -> list[Notice]:
    """What ``env`` tells the user; ``state`` is the state with ``env`` folded in."""
    mapper = MAPPERS.get(type(env.event))
    return mapper(state, env) if mapper is not None else []
