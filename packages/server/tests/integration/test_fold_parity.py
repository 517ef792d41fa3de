"""The web client's fold (``web/store.js``) equals the server's (``codey_server.core.fold``).

A varied recorded log (every event type, several sessions, deltas, a second approval decision
that must be ignored, pairing, revocation, auth) is folded in Python and, in Chromium, by the
JavaScript store; the two states must be equal as JSON. The markdown renderer's safety and the
views' basic rendering are checked in the same browser.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from codey_protocol import encode
from codey_protocol import events as ev
from codey_protocol.codec import decode_envelope
from codey_protocol.state import State
from codey_protocol.updates import APPEND_FIELDS, REPLACE_FIELDS
from codey_protocol.worker import (
    AcpConfigChoice,
    AcpConfigOption,
    AcpMode,
    ApplyPatch,
    Capabilities,
    Environment,
    FileChange,
    HookCommand,
    HookFile,
    InstructionFile,
    McpCall,
    McpServerInfo,
    McpTool,
    RunCommand,
    SkillInfo,
)
from codey_server.features import apply
from codey_testkit.compare import differences
from codey_testkit.samples import sample, sample_struct

pytestmark = pytest.mark.integration

WEB = Path(__file__).resolve().parents[4] / "web"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
BLANK = "/__blank.html"


# ---------------------------------------------------------------------------------------------
# a recorded log


class _Log:
    def __init__(self) -> None:
        self.envelopes: list[ev.Envelope] = []
        self.ts = 1_700_000_000.125

    def add(self, session_id: str | None, event: Any) -> None:
        self.ts += 0.37
        self.envelopes.append(ev.Envelope(seq=len(self.envelopes) + 1, ts=round(self.ts, 3),
                                          session_id=session_id, event=event))

    def update(self, sid: str, item_id: str, **fields: Any) -> None:
        self.add(sid, ev.SessionItemUpdated(item_id=item_id, **fields))


def _pair(log: _Log, n: int, outcome: str) -> None:
    rid = f"req{n}"
    log.add(None, ev.WorkerPairRequested(
        request_id=rid, hostname=f"host-{n}", os="Linux 6.1", python_version="3.11.9",
        worker_version="0.1.0", roots=[f"/home/u{n}", "/srv"], fingerprint=f"SHA256:ab{n}",
        expires_at=1_700_000_600.0 + n))
    if outcome == "approved":
        log.add(None, ev.WorkerPaired(
            worker_id=f"w{n}", request_id=rid, hostname=f"host-{n}", os="Linux 6.1",
            python_version="3.11.9", worker_version="0.1.0", roots=[f"/home/u{n}"],
            public_key=f"pk{n}"))
        log.add(None, ev.WorkerPairResolved(request_id=rid, outcome="approved",
                                            worker_id=f"w{n}"))
    elif outcome != "pending":
        log.add(None, ev.WorkerPairResolved(request_id=rid, outcome=outcome))  # type: ignore[arg-type]


def _session_turn(log: _Log, sid: str, k: int) -> None:
    """One turn: prompt, reasoning, streamed answer, a shell call with approval and output."""
    log.add(sid, ev.SessionStatusChanged(status="running"))
    log.add(sid, ev.SessionItemAppended(item=ev.UserMessage(id=f"{sid}-u{k}", ts=log.ts,
                                                            text=f"do thing {k} ✨")))
    log.add(sid, ev.SessionItemAppended(item=ev.Reasoning(id=f"{sid}-r{k}", ts=log.ts,
                                                          streaming=True)))
    for part in ("Thinking ", "about **it**", " 🧠"):
        log.update(sid, f"{sid}-r{k}", text_delta=part)
    log.update(sid, f"{sid}-r{k}", streaming=False)
    call = f"{sid}-t{k}"
    argv = ["pytest", "-q", f"tests/test_{k}.py"]
    log.add(sid, ev.SessionItemAppended(item=ev.ToolCall(
        id=call, ts=log.ts, call_id=f"call_{k}", name="shell",
        arguments=json.dumps({"command": argv}), command=argv)))
    log.add(sid, ev.ApprovalRequested(approval_id=f"{sid}-a{k}", item_id=call, kind="command",
                                      command=argv, reason="runs tests"))
    log.update(sid, call, status="waiting_approval", approval_id=f"{sid}-a{k}")
    log.add(sid, ev.SessionStatusChanged(status="waiting_approval", reason="approve pytest"))
    log.add(sid, ev.ApprovalResolved(approval_id=f"{sid}-a{k}", decision="approved",
                                     for_session=True))
    # A second decision must be ignored: the first decision wins.
    log.add(sid, ev.ApprovalResolved(approval_id=f"{sid}-a{k}", decision="rejected",
                                     message="too late"))
    action = RunCommand(action_id=f"{sid}-act{k}", session_id=sid, argv=argv,
                        workdir="/home/u1/proj", env={"LANG": "C"})
    log.add(sid, ev.ActionRequested(action_id=f"{sid}-act{k}", item_id=call, worker_id="w1",
                                    action=action))
    log.update(sid, call, status="running", action_id=f"{sid}-act{k}")
    for chunk in ("\x1b[32m....\x1b[0m", "\n1 passed", " in 0.1s\n"):
        log.update(sid, call, output_delta=chunk)
    log.update(sid, call, status="done", exit_code=0, result="exit 0\n1 passed",
               truncated=False)
    log.add(sid, ev.ActionFinished(action_id=f"{sid}-act{k}", outcome="result"))
    log.add(sid, ev.SessionItemAppended(item=ev.AssistantMessage(id=f"{sid}-m{k}", ts=log.ts,
                                                                 streaming=True)))
    for part in ("All ", "tests ", "pass.\n\n```py\nprint(1)\n```"):
        log.update(sid, f"{sid}-m{k}", text_delta=part)
    log.update(sid, f"{sid}-m{k}", streaming=False)
    log.add(sid, ev.TokenUsageRecorded(input_tokens=100 + k, output_tokens=20, reasoning_tokens=5,
                                       total_tokens=125 + k))
    log.add(sid, ev.SessionStatusChanged(status="idle"))


def build_log() -> list[ev.Envelope]:
    """A log touching every event type and the fold's corner cases."""
    log = _Log()
    _pair(log, 1, "approved")
    _pair(log, 2, "approved")
    _pair(log, 3, "denied")
    _pair(log, 4, "expired")
    _pair(log, 5, "locked")
    _pair(log, 6, "pending")
    caps = Capabilities(executors=["run_command", "apply_patch"], mcp_servers=[
        McpServerInfo(name="time", tools=[McpTool(name="now", description="the time",
                                                  input_schema={"type": "object"})])])
    log.add(None, ev.WorkerConnected(worker_id="w1", hostname="host-1b", os="Linux 6.2",
                                     worker_version="0.1.1", capabilities=caps))
    log.add(None, ev.WorkerConnected(worker_id="w2", hostname="host-2", os="Darwin",
                                     worker_version="0.1.0"))
    log.add(None, ev.WorkerConnected(worker_id="ghost", hostname="x", os="y",
                                     worker_version="z"))  # unknown worker: ignored
    log.add("s1", ev.SessionCreated(title="Fix tests", worker_id="w1", workdir="/home/u1/proj",
                                    provider="openai", model="gpt-5"))
    log.add("s2", ev.SessionCreated(title="Refactor", worker_id="w2", workdir="/srv/app",
                                    provider="ollama", model="qwen", policy="full-auto"))
    log.add(None, ev.SessionCreated(title="no id", worker_id="w1", workdir="/", provider="p",
                                    model="m"))  # no session id: ignored
    _session_turn(log, "s1", 1)
    _session_turn(log, "s2", 1)
    _session_turn(log, "s1", 2)
    # Same command approved "for session" again: approved_prefixes keeps it once.
    log.add("s1", ev.ApprovalRequested(approval_id="s1-again", item_id="s1-t2", kind="command",
                                       command=["pytest", "-q", "tests/test_2.py"]))
    log.add("s1", ev.ApprovalResolved(approval_id="s1-again", decision="approved",
                                      for_session=True))
    # Rejections, patches, MCP, writes.
    log.add("s1", ev.SessionItemAppended(item=ev.ToolCall(
        id="s1-patch", ts=log.ts, call_id="c-p", name="apply_patch", arguments="{}",
        patch="*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch")))
    log.add("s1", ev.ApprovalRequested(approval_id="s1-ap", item_id="s1-patch", kind="patch",
                                       patch="*** Begin Patch\n...", path="a.py"))
    log.add("s1", ev.ApprovalResolved(approval_id="s1-ap", decision="rejected",
                                      message="not like that", for_session=True))
    log.add("s1", ev.ApprovalResolved(approval_id="s1-ap", decision="approved"))
    log.add("s1", ev.ApprovalResolved(approval_id="missing", decision="approved"))
    # the attention ladder and the reviewer
    log.add("s1", ev.SessionAttentionChanged(nudge_after_s=60.0, act_after_s=None,
                                             on_approval="park", on_question="park"))
    log.add("s1", ev.ApprovalRequested(approval_id="s1-lad", item_id="s1-patch", kind="patch",
                                       patch="p", path="a.py"))
    log.add("s1", ev.ApprovalReviewed(approval_id="s1-lad", verdict="deny", risk=70,
                                      reason="edits", reviewer="p/m", latency_s=0.1))
    log.add("s1", ev.AttentionScheduled(target_id="s1-lad", target="approval",
                                        nudge_at=log.ts + 60, act_at=log.ts + 600, then="park"))
    log.add("s1", ev.AttentionNudged(target_id="s1-lad", target="approval", step="t1",
                                     text="waiting"))
    log.add("s1", ev.AttentionActed(target_id="s1-lad", target="approval", then="park",
                                    after_s=600.0))
    log.add("s1", ev.AttentionNudged(target_id="s1-lad", target="approval", step="parked"))
    log.add("s1", ev.ApprovalResolved(approval_id="s1-lad", decision="approved"))
    log.add("s1", ev.ActionRequested(
        action_id="s1-pa", item_id="s1-patch", worker_id="w1",
        action=ApplyPatch(action_id="s1-pa", session_id="s1", workdir="/w", patch="p")))
    log.update("s1", "s1-patch", status="done", diff="--- a/a.py\n+++ b/a.py\n@@\n-x\n+y\n",
               files=[FileChange(path="a.py", op="update", added=1, removed=1),
                      FileChange(path="b.py", op="move", moved_to="c.py")])
    log.add("s1", ev.ActionFinished(action_id="s1-pa", outcome="errored"))
    log.add("s1", ev.ActionFinished(action_id="never-requested", outcome="lost"))
    # a session's processes: started (an emoji counts as one character on both sides),
    # read, asked to stop, ended (twice: the first end stays), gone
    log.add("s1", ev.ProcessStarted(process_id="p1", item_id="s1-patch", worker_id="w1",
                                    argv=["npm", "run", "dev"], cwd="web", tty=True,
                                    output="ready 🙂\n"))
    log.add("s1", ev.ProcessOutput(process_id="p1", output_delta="GET / 200\n"))
    log.add("s1", ev.ProcessStopRequested(process_id="p1", by="user"))
    log.add("s1", ev.ProcessEnded(process_id="p1", signal=15, stopped_by="user",
                                  output_delta="bye\n"))
    log.add("s1", ev.ProcessEnded(process_id="p1", stopped_by="gone"))
    log.add("s1", ev.ProcessStarted(process_id="p2", item_id="s1-patch", worker_id="w1",
                                    argv=["sleep", "9"]))
    # what it listens on inside its own network, and the forwards the user asked for
    log.add("s1", ev.ProcessListening(process_id="p2", ports=[8000, 9000]))
    log.add("s1", ev.ProcessForwardRequested(process_id="p2", port=8000))
    log.add("s1", ev.ProcessForwarded(process_id="p2", port=8000, address="127.0.0.1:8000"))
    log.add("s1", ev.ProcessForwardRequested(process_id="p2", port=9000))
    log.add("s1", ev.ProcessEnded(process_id="p2", stopped_by="gone"))
    log.add("s1", ev.ProcessOutput(process_id="unknown", output_delta="x"))
    log.add("s1", ev.SessionItemAppended(item=ev.ToolCall(
        id="s1-mcp", ts=log.ts, call_id="c-m", name="mcp__time__now", arguments='{"tz":"UTC"}',
        mcp_server="time", mcp_tool="now")))
    log.add("s1", ev.ActionRequested(
        action_id="s1-ma", item_id="s1-mcp", worker_id="w1",
        action=McpCall(action_id="s1-ma", session_id="s1", server="time", tool="now",
                       arguments={"tz": "UTC", "n": [1, 2.5, None]})))
    log.update("s1", "s1-mcp", status="failed", error="server crashed", result="error: crashed")
    # Updates that must be ignored (unknown item, fields the item does not have).
    log.update("s1", "nope", text_delta="x", status="done")
    log.update("s1", "s1-patch", text_delta="no text field")
    log.update("s1", "s1-u1", status="done", output_delta="no output", exit_code=3)
    log.update("s9", "s1-u1", text_delta="unknown session")
    log.add("s1", ev.SessionItemAppended(item=ev.UserMessage(id="s1-q", ts=log.ts,
                                                             text="also this", queued=True)))
    log.update("s1", "s1-q", queued=False, text_delta=" please")
    log.add("s1", ev.SessionItemAppended(item=ev.ErrorItem(id="s1-e", ts=log.ts,
                                                           message="429 from model",
                                                           code="rate_limited")))
    log.add("s1", ev.SessionItemAppended(item=ev.PlanItem(
        id="s1-plan", ts=log.ts, steps=[ev.PlanStep(step="read"), ev.PlanStep(
            step="fix", status="in_progress")], explanation="two steps")))
    log.add("s1", ev.PlanUpdated(steps=[ev.PlanStep(step="read", status="done"),
                                        ev.PlanStep(step="fix", status="in_progress")],
                                 explanation="halfway"))
    log.add("s2", ev.PlanUpdated(steps=[ev.PlanStep(step="only")]))
    log.update("s1", "s1-t1", output="replaced output\n", truncated=True)
    log.add("s1", ev.SessionTitleChanged(title="Fix the flaky tests"))
    log.add("s1", ev.SessionPolicyChanged(policy="auto-edit"))
    log.add("s1", ev.SessionSandboxChanged(sandbox="read-only", network=True))
    log.add("s1", ev.SessionModelChanged(provider="claude", model="sonnet", effort="high",
                                         reason="switched"))
    # a session in a worktree: made (its workdir moves), counted, a git operation's item
    log.add("s3", ev.SessionCreated(title="In a worktree", worker_id="w1", workdir="/home/u1/app",
                                    provider="openai", model="gpt-5", worktree=ev.Worktree(
                                        repo="/home/u1/app", branch="codey/wt-0001",
                                        base="main")))
    log.add("s3", ev.SessionItemAppended(item=ev.GitOp(id="s3-op", ts=log.ts, op="create",
                                                       title="Worktree codey/wt-0001")))
    log.update("s3", "s3-op", output_delta="setting up\n")
    log.update("s3", "s3-op", status="done", exit_code=0, result="made")
    log.add("s3", ev.WorktreeUpdated(status="ready", path="/wt/app/wt", base_commit="c0ffee"))
    log.add("s3", ev.WorktreeUpdated(files=2, added=7, deleted=1, merged=True))
    log.add("s1", ev.WorktreeUpdated(status="ready"))  # no worktree: ignored
    log.add(None, ev.WorkerRenamed(worker_id="w1", name="laptop"))
    log.add("s1", ev.SessionWorkspaceChanged(paths=["a.py", "b.py", "a.py"]))
    log.add("s1", ev.SessionWorkspaceChanged(paths=["c.py", "a.py"]))
    log.add("s2", ev.SessionWorkspaceChanged(paths=[f"f{i}.txt" for i in range(150)]))
    log.add("s2", ev.SessionWorkspaceChanged(paths=[f"f{i}.txt" for i in range(100, 260)]))
    log.add("s2", ev.TokenUsageRecorded())
    log.add("nope", ev.TokenUsageRecorded(input_tokens=1))
    # The model path: cached tokens and the context gauge, compaction, notices, reasoning.
    log.add("s1", ev.TokenUsageRecorded(input_tokens=7000, output_tokens=300, cached_tokens=6000,
                                        context_window=8192, model="gpt-5"))
    log.add("s1", ev.CompactionRequested())
    log.add("s1", ev.SessionItemAppended(item=ev.Summary(
        id="s1-sum", ts=log.ts, text="- fixed the tests\n- next: docs", replaces_until="s1-t1",
        items_replaced=4, tokens_before=7300, reason="manual")))
    log.add("s1", ev.CompactionRequested())
    log.add("s1", ev.SessionItemAppended(item=ev.Notice(
        id="s1-skip", ts=log.ts, code="compaction_skipped", text="nothing to compact")))
    log.add("s1", ev.SessionItemAppended(item=ev.Notice(
        id="s1-empty", ts=log.ts, code="empty_answer", text="The model gave an empty answer")))
    log.add("s1", ev.SessionItemAppended(item=ev.Reasoning(id="s1-enc", ts=log.ts,
                                                           streaming=True)))
    log.update("s1", "s1-enc", streaming=False, reasoning_id="rs_1", encrypted_content="enc==")
    log.add("s1", ev.SessionItemAppended(item=ev.AssistantMessage(
        id="s1-cut", ts=log.ts, text="Half", streaming=True)))
    log.update("s1", "s1-cut", streaming=False, partial=True)
    log.add("s1", ev.SessionItemAppended(item=ev.AssistantMessage(
        id="s1-no", ts=log.ts, text="I can't do that.", refusal=True)))
    # Project context, questions, memory and session operations.
    log.add("s1", ev.AgentCommandsUpdated(commands=[
        ev.AgentCommand(name="init", description="Write an AGENTS.md"),
        ev.AgentCommand(name="plan-it", hint="what to plan")]))
    log.add("s1", ev.SessionItemAppended(item=ev.UserMessage(
        id="s1-slash", ts=log.ts, text="Review #1", for_turn=ev.TurnSettings(
            slash="review", provider="fast", model="haiku", tools=["read_file"]))))
    log.add("s1", ev.AgentModeUpdated(current_mode="ask", modes=[
        AcpMode(id="ask", name="Ask"), AcpMode(id="code", name="Code", description="Edits")]))
    log.add("s1", ev.AgentModeUpdated(current_mode="code"))
    log.add("s1", ev.AgentConfigUpdated(options=[
        AcpConfigOption(id="model", name="Model", current="fast", category="model",
                        choices=[AcpConfigChoice(value="fast", name="Fast"),
                                 AcpConfigChoice(value="deep", name="Deep", group="Big")]),
        AcpConfigOption(id="web", name="Web", type="boolean", current=True)]))
    log.add("s1", ev.TokenUsageRecorded(input_tokens=7, output_tokens=3, context_tokens=900,
                                        context_window=200_000, model="acp:scripted"))
    log.add("s1", ev.SessionContextUpdated(
        instructions=[InstructionFile(path="/home/u1/AGENTS.md", text="Be brief.", scope="user"),
                      InstructionFile(path="/home/u1/proj/AGENTS.md", text="Use uv.",
                                      truncated=True)],
        skills=[SkillInfo(name="release", description="Cut a release.",
                          path="/home/u1/.codey/skills/release/SKILL.md", scope="user")],
        environment=Environment(os="Linux", os_version="6.1", shell="/bin/bash",
                                workdir="/home/u1/proj", git_branch="main", git_dirty=False,
                                date="2026-11-22T10:00+00:00", timezone="UTC"),
        warnings=["skill /x/SKILL.md: skipped (no front matter)"]))
    log.add("s1", ev.QuestionAsked(question_id="q1", item_id="s1-t2", question="Which DB?",
                                   choices=["sqlite", "postgres"]))
    log.add("s1", ev.QuestionAnswered(question_id="q1", answer="sqlite"))
    log.add("s1", ev.QuestionAnswered(question_id="q1", cancelled=True))  # ignored
    log.add("s1", ev.QuestionAsked(question_id="q2", item_id="s1-t2", question="Sure?"))
    log.add("s1", ev.QuestionAnswered(question_id="q2", cancelled=True))
    log.add("s1", ev.MemoryUpdated(worker_id="w1", workdir="/home/u1/proj", text="- uv run"))
    log.add(None, ev.MemoryUpdated(worker_id="w1", workdir="/home/u1/proj",
                                   text="- uv run\n- ruff"))
    log.add("s3", ev.SessionForked(from_session="s1", until_item="s1-m1", title="Try B"))
    log.add("s4", ev.SessionForked(from_session="s1", until_item="nope", title="All of it"))
    log.add("s5", ev.SessionForked(from_session="gone", until_item="x", title="ignored"))
    log.add("s3", ev.SessionTitleChanged(title="Try B, renamed"))
    log.add("s3", ev.SessionArchived())
    log.add("s4", ev.SessionArchived())
    log.add("s4", ev.SessionArchived(archived=False))
    log.add("s4", ev.SessionMoved(worker_id="w2", from_worker="w1"))
    log.add("s6", ev.SessionCreated(title="Plan first", worker_id="w1", workdir="/home/u1/p",
                                    provider="openai", model="gpt-5", plan_mode=True))
    log.add("s6", ev.PlanUpdated(steps=[ev.PlanStep(step="look")], explanation="first"))
    log.add("s6", ev.SessionItemAppended(item=ev.UserMessage(id="s6-u", ts=log.ts,
                                                             text="more detail")))
    log.add("s6", ev.PlanUpdated(steps=[ev.PlanStep(step="look"), ev.PlanStep(step="fix")]))
    log.add("s6", ev.PlanApproved(note="go"))
    log.add("s6", ev.TurnRequested())
    log.add("s7", ev.SessionCreated(title="explorer: look", worker_id="w1", workdir="/home/u1/p",
                                    provider="openai", model="gpt-5", policy="suggest",
                                    parent_id="s1", parent_item="s1-t1", role="explorer",
                                    read_only=True, turn_cap=20))
    log.add("s5", ev.SessionForked(from_session="s1", until_item="s1-u1", title="Short-lived"))
    log.add("s5", ev.SessionStatusChanged(status="closed", reason="done"))
    log.add("s5", ev.SessionDeleted(reason="deleted by the user"))
    log.add("s2", ev.SessionStatusChanged(status="error", reason="model unreachable"))
    log.add(None, ev.RateLimitUpdated(provider="openai", limit_requests=500,
                                      remaining_requests=499, reset_requests="1s"))
    log.add(None, ev.RateLimitUpdated(provider="openai", remaining_tokens=1000))
    # budgets and prices: a session priced, stopped at its budget, raised and running again
    log.add(None, ev.PricesSet(prices={"gpt-5": ev.ModelPrice(input=1.5, cached_input=0.15,
                                                              output=12.0, cache_write=None)}))
    log.add(None, ev.BudgetSet(scope="day", max_micros=5_000_000))
    log.add("s6", ev.BudgetSet(scope="session", max_tokens=300))
    log.add("s6", ev.TokenUsageRecorded(input_tokens=250, output_tokens=80, total_tokens=330,
                                        provider="openai", cost_micros=1335))
    log.add("s6", ev.BudgetReached(scope="session", unit="tokens", limit=300, spent=330))
    log.add("s6", ev.SessionStatusChanged(status="waiting_user", reason="budget reached"))
    log.add("s6", ev.BudgetSet(scope="session", max_tokens=480))
    log.add("s6", ev.SessionStatusChanged(status="running"))
    log.add(None, ev.AuthStatusUpdated(provider="openai", state="pending", method="device_code",
                                       verification_uri="https://example.test/device",
                                       user_code="ABCD-EFGH"))
    log.add(None, ev.AuthStatusUpdated(provider="openai", state="logged_in", method="oauth",
                                       account="me@example.test", expires_at=1_700_100_000.5))
    log.add(None, ev.AuthStatusUpdated(provider="other", state="error", error="bad key"))
    log.add(None, ev.ProviderSaved(provider=ev.ProviderEntry(
        name="local", kind="ollama", base_url="http://h:11434/v1", models=["qwen"],
        auth="none", updated_at=log.ts)))
    log.add(None, ev.ProviderSaved(provider=ev.ProviderEntry(name="gone", base_url="http://g")))
    log.add(None, ev.AuthStatusUpdated(provider="gone", state="logged_in", method="api_key"))
    log.add(None, ev.ProviderRemoved(name="gone"))
    log.add("s1", ev.TerminalCreated(terminal_id="t1", worker_id="w1", workdir="/home/u1/proj",
                                     by="browser 1a2b3c4d"))
    log.add(None, ev.TerminalCreated(terminal_id="t2", worker_id="w1", workdir="/srv", by="x"))
    log.add("s1", ev.TerminalAttached(terminal_id="t1", by="browser 1a2b3c4d"))
    log.add(None, ev.TerminalAttached(terminal_id="t2", by="x"))
    log.add(None, ev.TerminalAttached(terminal_id="t2", by="y"))
    log.add(None, ev.TerminalDetached(terminal_id="t2", by="x"))
    log.add(None, ev.TerminalAttached(terminal_id="ghost", by="x"))
    log.add("s1", ev.TerminalClosed(terminal_id="t1", reason="exited"))
    log.add(None, ev.ScheduleSaved(spec=ev.ScheduleSpec(
        schedule_id="sc1", name="nightly", cron="0 2 * * *", timezone="Europe/Paris",
        worker_id="w1", workdir="/home/u1/p", prompt="run the tests", policy="full-auto")))
    log.add(None, ev.ScheduleSaved(spec=ev.ScheduleSpec(
        schedule_id="sc2", name="once", at=1_700_000_500.0, worker_id="w1", workdir="/w",
        prompt="p", target_session="s1", enabled=False)))
    log.add(None, ev.ScheduleFired(schedule_id="sc1", due_at=1_700_000_100.0,
                                   outcome="started", session_id="s1", skipped=2))
    log.add(None, ev.ScheduleFired(schedule_id="sc1", due_at=1_700_000_200.0,
                                   outcome="failed", error="worker gone"))
    log.add(None, ev.ScheduleFired(schedule_id="ghost", due_at=1.0, outcome="skipped"))
    log.add(None, ev.ScheduleSaved(spec=ev.ScheduleSpec(
        schedule_id="sc1", name="nightly v2", cron="0 3 * * *", worker_id="w1",
        workdir="/home/u1/p", prompt="run the tests")))
    log.add(None, ev.ScheduleDeleted(schedule_id="sc2"))
    log.add(None, ev.TriggerSet(spec=ev.TriggerSpec(
        trigger_id="tr1", hook_id="h1", name="on comment", worker_id="w1", workdir="/w",
        prompt="{{payload.comment.body}}", events=["issue_comment"], budget_usd=1.5,
        has_secret=True)))
    log.add(None, ev.TriggerSet(spec=ev.TriggerSpec(
        trigger_id="tr2", hook_id="h2", name="tasks", worker_id="w1", workdir="/w",
        prompt="p", target="task")))
    log.add(None, ev.TriggerDelivered(trigger_id="tr1", delivery_id="d1", outcome="started",
                                      event="issue_comment.created", session_id="s1",
                                      payload="ab" * 32, missing=["payload.x"]))
    log.add(None, ev.TriggerDelivered(trigger_id="tr1", delivery_id="d2", outcome="refused",
                                      event="issue_comment", reason="bad signature"))
    log.add(None, ev.TriggerDelivered(trigger_id="tr1", delivery_id="d3", outcome="filtered",
                                      replay_of="d1", payload="ab" * 32))
    log.add(None, ev.TriggerDelivered(trigger_id="ghost", delivery_id="d4", outcome="started"))
    log.add(None, ev.TriggerSet(spec=ev.TriggerSpec(
        trigger_id="tr1", hook_id="h1", name="on any comment", worker_id="w1", workdir="/w",
        prompt="p", enabled=False)))
    log.add(None, ev.TriggerRemoved(trigger_id="tr2"))
    log.add(None, ev.TaskCreated(task_id="t1", title="Design", order=0.0))
    log.add(None, ev.TaskCreated(task_id="t2", title="Build", description="the thing",
                                 depends_on=["t1"], order=1.0))
    log.add(None, ev.TaskCreated(task_id="t3", title="Spare", order=2.0))
    log.add(None, ev.TaskUpdated(task_id="t2", title="Build it", description="now",
                                 depends_on=["t1"]))
    log.add(None, ev.TaskMoved(task_id="t1", status="done", order=0.5))
    log.add(None, ev.TaskRunStarted(task_id="t2", session_id="s6"))
    log.add("s6", ev.SessionStatusChanged(status="running"))
    log.add("s6", ev.SessionStatusChanged(status="idle"))
    log.add(None, ev.TaskMoved(task_id="ghost", status="done", order=1.0))
    log.add(None, ev.TaskDeleted(task_id="t3"))
    log.add(None, ev.WorkerDisconnected(worker_id="w1", reason="bye"))
    log.add(None, ev.WorkerDisconnected(worker_id="ghost"))
    log.add(None, ev.WorkerRevoked(worker_id="w2"))
    log.add(None, ev.WorkerRevoked(worker_id="ghost"))
    log.add("s3", ev.SessionCreated(title="Late", worker_id="w2", workdir="/srv", provider="p",
                                    model="m", policy="suggest"))
    # a session run by an external ACP agent, on a worker that offers it
    log.add(None, ev.WorkerConnected(worker_id="w1", hostname="host-1b", os="Linux 6.2",
                                     worker_version="0.1.1", capabilities=Capabilities(
                                         executors=["acp_prompt"], acp_agents=["claude"])))
    log.add("s4", ev.SessionCreated(title="Agent", worker_id="w1", workdir="/home/u1/proj",
                                    provider="acp", model="claude", agent="claude"))
    log.add("s4", ev.ApprovalRequested(approval_id="s4-a", item_id="x", kind="acp",
                                       command=["acp", "edit"], reason="Write a.txt"))
    log.add("s4", ev.ApprovalResolved(approval_id="s4-a", decision="approved",
                                      for_session=True))
    log.add(None, ev.WorkerDisconnected(worker_id="w1", reason="bye again"))
    # the Telegram channel: pairing twice keeps the first date; unknown chats are ignored
    log.add(None, ev.TelegramChatPaired(chat_id=42, title="Ann"))
    log.add(None, ev.TelegramChatPaired(chat_id=-1001, title="team"))
    log.add(None, ev.TelegramChatPaired(chat_id=42, title="Ann B"))
    log.add(None, ev.TelegramSessionChosen(chat_id=42, session_id="s1"))
    log.add(None, ev.TelegramSessionChosen(chat_id=7, session_id="s1"))
    log.add(None, ev.TelegramMessageSent(chat_id=42, key="approval:s1-again", message_id=5))
    log.add(None, ev.TelegramMessageSent(chat_id=42, key="decided:s1-again"))
    log.add(None, ev.TelegramMessageSent(chat_id=7, key="answer:x", message_id=1))
    log.add(None, ev.TelegramUpdateHandled(update_id=10, bot_id=7))
    log.add(None, ev.TelegramUpdateHandled(update_id=3, bot_id=7))
    log.add(None, ev.TelegramUpdateHandled(update_id=2, bot_id=8))  # another bot
    log.add(None, ev.TelegramUpdateHandled(update_id=1))
    log.add(None, ev.TelegramChatRemoved(chat_id=-1001))
    log.add(None, ev.TelegramChatRemoved(chat_id=99))
    # push devices: added, added again (its first date kept), changed, an unknown one changed,
    # removed, one kept
    log.add(None, ev.PushDeviceAdded(device_id="dev_1", name="Phone", endpoint_host="fcm.x",
                                     kinds=["approval", "failed"]))
    log.add(None, ev.PushDeviceAdded(device_id="dev_2", name="Laptop", kinds=["finished"]))
    log.add(None, ev.PushDeviceAdded(device_id="dev_1", name="Phone", endpoint_host="fcm.y",
                                     kinds=["approval"]))
    log.add(None, ev.PushDeviceChanged(device_id="dev_1", name="Pixel", kinds=[]))
    log.add(None, ev.PushDeviceChanged(device_id="dev_9", name="?", kinds=["approval"]))
    log.add(None, ev.PushDeviceRemoved(device_id="dev_2", reason="gone"))
    # upgrades of the data: told once (a second record of the same one changes nothing),
    # dismissed; an unknown one's dismissal is ignored
    upgraded = ev.DataUpgraded(upgrade_id="u1", from_format=1, to_format=3, version="0.2.0",
                               changes=["tokens keep their rights"], backup="/data/backups/u1")
    log.add(None, upgraded)
    log.add(None, upgraded)
    log.add(None, ev.DataUpgraded(upgrade_id="u2", from_format=3, to_format=4, version="0.3.0"))
    log.add(None, ev.UpgradeNoticeDismissed(upgrade_id="u1"))
    log.add(None, ev.UpgradeNoticeDismissed(upgrade_id="nope"))
    # goals: set, checked twice, met; another given up; one for an unknown goal id ignored
    log.add("s1", ev.GoalSet(goal_id="g1", condition="$ pytest -q", command=["pytest", "-q"],
                             max_turns=3))
    log.add("s1", ev.GoalChecked(goal_id="g1", attempt=1, met=False, output="1 failed",
                                 exit_code=1, after_item="s1-q"))
    log.add("s1", ev.GoalChecked(goal_id="nope", attempt=9, met=True))
    log.add("s1", ev.GoalChecked(goal_id="g1", attempt=2, met=True, output="1 passed",
                                 exit_code=0, after_item="s1-e"))
    log.add("s1", ev.GoalMet(goal_id="g1", reason="`pytest -q` exited 0 (check 2)"))
    log.add("s2", ev.GoalSet(goal_id="g2", condition="the README explains setup"))
    log.add("s2", ev.GoalChecked(goal_id="g2", attempt=1, met=False, by="judge",
                                 output="no evidence"))
    log.add("s2", ev.GoalGivenUp(goal_id="g2", reason="cleared by the user"))
    log.add("s9", ev.GoalSet(goal_id="g9", condition="unknown session"))
    log.add("s1", ev.CheckpointRecorded(turn="s1-u1", commit="c" * 40, files=3,
                                        skipped=["big.bin (over 10485760 bytes)"]))
    log.add("s1", ev.CheckpointRecorded(turn="s1-u2", commit="d" * 40, shadow=True))
    log.add("s1", ev.CheckpointRecorded(turn="s1-u1", commit="e" * 40, files=4))
    log.add("s9", ev.CheckpointRecorded(turn="x", commit="f" * 40))
    # rewinds: to a live prompt (a branch), again to the same prompt (gone: ignored), to an
    # item that is not a prompt (ignored)
    log.add("s6", ev.ConversationRewound(turn="s6-u"))
    log.add("s6", ev.ConversationRewound(turn="s6-u", mode="both"))
    log.add("s1", ev.ConversationRewound(turn="s1-e"))
    # hooks: files found (a project's, untrusted; a user's), trusted, runs (on a call, on the
    # turn, for an unknown session: ignored)
    log.add("s1", ev.HooksFound(files=[
        HookFile(path="/w/.claude/settings.json", scope="project", sha256="a" * 64,
                 hooks=[HookCommand(event="PreToolUse", matcher="Bash",
                                    command_line="./guard")]),
        HookFile(path="/home/u/.codey/settings.json", scope="user", error="not JSON")]))
    log.add("s1", ev.HooksTrusted(path="/w/.claude/settings.json", sha256="a" * 64))
    log.add("s1", ev.HooksTrusted(path="/w/.claude/settings.json", sha256="a" * 64))
    log.add("s1", ev.HookRan(item_id="s1-e", event="PreToolUse", path="/w/.claude/settings.json",
                             command_line="./guard", exit_code=2, duration_ms=12,
                             output="no rm -rf", decision="deny", reason="no rm -rf"))
    log.add("s1", ev.HookRan(event="Stop", path="/w/.claude/settings.json",
                             command_line="./guard", timed_out=True))
    log.add("s9", ev.HookRan(event="Stop", path="p", command_line="c"))
    return log.envelopes


