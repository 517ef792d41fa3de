"""The agent as a plugin: ``/api/config`` and Settings → Models' listing and test calls; the
fold of what happens in a session's turns (:mod:`.fold`); the agent service, which runs the
turns; the goal runner, which checks a session's goal after each turn (:mod:`.goals`)."""

from __future__ import annotations

from typing import Protocol

from codey_server.agent import budget, fold
from codey_server.agent.acp_routes import AgentConfigController
from codey_server.agent.goals import GoalRunner
from codey_server.agent.routes import ConfigController
from codey_server.agent.service import AgentService
from codey_server.agent.slash_routes import SlashController
from codey_server.core.delivery import Delivery
from codey_server.core.engine import Engine
from codey_server.core.hosting import Hosting
from codey_server.http.plugin import FeaturePlugin, Part
from codey_server.settings import Settings

__all__ = ["PLUGIN"]


class _Credentials(Protocol):
    """The model providers' logins (the providers' ``auth``), as the agent uses them."""

    async def token_for(self, provider_name: str) -> str | None: ...

    async def refresh_rejected(self, provider_name: str) -> bool: ...


class _Blobs(Protocol):
    """The files sent with prompts (``blobs``): read into a turn, stored from one."""

    def get(self, digest: str) -> bytes | None: ...

    def put(self, data: bytes) -> str: ...


def _agent(engine: Engine, actions: Delivery, settings: Settings, auth: _Credentials,
           blobs: _Blobs, deployment: Hosting) -> AgentService:
    # the model's bearer: a stored login or API key, else the provider's api_key_env; a
    # token the provider rejects is refreshed once
    return AgentService(engine, actions, settings, auth.token_for, auth.refresh_rejected,
                        blobs.get, leases=deployment.leases, store_blob=blobs.put)


def _goals(engine: Engine, actions: Delivery, agent: AgentService) -> GoalRunner:
    # a session's goal checked after each of its turns, on the agent's providers
    return GoalRunner(engine, actions, agent)


PLUGIN = FeaturePlugin(
    "agent",
    routes=(ConfigController, SlashController, AgentConfigController),
    commands=budget.COMMANDS,
    fold=fold.FOLD,
    parts=(Part("agent", _agent, start=AgentService.start, stop=AgentService.stop),
           Part("goals", _goals, start=GoalRunner.start, stop=GoalRunner.stop)),
)
