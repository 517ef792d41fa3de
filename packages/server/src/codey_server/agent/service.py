"""The agent service: starts a turn when a session gets a prompt, stops it on interrupt,
wakes turns waiting for approvals, answers and sub-agents, compacts on request, and resumes
running sessions after a restart.

A turn is a value (:class:`~codey_server.agent.turn.CodeyTurn`, or
:class:`~codey_server.agent.acp.AcpTurn` for a session an ACP agent runs) on a
:class:`~codey_server.agent.driver.TurnDriver`, whose ``run`` is the session's task. Which
turns run, and what is claimed, queued, swept, released and reconciled around them, is decided
by the session supervisor (:mod:`~codey_server.agent.supervisor`, a pure ``step``): this
service feeds it inputs (folded events, a turn's end, a claim's answer, the sweep's tick) and
carries out its effects (start or cancel a turn's task, take or release a lease, ask a worker
for its processes).

It reacts to folded events (an engine listener), so a command from any path — the browser
socket, the REST API — has the same effect. It owns the model providers (one pooled client
each, closed at :meth:`stop`) and each session's encoded history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.events import Envelope
from codey_protocol.state import Approval, Question, SessionInfo, State
from codey_server.agent import supervisor as sv
from codey_server.agent.acp import ACP, acp_turn
from codey_server.agent.driver import TurnDriver
from codey_server.agent.history import History
from codey_server.agent.machine import ContextChanged, Ladder, ReviewerLimits
from codey_server.agent.models import ModelProvider, build_provider, discover_ollama_models
from codey_server.agent.ports import Actions, Limits, TurnDeps, provider_infos
from codey_server.agent.processes import (
    Forwarded,
    Listed,
    Stopped,
    forwarded,
    listed,
    stopped,
)
from codey_server.agent.ratewindow import RateWindows
from codey_server.agent.supervisor import (
    Boot,
    CancelTurn,
    Claim,
    ClaimFailed,
    Detach,
    FindFree,
    Folded,
    ForwardPort,
    FreeFound,
    Halt,
    Holding,
    HoldingLost,
    LeaseTaken,
    ListProcesses,
    ProcessesListed,
    Release,
    ReloadContext,
    Say,
    StartTurn,
    StopProcess,
    Supervisor,
    SweepTick,
    TurnEnded,
    TurnWanted,
    lease_name,
)
from codey_server.agent.turn import CodeyMachine, codey_turn
from codey_server.agent.turn.hooks import HOOKS_TIMEOUT_S, session_end, session_wants
from codey_server.agent.web import stored as web_stored
from codey_server.agent.web.run import WebTools
from codey_server.agent.wire import Loader, wire_for
from codey_server.core.actions import ActionFailed, ProgressCallback
from codey_server.core.background import Background
from codey_server.core.engine import Engine
from codey_server.core.fold import find_process
from codey_server.core.rules import Context, Decided
from codey_server.settings import ProviderConfig, Settings, WebConfig, provider_config

if TYPE_CHECKING:
    from codey_server.core.leases import Fence, Leases

log = logging.getLogger("codey.agent")

__all__ = ["AgentService"]

#: how often a replica looks for sessions whose turn nobody runs (a dead replica's)
SWEEP_S = 1.0
#: what one server knows of a lease: nothing (it has none)
_NO_HOLDING = Holding()
#: how long a process's stop (or a worker's list of processes) may take to answer
PROCESS_ACTION_TIMEOUT_S = 60.0

In = TypeVar("In")
TokenFor = Callable[[str], Awaitable[str | None]]
RefreshFor = Callable[[str], Awaitable[bool]]


class _Credentials:
    """One provider's view of the login service."""

    def __init__(self, name: str, token_for: TokenFor, refresh_for: RefreshFor | None) -> None:
        self.name = name
        self._token_for = token_for
        self._refresh_for = refresh_for

    async def token(self) -> str | None:
        return await self._token_for(self.name)

    async def refresh(self) -> bool:
        return await self._refresh_for(self.name) if self._refresh_for is not None else False


