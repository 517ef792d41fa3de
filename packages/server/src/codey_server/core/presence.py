"""Is this worker connected? One answer, read from the fold.

``worker_connected`` / ``worker_disconnected`` / ``worker_revoked`` are folded into
``WorkerInfo.connected`` (and ``replica``: which server holds its socket); :class:`Presence`
reads only that, kept current by an engine listener, for the turn runners (a session waits
for its worker), the routes and the terminals. The worker sockets know a moment earlier that a
socket came or went, but they only append those events: what they know beyond them stays
inside the transport (where to send a frame).
"""

from __future__ import annotations

import asyncio

from codey_protocol import events as ev
from codey_server.core.engine import Engine

__all__ = ["Presence"]


class Presence:
    """``connected`` and the events runners wait on, from the folded state.

    Create it once per server before the engine replays (or at least before anything waits
    on it); its events are made on first use from the state as folded then.
    """

    def __init__(self, engine: Engine, replica: str = "") -> None:
        self.engine = engine
        #: this server's name among replicas ("" alone): ``here`` compares it with the fold's
        self.replica = replica
        self._present: dict[str, asyncio.Event] = {}
        self._absent: dict[str, asyncio.Event] = {}
        self._absent_here: dict[str, asyncio.Event] = {}
        engine.listeners.append(self._on_event)

    def connected(self, worker_id: str) -> bool:
        """Whether the worker is connected, to this server or another replica."""
        info = self.engine.state.workers.get(worker_id)
        return info is not None and info.connected and not info.revoked

    def here(self, worker_id: str) -> bool:
        """Whether the worker is connected to this server."""
        info = self.engine.state.workers.get(worker_id)
        return self.connected(worker_id) and info is not None and info.replica == self.replica

    def presence(self, worker_id: str) -> asyncio.Event:
        """Set while the worker is connected."""
        event = self._present.get(worker_id)
        if event is None:
            event = self._present[worker_id] = asyncio.Event()
            self._absent[worker_id] = asyncio.Event()
            self._absent_here[worker_id] = asyncio.Event()
            self._update(worker_id)
        return event

    def absence(self, worker_id: str, *, here: bool = False) -> asyncio.Event:
        """Set while the worker is not connected (``here``: not connected to this server)."""
        self.presence(worker_id)
        return (self._absent_here if here else self._absent)[worker_id]

    def _update(self, worker_id: str) -> None:
        for event, on in ((self._present[worker_id], self.connected(worker_id)),
                          (self._absent[worker_id], not self.connected(worker_id)),
                          (self._absent_here[worker_id], not self.here(worker_id))):
            if on:
                event.set()
            else:
                event.clear()

    def _on_event(self, env: ev.Envelope) -> None:
        e = env.event
        if isinstance(e, (ev.WorkerConnected, ev.WorkerDisconnected, ev.WorkerRevoked)) \
                and e.worker_id in self._present:
            self._update(e.worker_id)
