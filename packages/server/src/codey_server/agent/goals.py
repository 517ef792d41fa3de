"""The goal runner: carries out the checks a session's goal needs (:mod:`codey_server.core.goals`
decides which, and what follows from each).

It reacts to folded status changes (an engine listener, on the replica that decided them) and,
at start, looks at every session: a session whose turn ended with its goal active and not
checked since gets its check; one that stopped any other way gives its goal up. So a restart
between two turns goes on from the log: the check that was under way runs again.

A command check is the same ``run_command`` the model's ``shell`` tool sends, in the session's
sandbox (a session with full access still checks in ``workspace-write``: a check is a gate, and
the repository it runs in may be hostile), never escalated; a machine without a sandbox gives
the goal up. A judged goal's evidence goes to :func:`~codey_server.agent.goal_judge.judge_goal`
with the session's provider and model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.approvals import hardened_env
from codey_server.agent.goal_judge import GoalVerdict, judge_goal
from codey_server.agent.models import ModelProvider
from codey_server.core import goals
from codey_server.core.actions import ActionFailed, Actions
from codey_server.core.background import Background
from codey_server.core.engine import Engine

__all__ = ["CHECK_TIMEOUT_S", "GoalRunner", "Judge"]

log = logging.getLogger("codey.goals")

#: a goal's command that runs longer than this is killed, and the goal is not met
CHECK_TIMEOUT_S = 600.0
#: the wait for the session's attachment on its machine before a check
ATTACH_TIMEOUT_S = 60.0

Judge = Callable[[ModelProvider, str, str, str], Awaitable[GoalVerdict]]


class _Providers(Protocol):
    """The agent's model providers, by name (``AgentService.provider``)."""

    def provider(self, name: str) -> ModelProvider | None: ...


class GoalRunner:
    def __init__(self, engine: Engine, actions: Actions, models: _Providers, *,
                 check_timeout_s: float = CHECK_TIMEOUT_S, judge: Judge = judge_goal) -> None:
        self.engine = engine
        self.actions = actions
        self.models = models
        self.check_timeout_s = check_timeout_s
        self.judge = judge
        #: sessions whose check runs now (one at a time per session)
        self._checking: set[str] = set()
        self._stopping: set[str] = set()
        self._background = Background(log)
        engine.listeners.append(self._on_event)

    async def start(self) -> None:
        """Go on with what the last run left: checks due, goals of stopped sessions."""
        for session_id in list(self.engine.state.sessions):
            self._look(session_id)

    async def stop(self) -> None:
        await self._background.cancel()

    def _on_event(self, env: ev.Envelope) -> None:
        if self.engine.applying_foreign or env.session_id is None:
            return  # the replica that decided it does it
        if isinstance(env.event, ev.SessionStatusChanged | ev.GoalSet):
            self._look(env.session_id)

    def _look(self, session_id: str) -> None:
        s = self.engine.state.sessions.get(session_id)
        if s is None or s.goal is None or s.goal.status != "active":
            return
        if goals.stopped(self.engine.state, session_id, self.engine.context):
            if session_id not in self._stopping:
                self._stopping.add(session_id)
                self._background.spawn(self._give_up(session_id), f"goal-stop-{session_id}")
        elif goals.due(s) is not None and session_id not in self._checking:
            self._checking.add(session_id)
            self._background.spawn(self._check(session_id), f"goal-{session_id}")

    async def _give_up(self, session_id: str) -> None:
        try:
            await self.engine.submit(goals.stopped, session_id)
        finally:
            self._stopping.discard(session_id)

    async def _check(self, session_id: str) -> None:
        try:
            await asyncio.sleep(0)  # the rest of the turn's last append is folded first
            s = self.engine.state.sessions.get(session_id)
            d = goals.due(s) if s is not None else None
            if s is None or d is None:
                return
            if d.kind == "command":
                done = await self._run(s, d)
            elif d.evidence is None:
                done = goals.CheckDone(d, met=False, output=(
                    f"you did not call {goals.GOAL_TOOL} this turn; call it with your evidence "
                    "once the goal is met"))
            else:
                done = await self._judged(s, d, d.evidence)
            await self.engine.submit(goals.checked, done)
        finally:
            self._checking.discard(session_id)
        # a turn that ended while this check ran (its result was then stale) is checked now
        self._look(session_id)

    async def _run(self, s: SessionInfo, d: goals.Due) -> goals.CheckDone:
        argv = d.command or []
        # the session's sandbox, never less than one: full access checks in workspace-write
        mode: wk.SandboxMode = s.sandbox if s.sandbox != "full-access" else "workspace-write"
        action = wk.RunCommand(
            action_id=self.engine.context.new_id("act"), session_id=s.session_id, argv=argv,
            workdir=s.workdir, timeout_s=self.check_timeout_s, env=hardened_env(argv),
            sandbox=mode, network=s.network)
        try:
            await self.actions.ensure_attached(s.worker_id, s.session_id, s.workdir,
                                               timeout=ATTACH_TIMEOUT_S)
            outcome = await self.actions.run(s.worker_id, action,
                                             timeout=self.check_timeout_s + 60.0)
        except TimeoutError:
            return goals.CheckDone(d, met=False,
                                   output="the check did not finish: the machine did not answer")
        except ActionFailed as err:
            if err.code == "sandbox_unavailable":
                return goals.CheckDone(d, met=False, output=err.message, give_up=(
                    "the machine has no OS sandbox, and a goal's command runs only in one"))
            return goals.CheckDone(d, met=False, output=f"the check could not run: {err.message}")
        if not isinstance(outcome, wk.CommandResult):
            return goals.CheckDone(d, met=False, output="the check could not run")
        output = outcome.stdout + ("\n" if outcome.stdout and outcome.stderr else "") + \
            outcome.stderr
        if outcome.timed_out:
            output += f"\n[the check timed out after {self.check_timeout_s:g} s and was killed]"
        met = outcome.exit_code == 0 and not outcome.timed_out
        return goals.CheckDone(d, met=met, output=output, exit_code=outcome.exit_code)

    async def _judged(self, s: SessionInfo, d: goals.Due, evidence: str) -> goals.CheckDone:
        provider = self.models.provider(s.provider)
        if provider is None:
            return goals.CheckDone(d, met=False, output=(
                f"the judge could not run: the provider {s.provider!r} is not configured"))
        assert s.goal is not None
        try:
            verdict = await self.judge(provider, s.model, s.goal.condition, evidence)
        except Exception as err:  # fails closed: a judge that broke did not say "met"
            log.exception("session %s: the goal's judge failed", s.session_id)
            verdict = GoalVerdict(met=False, reason=f"the judge failed: {err}")
        return goals.CheckDone(d, met=verdict.met, output=verdict.reason or (
            "the reviewer agreed" if verdict.met else "the reviewer was not convinced"))
