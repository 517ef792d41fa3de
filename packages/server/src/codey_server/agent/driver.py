"""The thin async driver of a turn: it carries out a turn machine's effects and feeds their
results back as inputs. Both turns — Codey's (:class:`~codey_server.agent.turn.CodeyTurn`) and
an ACP agent's (:class:`~codey_server.agent.acp.AcpTurn`) — run on it.

:meth:`TurnDriver.run` is the turn's asyncio task (started by the agent service). It holds the
turn's current value and feeds ``Start``, then one input at a time from its inbox. Each input
goes through the engine's write path: ``Engine.submit(step, input, exclusive=False)``, where
the decision is the pure :func:`~codey_server.agent.machine.step` of the turn's value (the turn
is the only writer of its session's steps, so its appends group-commit with everyone else's)
and the step's new value replaces the old one; only once the step's events are folded are its
effects started (so an effect never runs ahead of the record that explains it) and, when the
step asks, ``Proceed`` fed.

The driver keeps what is not the turn's to hold: the model providers (a ``CallModel`` names
one) and each session's encoded history (``BuildBody`` reads it, ``NoteBody`` records the
size of a body sent).

When the session moves on between a step's decision and its commit (a browser's command,
a process's output, another replica's write), the engine refuses the append and decides
again on the new state. The turn being a value, the second decision is the step taken afresh
from the value it had before the input, on the new state: what it decides may differ (the
status table, the session's position, what the new state holds). (An interrupt that commits
first cancels the turn's task as it is folded, before that: the turn's step never lands on
an interrupted session.)

Effects run as tasks (a model stream, an action, a wait) or timers; what they learn comes back
through the inbox, so the machine sees one input at a time, in order.

Cancelling the task is how a turn stops. On an interrupt the driver cancels its effects and
feeds ``Interrupted`` (shielded, so a second cancel cannot cut the clean-up short); during a
server shutdown (``deps.stopping()``) it only cancels them: the session resumes at the next
start. A bug in the machine, or an effect that fails unexpectedly, becomes ``Crashed``.

Among replicas the store and the actions are fenced by the session's lease: a write or an
action refused with :class:`~codey_server.errors.LeaseLost` (another replica took the session
over) ends the turn here at once, writing nothing more and cancelling nothing on the worker:
the new owner carries the session on from the log. :attr:`TurnDriver.lease_lost` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import WORKING_STATUSES, State
from codey_server.agent.errors import ModelError
from codey_server.agent.judge import judge
from codey_server.agent.machine import (
    ActionDone,
    ActionErrored,
    ActionProgressed,
    ActionTimedOut,
    Answered,
    ApprovalDecided,
    ApprovalExpired,
    BlobLoaded,
    BlobStored,
    BodyBuilt,
    BuildBody,
    CallModel,
    CancelAction,
    ChildDone,
    Crashed,
    Input,
    Interrupted,
    LoadBlob,
    Machine,
    ModelDone,
    ModelFailed,
    ModelParts,
    NoteBody,
    Proceed,
    Review,
    Reviewed,
    RunAction,
    SessionAttached,
    SetTimer,
    Start,
    Step,
    StoreBlob,
    TimerFired,
    TurnValue,
    WaitAnswer,
    WaitApproval,
    WaitChild,
    WaitHello,
    WebCall,
    WebDone,
    WorkerHello,
    WorkerPresence,
    step,
)
from codey_server.agent.ports import TurnDeps
from codey_server.agent.reviewer import ReviewFailed
from codey_server.agent.stream import ModelEvent
from codey_server.core.actions import ActionFailed
from codey_server.core.rules import Context, Decided
from codey_server.errors import LeaseLost

log = logging.getLogger("codey.agent")

__all__ = ["TurnDriver"]


@dataclass(frozen=True, slots=True)
class _Failure(Input):
    """An effect failed in a way no input describes (a bug): the turn crashes."""

    error: Exception


class _Inbox:
    """The inputs waiting for the machine, in order (an unbounded queue for one reader)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Input] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Input) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def put_part(self, part: ModelEvent, now: float) -> None:
        """A part of the model's stream: added to the parts not yet taken, if any."""
        items = self._items
        if items and isinstance(last := items[-1], ModelParts):
            last.parts.append(part)
        else:
            self.put(ModelParts([part], now=now))

    async def get(self) -> Input:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()


