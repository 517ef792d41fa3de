"""The session supervisor as a state machine without I/O: which sessions' turns run on this
server, and what happens around them. A prompt starts a turn, or queues another behind the one
running; a turn's end starts the one it queued and frees the session's lease; among replicas a
session is claimed by its lease, and a sweep takes the sessions nobody runs; a worker that
(re)connects is asked which of its processes still run.

The shape is the turn's (:mod:`~codey_server.agent.machine`): :func:`step` takes the
:class:`Supervisor` (an immutable value), the folded :class:`~codey_protocol.state.State`
(read-only) and one :data:`Input`, and returns the next :class:`Supervisor` and the
:data:`Effect` values for the agent service (:class:`~codey_server.agent.service.AgentService`)
to carry out. It appends nothing itself: a turn's events come from its machine, a process's
from :mod:`~codey_server.agent.processes`. What the service knows of a session's lease (held
here, with which fence) comes in the inputs, as a turn's inputs bring the time.

Order of calls: any input at any time, one at a time (the service feeds them synchronously,
from the engine's listener, its tasks and their callbacks). The service carries out, or
starts as tasks, each step's effects in order; an effect's answer comes back as an input.
After :class:`Halt` nothing starts any more.

Inputs and what sends them:

===================  ============================================================================
input                fed by the service when …
===================  ============================================================================
Boot                 it starts (one server: each session left with work begins it)
Halt                 it stops (runners stop without touching their sessions; they resume later)
Folded               an event was folded (the engine's listener)
TurnWanted           :meth:`~codey_server.agent.service.AgentService.start_turn` is called
TurnEnded            a turn's task ended (``lease_lost``: a fenced write of it was refused)
LeaseTaken           a claim took the session's lease and folded what was committed before
ClaimFailed          a claim found the lease held by another replica, or failed
HoldingLost          this replica failed to renew a session's lease
SweepTick            the sweep's interval passed (among replicas)
FreeFound            of the sessions a sweep asked about, those whose lease nobody holds
ProcessesListed      a worker's list of a session's processes was recorded (``listed``)
===================  ============================================================================

Effects: :class:`StartTurn`, :class:`CancelTurn`, :class:`ReloadContext`, :class:`Claim`,
:class:`Release`, :class:`FindFree`, :class:`ListProcesses`, :class:`StopProcess`,
:class:`ForwardPort`, :class:`Detach`, :class:`Say` (a line for the server's log). The service
carries them out in order; those of :class:`ProcessesListed` one after the other in the
reconcile's task (a stop, then the process's forwards), a :class:`Release` answering
:class:`LeaseTaken` in the claim's task, the others at once or as tasks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Literal

from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State
from codey_server.agent.conversation import needs_turn
from codey_server.agent.processes import live_processes
from codey_server.core.leases import Fence

__all__ = [
    "FOREIGN_CLAIM_DELAY_S",
    "RESUME",
    "Boot",
    "CancelTurn",
    "Claim",
    "ClaimFailed",
    "Detach",
    "Effect",
    "FindFree",
    "Folded",
    "ForwardPort",
    "FreeFound",
    "Halt",
    "Holding",
    "HoldingLost",
    "Input",
    "LeaseTaken",
    "ListProcesses",
    "ProcessesListed",
    "Release",
    "ReloadContext",
    "Say",
    "StartTurn",
    "StopProcess",
    "Supervisor",
    "SweepTick",
    "TurnEnded",
    "TurnWanted",
    "Want",
    "lease_name",
    "step",
    "work_for",
]

#: the statuses of a session whose turn was running when its runner went away
RESUME = ("running", "waiting_approval", "waiting_worker")
#: a prompt another replica committed is claimed after this head start: the replica that took
#: the browser's command runs the turn, unless it does not
FOREIGN_CLAIM_DELAY_S = 0.5
#: files whose change on disk reloads a session's context before its next model call
_CONTEXT_FILES = frozenset({"AGENTS.md", "SKILL.md"})
#: a session whose worktree is in one of these waits for it (``worktree_updated``); a removed
#: one is made again, or the session forked, by the user first
_NO_WORKTREE = ("creating", "failed", "removed")

#: what a session needs of a runner: its ``turn`` for a prompt, to ``resume`` the turn its last
#: runner left, or to ``compact`` its history
Want = Literal["turn", "resume", "compact"]


# the state ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Supervisor:
    """Which sessions are in whose hands here. ``running``: their turn's task runs here (from
    :class:`StartTurn` to :class:`TurnEnded`); ``rerun``: prompted while it ran, so another
    turn follows; ``claiming``: a :class:`Claim` is under way; ``lost``: their lease went to
    another replica while the turn ran here (it is cancelled, and its lease not released)."""

    #: among replicas: a session's turn runs where its lease is held (False: one server)
    leased: bool = False
    #: the service is stopping: nothing starts any more
    stopping: bool = False
    running: frozenset[str] = frozenset()
    rerun: frozenset[str] = frozenset()
    claiming: frozenset[str] = frozenset()
    lost: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Holding:
    """What this replica knows of a session's lease as an input is made (one server: nothing,
    and nothing is asked of it)."""

    #: the lease's name is among those held here
    held: bool = False
    #: the holding's fence, which the turn's writes and actions carry (None: not held, or not
    #: as a holding this replica knows)
    fence: Fence | None = None


# inputs ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Boot:
    pass


@dataclass(frozen=True, slots=True)
class Halt:
    pass


@dataclass(frozen=True, slots=True)
class Folded:
    """An event was folded; ``foreign``: another replica appended it; ``holding``: of its
    session's lease."""

    env: ev.Envelope
    foreign: bool = False
    holding: Holding = Holding()


