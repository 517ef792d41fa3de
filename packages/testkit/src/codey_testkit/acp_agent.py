"""``codey-acp-agent``: a small ACP agent (written with the ``agent-client-protocol`` SDK)
that plays a script, for tests of Codey's ACP sessions. It speaks ACP on stdin/stdout.

    codey-acp-agent --script turns.json --state-dir /tmp/acp-state

The script is ``{"turns": [[step, ...], ...]}``: the n-th prompt of a session plays turn n
(the last turn again when there are fewer). Steps:

* ``{"say": text}`` / ``{"think": text}`` — a chunk of the answer / of its reasoning;
* ``{"tool": {"id", "title", "kind"?, "raw_input"?}}`` — a tool call starts (status pending);
* ``{"update": {"id", "status"?, "text"?, "title"?, "raw_input"?, "raw_output"?}}`` — a tool
  call changes (a title or raw input told late, as claude-agent-acp does; content
  text; or, as codex-acp sends a command's end, only ``raw_output``: ``{"stdout", "stderr",
  "aggregated_output", "formatted_output", "exit_code"}``);
* ``{"permission": {"id", "title"?, "kind"?, "raw_input"?, "text"?}}`` — ask the client (as
  codex-acp asks before a command: ``raw_input`` ``{"command": [...], "reason": ...}``,
  content ``text``); the outcome (``allow_once``, ``allow_always``, ``reject_once``, or
  ``cancelled``) is said back as text ``[permission: X]``, and steps with ``"if_allowed":
  true`` run only when it was an allow, those with ``"if_rejected": true`` only when not;
* ``{"write": {"path", "content"}}`` / ``{"read": {"path"}}`` — through the client's file
  system (a read's content is said back as ``[read: ...]``, a refused write as
  ``[write failed: ...]``);
* ``{"plan": [[text, status], ...]}``;
* ``{"commands": [[name, description, hint], ...]}`` — its slash commands
  (``available_commands_update``; ``hint`` ``""``: the command takes no input);
* ``{"wait_cancel": true}`` — wait until the client cancels the turn (``stop_reason``
  ``cancelled``);
* ``{"wait_file": name}`` — wait until ``name`` exists in the session's cwd;
* ``{"mode": id}`` — the agent changes its own mode (``current_mode_update``);
* ``{"usage": {"used", "size"}}`` — how full its context is (``usage_update``);
* ``{"settings": true}`` — say its mode and config values as text ``[mode: X; k=v, …]``.

Beside ``turns`` the script may give ``modes`` (``{"current": id, "available": [[id, name],
…]}``) and ``config`` (``[{"id", "name", "current", "choices": [[value, name], …]}]``, or
``"current": true/false`` for a boolean): the session's modes and config options, told in
``session/new`` and set by ``session/set_mode`` / ``session/set_config_option`` (a set mode
is also confirmed with a ``current_mode_update``); and ``prompt_usage``
(``{"input_tokens", "output_tokens", "total_tokens"}``), the usage each prompt answers with.

Sessions are kept in ``--state-dir`` (their turn counters), and ``load_session`` is supported:
a client that starts the agent again can go on with a session.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "worker_config"]


class ScriptedAgent:
    """The ACP ``Agent`` side; the SDK's connection calls these methods."""

    def __init__(self, turns: list[list[dict[str, Any]]], state_dir: Path,
                 script: dict[str, Any] | None = None) -> None:
        self.turns = turns or [[{"say": "(no script)"}]]
        self.script = script or {}
        self.state_dir = state_dir
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.conn: Any = None
        self.cancelled: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    def _path(self, session_id: str) -> Path:
        return self.state_dir / f"{session_id}.json"

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **kwargs: Any) -> Any:
        from acp import InitializeResponse
        from acp.schema import AgentCapabilities, Implementation

        return InitializeResponse(
            protocol_version=protocol_version,
            agent_capabilities=AgentCapabilities(load_session=True),
            agent_info=Implementation(name="codey-acp-agent", version="0.1.0"))

    async def authenticate(self, method_id: str, **kwargs: Any) -> Any:
        return None

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> Any:
        from acp import NewSessionResponse

        session_id = f"acp_{secrets.token_hex(6)}"
        modes = self.script.get("modes")
        self._path(session_id).write_text(json.dumps({
            "cwd": cwd, "prompts": 0, "mode": modes["current"] if modes else "",
            "config": {c["id"]: c["current"] for c in self.script.get("config", [])}}))
        return NewSessionResponse(session_id=session_id, **self._settings(session_id))

    def _settings(self, session_id: str) -> dict[str, Any]:
        """The session's ``modes`` and ``config_options`` as its answers carry them."""
        from acp.schema import (
            SessionConfigOptionBoolean,
            SessionConfigOptionSelect,
            SessionConfigSelectOption,
            SessionMode,
            SessionModeState,
        )

        data = json.loads(self._path(session_id).read_text())
        out: dict[str, Any] = {}
        if "modes" in self.script:
            out["modes"] = SessionModeState(current_mode_id=data["mode"], available_modes=[
                SessionMode(id=i, name=n) for i, n in self.script["modes"]["available"]])
        if "config" in self.script:
            options: list[Any] = []
            for c in self.script["config"]:
                value = data["config"][c["id"]]
                if isinstance(value, bool):
                    options.append(SessionConfigOptionBoolean(
                        id=c["id"], name=c["name"], type="boolean", current_value=value))
                else:
                    options.append(SessionConfigOptionSelect(
                        id=c["id"], name=c["name"], type="select", current_value=value,
                        options=[SessionConfigSelectOption(value=v, name=n)
                                 for v, n in c["choices"]]))
            out["config_options"] = options
        return out

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> Any:
        from acp import RequestError
        from acp.helpers import update_current_mode
        from acp.schema import SetSessionModeResponse

        known = [i for i, _n in self.script.get("modes", {}).get("available", [])]
        if mode_id not in known:
            raise RequestError.invalid_params({"mode_id": "unknown mode"})
        self._change(session_id, "mode", mode_id)
        await self.conn.session_update(session_id=session_id,
                                       update=update_current_mode(mode_id))
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool,
                                **kwargs: Any) -> Any:
        from acp import RequestError
        from acp.schema import SetSessionConfigOptionResponse

        option = next((c for c in self.script.get("config", []) if c["id"] == config_id), None)
        if option is None or (not isinstance(value, bool)
                              and value not in [v for v, _n in option.get("choices", [])]):
            raise RequestError.invalid_params({"config_id": "unknown option or value"})
        data = json.loads(self._path(session_id).read_text())
        data["config"][config_id] = value
        self._path(session_id).write_text(json.dumps(data))
        return SetSessionConfigOptionResponse(
            config_options=self._settings(session_id)["config_options"])

    def _change(self, session_id: str, key: str, value: Any) -> None:
        data = json.loads(self._path(session_id).read_text())
        data[key] = value
        self._path(session_id).write_text(json.dumps(data))

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                           **kwargs: Any) -> Any:
        from acp import LoadSessionResponse, RequestError

        if not self._path(session_id).exists():
            raise RequestError.invalid_params({"session_id": "unknown session"})
        return LoadSessionResponse(**self._settings(session_id))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        from acp import PromptResponse

        path = self._path(session_id)
        data = json.loads(path.read_text())
        turn = self.turns[min(data["prompts"], len(self.turns) - 1)]
        data["prompts"] += 1
        path.write_text(json.dumps(data))
        self.cancelled[session_id] = asyncio.Event()
        allowed = True
        for step in turn:
            if (step.get("if_allowed") and not allowed) or (step.get("if_rejected")
                                                            and allowed):
                continue
            if "wait_file" in step:  # a turn exactly as long as the test wants
                cwd = Path(data["cwd"])
                while not (cwd / step["wait_file"]).exists():
                    if self.cancelled[session_id].is_set():
                        return PromptResponse(stop_reason="cancelled")
                    await asyncio.sleep(0.05)
                continue
            if "wait_cancel" in step:
                await self.cancelled[session_id].wait()
                return PromptResponse(stop_reason="cancelled")
            if "permission" in step:
                allowed = await self._ask(session_id, step["permission"])
                continue
            await self._play(session_id, step)
        usage = self.script.get("prompt_usage")
        return PromptResponse(stop_reason="end_turn", usage=_usage(usage) if usage else None)

    async def _ask(self, session_id: str, spec: dict[str, Any]) -> bool:
        from acp import text_block, tool_content
        from acp.schema import PermissionOption, ToolCallUpdate

        # codex-acp's order: "always" before "once"
        options = [
            PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
            PermissionOption(option_id="allow_once", name="Allow", kind="allow_once"),
            PermissionOption(option_id="reject_once", name="Reject", kind="reject_once")]
        content: list[Any] | None = (
            [tool_content(text_block(spec["text"]))] if "text" in spec else None)
        answer = await self.conn.request_permission(
            session_id=session_id, options=options,
            tool_call=ToolCallUpdate(tool_call_id=spec["id"], title=spec.get("title"),
                                     kind=spec.get("kind"), raw_input=spec.get("raw_input"),
                                     content=content))
        outcome = answer.outcome
        chosen = getattr(outcome, "option_id", None) or "cancelled"
        await self._say(session_id, f"[permission: {chosen}]")
        return chosen.startswith("allow")

    async def _say(self, session_id: str, text: str, thought: bool = False) -> None:
        from acp import update_agent_message_text, update_agent_thought_text

        make = update_agent_thought_text if thought else update_agent_message_text
        await self.conn.session_update(session_id=session_id, update=make(text))

    async def _play(self, session_id: str, step: dict[str, Any]) -> None:
        from acp import start_tool_call, text_block, tool_content, update_plan, update_tool_call
        from acp.helpers import plan_entry

        if "say" in step:
            await self._say(session_id, step["say"])
        elif "think" in step:
            await self._say(session_id, step["think"], thought=True)
        elif "tool" in step:
            t = step["tool"]
            await self.conn.session_update(session_id=session_id, update=start_tool_call(
                t["id"], t["title"], kind=t.get("kind", "other"), status="pending",
                raw_input=t.get("raw_input")))
        elif "update" in step:
            u = step["update"]
            content = [tool_content(text_block(u["text"]))] if "text" in u else None
            await self.conn.session_update(session_id=session_id, update=update_tool_call(
                u["id"], status=u.get("status"), content=content, title=u.get("title"),
                raw_input=u.get("raw_input"), raw_output=u.get("raw_output")))
        elif "plan" in step:
            await self.conn.session_update(session_id=session_id, update=update_plan(
                [plan_entry(text, status=status) for text, status in step["plan"]]))
        elif "commands" in step:
            from acp.helpers import update_available_commands
            from acp.schema import AvailableCommand, AvailableCommandInput
            from acp.schema import UnstructuredCommandInput as Hint

            listed = [AvailableCommand(name=name, description=description,
                                       input=AvailableCommandInput(Hint(hint=hint)) if hint
                                       else None)
                      for name, description, hint in step["commands"]]
            await self.conn.session_update(session_id=session_id,
                                           update=update_available_commands(listed))
        elif "mode" in step:
            from acp.helpers import update_current_mode

            self._change(session_id, "mode", step["mode"])
            await self.conn.session_update(session_id=session_id,
                                           update=update_current_mode(step["mode"]))
        elif "usage" in step:
            from acp.schema import UsageUpdate

            await self.conn.session_update(session_id=session_id, update=UsageUpdate(
                session_update="usage_update", used=step["usage"]["used"],
                size=step["usage"]["size"]))
        elif "settings" in step:
            data = json.loads(self._path(session_id).read_text())
            values = ", ".join(f"{k}={v}" for k, v in sorted(data["config"].items()))
            await self._say(session_id, f"[mode: {data['mode']}; {values}]")
        elif "write" in step:
            w = step["write"]
            try:
                await self.conn.write_text_file(session_id=session_id, path=w["path"],
                                                content=w["content"])
            except Exception as err:  # the client refused: say so, as a real agent would
                await self._say(session_id, f"[write failed: {err}]")
        elif "read" in step:
            read = await self.conn.read_text_file(session_id=session_id,
                                                  path=step["read"]["path"])
            await self._say(session_id, f"[read: {read.content}]")
        else:
            raise ValueError(f"unknown step {step}")


