"""The agent service: starts a turn runner when a session gets a prompt, stops it on
interrupt, wakes runners waiting for approvals, and resumes running sessions after a restart.

It reacts to folded events (an engine listener), so a command from any path — the browser
socket, the REST API — has the same effect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from codey_protocol import events as ev
from codey_protocol.events import Envelope
from codey_server.agent.models import ModelProvider, build_provider, discover_ollama_models
from codey_server.agent.runner import TurnRunner, needs_turn
from codey_server.engine import Engine
from codey_server.settings import Settings
from codey_server.workers import WorkerRegistry

log = logging.getLogger("codey.agent")

__all__ = ["AgentService"]

_RESUME = ("running", "waiting_approval", "waiting_worker")


class AgentService:
    def __init__(self, engine: Engine, workers: WorkerRegistry, settings: Settings,
                 token_for: Callable[[str], Awaitable[str | None]]) -> None:
        self.engine = engine
        self.workers = workers
        self.settings = settings
        self.providers: dict[str, ModelProvider] = {}
        for config in settings.providers:
            name = config.name
            self.providers[name] = build_provider(
                config, lambda name=name: token_for(name))  # type: ignore[misc]
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._rerun: set[str] = set()  # prompted while the old task was still finishing
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self.stopping = False
        engine.listeners.append(self._on_event)

    async def start(self) -> None:
        for provider in self.providers.values():
            if provider.config.kind == "ollama":
                found = await discover_ollama_models(provider.config.base_url)
                provider.models = found or provider.models
                if found and not self.engine.context.default_models.get(provider.name):
                    self.engine.context.default_models[provider.name] = found[0]
        for session in self.engine.state.sessions.values():
            if session.status in _RESUME:
                log.info("resuming session %s (%s)", session.session_id, session.status)
                self.start_turn(session.session_id, resume=True)

    async def stop(self) -> None:
        # Runners stop without touching the sessions: they resume at the next start.
        self.stopping = True
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def running(self, session_id: str) -> bool:
        task = self.tasks.get(session_id)
        return task is not None and not task.done()

    def start_turn(self, session_id: str, *, resume: bool = False) -> None:
        if self.stopping:
            return
        if self.running(session_id):
            self._rerun.add(session_id)
            return
        runner = TurnRunner(self, session_id, resume=resume)
        task = asyncio.get_running_loop().create_task(runner.run(), name=f"turn-{session_id}")
        self.tasks[session_id] = task
        task.add_done_callback(lambda t: self._done(session_id, t))

    def _done(self, session_id: str, task: asyncio.Task[None]) -> None:
        if self.tasks.get(session_id) is task:
            del self.tasks[session_id]
        if session_id in self._rerun:
            self._rerun.discard(session_id)
            session = self.engine.state.sessions.get(session_id)
            if session is not None and not self.stopping and needs_turn(session):
                self.start_turn(session_id)

    def approval_waiter(self, approval_id: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(approval_id, []).append(future)
        return future

    def _on_event(self, env: Envelope) -> None:
        e = env.event
        sid = env.session_id
        if isinstance(e, ev.SessionItemAppended) and isinstance(e.item, ev.UserMessage):
            if sid is not None:
                self.start_turn(sid)
        elif isinstance(e, ev.SessionStatusChanged) and e.status == "interrupted":
            task = self.tasks.get(sid or "")
            if task is not None and not task.done():
                task.cancel()
        elif isinstance(e, ev.ApprovalResolved):
            for future in self._waiters.pop(e.approval_id, []):
                if not future.done():
                    future.set_result(None)