@dataclass(frozen=True, slots=True)
class TurnWanted:
    session_id: str
    want: Want = "turn"
    holding: Holding = Holding()
    foreign: bool = False


@dataclass(frozen=True, slots=True)
class TurnEnded:
    session_id: str
    #: why a fenced write or action of the turn was refused (None: it was not)
    lease_lost: str | None = None
    holding: Holding = Holding()


@dataclass(frozen=True, slots=True)
class LeaseTaken:
    session_id: str
    #: what the claim was for (None: a sweep's, or a holding the replica did not know)
    want: Want | None = None
    holding: Holding = Holding()


@dataclass(frozen=True, slots=True)
class ClaimFailed:
    session_id: str


@dataclass(frozen=True, slots=True)
class HoldingLost:
    session_id: str


@dataclass(frozen=True, slots=True)
class SweepTick:
    pass


@dataclass(frozen=True, slots=True)
class FreeFound:
    #: in the order :class:`FindFree` asked
    session_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ProcessesListed:
    session_id: str
    worker_id: str


Input = (Boot | Halt | Folded | TurnWanted | TurnEnded | LeaseTaken | ClaimFailed | HoldingLost
         | SweepTick | FreeFound | ProcessesListed)


# effects --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StartTurn:
    """Start the session's turn as a task: an ACP agent's (``acp``) or Codey's; its writes and
    actions carry ``fence`` (among replicas)."""

    session_id: str
    acp: bool = False
    resume: bool = False
    compact_only: bool = False
    fence: Fence | None = None


@dataclass(frozen=True, slots=True)
class CancelTurn:
    """Cancel the session's turn task (its driver tells the machine, unless stopping)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class ReloadContext:
    """Tell the running turn that AGENTS.md or a skill changed (``ContextChanged``)."""

    session_id: str
    now: float


@dataclass(frozen=True, slots=True)
class Claim:
    """After ``delay`` seconds take the session's lease; then fold what was committed before,
    and feed :class:`LeaseTaken` — or :class:`ClaimFailed` when the lease is held elsewhere or
    the claim fails."""

    session_id: str
    delay: float = 0.0
    want: Want | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """Release the session's lease (a task: the next prompt may start it on any replica)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class FindFree:
    """Ask which of these sessions' leases nobody holds; feed :class:`FreeFound`."""

    session_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListProcesses:
    """Ask the worker for the session's processes (``exec_list``), record the answer
    (``listed``), then feed :class:`ProcessesListed`."""

    session_id: str
    worker_id: str


