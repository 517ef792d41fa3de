"""What a chat channel says and understands, with no I/O: commands parsed from the user's
text, the texts the bot sends, and callback data of approval buttons.

Kept apart from the Telegram service so it is tested without a network, and so another
chat channel could reuse it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from codey_protocol import events as ev
from codey_protocol.state import Approval, Question, SessionInfo, State

__all__ = [
    "BUTTONS",
    "MAX_TEXT",
    "Command",
    "approval_text",
    "button_data",
    "cut",
    "decided_text",
    "parse",
    "parse_button",
    "question_text",
    "session_link",
    "sessions_text",
]

#: Telegram allows 4,096 characters a message; leave room for the link to the web view
MAX_TEXT = 3500

Decision = Literal["approve", "approve_for_session", "reject"]

#: the approval buttons: label and decision, one row each
BUTTONS: list[tuple[str, Decision]] = [
    ("Approve", "approve"), ("Approve for session", "approve_for_session"),
    ("Reject", "reject"),
]
_CODES: dict[Decision, str] = {"approve": "a", "approve_for_session": "s", "reject": "r"}
_DECISIONS = {code: decision for decision, code in _CODES.items()}


@dataclass(frozen=True)
class Command:
    """One message from the user. ``name``: pair, sessions, new, use, stop, help, prompt,
    or bad (``error`` says why)."""

    name: str
    args: tuple[str, ...] = ()
    text: str = ""
    error: str = ""


_USAGE = {
    "pair": "/pair CODE",
    "new": "/new <worker> <workdir> <prompt>",
    "use": "/use <session>",
}

HELP = ("/sessions: the sessions and their status\n"
        "/new <worker> <workdir> <prompt>: start a session\n"
        "/use <session>: send your messages to that session\n"
        "/stop: interrupt the current session\n"
        "Anything else is a prompt to the current session.")


def parse(text: str) -> Command:
    """The command in ``text``. ``/cmd@botname`` is the same as ``/cmd`` (groups add it)."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return Command("prompt", text=stripped) if stripped else Command("bad", error=HELP)
    head, _, rest = stripped.partition(" ")
    name = head[1:].split("@", 1)[0].lower()
    rest = rest.strip()
    if name in ("sessions", "stop", "help", "start"):
        return Command("help" if name == "start" else name)
    if name == "pair":
        code = rest.split()[0] if rest.split() else ""
        return Command("pair", (code,)) if code else _bad("pair")
    if name == "use":
        return Command("use", (rest.split()[0],)) if rest else _bad("use")
    if name == "new":
        parts = rest.split(None, 2)
        if len(parts) < 3:
            return _bad("new")
        return Command("new", (parts[0], parts[1]), text=parts[2])
    return Command("bad", error=f"unknown command /{name}\n\n{HELP}")


def _bad(name: str) -> Command:
    return Command("bad", error=f"usage: {_USAGE[name]}")


def button_data(approval_id: str, decision: Decision) -> str:
    """Callback data of a button (Telegram allows 64 bytes): ``<code>:<approval_id>``."""
    return f"{_CODES[decision]}:{approval_id}"


def parse_button(data: str) -> tuple[str, Decision] | None:
    """``(approval_id, decision)`` from a button's callback data; None if it is not ours."""
    code, sep, approval_id = data.partition(":")
    decision = _DECISIONS.get(code)
    if not sep or decision is None or not approval_id:
        return None
    return approval_id, decision


def session_link(public_url: str | None, session_id: str) -> str:
    return f"{(public_url or '').rstrip('/')}/#/session/{session_id}"


def cut(text: str, link: str, limit: int = MAX_TEXT) -> str:
    """``text`` whole if it fits in ``limit`` characters, else its start on a line (or word)
    boundary, then where the rest is."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    for sep in ("\n", " "):
        at = head.rfind(sep)
        if at > limit // 2:
            head = head[:at]
            break
    return f"{head.rstrip()}\n…\n(cut: the whole text is at {link})"


def _short(session_id: str) -> str:
    return session_id.removeprefix("ses_")[:8]


def sessions_text(state: State, current: str | None, limit: int = 20) -> str:
    """The newest sessions (not archived, not sub-agents), with status; ``*`` marks the
    chat's current one."""
    shown = sorted((s for s in state.sessions.values() if not s.archived and not s.parent_id),
                   key=lambda s: s.updated_at, reverse=True)[:limit]
    if not shown:
        return "No sessions yet. Start one: /new <worker> <workdir> <prompt>"
    lines = []
    for s in shown:
        mark = "*" if s.session_id == current else " "
        lines.append(f"{mark} {_short(s.session_id)} [{s.status}] {s.title}")
    return "\n".join(lines) + "\n\n/use <id> to switch"


def find_session(state: State, ref: str) -> SessionInfo | None:
    """The session whose id is ``ref``, or starts with it (with or without ``ses_``); None when
    nothing or more than one matches."""
    if ref in state.sessions:
        return state.sessions[ref]
    bare = ref.removeprefix("ses_")
    found = [s for s in state.sessions.values() if s.session_id.removeprefix("ses_")
             .startswith(bare)]
    return found[0] if len(found) == 1 else None


def approval_text(session: SessionInfo, approval: Approval) -> str:
    what = {"command": "run", "patch": "apply this patch", "write": "write",
            "mcp": "call", "acp": "the agent asks",
            "delegate": "give a sub-agent another folder or machine"}.get(approval.kind,
                                                                          approval.kind)
    lines = [f"Approval needed in “{session.title}” ({_short(session.session_id)}): {what}"]
    if approval.command and approval.kind != "acp":  # an agent's is only a kind, no command
        lines.append("$ " + " ".join(approval.command))
    if approval.path:
        lines.append(approval.path)
    if approval.patch:
        lines.append(approval.patch)
    if approval.reason:
        lines.append(approval.reason)
    return "\n".join(lines)


_DECIDED = {"approved": "✅ approved", "rejected": "❌ rejected", "expired": "⌛ expired",
            "cancelled": "cancelled", "pending": "pending"}


def decided_text(session: SessionInfo, approval: Approval) -> str:
    """The approval message once decided, whoever decided (chat or browser)."""
    word = _DECIDED.get(approval.status, approval.status)
    if approval.status == "approved" and approval.command in session.approved_prefixes:
        word += " for the session"
    return f"{approval_text(session, approval)}\n\n{word}"


def question_text(session: SessionInfo, question: Question) -> str:
    text = f"Question from “{session.title}”: {question.question}"
    if question.choices:
        text += "\n" + "\n".join(f"- {c}" for c in question.choices)
    return text + "\n\n(reply with your answer)"


def last_answer(session: SessionInfo) -> ev.AssistantMessage | None:
    """The last finished answer of the model, if the session's last item is one."""
    for item in reversed(session.items):
        if isinstance(item, ev.AssistantMessage):
            return None if item.streaming or item.partial or not item.text else item
        if isinstance(item, (ev.ToolCall, ev.UserMessage)):
            return None
    return None