# ---------------------------------------------------------------------------------------------
# a log with every update field (read from the structs, so a field added later is covered)

ITEM_KINDS: tuple[type[ev.ItemBase], ...] = typing.get_args(ev.Item)
UPDATE_TYPES = {f.name: f.type
                for f in typing.cast(mi.StructType, mi.type_info(ev.SessionItemUpdated)).fields}
UPDATES_SESSION = "su"


class _Expected(msgspec.Struct):
    item_id: str
    field: str  # the item's field
    value: Any  # its JSON value after the update


def update_log(with_chunk: bool = False) -> tuple[list[ev.Envelope], int, list[_Expected]]:
    """For every update field and every item kind that has its target: a fresh item, then one
    update setting that field. Returns the log, the index of the first update, and what each
    update must leave in its item.

    ``with_chunk``: a chunk of the item's streamed text or output comes first, and the update
    carries a second chunk too (as the runner may send them together), so that a view cannot
    take it for a bare chunk.
    """
    log = _Log()
    log.add(UPDATES_SESSION, ev.SessionCreated(title="updates", worker_id="w", workdir="/w",
                                               provider="p", model="m"))
    changes = [*APPEND_FIELDS.items(), *((name, name) for name in REPLACE_FIELDS)]
    items: list[ev.ItemBase] = []
    updates: list[ev.SessionItemUpdated] = []
    expected: list[_Expected] = []
    for name, target in changes:
        for cls in ITEM_KINDS:
            if target not in cls.__struct_fields__:
                continue
            n = len(items) + 1
            item = sample_struct(cls, n, id=f"su-{n}-{target}", ts=log.ts)
            before = msgspec.to_builtins(getattr(item, target))
            # a sample that differs from the item's own (a string field the item was drawn
            # with the same seed, ``name``, would be equal)
            value = next(v for v in (sample(UPDATE_TYPES[name], n + k) for k in range(50))
                         if (before + v if name in APPEND_FIELDS
                             else msgspec.to_builtins(v)) != before)
            fields = {name: value}
            if with_chunk:
                chunk = next((d for d, t in APPEND_FIELDS.items() if t in cls.__struct_fields__
                              and d != name), None)
                if chunk is not None:
                    updates.append(ev.SessionItemUpdated(item_id=f"su-{n}-{target}",
                                                         **{chunk: f"chunk {n}\n"}))
                    fields[chunk] = f"chunk {n}b\n"
            before = msgspec.to_builtins(getattr(item, target))
            after = before + value if name in APPEND_FIELDS else msgspec.to_builtins(value)
            assert after != before, f"the sample for {name} changes nothing"
            items.append(item)
            updates.append(ev.SessionItemUpdated(item_id=item.id, **fields))
            expected.append(_Expected(item.id, target, after))
    for item in items:
        log.add(UPDATES_SESSION, ev.SessionItemAppended(item=item))
    first_update = len(log.envelopes)
    for update in updates:
        log.add(UPDATES_SESSION, update)
    return log.envelopes, first_update, expected