class _Waiters:
    """Turns waiting for something about one key, each until a condition on the state
    holds; :meth:`wake` makes them look again. One per kind of wait (approvals by id,
    questions by id, sessions' turns by session id)."""

    def __init__(self) -> None:
        self._futures: dict[str, list[asyncio.Future[None]]] = {}

    async def until(self, key: str, over: Callable[[], bool]) -> None:
        """Return once ``over()`` is true: at once, or after a :meth:`wake` of ``key`` (the
        condition is checked and the waiter registered with no await between, so a wake
        cannot be missed)."""
        while not over():
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiting = self._futures.setdefault(key, [])
            waiting.append(future)
            try:
                await future
            finally:
                if future in waiting:
                    waiting.remove(future)
                    if not waiting:
                        self._futures.pop(key, None)

    def wake(self, key: str) -> None:
        for future in self._futures.pop(key, []):
            if not future.done():
                future.set_result(None)


@dataclasses.dataclass(frozen=True)
class WebSetup:
    """The web tools' settings the service runs with now: the effective ``web`` section,
    ``fetch_allow`` and Settings → Tools' domains as the gate reads them, and what Settings →
    Tools saved (None: nothing; the config's alone)."""

    config: WebConfig
    fetch_allow: tuple[str, ...]
    fetch_domains: tuple[str, ...]
    stored: web_stored.StoredWeb | None


