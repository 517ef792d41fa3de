"""A turn as a state machine without I/O: what goes in, what comes out, and what both turns
(Codey's own, :mod:`~codey_server.agent.turn`, and an ACP agent's, :mod:`~codey_server.agent.acp`)
share.

The shape is the websockets library's: the machine never touches a socket, a clock or a task.
:meth:`TurnMachine.step` takes the folded :class:`~codey_protocol.state.State` (read-only), one
:data:`Input` and the decision :class:`~codey_server.core.rules.Context` (fresh ids), and returns
a :class:`Step`: the events to append (``[(session_id, event)]``, like every decision) and the
:data:`Effect` values for the driver (:mod:`~codey_server.agent.driver`) to carry out. The driver
runs ``step`` as a decision through ``Engine.submit`` — the turn's events take the one write
path — then starts the effects, whose results come back as inputs. Times come in the inputs
(``now``), never from a clock.

Order of calls: ``Start`` first; then any inputs, one at a time, each after the previous
step's events are folded; when a step sets :attr:`Step.proceed`, the next input is
``Proceed`` (the machine wanted to read the state its own events made before going on). The
turn is over when :attr:`TurnMachine.done` is true. ``Interrupted`` (the user stopped the
turn: close what is open, cancel the worker's actions) and ``Crashed`` (a bug: an error item)
end it from any point.

Inputs and what sends them:

============================  ===============================================================
input                         sent by the driver when …
============================  ===============================================================
Start, Proceed                the turn begins; a step asked to go on
ModelParts / Done / Failed    parts of the model's stream arrived; the stream ended; failed
ActionProgressed              an action streamed output (or an ACP update)
SessionAttached               before an action: the session's attach on this connection
                              listed MCP servers in its workdir (once per list)
ActionDone / Errored /        an action's outcome arrived; the worker refused or failed it;
ActionTimedOut                it did not finish in time
WorkerPresence                the worker of a running action went away, or came back
ApprovalDecided / Expired     an approval was resolved (by anyone); its deadline passed
Answered, ChildDone           a question was answered; a sub-agent's turn ended
BlobLoaded, BlobStored        a stored file was read; bytes were kept in the blob store
TimerFired                    a timer set by the machine fired
ContextChanged                AGENTS.md or a skill changed in the workdir
Interrupted, Crashed          the turn was stopped; the machine raised
============================  ===============================================================

Effects: :class:`CallModel`, :class:`RunAction`, :class:`CancelAction`, :class:`WaitApproval`
(with a deadline), :class:`WaitAnswer`, :class:`WaitChild`, :class:`LoadBlob`,
:class:`StoreBlob`, :class:`SetTimer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo, State
from codey_server.agent.conversation import interrupt_events
from codey_server.agent.errors import ModelError
from codey_server.agent.models import ModelProvider
from codey_server.agent.stream import ModelEvent
from codey_server.core.rules import Context, Decided

__all__ = [
    "COALESCE_S",
    "STREAM_CHUNK",
    "ActionDone",
    "ActionErrored",
    "ActionOutcomeInput",
    "ActionProgressed",
    "ActionTimedOut",
    "Answered",
    "ApprovalDecided",
    "ApprovalExpired",
    "BlobLoaded",
    "BlobStored",
    "CallModel",
    "CancelAction",
    "ChildDone",
    "Coalesced",
    "ContextChanged",
    "Crashed",
    "Effect",
    "Input",
    "Interrupted",
    "LoadBlob",
    "ModelDone",
    "ModelFailed",
    "ModelParts",
    "Proceed",
    "RunAction",
    "SessionAttached",
    "SetTimer",
    "Start",
    "Step",
    "StoreBlob",
    "Streamed",
    "TimerFired",
    "TurnMachine",
    "WaitAnswer",
    "WaitApproval",
    "WaitChild",
    "WorkerPresence",
]

#: streamed text/output is appended as one event per this many seconds (or STREAM_CHUNK chars)
COALESCE_S = 0.05
STREAM_CHUNK = 16 * 1024
#: the timer that flushes coalesced deltas
FLUSH = "flush"


# inputs --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Input:
    #: wall-clock time when the input was made (item times, deadlines)
    now: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Start(Input):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Proceed(Input):
    pass


@dataclass(frozen=True, slots=True)
class ModelParts(Input):
    """What the model's stream gave since the last step, in order (the driver gathers parts
    that arrive while the machine is busy into one input)."""

    parts: list[ModelEvent]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelDone(Input):
    pass


@dataclass(frozen=True, slots=True)
class ModelFailed(Input):
    error: ModelError


@dataclass(frozen=True, slots=True)
class ActionProgressed(Input):
    action_id: str
    progress: wk.ActionProgress


@dataclass(frozen=True, slots=True)
class SessionAttached(Input):
    """The session is attached on its worker's connection, and the worker listed these MCP
    servers in its workdir when it attached it (they may differ from its ``hello``'s: a
    server confined to its cwd starts only there). Comes before the outcome of the action
    that attached it."""

    mcp_servers: list[wk.McpServerInfo]


@dataclass(frozen=True, slots=True)
class ActionDone(Input):
    action_id: str
    outcome: wk.ActionOutcome


@dataclass(frozen=True, slots=True)
class ActionErrored(Input):
    action_id: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class ActionTimedOut(Input):
    action_id: str


@dataclass(frozen=True, slots=True)
class WorkerPresence(Input):
    """The worker of a running action went away (``present`` False) or came back."""

    action_id: str
    present: bool


@dataclass(frozen=True, slots=True)
class ApprovalDecided(Input):
    approval_id: str


@dataclass(frozen=True, slots=True)
class ApprovalExpired(Input):
    approval_id: str


@dataclass(frozen=True, slots=True)
class Answered(Input):
    question_id: str


@dataclass(frozen=True, slots=True)
class ChildDone(Input):
    session_id: str


@dataclass(frozen=True, slots=True)
class BlobLoaded(Input):
    digest: str
    data: bytes | None


@dataclass(frozen=True, slots=True)
class BlobStored(Input):
    """Bytes were kept in the blob store under ``digest`` (``stored`` False: they could not
    be)."""

    digest: str
    stored: bool


@dataclass(frozen=True, slots=True)
class TimerFired(Input):
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextChanged(Input):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted(Input):
    pass


@dataclass(frozen=True, slots=True)
class Crashed(Input):
    message: str


ActionOutcomeInput = ActionDone | ActionErrored | ActionTimedOut


# effects -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CallModel:
    """Stream ``body`` to the provider: ``ModelParts``, then ``ModelDone`` or ``ModelFailed``."""

    provider: ModelProvider
    model: str
    body: bytes


@dataclass(frozen=True, slots=True)
class RunAction:
    """Run an action on the worker (attached to the session's workdir first when
    ``attach_timeout`` is set; ``SessionAttached`` when that gave a new list of MCP
    servers): ``ActionDone`` / ``ActionErrored`` / ``ActionTimedOut``."""

    worker_id: str
    action: wk.ActionMessage
    timeout: float
    workdir: str = ""
    attach_timeout: float | None = None
    #: feed its output as ``ActionProgressed``
    progress: bool = False
    #: feed ``WorkerPresence`` while it runs
    watch: bool = False
    #: not even tried while the worker is away (``ActionErrored``, code ``away``)
    if_present: bool = False
    #: False: nothing comes back (a failure is only logged)
    report: bool = True
    #: characters of its output the log already shows (a resumed call's): not fed again
    #: when the output comes again from its start (after a take-over among replicas)
    skip: int = 0


@dataclass(frozen=True, slots=True)
class CancelAction:
    worker_id: str
    action_id: str
    session_id: str


@dataclass(frozen=True, slots=True)
class WaitApproval:
    """``ApprovalDecided`` once the approval is no longer pending, or ``ApprovalExpired`` at
    ``deadline`` (wall clock; None: no deadline)."""

    session_id: str
    approval_id: str
    deadline: float | None


@dataclass(frozen=True, slots=True)
class WaitAnswer:
    """``Answered`` once the question is no longer pending."""

    session_id: str
    question_id: str


@dataclass(frozen=True, slots=True)
class WaitChild:
    """``ChildDone`` once the sub-agent session's turn is over (or the session is gone)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class LoadBlob:
    """``BlobLoaded`` with a stored file's bytes (None: no longer stored)."""

    digest: str