def python_fold(envelopes: list[ev.Envelope]) -> dict[str, Any]:
    """Fold copies: ``apply`` mutates the appended items it stores, which live in the events."""
    state = State()
    for env in envelopes:
        state = apply(state, decode_envelope(encode(env)))
    return msgspec.to_builtins(state)  # type: ignore[no-any-return]




def envelopes_json(envelopes: list[ev.Envelope]) -> str:
    return "[" + ",".join(encode(e).decode() for e in envelopes) + "]"


# ---------------------------------------------------------------------------------------------
# fixtures: web/ on a stdlib HTTP server, one Chromium page


class _Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == BLANK:
            body = b"<!doctype html><title>blank</title><div id=root></div>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def web_base() -> Iterator[str]:
    handler = functools.partial(_Handler, directory=str(WEB))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def web_page(web_base: str) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        pg = browser.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda err: errors.append(str(err)))
        pg.goto(web_base + BLANK)
        yield pg
        browser.close()
        assert not errors, errors


# ---------------------------------------------------------------------------------------------
# fold parity

_JS_FOLD = """async ([text, cut]) => {
  const m = await import('/store.js');
  const envs = JSON.parse(text);
  const state = m.emptyState();
  for (const e of envs.slice(0, cut)) m.apply(state, e);
  return JSON.parse(JSON.stringify(state));
}"""


