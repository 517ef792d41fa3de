"""External coding agents over the Agent Client Protocol (ACP), run by this worker.

Order of calls: ``AcpAgents(configs, policy, state_path)`` (no I/O) → ``await
prompt(action, emit)`` for each ``acp_prompt`` action (starts the session's agent process on
the first one, keeps it for the next) → ``answer(action)`` for each ``acp_permission``,
``await configure(action)`` for each ``acp_configure`` (a mode or config option the user
picked) → ``await close()`` (ends every agent process).

The modes and config options the agent's session starts with (``session/new``'s or
``session/load``'s answer) are passed on as ``mode`` / ``config`` updates at the start of the
session's first turn, the agent's later changes as it sends them.

What the agent does comes back as :class:`~codey_protocol.worker.AcpUpdate` through ``emit``.
What it asks of the client is served here, confined like every action: file reads and writes
go through :mod:`codey_worker.fs` inside the session's workdir and the owner's allowed roots;
terminals are not offered (the capability says so), so an agent runs commands only through
its own tools, which ask for permission. A permission request waits for the user's answer
(``answer``); a cancelled turn refuses it.

The agent's ACP session id is kept per Codey session in ``state_path``: after this worker
restarts, an agent that supports ``session/load`` goes on with the same session.

The ``agent-client-protocol`` SDK is imported only when an agent runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from codey_protocol.version import __version__
from codey_protocol.worker import (
    AcpConfigChoice,
    AcpConfigOption,
    AcpConfigure,
    AcpConfigured,
    AcpMode,
    AcpOption,
    AcpPermission,
    AcpPrompt,
    AcpTurnEnded,
    AcpUpdate,
    AcpUsage,
    PermissionAnswered,
    ReadFile,
    WriteFile,
)
from codey_worker import fs
from codey_worker.confine import ActionRefused
from codey_worker.policy import LocalPolicy
from codey_worker.shell import build_env, merge_git_env

__all__ = ["AcpAgentConfig", "AcpAgents", "Emit"]

log = logging.getLogger(__name__)

Emit = Callable[[AcpUpdate], Awaitable[None]]


@dataclass(frozen=True)
class AcpAgentConfig:
    """``acp_agents.<name>`` in the worker's config: the agent's command, started in the
    session's workdir with the environment commands get plus ``env``."""

    name: str
    command: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


class _Client:
    """The ACP ``Client`` side for one agent process (one Codey session)."""

    def __init__(self, owner: _Live) -> None:
        self.owner = owner

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        converted = _convert(update)
        if converted is not None and converted.kind == "mode":
            self.owner.current_mode = converted.current_mode
        elif converted is not None and converted.kind == "config":
            self.owner.config_options = converted.config_options
        if converted is not None and self.owner.emit is not None:
            await self.owner.emit(converted)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **kwargs: Any) -> Any:
        from acp import RequestPermissionResponse
        from acp.schema import AllowedOutcome, DeniedOutcome

        emit = self.owner.emit
        if emit is None:  # no turn is running: nobody to ask
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        request_id = f"perm_{secrets.token_hex(6)}"
        waiter: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self.owner.permissions[request_id] = waiter
        try:
            raw = getattr(tool_call, "raw_input", None)
            # the why: the raw input's reason where there is a raw input (codex-acp's content
            # then lists its own decisions and amendments, which mean nothing here), else the
            # request's content
            reason = raw.get("reason") if isinstance(raw, dict) else _tool_text(
                getattr(tool_call, "content", None))
            await emit(AcpUpdate(
                kind="permission", request_id=request_id, tool_call_id=tool_call.tool_call_id,
                title=tool_call.title, tool_kind=tool_call.kind, command=_command(raw),
                reason=reason[:2000] if isinstance(reason, str) else "",
                options=[AcpOption(option_id=o.option_id, name=o.name, kind=o.kind)
                         for o in options]))
            chosen = await waiter
        finally:
            self.owner.permissions.pop(request_id, None)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id=chosen))

    async def read_text_file(self, session_id: str, path: str, line: int | None = None,
                             limit: int | None = None, **kwargs: Any) -> Any:
        from acp import ReadTextFileResponse

        action = ReadFile(action_id="acp", session_id=self.owner.session_id,
                          workdir=self.owner.workdir, path=path,
                          offset=max((line or 1) - 1, 0), limit=limit)
        content = await asyncio.to_thread(fs.read_file, action, self.owner.policy)
        return ReadTextFileResponse(content=content.content)

    async def write_text_file(self, session_id: str, path: str, content: str,
                              **kwargs: Any) -> Any:
        action = WriteFile(action_id="acp", session_id=self.owner.session_id,
                           workdir=self.owner.workdir, path=path, content=content)
        await asyncio.to_thread(fs.write_file, action, self.owner.policy)
        return None

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        from acp import RequestError

        raise RequestError.method_not_found("terminal/create")


