"""The model's conversation, derived from a session's items (never kept in a second store).

:func:`conversation_of` gives the whole conversation as neutral :data:`Entry` values; each
wire format (:mod:`codey_server.agent.wire`) encodes them its own way. :class:`Walker` is the
step function behind it, usable one item at a time so that :mod:`~codey_server.agent.history`
can resume at a clean point instead of walking the whole history on every call.

Rules:

- The newest :class:`~codey_protocol.events.Summary` stands for every item up to its
  ``replaces_until``: the conversation starts with the summary, then the items after that.
- Tool calls of one model answer (same ``response_id``) go back together, then their results.
- Queued prompts, partial answers (a cut stream), unanswered tool calls, errors, notices and
  plans are not sent. Reasoning is sent only where the provider gave encrypted content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codey_protocol import events as ev
from codey_protocol.events import IMAGE_MIMES
from codey_protocol.state import SessionInfo
from codey_server.core.decide import clean_file_name

__all__ = [
    "ATTACHMENTS_DIR",
    "IMAGE_MIMES",
    "SUMMARY_PREFIX",
    "AssistantText",
    "Entry",
    "ReasoningEntry",
    "SummaryEntry",
    "ToolCallEntry",
    "ToolResultEntry",
    "UserText",
    "Walker",
    "attachment_path",
    "base_of",
    "conversation_of",
    "is_final",
    "model_call_needed",
    "needs_turn",
]

SUMMARY_PREFIX = ("Earlier parts of this conversation were compacted into this summary; "
                  "continue from it.\n\n")


#: images the model is given as images (other attachments are written into the workdir)
#: where a prompt's other files go, inside the workdir
ATTACHMENTS_DIR = ".codey/attachments"


def attachment_path(attachment: ev.Attachment) -> str:
    """The attachment's path in the workdir (the hash keeps same-named files apart)."""
    # cleaned again: a name stored before names were cleaned on the way in
    return f"{ATTACHMENTS_DIR}/{attachment.hash[:8]}-{clean_file_name(attachment.name)}"


@dataclass(frozen=True, slots=True)
class UserText:
    text: str
    #: (mime, content hash) of each image sent with the message
    images: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AssistantText:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningEntry:
    summary: str
    encrypted_content: str


@dataclass(frozen=True, slots=True)
class ToolCallEntry:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolResultEntry:
    call_id: str
    output: str
    #: (mime, content hash) of each image the call gave the model (``view_image``)
    images: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SummaryEntry:
    text: str


Entry = UserText | AssistantText | ReasoningEntry | ToolCallEntry | ToolResultEntry | SummaryEntry


def is_final(item: ev.Item) -> bool:
    """True when nothing that matters to the conversation can change in ``item`` any more."""
    if isinstance(item, ev.ToolCall):
        return item.result is not None
    if isinstance(item, ev.UserMessage):
        files = any(a.mime not in IMAGE_MIMES for a in item.attachments)
        return not item.queued and (item.attachments_written or not files)
    if isinstance(item, (ev.AssistantMessage, ev.Reasoning)):
        return not item.streaming
    return True


class Walker:
    """Items → entries, one item at a time: ``begin(item)`` (entries that must come before
    it), then ``own(item)``; ``end()`` at the end. Between ``begin`` and ``own`` the walker
    is :attr:`clean` when no tool result waits for its answer's other calls."""

    __slots__ = ("answer", "results")

    def __init__(self, answer: str | None = None) -> None:
        self.answer = answer  # response_id of the answer whose calls are being collected
        self.results: list[Entry] = []

    @property
    def clean(self) -> bool:
        return not self.results

    def _flush(self) -> list[Entry]:
        out, self.results = self.results, []
        return out

    def begin(self, item: ev.Item) -> list[Entry]:
        if isinstance(item, ev.ToolCall):
            if item.response_id is None or item.response_id != self.answer:
                self.answer = item.response_id
                return self._flush()
            return []
        if not _speaks(item):
            return []
        self.answer = None
        return self._flush()

    def own(self, item: ev.Item) -> list[Entry]:
        if isinstance(item, ev.ToolCall):
            if item.result is None:
                return []
            image = item.image
            self.results.append(ToolResultEntry(
                item.call_id, item.result, ((image.mime, image.hash),) if image else ()))
            return [ToolCallEntry(item.call_id, item.name, item.arguments)]
        if isinstance(item, ev.UserMessage):
            if item.queued or item.blocked:
                return []
            if not item.attachments:
                return [UserText(item.text)]
            return [_with_attachments(item)]
        if isinstance(item, ev.AssistantMessage):
            return [AssistantText(item.text)] if item.text and not item.partial else []
        if isinstance(item, ev.Reasoning) and _speaks(item):
            assert item.encrypted_content is not None
            return [ReasoningEntry(item.text, item.encrypted_content)]
        return []

    def end(self) -> list[Entry]:
        return self._flush()


