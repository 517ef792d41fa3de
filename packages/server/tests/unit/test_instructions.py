"""The instructions a model call starts with: every tool the call offers, the session's
approval policy and its sandbox mode are described in what the model receives (read from the
request body the turn builds, on both wires)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import State
from codey_server.agent.history import History
from codey_server.agent.instructions import build_instructions
from codey_server.agent.machine import BodyBuilt, BuildBody, CallModel, Proceed, Start, step
from codey_server.agent.models import ModelProvider
from codey_server.agent.ports import Limits, provider_infos
from codey_server.agent.tools import BUILTIN
from codey_server.agent.tools.delegate import DELEGATE
from codey_server.agent.tools.exec import EXEC
from codey_server.agent.turn import CodeyMachine, codey_turn
from codey_server.agent.wire import wire_for
from codey_server.core.rules import Context
from codey_server.features import apply_all
from codey_server.settings import ProviderConfig, RoleConfig
from codey_testkit.credentials import FixedCredentials

S, W = "ses_1", "wrk_1"


class _Models:
    def __init__(self, kind: str, edit_tools: str) -> None:
        # (a window the instructions and the tools fit in: Ollama's default does not)
        self.p = ModelProvider(ProviderConfig(name="p", kind=kind,  # type: ignore[arg-type]
                                              base_url="http://127.0.0.1:9/v1",
                                              edit_tools=edit_tools,  # type: ignore[arg-type]
                                              context_window=32_768),
                               FixedCredentials())

    def provider(self, name: str) -> ModelProvider | None:
        return self.p

    def history(self, session_id: str, wire_name: str) -> History:
        return History(wire_for(wire_name))


def _first_call(kind: str = "chat", **setup: Any) -> tuple[str, list[str]]:
    """(the instructions, the names of the tools) of the session's first model call."""
    body = _first_body(kind=kind, **setup)
    if kind == "responses":
        return body["instructions"], [t["name"] for t in body["tools"]]
    return body["messages"][0]["content"], [t["function"]["name"] for t in body["tools"]]


def _first_body(*, policy: str = "suggest", sandbox: str = "workspace-write",
                network: bool = False, kind: str = "chat", edit_tools: str = "both",
                plan_mode: bool = False, read_only: bool = False, machine: str = "bwrap",
                roles: bool = False, mcp: bool = False) -> dict[str, Any]:
    """The request body of the session's first model call."""
    caps = wk.Capabilities(sandbox=wk.SandboxInfo(kind=machine),  # type: ignore[arg-type]
                           mcp_servers=[wk.McpServerInfo(name="time", tools=[
                               wk.McpTool(name="now")])] if mcp else [])
    events: list[tuple[str | None, ev.Event]] = [
        (None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="Linux",
                               python_version="3", worker_version="0", roots=["/w"],
                               public_key="k")),
        (None, ev.WorkerConnected(worker_id=W, hostname="h", os="Linux", worker_version="0",
                                  capabilities=caps)),
        (S, ev.SessionCreated(title="t", worker_id=W, workdir="/w/p", provider="p", model="m",
                              policy=policy, sandbox=sandbox,  # type: ignore[arg-type]
                              network=network, plan_mode=plan_mode, read_only=read_only)),
        (S, ev.SessionItemAppended(item=ev.UserMessage(id="u", ts=0.0, text="go")))]
    state = apply_all(State(), [ev.Envelope(seq=n, ts=float(n), session_id=sid, event=e)
                                for n, (sid, e) in enumerate(events, start=1)])
    models = _Models(kind, edit_tools)
    machine = CodeyMachine(provider_infos(models))  # type: ignore[arg-type]
    turn = codey_turn(S, limits=Limits(),
                      roles={"explorer": RoleConfig(description="reads")} if roles else None)
    ctx, seq = Context(), len(events)
    turn, made = step(machine, turn, state, Start(now=10.0), ctx)
    while True:  # fold the step's events, as the engine does, and go on
        for sid, e in made.events:
            seq += 1
            apply_all(state, [ev.Envelope(seq=seq, ts=10.0, session_id=sid, event=e)])
        [build] = [e for e in made.effects if isinstance(e, BuildBody)] or [None]
        if made.proceed:
            turn, made = step(machine, turn, state, Proceed(now=10.0), ctx)
        elif build is not None:  # the driver builds the body from the session's history
            body = build.wire.body(model=build.model, instructions=build.instructions,
                                   messages=models.history(S, build.wire.name).messages(
                                       build.items), tools=build.tools, session_id=S,
                                   options=build.options)
            turn, made = step(machine, turn, state, BodyBuilt(body, 0, now=10.0), ctx)
        else:
            break
    [call] = [e for e in made.effects if isinstance(e, CallModel)]
    body: dict[str, Any] = json.loads(call.body)
    return body


_POLICIES = ["suggest", "auto-edit", "full-auto"]
_SANDBOXES = ["workspace-write", "read-only", "full-access"]
_MODES = [{}, {"plan_mode": True}, {"read_only": True}, {"roles": True, "mcp": True}]