class AgentService:
    #: idle sessions whose encoded conversation (:class:`History`, about the size of their
    #: items again) stays cached, the ones used last; a session whose cache went encodes its
    #: conversation afresh at its next call, once. A server up for weeks kept one for every
    #: session it ever ran (issue 36). Those of running turns always stay.
    histories_kept = 32

    def __init__(self, engine: Engine, workers: Actions, settings: Settings,
                 token_for: TokenFor, refresh_for: RefreshFor | None = None,
                 load_blob: Loader | None = None, *, actions: Actions | None = None,
                 leases: Leases | None = None,
                 store_blob: Callable[[bytes], str] | None = None) -> None:
        self.engine = engine
        #: among replicas: a session's turn runs where its lease is held (None: one server)
        self.leases = leases
        #: which sessions' turns run here, and what is under way for them (a value, changed
        #: only by :func:`~codey_server.agent.supervisor.step`)
        self.supervisor = Supervisor(leased=leases is not None)
        self._sweeper: asyncio.Task[None] | None = None
        if leases is not None:
            leases.on_lost.append(self._lease_lost)
        self.load_blob = load_blob
        self.workers = workers
        self.settings = settings
        self._token_for = token_for
        self._refresh_for = refresh_for
        #: the providers' shared rate-limit windows (the fleet governor's driver)
        self.windows = RateWindows()
        #: config.json's providers, then those of Settings → Models (defined from the log's
        #: ``provider_saved`` events at :meth:`start` and as they come; config.json's win)
        self.providers: dict[str, ModelProvider] = {
            config.name: self._build(config) for config in settings.providers}
        self._file_providers = frozenset(self.providers)
        self.histories: dict[tuple[str, str], History] = {}
        #: the live side of the supervisor's ``running``: each such session's task and driver
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.drivers: dict[str, TurnDriver] = {}
        #: the waits (ports.Waits): approvals and questions by id, sessions' turns by id
        self._approvals = _Waiters()
        self._answers = _Waiters()
        self._turns = _Waiters()
        self._hellos = _Waiters()
        #: the workers that said hello to this server since it started (seen connecting: a
        #: replay at the start tells no listener), by id
        self._greeted: set[str] = set()
        self._background = Background(log)
        self.deps = TurnDeps(
            store=engine, actions=actions or workers, models=self, waits=self,
            limits=Limits(turn_iteration_cap=settings.turn_iteration_cap,
                          action_timeout_s=settings.action_timeout_s,
                          approval_timeout_s=settings.approval_timeout_s,
                          ladder=Ladder(settings.attention.nudge_after_s,
                                        settings.attention.act_after_s,
                                        settings.attention.on_approval,
                                        settings.attention.on_question),
                          reviewer=ReviewerLimits(
                              settings.reviewer.provider, settings.reviewer.model,
                              settings.reviewer.risk_threshold, settings.reviewer.timeout_s,
                              settings.reviewer.denials_to_park)),
            stopping=lambda: self.stopping, roles=dict(settings.roles), load_blob=load_blob,
            store_blob=store_blob)
        self.set_web(web_stored.load(settings.data_dir))
        engine.listeners.append(self._on_event)

    # the web tools (Settings → Tools) ------------------------------------------------------

    def set_web(self, stored: web_stored.StoredWeb | None) -> None:
        """Run the web tools with Settings → Tools' ``stored`` over the config's (None: the
        config's alone); turns that start from now on use them."""
        config, key = web_stored.effective(self.settings.web, stored)
        self.deps.web = WebTools.of(config, key)
        self.web_config = WebSetup(config, tuple(config.fetch_allow),
                                   tuple(stored.fetch_domains) if stored else (), stored)

    # providers of Settings → Models ---------------------------------------------------------

    def _build(self, config: ProviderConfig) -> ModelProvider:
        provider = build_provider(config, _Credentials(config.name, self._token_for,
                                                        self._refresh_for))
        provider.windows = self.windows
        return provider

    def _define(self, entry: ev.ProviderEntry) -> None:
        """Use a provider saved in Settings → Models from now on: the next model call of every
        session on it goes to the new definition (a call under way finishes on the old one)."""
        if entry.name in self._file_providers:
            return  # config.json's wins
        old = self.providers.get(entry.name)
        provider = self.providers[entry.name] = self._build(provider_config(entry))
        provider.prepare()  # its SDK starts loading now, not on its first call
        if old is not None:
            self._background.spawn(old.aclose(), f"close-{entry.name}")
        if entry.kind == "ollama" and not entry.models:
            self._background.spawn(self._discover(provider), f"discover-{entry.name}")

    def _forget(self, name: str) -> None:
        if name in self._file_providers:
            return
        old = self.providers.pop(name, None)
        if old is not None:
            self._background.spawn(old.aclose(), f"close-{name}")

    async def token_for(self, name: str) -> str | None:
        """A provider's current bearer (for Settings → Models' listing of its models)."""
        return await self._token_for(name)

    async def _discover(self, provider: ModelProvider) -> None:
        found = await discover_ollama_models(provider.config.base_url)
        provider.models = found or provider.models

    # ports.Models ---------------------------------------------------------------------------

    def provider(self, name: str) -> ModelProvider | None:
        return self.providers.get(name)

    def history(self, session_id: str, wire_name: str) -> History:
        key = (session_id, wire_name)
        history = self.histories.pop(key, None)  # and in again, last: the dict is LRU order
        if history is None:
            history = History(wire_for(wire_name), self.load_blob)
        self.histories[key] = history
        return history

    def _drop_idle_histories(self) -> None:
        """Keep the histories of :attr:`histories_kept` idle sessions, the ones used last."""
        idle = [key for key in self.histories if key[0] not in self.tasks]
        for key in idle[:max(0, len(idle) - self.histories_kept)]:
            del self.histories[key]

    # lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        for entry in self.engine.state.providers.values():
            self._define(entry)
        for provider in self.providers.values():
            # each SDK starts loading in its thread now, the server's start being all but
            # done (so it does not slow it): a session's first model call, seconds away at
            # the soonest, then finds it loaded, instead of every session started meanwhile
            # waiting for the import and all calling at once when it ends
            provider.prepare()
        for provider in self.providers.values():
            if provider.config.kind == "ollama" and provider.name in self._file_providers:
                found = await discover_ollama_models(provider.config.base_url)
                provider.models = found or provider.models
                if found and not self.engine.context.default_models.get(provider.name):
                    self.engine.context.default_models[provider.name] = found[0]
        # one server: each session left with work begins it; among replicas the sweep takes
        # the sessions whose lease nobody holds
        self._feed(Boot())
        if self.leases is not None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(),
                                                                   name="agent-sweep")

    async def stop(self) -> None:
        # Runners stop without touching the sessions: they resume at the next start.
        self._feed(Halt())  # (cancels every turn task)
        if self._sweeper is not None:
            self._sweeper.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await self._background.cancel()
        for provider in self.providers.values():
            await provider.aclose()

    @property
    def stopping(self) -> bool:
        return self.supervisor.stopping

    def running(self, session_id: str) -> bool:
        return session_id in self.supervisor.running

    def start_turn(self, session_id: str, *, resume: bool = False,
                   compact_only: bool = False) -> None:
        """Start the session's turn here, claim the session first (among replicas), or queue
        a turn behind the one running; what decides is the supervisor."""
        want: sv.Want = "compact" if compact_only else "resume" if resume else "turn"
        self._feed(TurnWanted(session_id, want, self._holding(session_id),
                              self.engine.applying_foreign))

    # the supervisor's inputs and effects ------------------------------------------------------

    def _holding(self, session_id: str | None) -> Holding:
        """What this replica knows of the session's lease now (one server: nothing)."""
        if self.leases is None or session_id is None:
            return _NO_HOLDING
        name = lease_name(session_id)
        return Holding(name in self.leases.held, self.leases.fence(name))

    def _step(self, input: sv.Input) -> list[sv.Effect]:
        """One step of the supervisor; its effects, for the caller to carry out in order."""
        self.supervisor, effects = sv.step(self.supervisor, self.engine.state, input)
        return effects

    def _feed(self, input: sv.Input) -> None:
        """One step of the supervisor, its effects carried out at once (or started as tasks)."""
        for effect in self._step(input):
            self._carry_out(effect)

    def _carry_out(self, effect: sv.Effect) -> None:
        spawn = self._background.spawn
        match effect:
            case StartTurn():
                self._start_turn(effect)
            case CancelTurn(session_id):
                task = self.tasks.get(session_id)
                if task is not None:
                    task.cancel()
            case ReloadContext(session_id, now):
                driver = self.drivers.get(session_id)
                if driver is not None:
                    driver.tell(ContextChanged(now=now))
            case Claim(session_id, delay, want):
                spawn(self._claim(session_id, delay, want), f"claim-{session_id}")
            case Release(session_id):
                assert self.leases is not None
                spawn(self.leases.release(lease_name(session_id)), f"release-{session_id}")
            case FindFree():
                spawn(self._find_free(effect), "agent-find-free")
            case ListProcesses(session_id, worker_id):
                spawn(self._reconcile(session_id, worker_id), f"processes-{session_id}")
            case StopProcess(session_id, process_id):
                spawn(self._stop_process(session_id, process_id), f"stop-{process_id}")
            case ForwardPort(session_id, process_id, port):
                spawn(self._forward(session_id, process_id, port),
                      f"forward-{process_id}-{port}")
            case Detach(session_id, worker_id):
                self._detach(session_id, worker_id)
            case Say(level, message):
                log.log(level, "%s", message)

    def _start_turn(self, effect: StartTurn) -> None:
        session_id = effect.session_id
        deps = self.deps
        if effect.fence is not None:
            # a lost lease stops this runner as a shutdown would; every write and action of it
            # carries the epoch it was started under, and the database refuses them once
            # another replica took the session over
            deps = dataclasses.replace(
                deps, stopping=lambda: self.stopping or session_id in self.supervisor.lost,
                store=_FencedStore(self.engine, effect.fence),
                actions=_FencedActions(deps.actions, effect.fence))
        try:
            if effect.acp:
                driver = TurnDriver(ACP, acp_turn(session_id, limits=deps.limits,
                                                  resume=effect.resume), deps)
            else:
                driver = TurnDriver(CodeyMachine(provider_infos(self), self.greeted,
                                                 self.web_config.fetch_allow,
                                                 self.web_config.fetch_domains),
                                    codey_turn(session_id, limits=deps.limits, roles=deps.roles,
                                               resume=effect.resume,
                                               compact_only=effect.compact_only), deps)
            task = asyncio.get_running_loop().create_task(driver.run(),
                                                          name=f"turn-{session_id}")
        except BaseException:  # (a bug) no task runs: the supervisor must know it
            self._feed(TurnEnded(session_id, holding=self._holding(session_id)))
            raise
        self.drivers[session_id] = driver
        self.tasks[session_id] = task
        task.add_done_callback(lambda t: self._done(session_id, t))

    def _done(self, session_id: str, task: asyncio.Task[None]) -> None:
        driver = None
        if self.tasks.get(session_id) is task:
            del self.tasks[session_id]
            driver = self.drivers.pop(session_id, None)
            self._drop_idle_histories()
        lost = driver.lease_lost if driver is not None else None
        self._feed(TurnEnded(session_id, None if lost is None else str(lost),
                             self._holding(session_id)))
        self._turns.wake(session_id)  # a parent may be waiting for this sub-agent

    # among replicas -------------------------------------------------------------------------

    async def _claim(self, session_id: str, delay: float, want: sv.Want | None) -> None:
        """Take the session's lease and fold everything committed before it was free; then
        the supervisor starts what the session needs, if anything still (its last owner may
        have finished it)."""
        assert self.leases is not None
        taken = False
        try:
            if self.stopping:
                return
            if delay:
                await asyncio.sleep(delay)
            if not await self.leases.acquire(lease_name(session_id)):
                return  # another replica runs it
            await self.engine.catch_up()
            taken = True
        except Exception as err:  # the next sweep tries again
            log.warning("could not claim session %s (%s)", session_id, err)
        finally:
            if not taken:
                self._feed(ClaimFailed(session_id))
        if not taken:
            return
        try:
            for effect in self._step(LeaseTaken(session_id, want, self._holding(session_id))):
                if isinstance(effect, Release):  # nothing to do after all: let it go now
                    await self.leases.release(lease_name(session_id))
                else:
                    self._carry_out(effect)
        except Exception as err:
            log.warning("could not claim session %s (%s)", session_id, err)

    async def _sweep(self) -> None:
        assert self.leases is not None
        while not self.stopping:
            try:
                for effect in self._step(SweepTick()):
                    if isinstance(effect, FindFree):
                        await self._find_free(effect)
                    else:
                        self._carry_out(effect)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("session sweep failed (%s)", err)
            await asyncio.sleep(SWEEP_S)

    async def _find_free(self, effect: FindFree) -> None:
        assert self.leases is not None
        free = await self.leases.free([lease_name(sid) for sid in effect.session_ids])
        self._feed(FreeFound(tuple(sid for sid in effect.session_ids
                                   if lease_name(sid) in free)))

    def _lease_lost(self, name: str) -> None:
        if name.startswith("session:"):
            self._feed(HoldingLost(name.removeprefix("session:")))

    # ports.Waits ----------------------------------------------------------------------------

    async def approval(self, session_id: str, approval_id: str) -> None:
        await self._approvals.until(approval_id, self._decided(
            session_id, lambda s: s.approvals.get(approval_id)))

    async def answer(self, session_id: str, question_id: str) -> None:
        await self._answers.until(question_id, self._decided(
            session_id, lambda s: s.questions.get(question_id)))

    def greeted(self, worker_id: str) -> bool:
        """Whether the worker said hello to this server since it started, or is connected
        now (among replicas, to another one): only then are its capabilities in the state
        its own. At the start every worker of this server is disconnected (``restarted``),
        and what the state holds of one is the machine as it was before: perhaps an older
        worker, without the sandbox today's has (issue 36)."""
        info = self.engine.state.workers.get(worker_id)
        return worker_id in self._greeted or (info is not None and info.connected
                                              and not info.revoked)

    async def hello(self, worker_id: str) -> None:
        def over() -> bool:
            info = self.engine.state.workers.get(worker_id)
            return info is None or info.revoked or self.greeted(worker_id)

        # woken as the worker connects or is revoked
        await self._hellos.until(worker_id, over)

    def _decided(self, session_id: str,
                 find: Callable[[SessionInfo], Approval | Question | None]) -> Callable[[], bool]:
        """A condition: the approval or question ``find`` picks is no longer pending."""
        def decided() -> bool:
            session = self.engine.state.sessions.get(session_id)
            record = find(session) if session is not None else None
            return record is None or record.status != "pending"

        return decided

    async def turn_over(self, session_id: str) -> None:
        def over() -> bool:
            session = self.engine.state.sessions.get(session_id)
            return session is None or (not self.running(session_id)
                                       and session.status not in sv.RESUME)

        # woken when its turn task ends, and on each of its status changes
        await self._turns.until(session_id, over)

    def _on_event(self, env: Envelope) -> None:
        e = env.event
        sid = env.session_id
        if isinstance(e, ev.ApprovalResolved):
            self._approvals.wake(e.approval_id)
        elif isinstance(e, ev.QuestionAnswered):
            self._answers.wake(e.question_id)
        elif isinstance(e, ev.WorkerConnected):
            self._greeted.add(e.worker_id)
            self._hellos.wake(e.worker_id)
        elif isinstance(e, ev.WorkerRevoked):
            self._hellos.wake(e.worker_id)
        elif isinstance(e, ev.ProviderSaved):  # on every replica
            self._define(e.provider)
        elif isinstance(e, ev.ProviderRemoved):
            self._forget(e.name)
        elif isinstance(e, ev.SessionStatusChanged) and sid is not None:
            self._turns.wake(sid)  # a parent may be waiting for this sub-agent
        elif isinstance(e, ev.SessionDeleted):
            for key in [k for k in self.histories if k[0] == sid]:
                del self.histories[key]
        if sid is not None and not self.engine.applying_foreign:
            # (a delete closes the session first: it is still in the state then)
            if isinstance(e, ev.SessionArchived) and e.archived:
                self._session_end(sid, "archived")
            elif isinstance(e, ev.SessionStatusChanged) and e.status == "closed" \
                    and e.reason == "deleted":
                self._session_end(sid, "deleted")
        # turns to start, queue or cancel, processes to stop, forward or list
        self._feed(Folded(env, self.engine.applying_foreign, self._holding(sid)))

    def _session_end(self, session_id: str, reason: str) -> None:
        """Run the session's ``SessionEnd`` hooks (issue 39), if it has some that may run,
        without waiting: best effort (a worker away runs none), logged, not recorded."""
        s = self.engine.state.sessions.get(session_id)
        if s is None or not session_wants(self.engine.state, s, "SessionEnd") \
                or not self.deps.actions.presence(s.worker_id).is_set():
            return
        action = session_end(s, self.engine.context.new_id("act"), reason)

        async def run() -> None:
            try:
                await self.deps.actions.ensure_attached(s.worker_id, session_id, s.workdir,
                                                        timeout=HOOKS_TIMEOUT_S)
                outcome = await self.deps.actions.run(s.worker_id, action,
                                                      timeout=HOOKS_TIMEOUT_S)
            except (ActionFailed, TimeoutError) as err:
                log.warning("session %s: its SessionEnd hooks did not run (%s)", session_id,
                            err)
                return
            if isinstance(outcome, wk.HooksRan):
                log.info("session %s: SessionEnd hooks ran: %s", session_id,
                         [(r.command, r.exit_code, r.problem) for r in outcome.runs])

        self._background.spawn(run(), f"session-end-{session_id}")

    # a session's processes ----------------------------------------------------------------

    async def _stop_process(self, session_id: str, process_id: str) -> None:
        """Send ``exec_kill`` for a process asked to stop, and record its end. A worker that
        is away is not waited for: the reconcile after it reconnects stops it."""
        session = self.engine.state.sessions.get(session_id)
        p = find_process(session, process_id) if session is not None else None
        actions = self.deps.actions
        if p is None or p.status != "stopping" or not actions.presence(p.worker_id).is_set():
            return
        action = wk.ExecKill(action_id=self.engine.context.new_id("act"),
                             session_id=session_id, process_id=process_id)
        try:
            outcome = await actions.run(p.worker_id, action, timeout=PROCESS_ACTION_TIMEOUT_S)
        except ActionFailed as err:
            if err.code != "process_gone":
                log.warning("session %s: %s did not stop (%s)", session_id, process_id, err)
                return
            outcome = None
        except TimeoutError:
            log.warning("session %s: %s did not stop in time", session_id, process_id)
            return
        if outcome is None or isinstance(outcome, wk.ExecOutput):
            await self.engine.submit(stopped, Stopped(session_id, process_id, outcome))

    async def _forward(self, session_id: str, process_id: str, port: int) -> None:
        """Send ``exec_forward`` for a port the user asked to reach, and record the answer.
        A worker that is away is not waited for: the reconcile after it reconnects asks
        again (a forward asked twice is the same forward)."""
        session = self.engine.state.sessions.get(session_id)
        p = find_process(session, process_id) if session is not None else None
        actions = self.deps.actions
        if p is None or not actions.presence(p.worker_id).is_set():
            return
        action = wk.ExecForward(action_id=self.engine.context.new_id("act"),
                                session_id=session_id, process_id=process_id, port=port)
        outcome: wk.PortForwarded | None = None
        error = ""
        try:
            answer = await actions.run(p.worker_id, action, timeout=PROCESS_ACTION_TIMEOUT_S)
            if isinstance(answer, wk.PortForwarded):
                outcome = answer
        except ActionFailed as err:
            error = err.message
        except TimeoutError:
            error = "the machine did not answer in time"
        await self.engine.submit(forwarded, Forwarded(session_id, process_id, port, outcome,
                                                      error))

    async def _reconcile(self, session_id: str, worker_id: str) -> None:
        """A worker (re)connected with live processes of the session: ask it which it still
        runs, record its answer, then carry out the stops and forwards asked while it was
        away (one after the other, here)."""
        action = wk.ExecList(action_id=self.engine.context.new_id("act"),
                             session_id=session_id)
        try:
            listing = await self.deps.actions.run(worker_id, action,
                                                  timeout=PROCESS_ACTION_TIMEOUT_S)
        except (ActionFailed, TimeoutError) as err:
            log.warning("session %s: could not list its processes on %s (%s)", session_id,
                        worker_id, err or "timed out")
            return
        if not isinstance(listing, wk.ExecProcesses):
            return
        await self.engine.submit(listed, Listed(session_id, worker_id, listing))
        for effect in self._step(ProcessesListed(session_id, worker_id)):
            if isinstance(effect, StopProcess):
                await self._stop_process(effect.session_id, effect.process_id)
            elif isinstance(effect, ForwardPort):
                await self._forward(effect.session_id, effect.process_id, effect.port)
            else:
                self._carry_out(effect)

    def _detach(self, session_id: str, worker_id: str) -> None:
        """A closed session's worker stops watching its workdir (best effort: a worker that
        is away has no watch to stop)."""
        action = wk.DetachSession(action_id=self.engine.context.new_id("act"),
                                  session_id=session_id)

        # the session is closed either way: a failure is only logged
        self._background.spawn(self.deps.actions.run(worker_id, action, timeout=30),
                               f"detach-{session_id}")


