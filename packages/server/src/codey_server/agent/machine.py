"""A turn as a state machine without I/O: what goes in, what comes out, and what both turns
(Codey's own, :mod:`~codey_server.agent.turn`, and an ACP agent's, :mod:`~codey_server.agent.acp`)
share.

The shape is the websockets library's: the machine never touches a socket, a clock or a task,
and its state is a value. A turn is an immutable struct (``CodeyTurn``, ``AcpTurn``) whose
:class:`Core` holds what both kinds share, among it the turn's explicit phase
(:attr:`Core.then`: the step it takes when fed ``Proceed``; :attr:`Core.done`: over). One
function moves it on::

    step(machine, turn, state, input, ctx) -> (turn, Step)

It takes the folded :class:`~codey_protocol.state.State` (read-only), one :data:`Input` and
the decision :class:`~codey_server.core.rules.Context` (fresh ids), and returns the turn's
next value and a :class:`Step`: the events to append (``[(session_id, event)]``, like every
decision) and the :data:`Effect` values for the driver (:mod:`~codey_server.agent.driver`) to
carry out. The ``machine`` (:class:`Machine`) is the kind's handlers, holding nothing that
changes. Nothing is stored as a callback: where a turn must read the state its own events made
before going on, it records the name of its next step (an enum) and asks for ``Proceed``. So
a turn can be printed, compared and replayed from its inputs.

The driver runs ``step`` as a decision through ``Engine.submit`` — the turn's events take the
one write path — then starts the effects, whose results come back as inputs. Times come in
the inputs (``now``), never from a clock.

Order of calls: ``Start`` first; then any inputs, one at a time, each after the previous
step's events are folded; when a step sets :attr:`Step.proceed`, the next input is
``Proceed``. The turn is over when ``turn.core.done`` is true. ``Interrupted`` (the user
stopped the turn: close what is open, cancel the worker's actions) and ``Crashed`` (a bug: an
error item) end it from any point.

Inputs and what sends them:

============================  ===============================================================
input                         sent by the driver when …
============================  ===============================================================
Start, Proceed                the turn begins; a step asked to go on
BodyBuilt                     a request body asked for with ``BuildBody`` is ready
ModelParts / Done / Failed    parts of the model's stream arrived; the stream ended; failed
ActionProgressed              an action streamed output (or an ACP update)
SessionAttached               before an action: the session's attach on this connection
                              listed MCP servers in its workdir (once per list)
ActionDone / Errored /        an action's outcome arrived; the worker refused or failed it;
ActionTimedOut                it did not finish in time
WorkerPresence                the worker of a running action went away, or came back
WorkerHello                   the worker a ``WaitHello`` waits for said hello to this server
ApprovalDecided / Expired     an approval was resolved (by anyone); its deadline passed
Answered, ChildDone           a question was answered; a sub-agent's turn ended
WebDone                       a web tool's request (``WebCall``) is over
BlobLoaded, BlobStored        a stored file was read; bytes were kept in the blob store
TimerFired                    a timer set by the machine fired
ContextChanged                AGENTS.md or a skill changed in the workdir
Interrupted, Crashed          the turn was stopped; the machine raised
============================  ===============================================================

Effects: :class:`BuildBody` and :class:`NoteBody` (the session's encoded history, which the
driver keeps), :class:`CallModel` (a provider by name), :class:`RunAction`,
:class:`CancelAction`, :class:`WaitApproval` (with a deadline), :class:`WaitAnswer`,
:class:`WaitChild`, :class:`WaitHello`, :class:`LoadBlob`, :class:`StoreBlob`,
:class:`SetTimer`, :class:`WebCall`.

A turn never ends with an approval of its session still pending: :meth:`Stepper.end`
cancels what is left, saying why, so no card offers a decision nothing waits for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, Literal, Protocol, TypeVar

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo, State
from codey_server.agent.conversation import interrupt_events
from codey_server.agent.errors import ModelError
from codey_server.agent.stream import ModelEvent
from codey_server.agent.wire import CallOptions, Wire
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
    "BodyBuilt",
    "BuildBody",
    "CallModel",
    "CancelAction",
    "ChildDone",
    "ContextChanged",
    "Core",
    "Crashed",
    "Delta",
    "Effect",
    "Input",
    "Interrupted",
    "Ladder",
    "Limits",
    "LoadBlob",
    "Machine",
    "ModelDone",
    "ModelFailed",
    "ModelParts",
    "NoteBody",
    "Proceed",
    "Review",
    "Reviewed",
    "ReviewerLimits",
    "RunAction",
    "SessionAttached",
    "SetTimer",
    "Start",
    "Step",
    "Stepper",
    "StoreBlob",
    "Streamed",
    "TimerFired",
    "TurnValue",
    "WaitAnswer",
    "WaitApproval",
    "WaitChild",
    "WaitHello",
    "WebCall",
    "WebDone",
    "WorkerHello",
    "WorkerPresence",
    "evolve",
    "step",
]

#: streamed text/output is appended as one event per this many seconds (or STREAM_CHUNK chars)
COALESCE_S = 0.05
STREAM_CHUNK = 16 * 1024
#: the timer that flushes coalesced deltas
FLUSH = "flush"
#: the attention ladder's timers: ``<step><target id>``
NUDGE_TIMER = "att1:"
ACT_TIMER = "att2:"
#: what a question nobody answered by T2 is answered
NO_ANSWER = "no answer; use your best judgement"


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
class BodyBuilt(Input):
    """The request body a :class:`BuildBody` asked for, and the size of the body last built
    from the same history (its :class:`NoteBody`; 0: none since the history was reset)."""

    body: bytes
    last_size: int


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
class WorkerHello(Input):
    """The worker a :class:`WaitHello` waits for said hello to this server (or never will:
    it is revoked, or not known)."""

    worker_id: str


@dataclass(frozen=True, slots=True)
class ApprovalDecided(Input):
    approval_id: str


@dataclass(frozen=True, slots=True)
class ApprovalExpired(Input):
    approval_id: str


@dataclass(frozen=True, slots=True)
class Reviewed(Input):
    """The reviewer's verdict on a pending approval (``verdict`` None: it failed, ``error``
    says why), and how long it took."""

    approval_id: str
    verdict: Any
    error: str = ""
    latency_s: float = 0.0
    #: ``provider/model`` that judged
    reviewer: str = ""


@dataclass(frozen=True, slots=True)
class Answered(Input):
    question_id: str


@dataclass(frozen=True, slots=True)
class ChildDone(Input):
    session_id: str


@dataclass(frozen=True, slots=True)
class WebDone(Input):
    """A web tool's request is over: the call's status and the text the model gets."""

    item_id: str
    status: ev.ToolStatus
    result: str


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
class BuildBody:
    """Build a request body from the session's encoded history (kept by the driver, per
    session and wire): ``wire.body`` of the conversation of ``items`` with these parts.
    ``BodyBuilt`` comes back."""

    session_id: str
    wire: Wire
    items: Sequence[ev.Item]
    model: str
    instructions: str
    tools: bytes
    options: CallOptions


@dataclass(frozen=True, slots=True)
class NoteBody:
    """Remember ``size`` as the size of the last body built from the session's history for
    ``wire_name`` (0: the history was compacted), for the next call's context estimate.
    Nothing comes back."""

    session_id: str
    wire_name: str
    size: int


@dataclass(frozen=True, slots=True)
class CallModel:
    """Stream ``body`` to the provider named ``provider``: ``ModelParts``, then ``ModelDone``
    or ``ModelFailed``."""

    provider: str
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
class WaitHello:
    """``WorkerHello`` once the worker said hello to this server since it started (at once
    if it has), or is revoked or not known: only then are its capabilities in the state its
    own, not those of the machine as it was before the server's restart."""

    session_id: str
    worker_id: str