def test_log_covers_every_event_type() -> None:
    seen = {type(e.event) for e in build_log()}
    assert seen == set(ev.Event.__args__)  # type: ignore[attr-defined]


@pytest.mark.parametrize("fraction", [0.3, 0.7, 1.0])
def test_js_fold_equals_python_fold(web_page: Any, fraction: float) -> None:
    envelopes = build_log()
    cut = int(len(envelopes) * fraction)
    expected = python_fold(envelopes[:cut])
    got = web_page.evaluate(_JS_FOLD, [envelopes_json(envelopes), cut])
    assert differences(got, expected) == []
    assert got == expected


def test_every_update_field_takes_effect_in_the_python_fold() -> None:
    """Guards the update log: each update field reached an item and changed it."""
    envelopes, _, expected = update_log()
    items = {i["id"]: i for i in python_fold(envelopes)["sessions"][UPDATES_SESSION]["items"]}
    changed = {x.field for x in expected}
    assert changed == set(APPEND_FIELDS.values()) | set(REPLACE_FIELDS)
    for x in expected:
        assert items[x.item_id][x.field] == x.value, x


@pytest.mark.parametrize("with_chunk", [False, True])
def test_js_fold_equals_python_fold_for_every_update_field(web_page: Any,
                                                           with_chunk: bool) -> None:
    envelopes, _, _ = update_log(with_chunk)
    got = web_page.evaluate(_JS_FOLD, [envelopes_json(envelopes), len(envelopes)])
    expected = python_fold(envelopes)
    assert differences(got, expected) == []
    assert got == expected


