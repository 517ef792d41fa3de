"""The engine: the event log, the folded state, and the one way to change it.

Order of calls: ``await Engine.start()`` (opens the log, loads the latest snapshot, replays
the tail; a snapshot made by other code is not trusted: the state is rebuilt from the log and
a fresh snapshot written, :mod:`~codey_server.core.snapshots`) → any number of ``execute`` /
``submit`` → ``await stop()`` (finishes in-flight appends, writes a final snapshot, closes the
log).

Every change goes a pure decision (``execute``: a browser command through the features'
rules; ``submit``: any other decision) → ``log.append`` → ``apply`` (here, in seq order) →
fan-out (the log publishes committed events to subscribers). These two are the only write
path: nothing else appends (``tests/unit/test_write_path.py`` checks every module). A write
returns only once its events are folded into :attr:`state`, so a caller always reads its own
writes.

Optimistic concurrency: each append carries the seq of the state its decision was taken on
(``expected``), and the log refuses it with :class:`~codey_server.errors.AppendConflict`
when one of its sessions has an event after that seq — another decision on the same state
of that session committed first (a turn's own step and a browser's command, or another
replica's). The engine then waits until that event is folded and takes the decision again,
on the new state, at most :data:`DECIDE_ATTEMPTS` times in all. So the status table
(:mod:`~codey_server.core.status`), checked on the state a decision was taken on, holds in
commit order too: two decisions taken on the same state of a session never both commit.

:attr:`state` is one object, set by ``start`` (from the latest snapshot) and from then on
changed in place by every fold (:mod:`codey_server.core.fold` mutates; it does not return a
new state). So anything read out of it — ``engine.state.sessions[sid]``, an item, a worker —
is live: after an ``await`` it already shows the events folded meanwhile (see
:mod:`codey_server.core.fold`); code that needs a value as of one moment reads it before its
next ``await`` or copies it. Listeners run right after their envelope is folded,
on the loop, so they see the state at exactly that seq.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import TypeVar

from codey_protocol import client as cl
from codey_protocol.events import Envelope, Event
from codey_protocol.foldversion import encode_snapshot
from codey_protocol.state import State
from codey_server.core import status
from codey_server.core.heap import release_free_memory
from codey_server.core.rules import Context, Decided, Rules
from codey_server.core.snapshots import load_state
from codey_server.errors import AppendConflict
from codey_server.eventlog import EventLog, Fence

log = logging.getLogger("codey.engine")

__all__ = ["DECIDE_ATTEMPTS", "Engine"]

#: how many times one write decides, when each time a session it touches moves on before its
#: append commits (then the last AppendConflict is raised)
DECIDE_ATTEMPTS = 10

In = TypeVar("In")


class Engine:
    def __init__(self, eventlog: EventLog, rules: Rules, *, snapshot_every: int = 5000,
                 context: Context | None = None) -> None:
        self.log = eventlog
        #: every feature's decisions and folds (``codey_server.features.RULES``)
        self.rules = rules
        self.state = State()
        self.context = context or Context()
        self.snapshot_every = snapshot_every
        self._pending: dict[int, Envelope] = {}  # committed, waiting for an earlier seq
        self._applied = asyncio.Condition()
        self._command_lock = asyncio.Lock()
        self._snapshot_seq = 0
        self._snapshot_task: asyncio.Task[None] | None = None
        self.started_at = 0.0
        self.replayed = 0
        #: called with each envelope right after it is folded (sync; schedule work, don't block)
        self.listeners: list[Callable[[Envelope], None]] = []
        #: True while listeners are told of an event another replica appended
        self.applying_foreign = False
        self._foreign: set[int] = set()
        #: told how long each append took, call to commit and fold (/metrics)
        self.append_timers: list[Callable[[float], None]] = []
        #: appends refused because a session moved on after their decision (each decided again)
        self.conflicts = 0

    # lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        t0 = time.perf_counter()
        await self.log.open()
        loaded = await load_state(self.log, self.rules.apply)
        self.state, self._snapshot_seq = loaded.state, loaded.snapshot_seq
        self.replayed += loaded.replayed
        self.started_at = time.time()
        # other replicas' appends (PostgreSQL): folded in seq order among this one's
        self.log.follow(self.state.seq, self._fold_foreign)
        log.info("state at seq %d (snapshot %d, replayed %d events) in %.3f s",
                 self.state.seq, self._snapshot_seq, self.replayed, time.perf_counter() - t0)
        # a snapshot of other code is replaced at once: the next start trusts this one
        if (loaded.foreign is not None and self.state.seq > 0) \
                or self.state.seq - self._snapshot_seq >= self.snapshot_every:
            await self.snapshot()

    async def stop(self) -> None:
        """Snapshot (start-up stays fast), then close the log, finishing in-flight appends.

        Anything committed after the snapshot is in the log and replayed at the next start.
        """
        if self._snapshot_task is not None:
            await asyncio.gather(self._snapshot_task, return_exceptions=True)
        if self.state.seq > self._snapshot_seq:
            try:
                await self.snapshot()
            except Exception:  # a snapshot is an optimisation; never fail shutdown on it
                log.exception("final snapshot failed")
        await self.log.close()

    # writes -------------------------------------------------------------------------------

    async def _append(self, events: Sequence[tuple[str | None, Event]], *,
                      fence: Fence | None = None, expected: int | None = None
                      ) -> list[Envelope]:
        """Append events atomically; returns once they are committed and folded. Private:
        every writer goes through :meth:`execute` or :meth:`submit`, which decide first."""
        if not events:
            return []
        status.check(self.state, list(events))
        started = time.perf_counter()
        # The fold must not depend on this caller: a task cancelled while its events commit
        # would otherwise leave them unfolded, and every later append would wait forever.
        appended = asyncio.ensure_future(self.log.append(events, fence=fence,
                                                         expected=expected))
        appended.add_done_callback(self._fold_when_done)
        envs = await asyncio.shield(appended)
        await self._folded(envs[-1].seq)
        for timer in self.append_timers:
            timer(time.perf_counter() - started)
        return envs

    async def _decide_and_append(self, decide: Callable[[], Decided],
                                 fence: Fence | None) -> list[Envelope]:
        """Run ``decide`` on the current state and append what it decided at that state's
        seq; when a session of it moved on meanwhile (:class:`AppendConflict`), wait until
        what moved it is folded and decide again (:data:`DECIDE_ATTEMPTS` in all)."""
        attempt = 1
        while True:
            at = self.state.seq  # (no await between here and the append's queueing)
            try:
                return await self._append(decide(), fence=fence, expected=at)
            except AppendConflict as err:
                self.conflicts += 1
                if attempt >= DECIDE_ATTEMPTS:
                    log.warning("gave up deciding after %d attempts: %s", attempt, err)
                    raise
                attempt += 1
                log.debug("deciding again (attempt %d): %s", attempt, err)
                await self._folded(err.seq)

    async def execute(self, command: cl.ClientToServer, *, origin: str = "") -> list[Envelope]:
        """Decide a browser command against the current state and append its events.

        Raises :class:`~codey_server.core.decide.CommandRejected` (nothing appended) when the
        command cannot be carried out. Commands are decided one at a time so that each sees
        the effects of the one before (the first decision on an approval wins). ``origin``
        says who sent it when not a browser (``mcp:<token id>``); the decision records it.
        When a session of it moved on before its append committed (a turn's step, another
        replica's write), it is decided again on the new state (see the module docstring).
        """
        ctx = dataclasses.replace(self.context, origin=origin) if origin else self.context
        async with self._command_lock:
            return await self._decide_and_append(
                lambda: self.rules.decide(self.state, command, ctx), None)

    async def submit(self, decision: Callable[[State, In, Context], Decided], input: In, *,
                     exclusive: bool = True, fence: Fence | None = None) -> list[Envelope]:
        """The write path for everything that is not a browser command: run the pure
        ``decision(state, input, ctx)`` against the current state and append its events
        (nothing when it decides nothing); returns once they are committed and folded.

        ``exclusive`` (the default) decides under the same lock as :meth:`execute`, so the
        decision sees the effects of every command and decision before it (a pairing code's
        first use wins, a schedule fires once). A session's own turn, the only writer of its
        steps, passes ``exclusive=False``: its appends then group-commit with everyone else's.
        A decision may raise :class:`~codey_server.core.rules.CommandRejected`; nothing is
        appended then.

        Either way the append carries the seq the decision was taken on: when a session of
        it moved on before the append committed, ``decision`` is called again, with the same
        ``input``, on the new state (so it must be pure); after :data:`DECIDE_ATTEMPTS`
        refusals the last :class:`~codey_server.errors.AppendConflict` is raised.

        ``fence`` (among replicas, a session's runner): the events are committed only while
        that lease holding is current; raises :class:`~codey_server.errors.LeaseLost`
        otherwise, with nothing appended (see :class:`~codey_server.eventlog.EventLog`).
        """
        def decide() -> Decided:
            return decision(self.state, input, self.context)

        if not exclusive:
            return await self._decide_and_append(decide, fence)
        async with self._command_lock:
            return await self._decide_and_append(decide, fence)

    async def catch_up(self) -> None:
        """Return once the state has folded every event committed so far, by any replica (the
        others' arrive through the log's follower): a decision taken next sees them all."""
        await self._folded(await self.log.committed_seq())

    async def _folded(self, seq: int) -> None:
        """Return once the state has folded ``seq`` (a committed one)."""
        if self.state.seq < seq:
            async with self._applied:
                await self._applied.wait_for(lambda: self.state.seq >= seq)

    def _fold_when_done(self, appended: asyncio.Future[list[Envelope]]) -> None:
        if not appended.cancelled() and appended.exception() is None:
            self._fold(appended.result())

    def _fold_foreign(self, envs: list[Envelope]) -> None:
        self._foreign.update(env.seq for env in envs if env.seq > self.state.seq)
        self._fold(envs)

    def _fold(self, envs: list[Envelope]) -> None:
        for env in envs:
            if env.seq > self.state.seq:
                self._pending[env.seq] = env
        advanced = False
        nxt = self.state.seq + 1
        while nxt in self._pending:
            env = self._pending.pop(nxt)
            self.rules.apply(self.state, env)
            if self._foreign:
                self.applying_foreign = nxt in self._foreign
                self._foreign.discard(nxt)
            for listener in self.listeners:
                try:
                    listener(env)
                except Exception:  # a listener's bug must not stop the fold
                    log.exception("listener failed on seq %d", env.seq)
            nxt += 1
            advanced = True
        self.applying_foreign = False
        if advanced:
            asyncio.get_running_loop().create_task(self._notify())
            self._maybe_snapshot()

    async def _notify(self) -> None:
        async with self._applied:
            self._applied.notify_all()

    # snapshots ----------------------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        if self.state.seq - self._snapshot_seq < self.snapshot_every:
            return
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        self._snapshot_task = asyncio.get_running_loop().create_task(self.snapshot())

    async def snapshot(self) -> None:
        # Encoding runs on the loop thread, so it sees one consistent state at one seq.
        seq = self.state.seq
        data = encode_snapshot(self.state)
        await self.log.save_snapshot(seq, data)
        self._snapshot_seq = seq
        size = len(data)
        del data
        # the biggest transient buffer there is, just freed: the heap's free pages go back
        # now, or they stay resident (core/heap.py)
        t0 = time.perf_counter()
        release_free_memory()
        log.debug("snapshot at seq %d (%d bytes); free memory released in %.1f ms", seq, size,
                  (time.perf_counter() - t0) * 1000)

    async def trim(self, keep: Collection[str]) -> int:
        """Delete the stored events of every session not in ``keep`` (retention), up to a
        snapshot taken now, so a restart rebuilds the same state from that snapshot."""
        if self._snapshot_task is not None:
            await asyncio.gather(self._snapshot_task, return_exceptions=True)
        await self.snapshot()
        return await self.log.trim(keep, self._snapshot_seq)
