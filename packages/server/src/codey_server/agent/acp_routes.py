"""``POST /api/sessions/{id}/agent/config``: set a mode or a config option of the ACP agent
that runs a session (the selects in its header). The session's worker asks the agent
(``acp_configure``: ``session/set_mode`` / ``session/set_config_option``); what the agent
answers is folded into the session (``agent_mode_updated``, ``agent_config_updated``), so
every open view shows the value the agent confirmed, not the one asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec
from litestar import post
from litestar.di import NamedDependency
from litestar.exceptions import ClientException, NotFoundException
from litestar.params import FromPath, JSONBody

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo, State
from codey_server.agent.service import AgentService
from codey_server.core.actions import ActionFailed
from codey_server.core.engine import Engine
from codey_server.core.rules import Context, Decided
from codey_server.http.errors import errors
from codey_server.http.resource import Resource

__all__ = ["AgentConfigBody", "AgentConfigController", "AgentSettings", "confirmed"]

#: how long the worker may take (it may have to start the agent first)
CONFIGURE_TIMEOUT_S = 60.0

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class AgentConfigBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Either ``mode`` (a mode's id) or ``option`` and ``value`` (a config option's id and
    one of its values; true/false for a boolean one)."""

    mode: _Id | None = None
    option: _Id | None = None
    value: Annotated[str, msgspec.Meta(max_length=200)] | bool | None = None


class AgentSettings(msgspec.Struct, kw_only=True):
    """The agent's mode and config options as it confirmed them."""

    mode: str
    modes: list[wk.AcpMode]
    options: list[wk.AcpConfigOption]


@dataclass(frozen=True)
class _Confirmed:
    session_id: str
    answer: wk.AcpConfigured


def confirmed(state: State, i: _Confirmed, ctx: Context) -> Decided:
    """The agent's answer to a set mode or option, as the session's events (what changed
    only)."""
    s = state.sessions.get(i.session_id)
    if s is None:
        return []
    a = i.answer
    out: Decided = []
    if a.modes is not None and (a.current_mode != s.agent_mode or a.modes != s.agent_modes):
        out.append((s.session_id, ev.AgentModeUpdated(current_mode=a.current_mode,
                                                      modes=a.modes)))
    if a.config_options is not None and a.config_options != s.agent_config:
        out.append((s.session_id, ev.AgentConfigUpdated(options=a.config_options)))
    return out


def _acp_session(engine: Engine, session_id: str) -> SessionInfo:
    s = engine.state.sessions.get(session_id)
    if s is None:
        raise NotFoundException(f"no session {session_id!r}")
    if not s.agent:
        raise ClientException("the session is not run by an ACP agent", status_code=409)
    machine = engine.state.workers.get(s.worker_id)
    if machine is None or not machine.connected:
        raise ClientException("the session's machine is not connected", status_code=409)
    return s


def _action(s: SessionInfo, action_id: str, data: AgentConfigBody) -> wk.AcpConfigure:
    if data.mode is not None and data.option is None and data.value is None:
        if data.mode not in {m.id for m in s.agent_modes}:
            raise ClientException(f"the agent has no mode {data.mode!r}", status_code=400)
        return wk.AcpConfigure(action_id=action_id, session_id=s.session_id, agent=s.agent or "",
                               workdir=s.workdir, mode_id=data.mode)
    if data.mode is None and data.option is not None and data.value is not None:
        option = next((o for o in s.agent_config if o.id == data.option), None)
        if option is None:
            raise ClientException(f"the agent has no option {data.option!r}", status_code=400)
        if (option.type == "boolean") != isinstance(data.value, bool):
            raise ClientException(f"{data.option!r} takes "
                                  f"{'true or false' if option.type == 'boolean' else 'a value'}",
                                  status_code=400)
        if option.type == "select" and data.value not in {c.value for c in option.choices}:
            raise ClientException(f"{data.option!r} has no value {data.value!r}",
                                  status_code=400)
        return wk.AcpConfigure(action_id=action_id, session_id=s.session_id, agent=s.agent or "",
                               workdir=s.workdir, config_id=data.option, value=data.value)
    raise ClientException("give either mode, or option and value", status_code=400)


class AgentConfigController(Resource):
    path = "/api/sessions"
    tags = ["sessions"]

    @post("/{session_id:str}/agent/config", status_code=200, responses=errors(400, 404, 409))
    async def set_config(self, session_id: FromPath[str], data: JSONBody[AgentConfigBody],
                         engine: NamedDependency[Engine],
                         agent: NamedDependency[AgentService]) -> AgentSettings:
        """Set the ACP agent's mode or one of its config options; answers them as the agent
        confirmed them (also folded into the session). Only what the agent offered can be
        asked for."""
        s = _acp_session(engine, session_id)
        action = _action(s, engine.context.new_id("act"), data)
        try:
            answer = await agent.deps.actions.run(s.worker_id, action,
                                                  timeout=CONFIGURE_TIMEOUT_S)
        except (ActionFailed, TimeoutError) as err:
            raise ClientException(f"the agent did not take it: {err}", status_code=409) from None
        if not isinstance(answer, wk.AcpConfigured):
            raise ClientException("the machine's worker is too old to set an agent's modes",
                                  status_code=409)
        await engine.submit(confirmed, _Confirmed(session_id, answer))
        s = engine.state.sessions[session_id]
        return AgentSettings(mode=s.agent_mode, modes=list(s.agent_modes),
                             options=list(s.agent_config))
