"""A session's status: which changes are legal, in one table.

Every ``session_status_changed`` goes through :func:`check` on the write path
(:meth:`~codey_server.core.engine.Engine.submit` and ``execute``), so a decision that would make
an illegal change fails there — loudly, in tests — instead of leaving a session in a state no
screen explains. Staying in a status (a new reason) is always legal.

::

    idle ──► running ◄──► waiting_approval / waiting_worker / waiting_user   (busy)
      ▲         │                         │
      └─────────┤ (the turn ends)         │
                ▼                         ▼
         interrupted / error  ◄────── (any busy status)
                │
                └──► running (a retry, a new prompt, a resume)

    anything but closed ──► closed (final)
"""

from __future__ import annotations

from collections.abc import Mapping

from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.errors import ServerError

__all__ = ["BUSY", "TRANSITIONS", "IllegalTransition", "check"]

#: a turn is under way: the session works, or waits on someone for it
BUSY: frozenset[ev.SessionStatus] = frozenset(
    {"running", "waiting_approval", "waiting_worker", "waiting_user"})

#: from each status, the statuses a session may change to
TRANSITIONS: Mapping[ev.SessionStatus, frozenset[ev.SessionStatus]] = {
    # a turn begins; a compaction or a resume that fails before it runs errs; closed
    "idle": frozenset({"running", "error", "closed"}),
    **{busy: BUSY | {"idle", "interrupted", "error", "closed"} for busy in BUSY},
    # a retry, a new prompt or a resume runs it again
    "interrupted": frozenset({"running", "error", "closed"}),
    "error": frozenset({"running", "closed"}),
    "closed": frozenset(),
}


class IllegalTransition(ServerError):
    """A decision would change a session's status in a way :data:`TRANSITIONS` forbids."""


def check(state: State, events: list[tuple[str | None, ev.Event]]) -> None:
    """Raise :class:`IllegalTransition` if ``events``, appended to ``state`` in order, change
    a session's status illegally. Cheap when there is no status change among them."""
    changed: dict[str, ev.SessionStatus] = {}
    for session_id, event in events:
        if session_id is None:
            continue
        if isinstance(event, ev.SessionStatusChanged):
            session = state.sessions.get(session_id)
            before = changed.get(session_id, session.status if session else None)
            if before is not None and event.status != before \
                    and event.status not in TRANSITIONS[before]:
                raise IllegalTransition(f"session {session_id}: {before} → {event.status} "
                                        f"is not a legal status change ({event.reason!r})")
            changed[session_id] = event.status
        elif isinstance(event, (ev.SessionCreated, ev.SessionForked)):
            changed[session_id] = "idle"
