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
from codey_server.core import notices

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

#: the approval buttons: label and decision, one row each (the notices' own)
BUTTONS: list[tuple[str, Decision]] = [(a.label, a.decision)
                                       for a in notices.APPROVAL_ACTIONS]
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


_short = notices.short_id


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
    """The approval as the chat shows it: the notice's whole text (:mod:`~codey_server.core.
    notices`, what a push notification says too)."""
    notice = notices.approval_notice(session, approval)
    if notice.risky:  # no buttons: the app decides it
        return f"{notice.detail}\n\nOpen Codey to decide (outside the sandbox, or full access)."
    return notice.detail


def decided_text(session: SessionInfo, approval: Approval) -> str:
    """The approval message once decided, whoever decided (chat, browser or notification)."""
    return f"{notices.approval_notice(session, approval).detail}\n\n" \
        f"{notices.decided_text(session, approval)}"


def question_text(session: SessionInfo, question: Question) -> str:
    return f"{notices.question_notice(session, question).detail}\n\n(reply with your answer)"


def last_answer(session: SessionInfo) -> ev.AssistantMessage | None:
    """The last finished answer of the model, if the session's last item is one."""
    return notices.last_answer(session)