class _FencedStore:
    """The engine as one runner's store: every write carries the runner's fence."""

    def __init__(self, engine: Engine, fence: Fence) -> None:
        self.engine = engine
        self.fence = fence

    @property
    def state(self) -> State:
        return self.engine.state

    @property
    def context(self) -> Context:
        return self.engine.context

    async def submit(self, decision: Callable[[State, In, Context], Decided], input: In, *,
                     exclusive: bool = True) -> list[Envelope]:
        return await self.engine.submit(decision, input, exclusive=exclusive,
                                        fence=self.fence)


class _FencedActions:
    """One runner's actions: each is written for the replicas under the runner's fence
    (a stale one is refused with LeaseLost, never sent again)."""

    def __init__(self, actions: Actions, fence: Fence) -> None:
        self.actions = actions
        self.fence = fence

    async def ensure_attached(self, worker_id: str, session_id: str, workdir: str, *,
                              timeout: float | None = None) -> list[wk.McpServerInfo]:
        return await self.actions.ensure_attached(worker_id, session_id, workdir,
                                                  timeout=timeout)

    async def run(self, worker_id: str, action: wk.ActionMessage, *,
                  on_progress: ProgressCallback | None = None, timeout: float | None = None,
                  skip: int = 0, fence: Fence | None = None) -> wk.ActionOutcome:
        return await self.actions.run(worker_id, action, on_progress=on_progress,
                                      timeout=timeout, skip=skip, fence=fence or self.fence)

    async def cancel(self, worker_id: str, target_action_id: str, session_id: str) -> None:
        await self.actions.cancel(worker_id, target_action_id, session_id)

    def presence(self, worker_id: str) -> asyncio.Event:
        return self.actions.presence(worker_id)

    def absence(self, worker_id: str) -> asyncio.Event:
        return self.actions.absence(worker_id)