@pytest.mark.parametrize(("policy", "sandbox", "mode", "kind", "edit_tools"), [
    (p, s, m, k, e) for (p, s), m, k, e in zip(
        itertools.product(_POLICIES, _SANDBOXES), itertools.cycle(_MODES),
        itertools.cycle(["chat", "responses", "ollama"]),
        itertools.cycle(["both", "apply_patch", "edit"]), strict=False)])
def test_every_offered_tool_the_policy_and_the_sandbox_are_described(
        policy: str, sandbox: str, mode: dict[str, bool], kind: str, edit_tools: str) -> None:
    text, tools = _first_call(policy=policy, sandbox=sandbox, kind=kind,
                              edit_tools=edit_tools, **mode)
    assert tools
    for name in tools:
        described = f"`{name}`" in text or (name.startswith("mcp__") and "`mcp__<server>__"
                                                                         "<tool>`" in text)
        assert described, f"{name} is offered but not described"
    assert f"Approval policy: **{policy}**" in text
    assert f"Sandbox mode: **{sandbox}**" in text


def test_every_tool_has_a_line_of_guidance() -> None:
    for tool in (*BUILTIN, DELEGATE):
        if tool.name in ("write_stdin", "kill"):  # described with exec, which starts them
            assert f"`{tool.name}`" in EXEC.guide
        else:
            assert tool.guide.startswith(f"`{tool.name}` "), tool.name


def test_the_network_and_escalation_are_said_inside_a_sandbox_only() -> None:
    off, _ = _first_call(sandbox="workspace-write")
    assert "The network is off" in off and '"escalate": true' in off
    on, _ = _first_call(sandbox="read-only", network=True)
    assert "The network is on" in on
    bare, _ = _first_call(sandbox="full-access")
    assert "escalate" not in bare and "The network is" not in bare
    # a machine without a sandbox: commands are refused until the user chooses full access
    refused, _ = _first_call(machine="none")
    assert "This machine has no sandbox" in refused


def test_the_editing_advice_follows_the_editors_offered() -> None:
    both, _ = _first_call(edit_tools="both")
    assert "Use `edit` for a small change" in both
    patch_only, tools = _first_call(edit_tools="apply_patch")
    assert "edit" not in tools and "`edit`" not in patch_only
    assert "`apply_patch`" in patch_only


def test_the_instructions_cover_the_topics_of_a_coding_agents_briefing() -> None:
    text = build_instructions(_session(), tools=[])
    for heading in ("## How you work", "## Finding your way", "## Changing code",
                    "## Checking your work", "## Your final answer",
                    "## Approvals and the sandbox"):
        assert heading in text
    for words in ("Keep going until the task is done", "`update_plan`",
                  "say in one short sentence what you are about to do", "`grep`",
                  "narrowest first", "`path/to/file.py:42`"):
        assert words in text


def test_agents_md_files_and_their_precedence() -> None:
    s = _session()
    s.context = _context()
    text = build_instructions(s)
    assert "the one closer to the file wins" in text
    assert "what the user tells you in this conversation wins over all of them" in text
    assert text.index("### /w/AGENTS.md") < text.index("### /w/p/AGENTS.md")


def test_the_model_kind_gets_its_own_lines() -> None:
    responses, _ = _first_call(kind="responses")
    chat, _ = _first_call(kind="chat")
    ollama, _ = _first_call(kind="ollama")
    assert "## This model" in responses and "reasoning is kept" in responses
    assert "valid JSON" in chat and "reasoning is kept" not in chat
    # a small window's model gets the briefing in short, with the same topics, and the
    # tools only named (their definitions in short)
    assert len(ollama) < len(chat) / 2
    for words in ("Keep going until the task is done", "`update_plan`", "`grep`",
                  "narrowest first", "`path:line`"):
        assert words in ollama


def _session() -> Any:
    from codey_protocol.state import SessionInfo

    return SessionInfo(session_id=S, title="t", worker_id=W, workdir="/w/p", provider="p",
                       model="m")


def _context() -> Any:
    from codey_protocol.state import SessionContext

    return SessionContext(instructions=[
        wk.InstructionFile(path="/w/AGENTS.md", text="Use tabs."),
        wk.InstructionFile(path="/w/p/AGENTS.md", text="Use spaces here.")])


def test_a_small_windows_model_gets_the_tools_in_short() -> None:
    full = [t["function"] for t in _first_body(kind="chat")["tools"]]
    short = [t["function"] for t in _first_body(kind="ollama")["tools"]]
    assert [t["name"] for t in short] == [t["name"] for t in full]
    shell = next(t for t in short if t["name"] == "shell")
    assert shell["description"] == "Run a command in the session's workdir."
    assert "description" not in json.dumps(shell["parameters"])
    assert len(json.dumps(short)) < len(json.dumps(full)) * 0.7