@dataclass(frozen=True, slots=True)
class StopProcess:
    """Send ``exec_kill`` for a process asked to stop, and record its end (``stopped``)."""

    session_id: str
    process_id: str


@dataclass(frozen=True, slots=True)
class ForwardPort:
    """Send ``exec_forward`` for a port the user asked to reach, and record the answer."""

    session_id: str
    process_id: str
    port: int


@dataclass(frozen=True, slots=True)
class Detach:
    """Tell the closed session's worker to stop watching its workdir (best effort)."""

    session_id: str
    worker_id: str


@dataclass(frozen=True, slots=True)
class Say:
    level: int
    message: str


Effect = (StartTurn | CancelTurn | ReloadContext | Claim | Release | FindFree | ListProcesses
          | StopProcess | ForwardPort | Detach | Say)

Step = tuple[Supervisor, list[Effect]]


# the transitions ------------------------------------------------------------------------------

def step(sup: Supervisor, world: State, input: Input) -> Step:
    """The supervisor after ``input``, and what the service is to do, in order."""
    match input:
        case Folded():
            return _folded(sup, world, input)
        case TurnWanted(session_id, want, holding, foreign):
            return _want(sup, world, session_id, want, holding, foreign=foreign)
        case TurnEnded():
            return _ended(sup, world, input)
        case LeaseTaken():
            return _taken(sup, world, input)
        case ClaimFailed(session_id):
            return replace(sup, claiming=sup.claiming - {session_id}), []
        case HoldingLost(session_id):
            if not sup.leased or session_id not in sup.running:
                return sup, []
            return replace(sup, lost=sup.lost | {session_id}), [
                Say(logging.WARNING, f"session {session_id}: its lease went to another "
                                     "replica; stopping here"),
                CancelTurn(session_id)]
        case SweepTick():
            if not sup.leased or sup.stopping:
                return sup, []
            wanting = tuple(sid for sid, s in world.sessions.items()
                            if work_for(s) is not None and sid not in sup.running
                            and sid not in sup.claiming)
            return sup, [FindFree(wanting)]
        case FreeFound(session_ids):
            effects: list[Effect] = []
            for sid in session_ids:
                sup, claimed = _claim(sup, sid, 0.0, None)
                effects += claimed
            return sup, effects
        case ProcessesListed(session_id, worker_id):
            return sup, _after_listing(world, session_id, worker_id)
        case Boot():
            return _boot(sup, world)
        case Halt():
            return (replace(sup, stopping=True),
                    [CancelTurn(sid) for sid in sorted(sup.running)])
    raise TypeError(f"not a supervisor input: {input!r}")  # pragma: no cover


def work_for(session: SessionInfo) -> Want | None:
    """What a session left without a runner needs: ``resume`` its turn, a ``turn`` for a
    prompt that was committed before anyone began it, ``compact``, or nothing (None)."""
    asking = session.status == "waiting_user" and any(
        q.status == "pending" for q in session.questions.values())
    if session.status in RESUME or asking:
        return "resume"
    if session.compaction_requested:
        return "compact"
    if session.status == "idle" and needs_turn(session):
        return "turn"
    return None


def lease_name(session_id: str) -> str:
    """The name of the lease under which a session's turn runs (among replicas)."""
    return f"session:{session_id}"