def _usage(spec: dict[str, int]) -> Any:
    from acp.schema import Usage

    return Usage(input_tokens=spec["input_tokens"], output_tokens=spec["output_tokens"],
                 total_tokens=spec.get("total_tokens",
                                       spec["input_tokens"] + spec["output_tokens"]))


def worker_config(script: Path, state_dir: Path | None = None) -> dict[str, Any]:
    """A worker's ``config.json`` whose ACP agent ``scripted`` is this agent playing
    ``script`` (its sessions kept in ``state_dir``, for ``session/load``)."""
    args = ["-m", "codey_testkit.acp_agent", "--script", str(script)]
    if state_dir is not None:
        args += ["--state-dir", str(state_dir)]
    return {"acp_agents": {"scripted": {"command": sys.executable, "args": args}}}


def main(argv: list[str] | None = None) -> None:
    """Run the scripted agent on stdio. Example: ``codey-acp-agent --script turns.json``."""
    parser = argparse.ArgumentParser(prog="codey-acp-agent", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", type=Path, required=True, help="the turns (JSON)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where sessions are kept (default: beside the script)")
    args = parser.parse_args(argv)
    from acp import run_agent

    script = json.loads(args.script.read_text())
    state = args.state_dir or args.script.parent / "acp-state"
    # the SDK's Agent protocol lists every optional method; this agent has the ones it needs
    asyncio.run(run_agent(ScriptedAgent(script["turns"], state, script)))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