@dataclass(frozen=True, slots=True)
class StoreBlob:
    """Keep ``data`` in the blob store (by its sha256): ``BlobStored``."""

    data: bytes


@dataclass(frozen=True, slots=True)
class SetTimer:
    """``TimerFired(key)`` after ``delay`` seconds."""

    key: str
    delay: float


Effect = (CallModel | RunAction | CancelAction | WaitApproval | WaitAnswer | WaitChild
          | LoadBlob | StoreBlob | SetTimer)


@dataclass(slots=True)
class Step:
    """What one input made: events to append, effects to start, and whether to feed
    ``Proceed`` once the events are folded."""

    events: Decided = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    proceed: bool = False


# the shared part of both turns ---------------------------------------------------------------

class Coalesced:
    """Deltas for one field of one item (``text_delta``, ``output_delta``), appended as few
    events as possible: at :data:`STREAM_CHUNK` characters, or when the flush timer fires."""

    __slots__ = ("buf", "field", "item_id", "size")

    def __init__(self, field: str, item_id: str | None = None) -> None:
        self.field = field
        self.item_id = item_id
        self.buf: list[str] = []
        self.size = 0


class Streamed(Coalesced):
    """One streamed item (text, refusal, reasoning): appended with its first delta, its later
    deltas coalesced, closed (``streaming: false``) at the end."""

    __slots__ = ("make", "said")

    def __init__(self, make: Callable[[str, float, str], ev.Item]) -> None:
        super().__init__("text_delta")
        self.make = make  # (item id, time, first text) -> the item
        self.said = False  # anything was said


