"""``Delivery``: the agent's :class:`~codey_server.core.actions.Actions`, carried out through
the sans-I/O :class:`~codey_server.core.router.Router`.

It owns the router and does its effects: settles each caller's own future (a caller that
times out or is cancelled takes only its future with it; no shield or ``wait_for`` between the
worker's answer and the caller), sends on a worker's :class:`~codey_server.core.actions.Link`,
calls the caller's progress callback, and, among replicas, writes and reads through
:class:`~codey_server.core.actions.Routes`. It holds no exactly-once state of its own.

Who feeds it:

- callers: :meth:`run`, :meth:`cancel`, :meth:`ensure_attached` (the ``Actions`` port);
- the worker sockets (:mod:`codey_server.workers.sockets`): :meth:`linked` after a worker's
  hello, :meth:`received` for each frame about an action, :meth:`unlinked` when its socket
  ends;
- the cluster (:mod:`codey_server.cluster.replicas`): :meth:`carry`, :meth:`answered`,
  :meth:`progressed`, from the rows it picks up and reads back;
- the fold: ``worker_revoked`` fails every wait on that worker; presence (``presence``,
  ``absence``) is :class:`~codey_server.core.presence.Presence`, the fold's answer.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.core.actions import ActionFailed, Link, ProgressCallback, Routes
from codey_server.core.background import Background
from codey_server.core.engine import Engine
from codey_server.core.presence import Presence
from codey_server.core.router import (
    Answer,
    CancelElsewhere,
    Deliver,
    Effect,
    Outcome,
    Record,
    RecordProgress,
    Route,
    Router,
    Send,
    Settle,
)
from codey_server.eventlog.base import Fence

__all__ = ["Delivery"]

log = logging.getLogger("codey.actions")


@dataclass
class _Doing:
    """The effect a caller's task is carrying out, so a cut-off caller can say which."""

    effect: Effect | None = None