def _with_attachments(item: ev.UserMessage) -> UserText:
    images = tuple((a.mime, a.hash) for a in item.attachments if a.mime in IMAGE_MIMES)
    files = [a for a in item.attachments if a.mime not in IMAGE_MIMES]
    text = item.text
    if files:
        where = "in the workdir" if item.attachments_written else "not written yet"
        listed = "\n".join(f"- {attachment_path(a)} ({a.size:,} bytes, {a.mime})"
                            for a in files)
        text = f"{text}\n\nFiles sent with this message ({where}):\n{listed}".lstrip()
    return UserText(text, images)


def _speaks(item: ev.Item) -> bool:
    """Items that end the current answer's group of tool calls."""
    if isinstance(item, (ev.UserMessage, ev.AssistantMessage)):
        return True
    if isinstance(item, ev.Reasoning):
        return bool(item.encrypted_content) and not item.partial and not item.streaming
    return False


def base_of(items: Sequence[ev.Item]) -> tuple[ev.Summary | None, int]:
    """The newest summary (or None) and the index of the first item after what it replaces."""
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        if isinstance(item, ev.Summary):
            for j in range(i - 1, -1, -1):
                if items[j].id == item.replaces_until:
                    return item, j + 1
            return item, i + 1  # what it replaced is gone: everything before it
    return None, 0


def conversation_of(session: SessionInfo) -> list[Entry]:
    """The model's input, rebuilt from the session's items."""
    items = session.items
    summary, start = base_of(items)
    out: list[Entry] = [SummaryEntry(summary.text)] if summary is not None else []
    walker = Walker()
    for i in range(start, len(items)):
        item = items[i]
        out.extend(walker.begin(item))
        out.extend(walker.own(item))
    out.extend(walker.end())
    return out


def model_call_needed(session: SessionInfo) -> bool:
    """True when the conversation ends with something the model has not answered yet.

    A notice that ended a turn (an empty or refused answer, say) counts as an answer: the
    model is not called again until the user says something. Nor after a rewind, until
    something follows it: the user chose that point (an errored or cut turn before it must
    not run again by itself, on a restart say).
    """
    if session.rewound and session.rewound[-1].after == (
            session.items[-1].id if session.items else ""):
        return False
    for item in reversed(session.items):
        if isinstance(item, ev.UserMessage):
            if item.blocked:
                continue  # a hook kept it from the model: nothing to answer
            return True
        if isinstance(item, ev.ToolCall):
            return item.result is not None
        if isinstance(item, ev.AssistantMessage):
            if item.partial:
                continue  # a cut answer: it still needs one
            return False
        if isinstance(item, ev.Notice) and item.code in TURN_ENDING_NOTICES:
            return False
    return False


#: notices after which the turn is over until the user speaks
TURN_ENDING_NOTICES = frozenset({"empty_answer", "incomplete", "refusal"})


def needs_turn(session: SessionInfo) -> bool:
    """True when a prompt is waiting for a turn: queued, or unanswered at the end."""
    queued = any(isinstance(i, ev.UserMessage) and i.queued for i in session.items)
    return queued or model_call_needed(session)


def interrupt_events(session: SessionInfo) -> list[ev.Event]:
    """What an interrupt closes in a session: its pending actions (the caller asks the worker
    to stop them), approvals and questions, tool calls without a result, streams left open."""
    events: list[ev.Event] = [ev.ActionFinished(action_id=action_id, outcome="cancelled")
                              for action_id in session.pending_actions]
    events += [ev.ApprovalResolved(approval_id=a.approval_id, decision="cancelled")
               for a in session.approvals.values() if a.status == "pending"]
    events += [ev.QuestionAnswered(question_id=q.question_id, cancelled=True)
               for q in session.questions.values() if q.status == "pending"]
    for item in session.items:
        if isinstance(item, ev.ToolCall) and item.result is None:
            events.append(ev.SessionItemUpdated(
                item_id=item.id, status="cancelled", result="interrupted by the user"))
        elif isinstance(item, (ev.AssistantMessage, ev.Reasoning)) and item.streaming:
            events.append(ev.SessionItemUpdated(item_id=item.id, streaming=False,
                                                partial=True))
    return events