class TurnMachine:
    """The part of a turn both kinds share: one step at a time, the status as this step left
    it, coalesced deltas, approvals with a deadline, the interrupt and the crash.

    A subclass handles the inputs it cares about (``_on_<input>`` methods) and calls
    :meth:`emit`, :meth:`effect`, :meth:`status`, :meth:`next` from them.
    """

    def __init__(self, session_id: str, *, approval_timeout_s: float | None = None) -> None:
        self.session_id = session_id
        self.approval_timeout_s = approval_timeout_s
        #: the turn is over: the driver stops
        self.done = False
        self._then: Callable[[], None] | None = None
        self._flushing: list[Coalesced] = []  # buffers the flush timer empties
        self._timer_set = False
        # as of the current step
        self.state: State = State()
        self.session: SessionInfo = SessionInfo(session_id="", title="", worker_id="",
                                                workdir="", provider="", model="")
        self.ctx = Context()
        self.now = 0.0
        self._step = Step()
        self._status: tuple[ev.SessionStatus, str] = ("idle", "")
        self._handlers: dict[type[Input], Callable[[Any], None] | None] = {
            cls: getattr(self, name, None) for cls, name in _HANDLERS.items()}

    # the step ------------------------------------------------------------------------------

    def step(self, state: State, input: Input, ctx: Context) -> Step:
        """Feed one input; returns the events to append and the effects to start. Reads
        ``state`` (the fold, as of this step); never changes it."""
        session = state.sessions.get(self.session_id)
        self._step = step = Step()
        if session is None:  # deleted meanwhile: nothing left to do
            self.done = True
            return step
        self.state, self.session, self.ctx, self.now = state, session, ctx, input.now
        self._status = (session.status, session.status_reason)
        handler = self._handlers[type(input)]
        if handler is not None:
            handler(input)
        return step

    def _on_proceed(self, _: Proceed) -> None:
        then, self._then = self._then, None
        if then is not None:
            then()

    # what a handler calls ------------------------------------------------------------------

    def emit(self, *events: ev.Event) -> None:
        """Append ``events`` to this session (at the end of the step)."""
        sid = self.session_id
        self._step.events += [(sid, e) for e in events]

    def emit_all(self, events: Decided) -> None:
        self._step.events.extend(events)

    def effect(self, effect: Effect) -> None:
        self._step.effects.append(effect)

    def next(self, then: Callable[[], None]) -> None:
        """Go on with ``then`` once this step's events are folded (at once if there are
        none): whatever reads the session's items after a change of ours calls this first."""
        if self._step.events:
            self._then = then
            self._step.proceed = True
        else:
            then()

    def new_id(self, prefix: str) -> str:
        return self.ctx.new_id(prefix)

    def status(self, status: ev.SessionStatus, reason: str = "") -> None:
        """Change the session's status, unless it is already that (as this step left it)."""
        if self._status != (status, reason):
            self._status = (status, reason)
            self.emit(ev.SessionStatusChanged(status=status, reason=reason))

    @property
    def current_status(self) -> ev.SessionStatus:
        return self._status[0]

    @property
    def status_reason(self) -> str:
        return self._status[1]

    def notice(self, code: str, text: str) -> None:
        self.emit(ev.SessionItemAppended(item=ev.Notice(id=self.new_id("itm"), ts=self.now,
                                                        code=code, text=text)))

    def finish(self, item_id: str, status: ev.ToolStatus, result: str, *before: ev.Event,
               **fields: Any) -> None:
        """Settle a tool call: ``before`` (an action's end, a plan), then the item's update."""
        self.emit(*before, ev.SessionItemUpdated(item_id=item_id, status=status, result=result,
                                                 **fields))

    # coalesced deltas ----------------------------------------------------------------------

    def add_delta(self, buffer: Coalesced, text: str) -> None:
        buffer.buf.append(text)
        buffer.size += len(text)
        if buffer.size >= STREAM_CHUNK:
            self.flush(buffer)
            return
        if buffer not in self._flushing:
            self._flushing.append(buffer)
        if not self._timer_set:
            self._timer_set = True
            self.effect(SetTimer(FLUSH, COALESCE_S))

    def flush(self, buffer: Coalesced) -> None:
        if buffer.buf:
            text = "".join(buffer.buf)
            buffer.buf.clear()
            buffer.size = 0
            if buffer.item_id is not None:
                delta: dict[str, Any] = {buffer.field: text}
                self.emit(ev.SessionItemUpdated(item_id=buffer.item_id, **delta))

    def stream(self, streamed: Streamed, text: str) -> None:
        """A delta of a streamed item: the item is appended with the first one."""
        streamed.said = True
        if streamed.item_id is None:
            streamed.item_id = self.new_id("itm")
            self.emit(ev.SessionItemAppended(item=streamed.make(streamed.item_id, self.now,
                                                                text)))
        else:
            self.add_delta(streamed, text)

    def close(self, streamed: Streamed, *, partial: bool, **fields: Any) -> None:
        self.flush(streamed)
        if streamed.item_id is not None:
            self.emit(ev.SessionItemUpdated(item_id=streamed.item_id, streaming=False,
                                            partial=True if partial else None, **fields))
        streamed.item_id = None

    def _on_timer_fired(self, i: TimerFired) -> None:
        if i.key == FLUSH:
            self._timer_set = False
            flushing, self._flushing = self._flushing, []
            for buffer in flushing:
                self.flush(buffer)
        else:
            self.on_timer(i.key)

    def on_timer(self, key: str) -> None:
        """A timer of the subclass's own fired."""

    # actions -------------------------------------------------------------------------------

    def _on_action_done(self, i: ActionDone) -> None:
        self.action_over(i)

    def _on_action_errored(self, i: ActionErrored) -> None:
        self.action_over(i)

    def _on_action_timed_out(self, i: ActionTimedOut) -> None:
        self.action_over(i)

    def action_over(self, i: ActionOutcomeInput) -> None:
        """An action this turn ran has its outcome, or failed, or timed out (by action id;
        an action sent with ``report=False`` never comes back)."""

    # approvals -----------------------------------------------------------------------------

    def await_approval(self, approval_id: str, requested_at: float) -> None:
        """Wait for a pending approval: until it is decided, or until ``requested_at`` + the
        approval timeout (measured from the request, so a restart does not reset it)."""
        self.status("waiting_approval", "waiting for your approval")
        limit = self.approval_timeout_s
        self.effect(WaitApproval(self.session_id, approval_id,
                                 None if limit is None else requested_at + limit))

    def _on_approval_decided(self, i: ApprovalDecided) -> None:
        # after an interrupt the waiter still wakes (its approval was cancelled): the turn is
        # over, and nothing may set the session running again
        if not self.done:
            self.approval_over(i.approval_id)

    def _on_approval_expired(self, i: ApprovalExpired) -> None:
        if self.done:
            return
        approval = self.session.approvals.get(i.approval_id)
        if approval is None or approval.status != "pending":
            self.approval_over(i.approval_id)
            return
        self.emit(ev.ApprovalResolved(
            approval_id=i.approval_id, decision="expired",
            message=f"no decision within {_duration(self.approval_timeout_s or 0.0)}"))
        self.next(lambda: self.approval_over(i.approval_id))

    def approval_over(self, approval_id: str) -> None:
        """The approval is decided, expired or cancelled (read it from the session)."""

    # the end -------------------------------------------------------------------------------

    def _on_interrupted(self, _: Interrupted) -> None:
        """Stop the worker's actions, close open calls, approvals, questions and streams."""
        s = self.session
        for action_id, pending in s.pending_actions.items():
            self.effect(CancelAction(pending.worker_id, action_id, self.session_id))
        flushing, self._flushing = self._flushing, []
        for buffer in flushing:  # what was said before the interrupt is kept
            self.flush(buffer)
        self.emit(*interrupt_events(s))
        if self.current_status not in ("interrupted", "closed"):
            self.status("interrupted", "interrupted by the user")
        self.done = True

    def _on_crashed(self, i: Crashed) -> None:
        self.error(f"internal error: {i.message}", "internal", "internal error")

    def error(self, message: str, code: str, reason: str) -> None:
        """End the turn with an error item and status ``error`` (the session stays usable)."""
        self.emit(ev.SessionItemAppended(item=ev.ErrorItem(id=self.new_id("itm"), ts=self.now,
                                                           message=message, code=code)))
        self.status("error", reason)
        self.done = True


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


#: each input's handler method: ``_on_<input in snake case>``
_HANDLERS: dict[type[Input], str] = {
    cls: f"_on_{_snake(cls.__name__)}"
    for cls in (Start, Proceed, ModelParts, ModelDone, ModelFailed, ActionProgressed,
                SessionAttached, ActionDone, ActionErrored, ActionTimedOut, WorkerPresence,
                ApprovalDecided, ApprovalExpired, Answered, ChildDone, BlobLoaded, BlobStored,
                TimerFired,
                ContextChanged, Interrupted, Crashed)}