@dataclass
class _Live:
    """One running agent process, for one Codey session."""

    session_id: str
    workdir: str
    policy: LocalPolicy
    stack: contextlib.AsyncExitStack
    conn: Any = None
    acp_session_id: str = ""
    emit: Emit | None = None
    permissions: dict[str, asyncio.Future[str | None]] = field(default_factory=dict)
    #: what the agent's session started with, passed on at the start of the next turn
    #: (the server hears of it only through a turn's updates); None once passed on
    opening: list[AcpUpdate] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: the agent's modes, as its session started (``set_mode`` answers none)
    modes: list[AcpMode] | None = None
    current_mode: str = ""
    config_options: list[AcpConfigOption] | None = None


class AcpAgents:
    """The ACP agents of this worker's sessions. See the module docstring."""

    def __init__(self, configs: dict[str, AcpAgentConfig], policy: LocalPolicy,
                 state_path: Path) -> None:
        self.configs = configs
        self.policy = policy
        self.state_path = state_path
        self._live: dict[str, _Live] = {}
        #: one start at a time per session (a turn and a mode picked at once start one agent)
        self._starting: dict[str, asyncio.Lock] = {}

    def names(self) -> list[str]:
        return sorted(self.configs)

    async def prompt(self, action: AcpPrompt, workdir: Path, emit: Emit) -> AcpTurnEnded:
        """Run one turn; returns when the agent ends it. Cancelling the task cancels the
        agent's turn (``session/cancel``) and refuses its open permission requests."""
        config = self._config(action.agent)
        live, loaded = await self._agent(action.session_id, action.agent, config, workdir)
        async with live.lock:
            from acp import text_block

            live.emit = emit
            try:
                for update in live.opening or []:
                    await emit(update)
                live.opening = None
                reply = await live.conn.prompt(session_id=live.acp_session_id,
                                               prompt=[text_block(action.prompt)])
            except asyncio.CancelledError:
                for waiter in live.permissions.values():
                    if not waiter.done():
                        waiter.set_result(None)
                with contextlib.suppress(Exception):
                    await asyncio.shield(live.conn.cancel(session_id=live.acp_session_id))
                raise
            finally:
                live.emit = None
        return AcpTurnEnded(stop_reason=str(reply.stop_reason),
                            acp_session_id=live.acp_session_id, loaded=loaded,
                            usage=_turn_usage(getattr(reply, "usage", None)))

    async def configure(self, action: AcpConfigure, workdir: Path) -> AcpConfigured:
        """Set the mode or config option ``action`` names (starting the agent when it does
        not run yet); answers what the agent says it is now. A turn may be under way: the
        request does not wait for it (ACP allows it)."""
        config = self._config(action.agent)
        live, _loaded = await self._agent(action.session_id, action.agent, config, workdir)
        if action.mode_id is None and (action.config_id is None or action.value is None):
            raise ActionRefused("bad_request", "acp_configure names no mode and no option")
        try:
            if action.mode_id is not None:
                await live.conn.set_session_mode(session_id=live.acp_session_id,
                                                 mode_id=action.mode_id)
                # set_mode answers nothing: the mode asked for is the mode now
                live.current_mode = action.mode_id
            else:
                reply = await live.conn.set_config_option(
                    session_id=live.acp_session_id, config_id=action.config_id,
                    value=action.value)
                live.config_options = _config_options(reply.config_options)
        except Exception as err:
            raise ActionRefused("acp_failed", f"the agent refused: {err}") from None
        # the answer says all of it: what the session started with is not passed on again
        live.opening = None
        return AcpConfigured(current_mode=live.current_mode, modes=live.modes,
                             config_options=live.config_options)

    def answer(self, action: AcpPermission) -> PermissionAnswered:
        for live in self._live.values():
            waiter = live.permissions.get(action.request_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(action.option_id)
                return PermissionAnswered(delivered=True)
        return PermissionAnswered(delivered=False)

    async def close(self) -> None:
        for live in list(self._live.values()):
            with contextlib.suppress(Exception):
                await live.stack.aclose()
        self._live.clear()

    def _config(self, agent: str) -> AcpAgentConfig:
        config = self.configs.get(agent)
        if config is None:
            raise ActionRefused("bad_request", f"no ACP agent {agent!r} on this worker "
                                               "(acp_agents in its config)")
        return config

    async def _agent(self, session_id: str, agent: str, config: AcpAgentConfig,
                     workdir: Path) -> tuple[_Live, bool]:
        async with self._starting.setdefault(session_id, asyncio.Lock()):
            live = self._live.get(session_id)
            if live is not None:
                return live, False
            return await self._start(session_id, agent, config, workdir)

    async def _start(self, session_id: str, agent: str, config: AcpAgentConfig,
                     workdir: Path) -> tuple[_Live, bool]:
        from acp import PROTOCOL_VERSION, spawn_agent_process
        from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

        live = _Live(session_id=session_id, workdir=str(workdir), policy=self.policy,
                     stack=contextlib.AsyncExitStack())
        # the owner's env for the agent goes in as written (an agent needs its API key,
        # which build_env strips from what commands get); the gits the agent runs get the
        # hardening the model's commands get (a folder laid out as a bare repository in a
        # cloned project cannot run its fsmonitor through them), the owner's git settings
        # after it
        env = merge_git_env(build_env({}, cwd=str(workdir)), config.env)
        try:
            # the SDK's Client protocol lists every optional method; _Client has the ones a
            # client without terminals needs (the SDK answers the others "not found")
            conn, _process = await live.stack.enter_async_context(spawn_agent_process(
                _Client(live), config.command, *config.args,  # type: ignore[arg-type]
                env=env, cwd=workdir))
            live.conn = conn
            init = await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                    terminal=False),
                client_info=Implementation(name="codey-worker", version=__version__))
            known = self._known().get(session_id)
            can_load = bool(init.agent_capabilities and init.agent_capabilities.load_session)
            loaded = False
            opened: Any = None
            if known and known.get("agent") == agent and can_load:
                try:
                    opened = await conn.load_session(
                        cwd=str(workdir), session_id=known["acp_session_id"], mcp_servers=[])
                    live.acp_session_id, loaded = known["acp_session_id"], True
                except Exception as err:  # gone on the agent's side: start afresh
                    log.info("acp: could not load session %s (%s)", known, err)
            if not loaded:
                opened = await conn.new_session(cwd=str(workdir), mcp_servers=[])
                live.acp_session_id = opened.session_id
                self._remember(session_id, agent, live.acp_session_id)
            live.opening = _opening(live, opened)
        except (OSError, Exception) as err:
            await live.stack.aclose()
            if isinstance(err, ActionRefused):
                raise
            raise ActionRefused("acp_failed", f"the ACP agent {agent!r} could not "
                                              f"start: {err}") from None
        self._live[session_id] = live
        return live, loaded

    def _known(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _remember(self, session_id: str, agent: str, acp_session_id: str) -> None:
        known = self._known()
        known[session_id] = {"agent": agent, "acp_session_id": acp_session_id}
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, self.state_path)