@dataclass(frozen=True, slots=True)
class LoadBlob:
    """``BlobLoaded`` with a stored file's bytes (None: no longer stored)."""

    digest: str


@dataclass(frozen=True, slots=True)
class StoreBlob:
    """Keep ``data`` in the blob store (by its sha256): ``BlobStored``."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Review:
    """Ask the reviewer model (``provider``/``model``) to judge ``data`` by ``rubric``
    (:func:`~codey_server.agent.reviewer.judge`): ``Reviewed``, within ``timeout`` seconds."""

    approval_id: str
    provider: str
    model: str
    rubric: str
    data: Any
    timeout: float


@dataclass(frozen=True, slots=True)
class SetTimer:
    """``TimerFired(key)`` after ``delay`` seconds."""

    key: str
    delay: float


@dataclass(frozen=True, slots=True)
class WebCall:
    """Carry out a web tool's request on the server (``kind`` ``fetch``: ``target`` is the
    URL; ``search``: the query): ``WebDone`` for ``item_id``."""

    item_id: str
    kind: str
    target: str
    prompt: str = ""


Effect = (BuildBody | NoteBody | CallModel | RunAction | CancelAction | WaitApproval
          | WaitAnswer | WaitChild | WaitHello | LoadBlob | StoreBlob | SetTimer | Review
          | WebCall)


@dataclass(slots=True)
class Step:
    """What one input made: events to append, effects to start, and whether to feed
    ``Proceed`` once the events are folded."""

    events: Decided = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    proceed: bool = False


@dataclass(frozen=True, slots=True)
class Ladder:
    """The attention ladder: "when nobody answers" (the server's ``attention`` setting, or
    the session's own)."""

    nudge_after_s: float | None = 120.0
    act_after_s: float | None = 1800.0
    on_approval: str = "reject"
    on_question: str = "answer"


@dataclass(frozen=True, slots=True)
class ReviewerLimits:
    """The reviewer model (the server's ``reviewer`` setting): None: the session's own."""

    provider: str | None = None
    model: str | None = None
    risk_threshold: int = 40
    timeout_s: float = 30.0
    denials_to_park: int = 3


@dataclass(frozen=True)
class Limits:
    turn_iteration_cap: int = 50
    action_timeout_s: float = 900.0
    #: an approval nobody decides in this long expires (None: approvals wait for ever)
    approval_timeout_s: float | None = None
    #: the default attention ladder (None: no ladder)
    ladder: Ladder | None = None
    reviewer: ReviewerLimits = ReviewerLimits()


# the shared part of both turns' values -------------------------------------------------------

D = TypeVar("D")
_EVOLVERS: dict[type[Any], Callable[..., Any]] = {}


def evolve(obj: D, **changes: Any) -> D:
    """A copy of the frozen, slotted dataclass ``obj`` with ``changes``: what
    ``dataclasses.replace`` does, without its checks and its ``__init__`` (a step makes a few
    dozen, and a turn's value has many fields). A field it does not have raises TypeError."""
    cls = type(obj)
    evolver = _EVOLVERS.get(cls)
    if evolver is None:
        evolver = _EVOLVERS[cls] = _evolver(cls)
    result: D = evolver(obj, **changes)
    return result


def _evolver(cls: type[Any]) -> Callable[..., Any]:
    # generated, as dataclasses generates __init__: one keyword per field, unset ones copied
    names: tuple[str, ...] = cls.__slots__
    source = (f"def evolve(o, *, {', '.join(f'{n}=_UNSET' for n in names)}):\n"
              + "".join(f"    if {n} is _UNSET: {n} = o.{n}\n" for n in names)
              + "    new = _new(_cls)\n"
              + "".join(f"    _set(new, {n!r}, {n})\n" for n in names)
              + "    return new\n")
    scope: dict[str, Any] = {"_UNSET": object(), "_set": object.__setattr__,
                             "_new": object.__new__, "_cls": cls}
    exec(source, scope)
    made: Callable[..., Any] = scope["evolve"]
    return made


class Shared(Enum):
    """The steps of the shared part a ``Proceed`` goes on with."""

    #: an approval expired (its record is folded): the machine reads it (``Core.expired``)
    APPROVAL_OVER = "approval_over"


@dataclass(frozen=True, slots=True)
class Delta:
    """Text for one field of one item (``text_delta``, ``output_delta``) not appended yet."""

    item_id: str
    field: str
    text: str = ""


StreamedKind = Literal["text", "refusal", "reasoning"]


@dataclass(frozen=True, slots=True)
class Streamed:
    """One streamed item (text, refusal, reasoning): appended with its first delta
    (``item_id`` then set), its later deltas coalesced, closed (``streaming: false``) at the
    end (``item_id`` None again)."""

    kind: StreamedKind
    item_id: str | None = None
    #: anything was said
    said: bool = False


@dataclass(frozen=True, slots=True)
class Core:
    """What every turn's value holds: its session, its phase and its coalesced deltas."""

    session_id: str
    #: an approval nobody decides in this long expires (None: never)
    approval_timeout_s: float | None = None
    #: the turn is over: the driver stops
    done: bool = False
    #: the step to take when ``Proceed`` comes (None: the turn waits for another input)
    then: Enum | None = None
    #: the approval whose expiry ``Shared.APPROVAL_OVER`` goes on with
    expired: str | None = None
    #: deltas not appended yet, in the order they came (an empty one was flushed by size)
    deltas: tuple[Delta, ...] = ()
    #: the flush timer is set
    timer_set: bool = False
    #: the server's attention ladder (None: none; a session's own setting wins)
    ladder: Ladder | None = None
    reviewer: ReviewerLimits = ReviewerLimits()


class TurnValue(Protocol):
    """A turn's value: an immutable struct with a :class:`Core`."""

    @property
    def core(self) -> Core: ...


T = TypeVar("T", bound=TurnValue)


class Stepper(Generic[T]):
    """One step in the making: the turn's value as the step changes it (``turn``, ``core``),
    what the step reads (the state, the session, the context, the time) and what it makes.
    It lives for one call of :func:`step`; handlers call its methods."""

    __slots__ = ("_status", "core", "ctx", "machine", "now", "out", "session", "state", "turn")

    def __init__(self, machine: Machine[T], turn: T, state: State, session: SessionInfo,
                 ctx: Context, now: float) -> None:
        #: the kind's handlers (and what they may look up: a Codey turn's providers)
        self.machine = machine
        self.turn = turn
        self.core = turn.core
        self.state = state
        self.session = session
        self.ctx = ctx
        self.now = now
        self.out = Step()
        self._status: tuple[ev.SessionStatus, str] = (session.status, session.status_reason)

    @property
    def session_id(self) -> str:
        return self.core.session_id

    def emit(self, *events: ev.Event) -> None:
        """Append ``events`` to this session (at the end of the step)."""
        sid = self.core.session_id
        self.out.events += [(sid, e) for e in events]

    def emit_all(self, events: Decided) -> None:
        self.out.events.extend(events)

    def effect(self, effect: Effect) -> None:
        self.out.effects.append(effect)

    def new_id(self, prefix: str) -> str:
        return self.ctx.new_id(prefix)

    def end(self) -> None:
        """The turn is over. An approval of the session still pending is cancelled, with the
        session's status reason: nothing waits for it any more, and a card that offered a
        decision would take one that runs nothing."""
        self.core = evolve(self.core, done=True, then=None)
        resolved = {e.approval_id for _, e in self.out.events
                    if isinstance(e, ev.ApprovalResolved)}
        reason = self._status[1]
        self.emit(*[ev.ApprovalResolved(
            approval_id=a.approval_id, decision="cancelled",
            message="the turn ended before it was decided" + (f" ({reason})" if reason else ""))
            for a in self.session.approvals.values()
            if a.status == "pending" and a.approval_id not in resolved])

    def wait(self, then: Enum) -> bool:
        """Go on with ``then`` once this step's events are folded: True, and ``Proceed``
        comes; False when there are none (go on at once)."""
        if not self.out.events:
            return False
        self.core = evolve(self.core, then=then)
        self.out.proceed = True
        return True

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

    def error(self, message: str, code: str, reason: str) -> None:
        """End the turn with an error item and status ``error`` (the session stays usable)."""
        self.emit(ev.SessionItemAppended(item=ev.ErrorItem(id=self.new_id("itm"), ts=self.now,
                                                           message=message, code=code)))
        self.status("error", reason)
        self.end()

    # coalesced deltas ----------------------------------------------------------------------

    def add_delta(self, item_id: str, field: str, text: str) -> None:
        deltas = self.core.deltas
        at = next((n for n, d in enumerate(deltas)
                   if d.item_id == item_id and d.field == field), None)
        joined = text if at is None else deltas[at].text + text
        if len(joined) >= STREAM_CHUNK:
            self._append_delta(item_id, field, joined)
            if at is not None:
                self._set_delta(at, Delta(item_id, field))
                self._drop_empty()
            return
        if at is None:
            self.core = evolve(self.core, deltas=(*deltas, Delta(item_id, field, joined)))
        else:
            self._set_delta(at, Delta(item_id, field, joined))
        if not self.core.timer_set:
            self.core = evolve(self.core, timer_set=True)
            self.effect(SetTimer(FLUSH, COALESCE_S))

    def _set_delta(self, at: int, delta: Delta) -> None:
        deltas = self.core.deltas
        self.core = evolve(self.core, deltas=(*deltas[:at], delta, *deltas[at + 1:]))

    def _append_delta(self, item_id: str, field: str, text: str) -> None:
        if text:
            delta: dict[str, Any] = {field: text}
            self.emit(ev.SessionItemUpdated(item_id=item_id, **delta))

    def _drop_empty(self) -> None:
        # with no flush timer set, nothing waits (every delta kept sets it): the entries
        # kept only for their order can go
        if not self.core.timer_set:
            self.core = evolve(self.core, deltas=())

    def flush(self, item_id: str) -> None:
        """Append what waits for ``item_id``."""
        for n, d in enumerate(self.core.deltas):
            if d.item_id == item_id and d.text:
                self._append_delta(d.item_id, d.field, d.text)
                self._set_delta(n, Delta(d.item_id, d.field))
        self._drop_empty()

    def flush_all(self) -> None:
        for d in self.core.deltas:
            self._append_delta(d.item_id, d.field, d.text)
        self.core = evolve(self.core, deltas=())

    def stream(self, streamed: Streamed, text: str) -> Streamed:
        """A delta of a streamed item: the item is appended with the first one. Returns the
        streamed item's new value."""
        if streamed.item_id is None:
            item_id = self.new_id("itm")
            self.emit(ev.SessionItemAppended(item=streamed_item(streamed.kind, item_id,
                                                                self.now, text)))
            return Streamed(streamed.kind, item_id, True)
        self.add_delta(streamed.item_id, "text_delta", text)
        return streamed if streamed.said else evolve(streamed, said=True)

    def close(self, streamed: Streamed, *, partial: bool, **fields: Any) -> Streamed:
        """Close the streamed item (its deltas appended first); returns its new value."""
        if streamed.item_id is None:
            return streamed
        self.flush(streamed.item_id)
        self.emit(ev.SessionItemUpdated(item_id=streamed.item_id, streaming=False,
                                        partial=True if partial else None, **fields))
        return evolve(streamed, item_id=None)

    # approvals -----------------------------------------------------------------------------

    def await_approval(self, approval_id: str, requested_at: float, *,
                       show: bool = True) -> None:
        """Wait for a pending approval: until it is decided, or until ``requested_at`` + the
        approval timeout (measured from the request, so a restart does not reset it).
        ``show``: the session's status says so (False: it says what else the turn waits
        for meanwhile)."""
        if show:
            self.status("waiting_approval", "waiting for your approval")
        limit = self.core.approval_timeout_s
        self.effect(WaitApproval(self.session_id, approval_id,
                                 None if limit is None else requested_at + limit))


    # the attention ladder ----------------------------------------------------------------

    def ladder(self) -> Ladder | None:
        """The session's own "when nobody answers", else the server's."""
        own = self.session.attention_setting
        if own is not None:
            return Ladder(own.nudge_after_s, own.act_after_s, own.on_approval, own.on_question)
        return self.core.ladder

    def attend(self, target_id: str, target: Literal["approval", "question"]) -> None:
        """Run the attention ladder of a wait for the user: go on with its record (a resumed
        turn: the times are the log's, so a restart keeps them), or schedule it from now (a
        new wait, or one a parked session waits for again), and set its timers."""
        a = self.session.attention
        if a is not None and a.target_id == target_id and not a.acted:
            nudge_at, act_at, nudged = a.nudge_at, a.act_at, a.nudged
        else:
            ladder = self.ladder()
            if ladder is None:
                return
            nudge_at = None if ladder.nudge_after_s is None else self.now + ladder.nudge_after_s
            act_at = None if ladder.act_after_s is None else self.now + ladder.act_after_s
            if nudge_at is None and act_at is None:
                return
            then = ladder.on_approval if target == "approval" else ladder.on_question
            self.emit(ev.AttentionScheduled(target_id=target_id, target=target,
                                            nudge_at=nudge_at, act_at=act_at,
                                            then=then))  # type: ignore[arg-type]
            nudged = False
        if nudge_at is not None and not nudged:
            self.effect(SetTimer(NUDGE_TIMER + target_id, max(0.0, nudge_at - self.now)))
        if act_at is not None:
            self.effect(SetTimer(ACT_TIMER + target_id, max(0.0, act_at - self.now)))

    def park(self, target_id: str, target: Literal["approval", "question"],
             step: Literal["parked", "denials"], reason: str) -> None:
        """Park the session: status ``interrupted``, every device told, the turn over — and
        the approval or question kept pending: its answer resumes the turn."""
        self.emit(ev.AttentionNudged(target_id=target_id, target=target, step=step,
                                     text=reason))
        self.status("interrupted", reason)
        self.core = evolve(self.core, done=True, then=None)


def streamed_item(kind: StreamedKind, item_id: str, ts: float, text: str) -> ev.Item:
    """The item a streamed ``kind`` of text is appended as, with its first text."""
    if kind == "reasoning":
        return ev.Reasoning(id=item_id, ts=ts, text=text, streaming=True)
    return ev.AssistantMessage(id=item_id, ts=ts, text=text, streaming=True,
                               refusal=kind == "refusal")


class Machine(Protocol[T]):
    """A kind of turn: its handlers, which read and change a :class:`Stepper`. It holds
    nothing that changes (a turn's state is its value)."""

    def handle(self, k: Stepper[T], input: Input) -> None:
        """An input the shared part does not take (``Start``, the model's, …)."""

    def proceed(self, k: Stepper[T], then: Enum) -> None:
        """Go on with the kind's step ``then`` (asked for with :meth:`Stepper.wait`)."""

    def action_over(self, k: Stepper[T], i: ActionOutcomeInput) -> None:
        """An action this turn ran has its outcome, or failed, or timed out (by action id;
        an action sent with ``report=False`` never comes back)."""

    def approval_over(self, k: Stepper[T], approval_id: str) -> None:
        """The approval is decided, expired or cancelled (read it from the session)."""

    def on_timer(self, k: Stepper[T], key: str) -> None:
        """A timer of the kind's own fired."""


# the step ----------------------------------------------------------------------------------

def step(machine: Machine[T], turn: T, state: State, input: Input,
         ctx: Context) -> tuple[T, Step]:
    """Feed one input to ``turn``; returns its next value and the step (the events to
    append, the effects to start). Reads ``state`` (the fold, as of this step); never
    changes it, nor ``turn``."""
    session = state.sessions.get(turn.core.session_id)
    if session is None:  # deleted meanwhile: nothing left to do
        return evolve(turn, core=evolve(turn.core, done=True)), Step()
    k = Stepper(machine, turn, state, session, ctx, input.now)
    if isinstance(input, Proceed):
        then = k.core.then
        k.core = evolve(k.core, then=None)
        if then is Shared.APPROVAL_OVER:
            expired = k.core.expired
            k.core = evolve(k.core, expired=None)
            if expired is not None:
                machine.approval_over(k, expired)
        elif then is not None:
            machine.proceed(k, then)
    elif isinstance(input, TimerFired):
        if input.key == FLUSH:
            k.core = evolve(k.core, timer_set=False)
            k.flush_all()
        elif input.key.startswith((NUDGE_TIMER, ACT_TIMER)):
            _ladder_timer(machine, k, input.key)
        else:
            machine.on_timer(k, input.key)
    elif isinstance(input, (ActionDone, ActionErrored, ActionTimedOut)):
        machine.action_over(k, input)
    elif isinstance(input, ApprovalDecided):
        # after an interrupt the waiter still wakes (its approval was cancelled): the turn is
        # over, and nothing may set the session running again
        if not k.core.done:
            machine.approval_over(k, input.approval_id)
    elif isinstance(input, ApprovalExpired):
        _approval_expired(machine, k, input.approval_id)
    elif isinstance(input, Interrupted):
        _interrupted(k)
    elif isinstance(input, Crashed):
        k.error(f"internal error: {input.message}", "internal", "internal error")
    else:
        machine.handle(k, input)
    return evolve(k.turn, core=k.core), k.out


def _ladder_timer(machine: Machine[T], k: Stepper[T], key: str) -> None:
    """T1 or T2 of the ladder of the session's wait for the user came: nudge, or act — unless
    the wait is over (answered meanwhile) or the turn is."""
    if k.core.done:
        return
    nudge = key.startswith(NUDGE_TIMER)
    target_id = key[len(NUDGE_TIMER if nudge else ACT_TIMER):]
    a = k.session.attention
    if a is None or a.target_id != target_id or a.acted:
        return
    target: Literal["approval", "question"] = "question" if a.target == "question" \
        else "approval"
    approval = k.session.approvals.get(target_id)
    question = k.session.questions.get(target_id)
    if target == "approval" and (approval is None or approval.status != "pending"):
        return
    if target == "question" and (question is None or question.status != "pending"):
        return
    since = approval.requested_at if approval is not None else \
        question.asked_at if question is not None else k.now
    waited = _duration(max(0.0, k.now - since))
    if nudge:
        if not a.nudged:
            what = question.question if question is not None else \
                " ".join(approval.command or []) or approval.path or approval.kind \
                if approval is not None else ""
            k.emit(ev.AttentionNudged(target_id=target_id, target=target, step="t1",
                                      text=f"waiting for you for {waited}: {what}"[:300]))
        return
    k.emit(ev.AttentionActed(target_id=target_id, target=target,
                             then=a.then,  # type: ignore[arg-type]
                             after_s=max(0.0, k.now - since)))
    if a.then == "park":
        k.park(target_id, target, "parked", f"parked: nobody answered in {waited}")
    elif target == "question":
        k.emit(ev.QuestionAnswered(question_id=target_id, answer=NO_ANSWER))
    elif a.then == "reviewer":
        machine.on_timer(k, key)  # the kind's reviewer judges it (or it is rejected)
    else:
        k.emit(ev.ApprovalResolved(
            approval_id=target_id, decision="rejected",
            message=f"nobody answered in {waited}; choose another way or stop"))


def _approval_expired(machine: Machine[T], k: Stepper[T], approval_id: str) -> None:
    if k.core.done:
        return
    approval = k.session.approvals.get(approval_id)
    if approval is None or approval.status != "pending":
        machine.approval_over(k, approval_id)
        return
    k.emit(ev.ApprovalResolved(
        approval_id=approval_id, decision="expired",
        message=f"no decision within {_duration(k.core.approval_timeout_s or 0.0)}"))
    k.core = evolve(k.core, expired=approval_id)
    k.wait(Shared.APPROVAL_OVER)


def _interrupted(k: Stepper[Any]) -> None:
    """Stop the worker's actions, close open calls, approvals, questions and streams."""
    s = k.session
    for action_id, pending in s.pending_actions.items():
        k.effect(CancelAction(pending.worker_id, action_id, k.session_id))
    k.flush_all()  # what was said before the interrupt is kept
    k.emit(*interrupt_events(s))
    if k.current_status not in ("interrupted", "closed"):
        k.status("interrupted", "interrupted by the user")
    k.end()


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