def _want(sup: Supervisor, world: State, sid: str, want: Want, holding: Holding, *,
          foreign: bool = False) -> Step:
    """Start what the session wants, here and now if this server may; else claim it, or queue
    it behind the turn running (a compaction too: the running turn compacts before its next
    model call, but a turn that is ending makes none, and the request waits for its end)."""
    if sup.stopping:
        return sup, []
    session = world.sessions.get(sid)
    if session is not None and session.worktree is not None and \
            session.worktree.status in _NO_WORKTREE:
        return sup, []  # its turn begins once its worktree is there
    if sid in sup.running:
        sup = replace(sup, rerun=sup.rerun | {sid})
        return sup, []
    fence = None
    if sup.leased:
        if not holding.held:
            return _claim(sup, sid, FOREIGN_CLAIM_DELAY_S if foreign else 0.0, want)
        if holding.fence is None:  # (held, but not as a holding this replica knows): take it
            return _claim(sup, sid, 0.0, None)
        # a lost lease stops this runner as a shutdown would; every write and action of it
        # carries the epoch it was started under
        fence = holding.fence
        sup = replace(sup, lost=sup.lost - {sid})
    acp = session is not None and bool(session.agent)
    if acp and want == "compact":
        return sup, []  # an external agent keeps its own context
    return replace(sup, running=sup.running | {sid}), [
        StartTurn(sid, acp=acp, resume=want == "resume", compact_only=want == "compact",
                  fence=fence)]


def _claim(sup: Supervisor, sid: str, delay: float, want: Want | None) -> Step:
    if not sup.leased or sid in sup.claiming or sup.stopping:
        return sup, []
    return replace(sup, claiming=sup.claiming | {sid}), [Claim(sid, delay, want)]


def _taken(sup: Supervisor, world: State, i: LeaseTaken) -> Step:
    """The lease is ours and the log caught up: start what the session needs, if anything
    still (its last owner may have finished it); else let the lease go."""
    sid = i.session_id
    sup = replace(sup, claiming=sup.claiming - {sid})
    session = world.sessions.get(sid)
    work = work_for(session) if session is not None else None
    if work is None and session is not None and i.want == "turn" and needs_turn(session):
        work = "turn"  # a prompt to an interrupted or failed session
    if work is None or sup.stopping:
        return sup, [] if sid in sup.running else [Release(sid)]
    effects: list[Effect] = []
    if work == "resume":
        effects.append(Say(logging.INFO, f"taking over session {sid} "
                                         f"({session.status if session else ''})"))
    sup, started = _want(sup, world, sid, work, i.holding)
    return sup, effects + started


def _ended(sup: Supervisor, world: State, i: TurnEnded) -> Step:
    sid = i.session_id
    sup = replace(sup, running=sup.running - {sid})
    effects: list[Effect] = []
    if i.lease_lost is not None:
        # a fenced write was refused: the replica that took the session over goes on from the
        # log; this one forgets its holding (the release below changes no row of a newer
        # epoch) and starts nothing for it
        effects.append(Say(logging.WARNING, f"session {sid}: stopped its turn here at once "
                                            f"({i.lease_lost}); the replica that took it over "
                                            "goes on"))
        sup = replace(sup, rerun=sup.rerun - {sid})
    if sid in sup.rerun:
        sup = replace(sup, rerun=sup.rerun - {sid})
        session = world.sessions.get(sid)
        want: Want | None = None
        if session is not None and session.compaction_requested:
            want = "compact"  # asked for while the turn ended: it made no model call since
        elif session is not None and needs_turn(session):
            want = "turn"
        if want is not None and not sup.stopping:
            sup, started = _want(sup, world, sid, want, i.holding)
            effects += started
    if sup.leased and not sup.stopping and sid not in sup.running and sid not in sup.lost:
        effects.append(Release(sid))  # the turn is over: the next prompt may start it anywhere
    return sup, effects


def _boot(sup: Supervisor, world: State) -> Step:
    """One server: begin what each session was left needing. (Among replicas the sweep takes
    the sessions whose lease nobody holds.)"""
    if sup.leased or sup.stopping:
        return sup, []
    effects: list[Effect] = []
    for session in world.sessions.values():
        sid = session.session_id
        work = work_for(session)
        if work == "resume":
            effects.append(Say(logging.INFO, f"resuming session {sid} ({session.status})"))
        elif work == "turn":
            # its prompt was committed, the server died before the turn began (a browser's new
            # session, a schedule's run): begin it now rather than wait for another
            effects.append(Say(logging.INFO, f"starting the waiting turn of session {sid}"))
        if work is not None:
            sup, started = _want(sup, world, sid, work, Holding())
            effects += started
    return sup, effects