def _text(content: Any) -> str:
    """The text of an ACP content block (other kinds are named, not shown)."""
    if content is None:
        return ""
    text = getattr(content, "text", None)
    if isinstance(text, str):
        return text
    return f"[{getattr(content, 'type', 'content')}]"


def _tool_text(contents: Any) -> str:
    parts = []
    for c in contents or []:
        kind = getattr(c, "type", "")
        if kind == "content":
            parts.append(_text(c.content))
        elif kind == "diff":
            parts.append(f"--- {c.path}\n{c.new_text}")
        elif kind == "terminal":
            parts.append(f"[terminal {c.terminal_id}]")
    return "\n".join(p for p in parts if p)


#: where agents put a command's output when they send it only as raw output (codex-acp's
#: exec end: ``formatted_output``, ``aggregated_output``, ``stdout``/``stderr``), in order
_RAW_OUTPUT_KEYS = ("formatted_output", "aggregated_output", "output", "result", "content")
_RAW_CAP = 64_000
#: an agent's slash commands passed on, at most
MAX_COMMANDS = 200
#: an agent's modes, config options, or one option's values passed on, at most
MAX_CHOICES = 100


def _raw_text(raw: Any) -> str:
    """The text of a tool call's raw output, when it has no content blocks."""
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw[:_RAW_CAP]
    if isinstance(raw, dict):
        for key in _RAW_OUTPUT_KEYS:
            value = raw.get(key)
            if isinstance(value, str) and value:
                return value[:_RAW_CAP]
        streams = [raw.get(k) for k in ("stdout", "stderr")]
        text = "".join(s for s in streams if isinstance(s, str))
        if text:
            return text[:_RAW_CAP]
    # another shape: shown as it came, so nothing the agent saw is hidden
    return json.dumps(raw, ensure_ascii=False, default=str)[:_RAW_CAP]