def test_store_skips_duplicates_and_resumes_from_snapshot(web_page: Any) -> None:
    """Store.apply ignores seq ≤ state.seq; a Python snapshot plus the rest equals the fold."""
    envelopes = build_log()
    cut = len(envelopes) // 2
    snapshot = python_fold(envelopes[:cut])
    got = web_page.evaluate("""async ([text, snap, cut]) => {
      const { Store } = await import('/store.js');
      const envs = JSON.parse(text);
      const store = new Store();
      const seen = [];
      store.subscribe((c) => seen.push(c.kind));
      store.replace(snap.seq, snap);
      let folded = 0;
      for (const e of envs.slice(cut - 5)) folded += store.apply(e) ? 1 : 0;  // overlap
      for (const e of envs) folded += store.apply(e) ? 1 : 0;  // all duplicates
      return { state: JSON.parse(JSON.stringify(store.state)), folded, resets: seen[0] };
    }""", [envelopes_json(envelopes), snapshot, cut])
    assert got["folded"] == len(envelopes) - cut
    assert got["resets"] == "reset"
    assert got["state"] == python_fold(envelopes)


def test_corner_cases_in_the_log_took_effect() -> None:
    """Guards the log itself: the cases the parity test relies on really happen."""
    state = python_fold(build_log())
    s1 = state["sessions"]["s1"]
    assert s1["approvals"]["s1-a1"]["status"] == "approved"  # second decision ignored
    assert s1["approvals"]["s1-ap"]["status"] == "rejected"
    assert s1["approved_prefixes"] == [["pytest", "-q", "tests/test_1.py"],
                                       ["pytest", "-q", "tests/test_2.py"]]
    assert len(state["sessions"]["s2"]["changed_paths"]) == 200
    assert s1["changed_paths"] == ["b.py", "c.py", "a.py"]
    assert set(s1["pending_actions"]) == {"s1-ma"}
    assert state["workers"]["w2"]["revoked"] is True
    assert set(state["pair_requests"]) == {"req6"}
    assert state["auth"]["openai"]["state"] == "logged_in"
    items = {i["id"]: i for i in s1["items"]}
    assert items["s1-q"] == {**items["s1-q"], "queued": False, "text": "also this please"}
    assert items["s1-t1"]["output"] == "replaced output\n"