class Delivery:
    """Actions on workers, exactly once per ``action_id``. See the module docstring."""

    def __init__(self, engine: Engine, presence: Presence, *,
                 routes: Routes | None = None) -> None:
        self.engine = engine
        self.presences = presence
        #: among replicas, the database between them (None: one server, nothing routed)
        self.routes = routes
        self.router = Router(routed=routes is not None)
        #: called with the worker id when a worker is linked here (the cluster picks up
        #: the actions written for it)
        self.on_linked: list[Callable[[str], None]] = []
        self._background = Background(log)
        engine.listeners.append(self._on_event)

    async def stop(self) -> None:
        await self._background.cancel()

    # the Actions port ------------------------------------------------------------------------

    async def run(self, worker_id: str, action: wk.ActionMessage, *,
                  on_progress: ProgressCallback | None = None,
                  timeout: float | None = None, skip: int = 0,
                  fence: Fence | None = None) -> wk.ActionOutcome:
        """Deliver ``action`` to the worker exactly once and wait for its outcome.

        Raises :class:`ActionFailed` for ``ActionErrored`` (and revoked, cancelled while the
        worker was away) and ``TimeoutError`` when no outcome came in ``timeout`` seconds.
        Running an ``action_id`` that is in flight joins the existing wait; once nobody waits
        the action is forgotten: not re-sent after a reconnect, a late answer ignored.

        Among replicas ``on_progress`` gets the action's output from its start (see the
        router), less its first ``skip`` characters; ``fence`` goes with the action's write
        (:class:`~codey_server.errors.LeaseLost` when stale). One server ignores both: after
        a restart the worker sends only the output that follows.
        """
        info = self.engine.state.workers.get(worker_id)
        if info is None or info.revoked:
            raise ActionFailed("revoked", "the worker was revoked; it will not run anything")
        if skip and on_progress is not None and self.router.routed:
            on_progress = _skipping(on_progress, skip)
        waiter: asyncio.Future[wk.ActionOutcome] = asyncio.get_running_loop().create_future()
        doing = _Doing()
        effects = self.router.submit(worker_id, action, waiter, on_progress, fence)
        try:
            async with asyncio.timeout(timeout):
                await self._do(effects, doing)
                return await waiter
        finally:
            later = self.router.leave(action.action_id, waiter, doing.effect)
            if later:  # this caller was cut off sending it; the others still wait
                self._background.spawn(self._do(later), f"deliver-{action.action_id}")
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # settled as this caller left: nobody else will look

    async def cancel(self, worker_id: str, target_action_id: str, session_id: str) -> None:
        """Ask the worker to stop an action; the action's own outcome says how it ended. With
        the worker away, the action ends "cancelled while the worker was away"."""
        elsewhere = self.router.routed and self.presences.connected(worker_id)
        await self._do(self.router.cancel(worker_id, target_action_id, session_id,
                                          _new_id(), elsewhere=elsewhere))

    async def ensure_attached(self, worker_id: str, session_id: str, workdir: str, *,
                              timeout: float | None = None) -> list[wk.McpServerInfo]:
        """Attach the session on the worker's current connection (idempotent, cheap); the
        MCP servers it listed in the workdir (see :class:`~codey_server.core.actions.Actions`).

        Raises ActionFailed when the worker refuses the workdir (e.g. outside its roots).
        """
        if self.router.is_attached(worker_id, session_id):
            return self.router.mcp_servers(worker_id, session_id)
        outcome = await self.run(worker_id, wk.AttachSession(
            action_id=_new_id(), session_id=session_id, workdir=workdir), timeout=timeout)
        servers = outcome.mcp_servers if isinstance(outcome, wk.Attached) else []
        self.router.attached(worker_id, session_id, servers)
        return servers

    def presence(self, worker_id: str) -> asyncio.Event:
        """Set while the worker is connected (to any replica): the fold's answer."""
        return self.presences.presence(worker_id)

    def absence(self, worker_id: str) -> asyncio.Event:
        """Set while the worker is not connected."""
        return self.presences.absence(worker_id)

    # the worker sockets ----------------------------------------------------------------------

    def link(self, worker_id: str) -> Link | None:
        """The worker's connection on this server, if it has one."""
        link: Link | None = self.router.link(worker_id)
        return link

    def linked_workers(self) -> list[str]:
        return self.router.linked_workers()

    async def linked(self, worker_id: str, link: Link, *, running: Collection[str] = (),
                     known_sessions: Collection[str] = ()) -> None:
        """``link`` is the worker's connection here from now on: every action it has not
        answered goes out on it, except those it says it is running."""
        effects = self.router.linked(worker_id, link, running, known_sessions)
        for hook in self.on_linked:
            hook(worker_id)
        await self._do(effects)

    def unlinked(self, worker_id: str, link: Link) -> bool:
        """``link`` ended; True if it was the worker's current one."""
        return self.router.unlinked(worker_id, link)

    async def received(self, worker_id: str, link: Link, frame: Answer) -> None:
        """An ``action_accepted`` / ``_progress`` / ``_result`` / ``_errored`` frame."""
        effects = self.router.received(worker_id, link, frame)
        if effects and not self._now(effects):
            await self._do(effects)

    # the database (among replicas) -----------------------------------------------------------

    async def carry(self, worker_id: str, action: wk.ActionMessage) -> None:
        await self._do(self.router.carry(worker_id, action))

    async def answered(self, action_id: str, outcome: Outcome) -> None:
        await self._do(self.router.answered(action_id, outcome))

    async def progressed(self, action_id: str, progress: wk.ActionProgress) -> None:
        await self._do(self.router.progressed(action_id, progress))

    # effects ---------------------------------------------------------------------------------

    def _now(self, effects: list[Effect]) -> bool:
        """Carry ``effects`` out here when none needs an await (an answer settling its
        waiters, the common case: no coroutine more on the worker's read loop); False,
        having done nothing, when one does."""
        for effect in effects:
            if type(effect) is not Settle:
                return False
        for effect in effects:
            assert isinstance(effect, Settle)
            for waiter in effect.waiters:
                _give(waiter, effect.outcome)
        return True

    async def _do(self, effects: list[Effect], doing: _Doing | None = None) -> None:
        for effect in effects:
            if isinstance(effect, Settle):
                for waiter in effect.waiters:
                    _give(waiter, effect.outcome)
            elif isinstance(effect, Send):
                if doing is not None:
                    doing.effect = effect
                try:
                    await effect.link.send(effect.message)
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # a broken socket: its end, then the reconnect, re-send
                    log.debug("could not send %s (%s)", type(effect.message).__name__, err)
            elif isinstance(effect, Deliver):
                await effect.listener(effect.progress)
            elif isinstance(effect, Route):
                if doing is not None:
                    doing.effect = effect
                outcome, existed = await self._routes.route(
                    effect.worker_id, effect.action, here=effect.here, fence=effect.fence)
                if doing is not None:
                    doing.effect = None
                await self._do(self.router.route_done(effect.action.action_id, outcome,
                                                      existed=existed), doing)
            elif isinstance(effect, Record):
                # not waited for: the caller has its outcome; progress rows were written first
                self._background.spawn(self._routes.record(effect.action_id, effect.outcome),
                                       f"record-{effect.action_id}")
            elif isinstance(effect, RecordProgress):
                await self._routes.record_progress(effect.progress)
            elif isinstance(effect, CancelElsewhere):
                await self._routes.cancel_elsewhere(effect.worker_id, effect.target_action_id,
                                                    effect.session_id)
        if doing is not None:
            doing.effect = None

    @property
    def _routes(self) -> Routes:
        if self.routes is None:  # the router asks for a route only when it is routed
            raise RuntimeError("a Delivery without routes was asked to route an action")
        return self.routes

    def _on_event(self, env: ev.Envelope) -> None:
        e = env.event
        if isinstance(e, ev.WorkerRevoked):
            effects = self.router.revoked(e.worker_id)
            if effects:
                self._background.spawn(self._do(effects), f"revoked-{e.worker_id}")
        elif isinstance(e, (ev.WorkerConnected, ev.WorkerDisconnected)):
            self.router.presence_changed(e.worker_id)


def _skipping(listener: ProgressCallback, skip: int) -> ProgressCallback:
    """``listener`` without the first ``skip`` characters of the output (across frames)."""
    left = skip

    async def progressed(progress: wk.ActionProgress) -> None:
        nonlocal left
        if left:
            cut = min(left, len(progress.data))
            left -= cut
            if cut == len(progress.data):
                return
            progress = wk.ActionProgress(action_id=progress.action_id, stream=progress.stream,
                                         data=progress.data[cut:])
        await listener(progress)

    return progressed


def _give(waiter: Any, outcome: Outcome) -> None:
    if waiter.done():
        return
    if isinstance(outcome, ActionFailed):
        waiter.set_exception(outcome)
    else:
        waiter.set_result(outcome)


def _new_id() -> str:
    return f"act_{secrets.token_hex(8)}"
