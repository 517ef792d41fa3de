"""``/api/sessions/{id}/commands``: the slash commands a session's prompt box offers from
prompt files (read by the session's worker in its workdir, :mod:`codey_worker.prompts`), and
running one: its body, with the arguments substituted (:mod:`.slash`), sent as a prompt.

The built-ins (``/model``, ``/compact``, ``/goal``, …) are the browser's own; an ACP agent's
commands come with its session's state (``acp_commands_updated``)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from litestar import get, post
from litestar.di import NamedDependency
from litestar.exceptions import ClientException, NotFoundException
from litestar.params import FromPath, JSONBody

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo
from codey_server.agent.service import AgentService
from codey_server.agent.slash import expand, model_for, tools_for_command
from codey_server.agent.tools import BUILTIN
from codey_server.core.actions import ActionFailed
from codey_server.core.engine import Engine
from codey_server.http.errors import errors
from codey_server.http.resource import Resource

__all__ = ["CommandList", "RunCommandBody", "SlashCommand", "SlashController", "SlashRun"]

#: how long the worker may take to read the prompt files
LIST_TIMEOUT_S = 30.0


class SlashCommand(msgspec.Struct, kw_only=True):
    """A prompt file as the menu shows it (its body stays on the server)."""

    name: str  # without the slash; ``a:b`` for ``a/b.md``
    description: str
    argument_hint: str
    scope: Literal["project", "user"]
    path: str
    model: str
    allowed_tools: list[str]


class CommandList(msgspec.Struct, kw_only=True):
    commands: list[SlashCommand]
    #: what was skipped or read in part, and why (garbage front matter, a symlink out)
    warnings: list[str]


class RunCommandBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/commands/run``: the command's name (no slash) and what was
    typed after it."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    arguments: Annotated[str, msgspec.Meta(max_length=100_000)] = ""


class SlashRun(msgspec.Struct, kw_only=True):
    seq: int
    text: str  # the prompt sent
    #: the model the prompt file asked for, for the turn it starts; ``""``: the session's
    model: str = ""
    #: the tools the turn it starts offers (its ``allowed-tools``); None: all the session's
    tools: list[str] | None = None
    #: what the user should know (a ``model`` no provider offers, ``allowed-tools`` entries
    #: not understood, a session busy with a turn, an ACP agent's session)
    notes: list[str] = msgspec.field(default_factory=list)


def _session(engine: Engine, session_id: str) -> SessionInfo:
    s = engine.state.sessions.get(session_id)
    if s is None:
        raise NotFoundException(f"no session {session_id!r}")
    return s


async def _prompt_files(engine: Engine, agent: AgentService, s: SessionInfo) -> wk.PromptFiles:
    machine = engine.state.workers.get(s.worker_id)
    if machine is None or not machine.connected:  # answer now, not after the timeout
        raise ClientException("the session's machine is not connected", status_code=409)
    try:
        found = await agent.deps.actions.run(s.worker_id, wk.ListPromptFiles(
            action_id=engine.context.new_id("act"), session_id=s.session_id,
            workdir=s.workdir), timeout=LIST_TIMEOUT_S)
    except (ActionFailed, TimeoutError) as err:
        raise ClientException(f"the machine could not list the prompt files: {err}",
                              status_code=409) from None
    if not isinstance(found, wk.PromptFiles):
        raise ClientException("the machine's worker is too old to list prompt files",
                              status_code=409)
    return found


class SlashController(Resource):
    path = "/api/sessions"
    tags = ["sessions"]

    @get("/{session_id:str}/commands", responses=errors(404, 409))
    async def commands(self, session_id: FromPath[str], engine: NamedDependency[Engine],
                       agent: NamedDependency[AgentService]) -> CommandList:
        """The prompt files the session's worker finds for its workdir (project first, then
        the user's), as slash commands."""
        s = _session(engine, session_id)
        found = await _prompt_files(engine, agent, s)
        return CommandList(commands=[SlashCommand(
            name=f.name, description=f.description, argument_hint=f.argument_hint,
            scope=f.scope, path=f.path, model=f.model, allowed_tools=f.allowed_tools)
            for f in found.files], warnings=found.warnings)

    @post("/{session_id:str}/commands/run", status_code=202,
          responses=errors(400, 404, 409, 413))
    async def run(self, session_id: FromPath[str], data: JSONBody[RunCommandBody],
                  engine: NamedDependency[Engine],
                  agent: NamedDependency[AgentService]) -> SlashRun:
        """Send the prompt file ``name`` as a prompt, its arguments substituted. Its
        ``model`` (when a configured provider offers it) and its ``allowed-tools`` apply to
        the turn the prompt starts only; the session's model and tools stay. Sent while a
        turn runs, the prompt joins that turn, whose model and tools stay."""
        s = _session(engine, session_id)
        found = await _prompt_files(engine, agent, s)
        match = next((f for f in found.files if f.name == data.name), None)
        if match is None:
            raise NotFoundException(f"no prompt file /{data.name} for this session")
        text = expand(match.body, data.arguments)
        if not text:
            raise ClientException(f"/{data.name} is empty", status_code=400)
        notes: list[str] = []
        turn = ev.TurnSettings(slash=match.name)
        if match.model and s.agent:
            notes.append(f"model {match.model!r} not applied: the session's agent picks its "
                         "own")
        elif match.model:
            pick = model_for(match.model, ((p.name, p.models)
                                           for p in agent.providers.values()),
                             (s.provider, s.model))
            if pick is None:
                notes.append(f"model {match.model!r}: no provider offers it, the session's "
                             "model answers")
            else:
                turn.provider, turn.model = pick
        if match.allowed_tools and s.agent:
            notes.append("allowed-tools not applied: the session's agent has its own tools")
        elif match.allowed_tools:
            tools, ignored = tools_for_command(match.allowed_tools,
                                               (t.name for t in BUILTIN))
            turn.tools = tools
            if ignored:
                notes.append(f"allowed-tools: not known, ignored: {', '.join(ignored)}")
        envs = await engine.execute(cl.SendPrompt(session_id=session_id, text=text,
                                                  for_turn=turn))
        sent = envs[-1].event
        queued = isinstance(sent, ev.SessionItemAppended) and isinstance(
            sent.item, ev.UserMessage) and sent.item.queued
        if queued and (turn.provider or turn.tools is not None):
            notes.append("a turn is running: the prompt joins it, with its model and tools")
            return SlashRun(seq=envs[-1].seq, text=text, notes=notes)
        return SlashRun(seq=envs[-1].seq, text=text, model=turn.model, tools=turn.tools,
                        notes=notes)