# ---------------------------------------------------------------------------------------------
# markdown safety

_MALICIOUS = [
    "<script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    "[click](javascript:window.__pwned=3)",
    "[click](JaVaScRiPt:alert(1))",
    '[x](https://ok.test/" onmouseover="window.__pwned=4)',
    "https://ok.test/\"><img src=x onerror=window.__pwned=5>",
    "**<svg onload=window.__pwned=6>**",
    "`<b>code</b>` and ```\n<iframe src=javascript:alert(1)></iframe>\n```",
    "- <a href=javascript:alert(1)>list</a>\n- _<u onclick=x>_",
    "> <style>body{display:none}</style>",
    "[a](data:text/html,<script>alert(1)</script>)",
    "\u0000 0 \u0000 placeholder abuse \u00000\u0000",
]


def test_markdown_never_makes_live_html(web_page: Any) -> None:
    report = web_page.evaluate("""async (inputs) => {
      const { renderMarkdown } = await import('/markdown.js');
      const root = document.getElementById('root');
      const out = [];
      for (const src of inputs) {
        const div = document.createElement('div');
        div.innerHTML = renderMarkdown(src);
        root.append(div);
        const bad = [];
        for (const el of div.querySelectorAll('*')) {
          const tag = el.tagName.toLowerCase();
          if (!['p','br','pre','code','strong','em','ul','ol','li','h3','h4','h5','h6',
                'blockquote','a','span','table','thead','tbody','tr','th','td','s','hr']
                .includes(tag)) bad.push('tag ' + tag);
          for (const a of el.attributes) {
            if (a.name.startsWith('on')) bad.push('attr ' + a.name);
          }
          if (tag === 'a' && !/^https?:\\/\\//.test(el.getAttribute('href'))) {
            bad.push('href ' + el.getAttribute('href'));
          }
        }
        out.push({ src, bad, text: div.textContent });
      }
      await new Promise((r) => setTimeout(r, 100));
      return { out, pwned: window.__pwned ?? null };
    }""", _MALICIOUS)
    assert report["pwned"] is None
    for row in report["out"]:
        assert row["bad"] == [], row
    # Escaped markup is still visible as text, not swallowed.
    assert "<script>" in report["out"][0]["text"]
    assert "<iframe" in report["out"][7]["text"]