def _folded(sup: Supervisor, world: State, i: Folded) -> Step:
    e = i.env.event
    sid = i.env.session_id
    if isinstance(e, ev.WorkerConnected):
        if i.foreign:  # the replica that holds its socket asks it
            return sup, []
        return sup, [ListProcesses(s.session_id, e.worker_id) for s in world.sessions.values()
                     if live_processes(s, e.worker_id)]
    if sid is None:
        return sup, []
    if isinstance(e, ev.ProcessStopRequested):
        # the replica that decided it stops it
        return sup, [] if i.foreign else [StopProcess(sid, e.process_id)]
    if isinstance(e, ev.ProcessForwardRequested):
        return sup, [] if i.foreign else [ForwardPort(sid, e.process_id, e.port)]
    if isinstance(e, ev.SessionItemAppended) and isinstance(e.item, ev.UserMessage):
        return _want(sup, world, sid, "turn", i.holding, foreign=i.foreign)
    if isinstance(e, ev.SessionWorkspaceChanged):
        if sid in sup.running and any(p.rsplit("/", 1)[-1] in _CONTEXT_FILES for p in e.paths):
            return sup, [ReloadContext(sid, i.env.ts)]  # (a new turn loads it anyway)
        return sup, []
    if isinstance(e, ev.WorktreeUpdated):
        session = world.sessions.get(sid)
        if e.status in ("ready", "in_place") and session is not None and needs_turn(session):
            # the prompt that waited for the worktree
            return _want(sup, world, sid, "turn", i.holding, foreign=i.foreign)
        return sup, []
    if isinstance(e, ev.CompactionRequested):
        return _want(sup, world, sid, "compact", i.holding, foreign=i.foreign)
    if isinstance(e, ev.TurnRequested):
        return _want(sup, world, sid, "turn", i.holding, foreign=i.foreign)
    if isinstance(e, (ev.ApprovalResolved, ev.QuestionAnswered)):
        # the answer to what a parked session waits for resumes its turn
        session = world.sessions.get(sid)
        target = e.approval_id if isinstance(e, ev.ApprovalResolved) else e.question_id
        if session is not None and session.parked_on == target \
                and session.status == "interrupted" and sid not in sup.running:
            return _want(sup, world, sid, "resume", i.holding, foreign=i.foreign)
        return sup, []
    if isinstance(e, ev.SessionStatusChanged) and e.status == "interrupted" \
            and (session := world.sessions.get(sid)) is not None \
            and session.parked_on is not None:
        return sup, []  # the turn parked itself (the ladder): it ends on its own, nothing closed
    if isinstance(e, ev.SessionStatusChanged) and e.status in ("interrupted", "closed"):
        effects: list[Effect] = [CancelTurn(sid)] if sid in sup.running else []
        if e.status == "closed":
            effects += _detach(world, sid)
        return sup, effects
    return sup, []


def _after_listing(world: State, sid: str, worker_id: str) -> list[Effect]:
    """After a worker's list was recorded: a stop or a forward asked while it was away is
    carried out now (a forward asked twice is the same forward)."""
    session = world.sessions.get(sid)
    effects: list[Effect] = []
    for p in live_processes(session, worker_id) if session is not None else []:
        if p.status == "stopping":
            effects.append(StopProcess(sid, p.process_id))
        effects += [ForwardPort(sid, p.process_id, f.port) for f in p.forwards
                    if f.status == "opening"]
    return effects


def _detach(world: State, sid: str) -> list[Effect]:
    """A closed session's worker stops watching its workdir, if it is there to be told."""
    session = world.sessions.get(sid)
    worker = world.workers.get(session.worker_id) if session is not None else None
    if session is None or worker is None or not worker.connected \
            or "detach_session" not in worker.capabilities.executors:
        return []
    return [Detach(sid, session.worker_id)]