def _command(raw: Any) -> list[str] | None:
    """The argv named by a tool call's raw input (``command``: a list, or one string)."""
    if not isinstance(raw, dict):
        return None
    command = raw.get("command", raw.get("argv"))
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        return command[:256]
    if isinstance(command, str) and command:
        return [command]
    return None


def _modes(state: Any) -> list[AcpMode] | None:
    """An ACP ``SessionModeState``'s modes (None: the agent has none)."""
    if state is None:
        return None
    return [AcpMode(id=str(m.id)[:200], name=str(m.name)[:200],
                    description=str(m.description or "")[:500])
            for m in (state.available_modes or [])[:MAX_CHOICES]]


def _config_options(options: Any) -> list[AcpConfigOption] | None:
    """ACP ``configOptions`` as Codey keeps them (None: the agent has none); a select's
    grouped values are flattened, each naming its group."""
    if options is None:
        return None
    out = []
    for o in list(options)[:MAX_CHOICES]:
        kind: Literal["select", "boolean"] = (
            "boolean" if getattr(o, "type", "") == "boolean" else "select")
        choices: list[AcpConfigChoice] = []
        for c in getattr(o, "options", None) or []:
            if hasattr(c, "group"):
                choices += [AcpConfigChoice(value=str(v.value)[:200], name=str(v.name)[:200],
                                            group=str(c.name)[:200]) for v in c.options]
            else:
                choices.append(AcpConfigChoice(value=str(c.value)[:200],
                                               name=str(c.name)[:200]))
        category = getattr(o, "category", None)
        current = o.current_value
        out.append(AcpConfigOption(
            id=str(o.id)[:200], name=str(o.name)[:200], type=kind,
            current=bool(current) if kind == "boolean" else str(current)[:200],
            choices=choices[:MAX_CHOICES], description=str(o.description or "")[:500],
            category=category if isinstance(category, str) else ""))
    return out


def _opening(live: _Live, opened: Any) -> list[AcpUpdate]:
    """What the agent's session started with (``session/new`` or ``session/load``'s
    answer), as updates; its modes are kept for ``set_mode``'s answer."""
    updates = []
    state = getattr(opened, "modes", None)
    live.modes = _modes(state)
    if state is not None:
        live.current_mode = str(state.current_mode_id)
        updates.append(AcpUpdate(kind="mode", current_mode=live.current_mode, modes=live.modes))
    options = live.config_options = _config_options(getattr(opened, "config_options", None))
    if options is not None:
        updates.append(AcpUpdate(kind="config", config_options=options))
    return updates


def _turn_usage(usage: Any) -> AcpUsage | None:
    """A prompt answer's ``usage`` (unstable in ACP; None when the agent sent none)."""
    if usage is None:
        return None
    return AcpUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                    reasoning_tokens=usage.thought_tokens or 0,
                    cached_tokens=usage.cached_read_tokens or 0,
                    cache_write_tokens=usage.cached_write_tokens or 0,
                    total_tokens=usage.total_tokens)


def _convert(update: Any) -> AcpUpdate | None:
    """An ACP session update as Codey passes it on; None for what Codey does not show."""
    kind = getattr(update, "session_update", "")
    if kind == "agent_message_chunk":
        return AcpUpdate(kind="text", text=_text(update.content))
    if kind == "agent_thought_chunk":
        return AcpUpdate(kind="thought", text=_text(update.content))
    if kind in ("tool_call", "tool_call_update"):
        text = _tool_text(update.content) or _raw_text(getattr(update, "raw_output", None))
        return AcpUpdate(kind="tool", tool_call_id=update.tool_call_id, title=update.title,
                         status=update.status, tool_kind=update.kind, text=text,
                         command=_command(getattr(update, "raw_input", None)))
    if kind == "plan":
        return AcpUpdate(kind="plan", entries=[(e.content, e.status) for e in update.entries])
    if kind == "available_commands_update":
        commands = []
        for c in update.available_commands[:MAX_COMMANDS]:
            given = getattr(c, "input", None)
            hint = getattr(getattr(given, "root", given), "hint", "") or ""
            commands.append((str(c.name)[:100], str(c.description or "")[:500], str(hint)[:200]))
        return AcpUpdate(kind="commands", commands=commands)
    if kind == "current_mode_update":
        return AcpUpdate(kind="mode", current_mode=str(update.current_mode_id)[:200])
    if kind == "config_option_update":
        return AcpUpdate(kind="config", config_options=_config_options(update.config_options))
    if kind == "usage_update":
        return AcpUpdate(kind="usage", usage=AcpUsage(context_tokens=update.used,
                                                      context_window=update.size))
    return None