def test_markdown_subset_renders(web_page: Any) -> None:
    html = web_page.evaluate("""async () => {
      const { renderMarkdown } = await import('/markdown.js');
      return renderMarkdown(
        "# Title\\n\\nSome **bold**, *it*, `a*b*c` and [docs](https://ex.test/a?b=1&c=2).\\n\\n" +
        "- one\\n- two\\n\\n1. first\\n2. second\\n\\n```js\\nlet x = '<b>';\\n```\\n");
    }""")
    assert "<h3>Title</h3>" in html
    assert "<strong>bold</strong>" in html and "<em>it</em>" in html
    assert "<code>a*b*c</code>" in html
    assert '<a href="https://ex.test/a?b=1&amp;c=2" target="_blank"' in html
    assert "<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in html
    assert "<ol>\n<li>first</li>\n<li>second</li>\n</ol>" in html
    # code is coloured (highlight.js) and still escaped
    assert '<pre class="code" data-lang="js"><code class="hljs language-js">' in html
    assert '<span class="hljs-string">&#x27;&lt;b&gt;&#x27;</span>' in html


# ---------------------------------------------------------------------------------------------
# the views render the folded state


def test_views_render_from_the_store(web_page: Any, web_base: str) -> None:
    envelopes = build_log()
    web_page.goto(web_base + "/index.html?offline#/")
    web_page.wait_for_function("window.__codey !== undefined")
    web_page.evaluate("""(text) => {
      const store = window.__codey.store;
      for (const e of JSON.parse(text)) store.apply(e);
    }""", envelopes_json(envelopes))
    try:
        cards = web_page.locator("[data-testid=session-card]")
        cards.first.wait_for()
        listed = [sid for sid, s in python_fold(envelopes)["sessions"].items()
                  if not s["archived"] and not s["parent_id"]]
        # archived sessions leave the main list; a sub-agent's session is shown in its parent's
        assert cards.count() == len(listed)
        s2 = web_page.locator("[data-testid=session-card][data-session-id=s2]")
        status = s2.locator("[data-testid=session-status]")
        assert status.get_attribute("data-status") == "error"
        assert status.inner_text() == "failed"  # in plain words
        assert s2.locator("[data-testid=worker-gone]").count() == 1  # w2 revoked
        w1 = web_page.locator("[data-testid=worker-card][data-worker-id=w1]")
        assert w1.locator("[data-testid=worker-status]").inner_text() == "disconnected"

        web_page.evaluate("location.hash = '#/session/s1'")
        view = web_page.locator("[data-testid=session-view]")
        view.wait_for()
        items = view.locator("[data-testid=item]")
        assert items.count() == len(python_fold(envelopes)["sessions"]["s1"]["items"])
        assert view.locator("[data-testid=plan] li").count() == 2
        assert view.locator("[data-testid=diff]").count() >= 1
        assert view.locator("[data-testid=approval]").count() == 0  # none pending

        # Live: a new approval appears inline, streamed output appends to one node.
        last = envelopes[-1].seq
        web_page.evaluate("""([seq, ts]) => {
          const store = window.__codey.store;
          const item = { kind: 'tool_call', id: 'live-t', ts, call_id: 'c', name: 'shell',
            arguments: '{}', status: 'pending', command: ['ls', '-la'], patch: null, path: null,
            mcp_server: null, mcp_tool: null, output: '', exit_code: null, truncated: false,
            diff: null, files: null, error: null, result: null, action_id: null,
            approval_id: null };
          store.apply({ seq: seq + 1, ts, session_id: 's1',
            event: { type: 'session_item_appended', item } });
          store.apply({ seq: seq + 2, ts, session_id: 's1',
            event: { type: 'approval_requested', approval_id: 'live-a', item_id: 'live-t',
              kind: 'command', command: ['ls', '-la'], patch: null, path: null, reason: '' } });
          store.apply({ seq: seq + 3, ts, session_id: 's1',
            event: { type: 'session_item_updated', item_id: 'live-t',
              output_delta: '\\u001b[31mred\\u001b[0m plain' } });
        }""", [last, 1_700_000_999.0])
        approval = view.locator("[data-item-id=live-t] [data-testid=approval]")
        approval.wait_for()
        assert approval.locator("[data-testid=approve]").is_enabled()
        out = view.locator("[data-item-id=live-t] [data-testid=tool-output]")
        assert out.inner_text() == "red plain"
        assert out.locator("span.ansi-fg-1").inner_text() == "red"
    finally:
        web_page.goto(web_base + BLANK)