class TurnDriver:
    """Runs one turn: ``machine`` (its kind's handlers) from the value ``turn``."""

    def __init__(self, machine: Machine[Any], turn: TurnValue, deps: TurnDeps) -> None:
        self.machine = machine
        #: the turn's current value (each step makes the next)
        self.turn = turn
        self.deps = deps
        self.session_id = turn.core.session_id
        self._inbox = _Inbox()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._step = Step()
        #: the turn's value before the input being decided (see :meth:`_decide`)
        self._before: TurnValue = turn
        #: the last MCP list fed as SessionAttached
        self._mcp_servers: list[wk.McpServerInfo] | None = None
        #: set when the turn ended because a fenced write or action was refused
        self.lease_lost: LeaseLost | None = None
        #: an action of this turn may have changed files (its end state is then kept)
        self._changed = False
        #: the turn's end state was kept; the step that ends the turn was held back for it
        self._end_kept = False
        self._held = False
        self._start: dict[type[Any], Callable[[Any], None]] = {
            BuildBody: self._build_body, NoteBody: self._note_body,
            CallModel: self._call_model, RunAction: self._run_action,
            CancelAction: self._cancel, WaitApproval: self._wait_approval,
            WaitAnswer: self._wait_answer, WaitChild: self._wait_child,
            WaitHello: self._wait_hello, LoadBlob: self._load_blob,
            StoreBlob: self._store_blob, SetTimer: self._set_timer, Review: self._review,
            WebCall: self._web_call}

    def tell(self, input: Input) -> None:
        """Feed an input from outside the turn (``ContextChanged``); safe at any time."""
        self._inbox.put(input)

    # the task ------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._feed(Start(now=time.time()))
            while not self.turn.core.done:
                if not self._inbox and not self._tasks and not self._timers:
                    raise RuntimeError("the turn waits, but for nothing")
                await self._feed(await self._inbox.get())
        except asyncio.CancelledError:
            self._stop()
            if not self.deps.stopping():
                await asyncio.shield(self._interrupted())
            raise
        except LeaseLost as err:  # another replica runs the session now: stop, write nothing
            self._stop()
            self.lease_lost = err
        except Exception as err:  # a bug here must not take the server down
            log.exception("session %s failed", self.session_id)
            self._stop()
            with contextlib.suppress(Exception):
                await self._submit(Crashed(str(err), now=time.time()))
        finally:
            self._stop()

    async def _keep_end_state(self) -> None:
        """The turn's end state, kept when it changed files (see checkpoints/): taken before
        the step that ends the turn is appended, so nothing of the turn runs after it ends."""
        s = self.deps.store.state.sessions.get(self.session_id)
        if s is None:
            return
        try:
            await self.deps.checkpoints.turn_ended(self.session_id, s.worker_id, s.workdir)
        except Exception:  # a safety net's failure must not fail the turn
            log.warning("session %s: its turn's end state was not kept", self.session_id,
                        exc_info=True)

    async def _interrupted(self) -> None:
        """Close what the turn left open, and stop its actions on the worker."""
        try:
            step = await self._submit(Interrupted(now=time.time()))
            await asyncio.gather(*(self.deps.actions.cancel(e.worker_id, e.action_id,
                                                            e.session_id)
                                   for e in step.effects if isinstance(e, CancelAction)))
        except LeaseLost as err:  # the new owner closes what is open
            self.lease_lost = err
        except Exception:
            log.exception("cleanup after interrupt failed for %s", self.session_id)

    async def _feed(self, input: Input) -> None:
        if isinstance(input, _Failure):
            raise input.error
        step = await self._submit(input)
        while True:
            for effect in step.effects:
                self._start[type(effect)](effect)
            if not step.proceed:
                return
            step = await self._submit(Proceed(now=time.time()))

    async def _submit(self, input: Input) -> Step:
        """One step of the machine, as a decision on the write path; returns the step."""
        self._before = self.turn
        self._held = False
        await self.deps.store.submit(self._decide, input, exclusive=False)
        if self._held:  # the step would end a turn that changed files: its end state first
            self._end_kept = True
            await self._keep_end_state()
            self._before = self.turn
            await self.deps.store.submit(self._decide, input, exclusive=False)
            # the turn is over for everyone now; a prompt that came meanwhile is a new turn
            # this driver may go on with, and its changes get an end state of their own
            self._changed = self._end_kept = False
        return self._step

    def _decide(self, state: State, input: Input, ctx: Context) -> Decided:
        # from the value before this input, every time: a decision taken again (the session
        # moved on before its step committed) is the step taken afresh on the new state
        turn, made = step(self.machine, self._before, state, input, ctx)
        # the turn ends for the user at the step that takes the session out of its working
        # statuses (often one before the machine's last, which has no events): a prompt or a
        # hand edit may come right after it, so the end state is kept before that step
        ends = turn.core.done or any(
            isinstance(e, ev.SessionStatusChanged) and e.status not in WORKING_STATUSES
            for _, e in made.events)
        if ends and self._changed and not self._end_kept and \
                self.deps.checkpoints is not None and \
                not isinstance(input, Interrupted | Crashed):
            # held back: decided again once the end state is kept (see _submit)
            self._held = True
            self.turn, self._step = self._before, Step()
            return []
        self.turn, self._step = turn, made
        return self._step.events

    def _stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._effect_done)

    def _effect_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (err := task.exception()) is not None:
            self.tell(_Failure(err if isinstance(err, Exception) else RuntimeError(err)))

    # effects -------------------------------------------------------------------------------

    def _build_body(self, e: BuildBody) -> None:
        history = self.deps.models.history(e.session_id, e.wire.name)
        last = history.last_body_len
        body = e.wire.body(model=e.model, instructions=e.instructions,
                           messages=history.messages(e.items), tools=e.tools,
                           session_id=e.session_id, options=e.options)
        self.tell(BodyBuilt(body, last, now=time.time()))

    def _note_body(self, e: NoteBody) -> None:
        self.deps.models.history(e.session_id, e.wire_name).last_body_len = e.size

    def _call_model(self, e: CallModel) -> None:
        self._spawn(self._stream(e))

    async def _stream(self, e: CallModel) -> None:
        put = self._inbox.put
        now = time.time
        provider = self.deps.models.provider(e.provider)
        if provider is None:  # removed since the step named it
            put(ModelFailed(ModelError(f"the provider {e.provider!r} is no longer configured "
                                       "on this server", code="not_configured"), now=now()))
            return
        try:
            async for part in provider.stream(model=e.model, body=e.body,
                                              session_id=self.session_id):
                self._inbox.put_part(part, now())
        except ModelError as err:
            put(ModelFailed(err, now=now()))
            return
        put(ModelDone(now=now()))

    def _run_action(self, e: RunAction) -> None:
        self._spawn(self._action(e))

    async def _action(self, e: RunAction) -> None:
        actions = self.deps.actions
        action_id = e.action.action_id
        put = self._inbox.put
        if e.if_present and not actions.presence(e.worker_id).is_set():
            put(ActionErrored(action_id, "away", "the worker is not connected", now=time.time()))
            return

        async def progressed(p: wk.ActionProgress) -> None:
            put(ActionProgressed(action_id, p, now=time.time()))

        watcher = asyncio.get_running_loop().create_task(self._watch(e.worker_id, action_id)) \
            if e.watch else None
        try:
            if e.attach_timeout is not None:
                servers = await actions.ensure_attached(e.worker_id, e.action.session_id,
                                                        e.workdir, timeout=e.attach_timeout)
                # an input only when the list is news: the port answers every action with the
                # list its attach kept, and a step per action would be a step for nothing
                if servers and servers is not self._mcp_servers:
                    self._mcp_servers = servers
                    put(SessionAttached(servers, now=time.time()))
            # the turn's first change: the workdir is kept as it was, before it runs
            if self.deps.checkpoints is not None and e.report and \
                    await self.deps.checkpoints.before_change(
                        e.action.session_id, e.worker_id, e.workdir, e.action):
                self._changed = True
            outcome = await actions.run(e.worker_id, e.action,
                                        on_progress=progressed if e.progress else None,
                                        timeout=e.timeout, skip=e.skip)
        except TimeoutError:
            result: Input = ActionTimedOut(action_id, now=time.time())
        except ActionFailed as err:
            result = ActionErrored(action_id, err.code, err.message, now=time.time())
        else:
            result = ActionDone(action_id, outcome, now=time.time())
        finally:
            if watcher is not None:
                watcher.cancel()  # before the outcome is queued: no presence news after it
        if e.report:
            put(result)
        elif not isinstance(result, ActionDone):
            log.warning("session %s: %s did not arrive (%s)", self.session_id,
                        type(e.action).__name__, getattr(result, "message", "timed out"))

    async def _watch(self, worker_id: str, action_id: str) -> None:
        presence = self.deps.actions.presence(worker_id)
        absence = self.deps.actions.absence(worker_id)
        put = self._inbox.put
        while True:
            if not presence.is_set():
                put(WorkerPresence(action_id, False, now=time.time()))
                await presence.wait()
                put(WorkerPresence(action_id, True, now=time.time()))
            await absence.wait()

    def _cancel(self, e: CancelAction) -> None:
        self._spawn(self.deps.actions.cancel(e.worker_id, e.action_id, e.session_id))

    def _wait_approval(self, e: WaitApproval) -> None:
        self._spawn(self._approval(e))

    async def _approval(self, e: WaitApproval) -> None:
        waiting = self.deps.waits.approval(e.session_id, e.approval_id)
        if e.deadline is not None:
            try:
                await asyncio.wait_for(waiting, max(0.0, e.deadline - time.time()))
            except TimeoutError:
                self.tell(ApprovalExpired(e.approval_id, now=time.time()))
                return
        else:
            await waiting
        self.tell(ApprovalDecided(e.approval_id, now=time.time()))

    def _wait_answer(self, e: WaitAnswer) -> None:
        self._spawn(self._then(self.deps.waits.answer(e.session_id, e.question_id),
                               lambda: Answered(e.question_id, now=time.time())))

    def _wait_child(self, e: WaitChild) -> None:
        self._spawn(self._then(self.deps.waits.turn_over(e.session_id),
                               lambda: ChildDone(e.session_id, now=time.time())))

    def _wait_hello(self, e: WaitHello) -> None:
        self._spawn(self._then(self.deps.waits.hello(e.worker_id),
                               lambda: WorkerHello(e.worker_id, now=time.time())))

    async def _then(self, waiting: Awaitable[None], done: Callable[[], Input]) -> None:
        await waiting
        self.tell(done())

    def _load_blob(self, e: LoadBlob) -> None:
        load = self.deps.load_blob
        self.tell(BlobLoaded(e.digest, load(e.digest) if load else None, now=time.time()))

    def _store_blob(self, e: StoreBlob) -> None:
        self._spawn(self._store(e))

    async def _store(self, e: StoreBlob) -> None:
        store = self.deps.store_blob
        try:
            if store is None:
                raise OSError("this server has no blob store")
            digest = await asyncio.to_thread(store, e.data)
        except OSError as err:
            log.warning("session %s: could not keep %d bytes (%s)", self.session_id,
                        len(e.data), err)
            self.tell(BlobStored("", False, now=time.time()))
            return
        self.tell(BlobStored(digest, True, now=time.time()))

    def _review(self, e: Review) -> None:
        self._spawn(self._judge(e))

    async def _judge(self, e: Review) -> None:
        provider = self.deps.models.provider(e.provider)
        model = e.model or (provider.default_model if provider is not None else "")
        started = time.monotonic()
        try:
            verdict = await judge(provider, model, e.rubric, e.data, timeout=e.timeout)
        except ReviewFailed as err:
            verdict, error = None, str(err)
        else:
            error = ""
        self.tell(Reviewed(e.approval_id, verdict, error, time.monotonic() - started,
                           reviewer=f"{e.provider}/{model}", now=time.time()))

    def _web_call(self, e: WebCall) -> None:
        self._spawn(self._web(e))

    async def _web(self, e: WebCall) -> None:
        web = self.deps.web
        if web is None:
            status, text = "failed", "error: the web tools are not available on this server"
        else:
            status, text = await web.run(e.kind, e.target, e.prompt)
        self.tell(WebDone(e.item_id, cast(ev.ToolStatus, status), text, now=time.time()))

    def _set_timer(self, e: SetTimer) -> None:
        old = self._timers.pop(e.key, None)
        if old is not None:
            old.cancel()
        self._timers[e.key] = asyncio.get_running_loop().call_later(e.delay, self._fire, e.key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.tell(TimerFired(key, now=time.time()))
