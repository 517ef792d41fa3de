"""Exactly-once delivery of actions to workers, as a state machine without I/O.

:class:`Router` keeps, for each ``action_id``, where the action is and who waits for it. It
is told what happened — a caller asks, a worker's link here comes or goes, the worker sends a
frame, the database answers — and returns what to do as a list of effects. It never awaits,
never touches a socket or a row; :class:`~codey_server.core.delivery.Delivery` carries the
effects out, and the two transports (the worker sockets of this server, the database between
replicas) feed it.

Inputs (methods) and the effects they return:

================================================  ==========================================
``submit(worker, action, waiter, listener)``      ``Send`` / ``Route`` (new), ``Settle`` (a
                                                  joiner after the outcome)
``leave(action_id, waiter, cut)``                 ``Send`` / ``Route`` again when the leaver
                                                  was cut off doing it and others still wait
``cancel(worker, target, session, cancel_id)``    ``Send(Cancel)``, ``CancelElsewhere``, or
                                                  ``Settle`` + ``Record`` (worker away)
``revoked(worker)``                               ``Settle`` (+ ``Record``) of all its actions
``linked(worker, link, running, known)``          ``Send`` of every unanswered action
``unlinked(worker, link)``                        (none; True if it was the current link)
``received(worker, link, frame)``                 ``Deliver`` / ``RecordProgress``, ``Settle``
                                                  (+ ``Record``)
``route_done(action_id, outcome)``                ``Settle``, or ``Send`` when linked here
``answered(action_id, outcome)`` (database)       ``Settle``
``progressed(action_id, progress)`` (database)    ``Deliver``
``carry(worker, action)`` (database)              ``Send``
================================================  ==========================================

The rules:

* **Once per link.** An action goes out at most once on each link (connection) of its worker.
  On a new link every unanswered action of that worker goes out again with the same id — the
  worker answers a repeat from its record — except the ones the worker says it holds: listed
  in its hello's ``running_actions``, or acknowledged on that link (``action_accepted``). Their
  answer comes on that link.
* **One outcome.** The first answer settles the action; every waiter gets it, one joining later
  gets it at once, later answers are ignored. Answers count only from the action's own worker.
* **Waiters leave alone.** A waiter that leaves (timed out, cancelled) takes only itself and
  its listener: the output goes to the listener of the one before it, if any. When nobody
  waits any more the action is forgotten: never sent again, a late answer ignored — unless
  this server carries it out for another replica (below; its output is written for them).
* **Cancel.** With the worker linked here: a ``cancel`` frame (once per link), the worker
  answers the target itself. Routed, with the worker connected to another replica: that
  replica is asked. Otherwise nothing can stop it on the worker: it settles "cancelled while
  the worker was away" and is never sent again (routed: recorded, so no replica sends it).
* **Revocation** settles every action of the worker: it will not answer.

**Routed** (several replicas, ``routed=True``): every new action is first written where the
replica holding its worker finds it (``Route``; the driver answers with :meth:`route_done`,
with the outcome if the action was carried out before). Then, with the worker linked here, it is
sent at once and its output and outcome go straight to the waiting caller (the same-replica
shortcut); otherwise the worker's replica picks it up (:meth:`carry`), and its output and
outcome come back from the database (:meth:`progressed`, :meth:`answered`). An outcome that
did not come from the database is written to it (``Record``); so is every output frame a
worker sends here (``RecordProgress``, before it goes to a caller here): the database holds
each action's whole output, in order. An action carried out here stays until it has an
outcome, even when nobody here waits for it.

**A take-over** (another replica's session, now run here) re-sends the action id. Its caller
gets the action's output again from its start, from the database — never part of it live
and part not: when the worker is linked elsewhere, as always; when the action was written
before (``route_done(existed=True)``) or is being carried out here for another replica (a
caller joins it), the output and the outcome that come on the link are written and read
back in order (``via_table``), not handed over directly; when it already has an outcome,
its output is read back before it. The caller leaves out what it already has
(``Delivery.run``'s ``skip``). A ``Route`` carries the caller's fence: the database refuses
it from a runner whose lease moved on.

Attachments are tracked here too: the sessions attached on the worker's current connection
(seeded by its hello, forgotten when the connection changes), each with the MCP servers the
worker listed in its workdir when it attached it (none for those its hello named).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from codey_protocol import worker as wk
from codey_server.core.actions import ActionFailed
from codey_server.eventlog.base import Fence

__all__ = ["Answer", "CancelElsewhere", "Deliver", "Effect", "Outcome", "Record", "RecordProgress",
           "Route", "Router", "Send", "Settle", "away", "revoked"]

Outcome = wk.ActionOutcome | ActionFailed
#: frames a worker sends about an action
Answer = wk.ActionAccepted | wk.ActionProgress | wk.ActionResult | wk.ActionErrored

#: ids a link may hold as "the worker has it" (a worker that acknowledges ids it never
#: answers must not grow this without end; past it, an action may be sent once more)
HOLDS_MAX = 4096


def away() -> ActionFailed:
    return ActionFailed("cancelled", "cancelled while the worker was away")


def revoked() -> ActionFailed:
    return ActionFailed("revoked", "the worker was revoked; it will not answer")


# effects ------------------------------------------------------------------------------------
# (values: never changed once made; not frozen=True, which makes each one three times slower
# to build, and two are built per action)


@dataclass(slots=True)
class Send:
    """Send ``message`` on ``link`` (a worker's connection on this server)."""

    link: Any
    message: wk.ServerToWorker


@dataclass(slots=True)
class Settle:
    """Give ``outcome`` to ``waiters`` (raise it for them when it is an ActionFailed)."""

    action_id: str
    outcome: Outcome
    waiters: tuple[Hashable, ...]


@dataclass(slots=True)
class Deliver:
    """Hand the action's output to the listener its caller gave."""

    listener: Any
    progress: wk.ActionProgress


@dataclass(slots=True)
class Route:
    """Routed: write the action where the replica holding its worker finds it (``here``: the
    worker is linked to this server, no need to wake another); then call
    :meth:`Router.route_done` with the outcome already there, if any."""

    worker_id: str
    action: wk.ActionMessage
    here: bool
    #: the caller's lease holding (a session's runner among replicas)
    fence: Fence | None = None


@dataclass(slots=True)
class Record:
    """Routed: write the action's outcome where every replica reads it (first one wins)."""

    action_id: str
    outcome: Outcome


@dataclass(slots=True)
class RecordProgress:
    """Routed: write output of an action carried out here for another replica."""

    progress: wk.ActionProgress


@dataclass(slots=True)
class CancelElsewhere:
    """Routed: ask the replica holding the worker to send it a cancel for the target."""

    worker_id: str
    target_action_id: str
    session_id: str


Effect = Send | Settle | Deliver | Route | Record | RecordProgress | CancelElsewhere


# state --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Flight:
    worker_id: str
    action: wk.ActionMessage
    waiters: list[Hashable] = field(default_factory=list)
    listener: Any = None  # the latest of ``listeners``: who gets the output
    #: (waiter, listener) for each waiter that gave one, oldest first: a listener leaves with
    #: its waiter, and the one before it gets the output again
    listeners: list[tuple[Hashable, Any]] | None = None
    #: routing: being written for the replicas; pending: waits for a link; sent: on ``link``;
    #: accepted: the worker holds it on ``link``
    state: Literal["routing", "pending", "sent", "accepted"] = "pending"
    link: Any = None
    outcome: Outcome | None = None
    carried: bool = False  # routed: carried out here, kept until it has an outcome
    cancel_sent_on: Any = None
    fence: Fence | None = None  # routed: the first caller's, for a Route done again
    #: routed: output and outcome from the link are written, and read back for the callers
    via_table: bool = False
    held: Outcome | None = None  # via_table: the outcome written, not yet read back

    @property
    def action_id(self) -> str:
        return self.action.action_id


@dataclass(slots=True)
class _Link:
    token: Any
    holds: set[str]  # what the worker has said it holds and not answered yet on this link


class Router:
    """The exactly-once state of one server's actions. See the module docstring."""

    def __init__(self, *, routed: bool = False) -> None:
        self.routed = routed
        self._flights: dict[str, _Flight] = {}
        self._links: dict[str, _Link] = {}
        #: worker → the sessions attached on its connection → the MCP servers their attach
        #: listed in the workdir
        self._attached: dict[str, dict[str, list[wk.McpServerInfo]]] = {}

    # queries ---------------------------------------------------------------------------------

    def link(self, worker_id: str) -> Any:
        """The worker's current link on this server, or None."""
        link = self._links.get(worker_id)
        return link.token if link is not None else None

    def linked_workers(self) -> list[str]:
        return list(self._links)

    def state(self, action_id: str) -> str | None:
        """``routing``, ``pending``, ``sent``, ``accepted``, ``settled``; None when forgotten."""
        flight = self._flights.get(action_id)
        if flight is None:
            return None
        return "settled" if flight.outcome is not None else flight.state

    def awaiting_elsewhere(self) -> list[str]:
        """Routed: the actions written for the replicas, not settled, whose output and
        outcome come from the database: their worker is not linked here, or they go through
        it (``via_table``)."""
        return [f.action_id for f in self._flights.values()
                if f.outcome is None and f.state != "routing"
                and (f.via_table or f.worker_id not in self._links)]

    def wants_progress(self, action_id: str) -> bool:
        flight = self._flights.get(action_id)
        return flight is not None and flight.outcome is None and flight.listener is not None

    def is_attached(self, worker_id: str, session_id: str) -> bool:
        return session_id in self._attached.get(worker_id, ())

    def mcp_servers(self, worker_id: str, session_id: str) -> list[wk.McpServerInfo]:
        """The MCP servers the session's attach listed in its workdir ([]: not known here)."""
        return self._attached.get(worker_id, {}).get(session_id, [])

    def attached(self, worker_id: str, session_id: str,
                 mcp_servers: list[wk.McpServerInfo] | None = None) -> None:
        """The session was attached on the worker (its attach action succeeded), and these
        are the MCP servers it listed in the workdir."""
        self._attached.setdefault(worker_id, {})[session_id] = mcp_servers or []

    # a caller --------------------------------------------------------------------------------

    def submit(self, worker_id: str, action: wk.ActionMessage, waiter: Hashable,
               listener: Any = None, fence: Fence | None = None) -> list[Effect]:
        """``waiter`` waits for ``action``'s outcome, ``listener`` (if given) gets its output.
        A second submit of an ``action_id`` joins the first; its listener replaces the
        earlier one until it leaves. ``fence`` (routed): the caller's lease holding, which
        the write of a new action carries."""
        flight = self._flights.get(action.action_id)
        if flight is None:
            flight = self._flights[action.action_id] = _Flight(
                worker_id, action, [waiter], listener,
                None if listener is None else [(waiter, listener)], fence=fence)
            if self.routed:
                flight.state = "routing"
                return [Route(worker_id, action, here=worker_id in self._links, fence=fence)]
            return self._deliver(flight)
        if self.routed and flight.carried and not flight.waiters and listener is not None \
                and flight.outcome is None:
            # carried out here for the replica the session was on: a take-over. Its output
            # so far is in the database; the caller reads it all from there, in order
            flight.via_table = True
        flight.waiters.append(waiter)
        if listener is not None:
            flight.listener = listener
            if flight.listeners is None:
                flight.listeners = []
            flight.listeners.append((waiter, listener))
        if flight.outcome is not None:
            return [Settle(flight.action_id, flight.outcome, (waiter,))]
        return []

    def leave(self, action_id: str, waiter: Hashable, cut: Effect | None = None
              ) -> list[Effect]:
        """``waiter`` stopped waiting (it got the outcome, timed out or was cancelled).

        ``cut``: the effect its task was carrying out for this action when it was stopped (a
        ``Send`` or ``Route`` that may not have happened): done again for the others still
        waiting.
        """
        flight = self._flights.get(action_id)
        if flight is None:
            return []
        if waiter in flight.waiters:
            flight.waiters.remove(waiter)
        if flight.listeners:
            # its output must not go on to a caller that stopped (a turn whose session went
            # to another replica): to the one before it, or (routed) written for the next
            flight.listeners = [(w, lr) for w, lr in flight.listeners if w != waiter]
            flight.listener = flight.listeners[-1][1] if flight.listeners else None
        if not flight.waiters and (flight.outcome is not None or not flight.carried):
            del self._flights[action_id]  # nobody waits: never sent again, answers ignored
            return []
        if flight.outcome is not None:
            return []
        if isinstance(cut, Send) and flight.state == "sent" and flight.link is cut.link:
            flight.state = "pending"
            return self._deliver(flight)
        if isinstance(cut, Route) and flight.state == "routing":
            return [Route(flight.worker_id, flight.action, here=flight.worker_id in self._links,
                          fence=flight.fence)]
        return []

    def cancel(self, worker_id: str, target_action_id: str, session_id: str, cancel_id: str,
               *, elsewhere: bool = False) -> list[Effect]:
        """Stop an action. ``elsewhere`` (routed): the worker is connected to another
        replica. See the module docstring for what happens."""
        flight = self._flights.get(target_action_id)
        link = self._links.get(worker_id)
        if link is not None:
            if flight is not None:
                if flight.cancel_sent_on is link.token:
                    return []
                flight.cancel_sent_on = link.token
            return [Send(link.token, wk.Cancel(action_id=cancel_id, session_id=session_id,
                                               target_action_id=target_action_id))]
        if elsewhere:
            return [CancelElsewhere(worker_id, target_action_id, session_id)]
        if flight is not None and flight.outcome is None:
            return self._settle(flight, away())  # settled: never sent again
        if flight is None and self.routed:
            return [Record(target_action_id, away())]  # no replica may send it later
        return []

    def revoked(self, worker_id: str) -> list[Effect]:
        """The worker was revoked: it will not answer anything."""
        self._attached.pop(worker_id, None)
        effects: list[Effect] = []
        for flight in list(self._flights.values()):
            if flight.worker_id == worker_id and flight.outcome is None:
                effects += self._settle(flight, flight.held or revoked())
        return effects

    # the worker's link here ------------------------------------------------------------------

    def linked(self, worker_id: str, link: Any, running: Collection[str] = (),
               known_sessions: Collection[str] = ()) -> list[Effect]:
        """``link`` is now the worker's connection here (replacing any other). ``running``:
        the actions its hello says it runs; ``known_sessions``: the sessions attached in its
        process."""
        self._links[worker_id] = _Link(link, set(list(running)[:HOLDS_MAX]))
        self._attached[worker_id] = {session_id: [] for session_id in known_sessions}
        effects: list[Effect] = []
        for flight in list(self._flights.values()):
            if flight.worker_id == worker_id and flight.outcome is None \
                    and flight.held is None and flight.state != "routing":
                flight.state = "pending"  # the old link's delivery counts for nothing now
                flight.link = flight.cancel_sent_on = None
                effects += self._deliver(flight)
        return effects

    def unlinked(self, worker_id: str, link: Any) -> bool:
        """``link`` closed; True if it was the worker's current link here (an older one,
        replaced by a newer, changes nothing)."""
        current = self._links.get(worker_id)
        if current is None or current.token is not link:
            return False
        del self._links[worker_id]
        self._attached.pop(worker_id, None)
        for flight in self._flights.values():
            if flight.worker_id == worker_id and flight.state in ("sent", "accepted"):
                flight.state = "pending"
                flight.link = flight.cancel_sent_on = None
        return True

    def received(self, worker_id: str, link: Any, frame: Answer) -> list[Effect]:
        """A frame about an action from the worker, on ``link``."""
        action_id = frame.action_id
        current = self._links.get(worker_id)
        if current is not None and current.token is not link:
            current = None  # an old link's last frames: answers count, holdings do not
        flight = self._flights.get(action_id)
        if flight is not None and (flight.worker_id != worker_id or flight.outcome is not None):
            flight = None  # a worker answers only for its own actions, and only once
        kind = type(frame)  # (not isinstance: a miss on a msgspec struct costs 0.3 µs)
        if kind is wk.ActionResult or kind is wk.ActionErrored:
            if current is not None:
                current.holds.discard(action_id)
            if flight is None or flight.held is not None:
                return []  # late, or nobody's: ignored
            if kind is wk.ActionResult:
                outcome: Outcome = cast(wk.ActionResult, frame).result
            else:
                errored = cast(wk.ActionErrored, frame)
                outcome = ActionFailed(errored.code, errored.message)
            if flight.via_table:  # written after its output; the read-back settles it
                flight.held = outcome
                return [Record(action_id, outcome)]
            return self._settle(flight, outcome)
        if kind is wk.ActionProgress:
            if flight is None:
                return []
            progress = cast(wk.ActionProgress, frame)
            # routed: every frame is written first (the database holds the whole output, for
            # whoever takes the session over), then given to the caller here
            effects: list[Effect] = [RecordProgress(progress)] if self.routed else []
            if flight.listener is not None and not flight.via_table:
                effects.append(Deliver(flight.listener, progress))
            return effects
        # action_accepted: the worker holds it
        if current is not None and len(current.holds) < HOLDS_MAX:
            current.holds.add(action_id)
        if flight is not None and flight.state == "sent" and flight.link is link:
            flight.state = "accepted"
        return []

    # the database (routed) -------------------------------------------------------------------

    def route_done(self, action_id: str, outcome: Outcome | None, *,
                   existed: bool = False) -> list[Effect]:
        """The action's ``Route`` is done; ``outcome``: the one already recorded, if any;
        ``existed``: it had been written before (a take-over re-sends it)."""
        flight = self._flights.get(action_id)
        if flight is None or flight.outcome is not None or flight.state != "routing":
            return []
        if outcome is not None and flight.listener is not None:
            # carried out before, its output in the database: the caller reads that, then
            # the outcome (the read-back settles it), rather than the outcome alone
            flight.state, flight.via_table, flight.held = "pending", True, outcome
            return []
        if outcome is not None:
            return self._settle(flight, outcome, recorded=True)
        flight.state = "pending"
        if flight.worker_id in self._links:
            flight.carried = True  # the same-replica shortcut: this server carries it out
            if existed and flight.listener is not None:
                flight.via_table = True  # its output so far is in the database: read it all
        return self._deliver(flight)

    def carry(self, worker_id: str, action: wk.ActionMessage) -> list[Effect]:
        """Carry out an action another replica wrote for a worker linked here (once: a
        second call, or one for an action in flight here, adds nothing)."""
        flight = self._flights.get(action.action_id)
        if flight is None:
            flight = self._flights[action.action_id] = _Flight(worker_id, action)
        elif flight.outcome is not None or flight.held is not None \
                or flight.state == "routing":
            return []  # settled, or its own caller here is writing it (route_done sends)
        flight.carried = True
        return self._deliver(flight)

    def answered(self, action_id: str, outcome: Outcome) -> list[Effect]:
        """The action's outcome, read from the database (written by whichever replica)."""
        flight = self._flights.get(action_id)
        if flight is None or flight.outcome is not None:
            return []
        return self._settle(flight, outcome, recorded=True)

    def progressed(self, action_id: str, progress: wk.ActionProgress) -> list[Effect]:
        """Output of the action, read from the database."""
        flight = self._flights.get(action_id)
        if flight is None or flight.outcome is not None or flight.listener is None:
            return []
        return [Deliver(flight.listener, progress)]

    def presence_changed(self, worker_id: str) -> None:
        """The fold says the worker connected or disconnected (on any replica): a new
        connection elsewhere attaches afresh. A link here tracks its own attachments."""
        if worker_id not in self._links:
            self._attached.pop(worker_id, None)

    # inside ----------------------------------------------------------------------------------

    def _deliver(self, flight: _Flight) -> list[Effect]:
        link = self._links.get(flight.worker_id)
        if link is None or flight.state != "pending" or flight.outcome is not None:
            return []
        flight.link = link.token
        if flight.action_id in link.holds:
            flight.state = "accepted"  # the worker has it: its answer comes on this link
            return []
        flight.state = "sent"
        return [Send(link.token, flight.action)]

    def _settle(self, flight: _Flight, outcome: Outcome, *, recorded: bool = False
                ) -> list[Effect]:
        flight.outcome = outcome
        flight.carried = False
        effects: list[Effect] = []
        if flight.waiters:
            effects.append(Settle(flight.action_id, outcome, tuple(flight.waiters)))
        elif self._flights.get(flight.action_id) is flight:
            del self._flights[flight.action_id]
        if self.routed and not recorded:
            effects.append(Record(flight.action_id, outcome))
        link = self._links.get(flight.worker_id)
        if link is not None:
            link.holds.discard(flight.action_id)
        return effects