def test_item_nodes_follow_every_update_field(web_page: Any, web_base: str) -> None:
    """Whatever fields an update carries (a chunk of output with anything else included), the
    session view's node for the item shows what a fresh render of the folded item shows."""
    envelopes, first_update, _ = update_log(with_chunk=True)
    web_page.goto(web_base + "/index.html?offline#/session/" + UPDATES_SESSION)
    web_page.wait_for_function("window.__codey !== undefined")
    try:
        mismatches = web_page.evaluate("""async ([text, cut]) => {
          const { renderItem } = await import('/views/items.js');
          const { findItem } = await import('/store.js');
          const c = window.__codey;
          const envs = JSON.parse(text);
          for (const e of envs.slice(0, cut)) c.store.apply(e);
          c.app.view._batch.flushNow();
          const ids = [...new Set(envs.slice(cut).map((e) => e.event.item_id))];
          const shown = ids.filter((id) => document.querySelector(`[data-item-id="${id}"]`));
          if (shown.length !== ids.length) return [`not built: ${ids.length - shown.length}`];
          for (const e of envs.slice(cut)) {
            c.store.apply(e);
            c.app.view._batch.flushNow();
          }
          const session = c.store.state.sessions[envs[0].session_id];
          const out = [];
          for (const id of ids) {
            const node = document.querySelector(`[data-item-id="${id}"]`);
            const fresh = renderItem(findItem(session, id), c.app.ctx, session);
            if (node.textContent !== fresh.textContent) {
              out.push({ id, shown: node.textContent, fresh: fresh.textContent });
            }
          }
          return out;
        }""", [envelopes_json(envelopes), first_update])
        assert mismatches == []
    finally:
        web_page.goto(web_base + BLANK)
