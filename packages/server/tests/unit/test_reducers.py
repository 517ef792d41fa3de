"""The fold ``codey_server.core.fold.apply``: one test per event type, then properties."""

from __future__ import annotations

import functools
import types
import typing
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codey_protocol import codec
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import State
from codey_server.agent.conversation import conversation_of
from codey_server.core.fold import MAX_CHANGED_PATHS, copy_state, find_item
from codey_server.features import apply, apply_all

W, S = "wrk_1", "ses_1"


class Log:
    """Builds envelopes with consecutive seqs; ``ts`` equals ``seq`` so effects are traceable."""

    def __init__(self) -> None:
        self.seq = 0

    def env(self, event: ev.Event, session_id: str | None = S) -> ev.Envelope:
        self.seq += 1
        return ev.Envelope(seq=self.seq, ts=float(self.seq), session_id=session_id, event=event)


def paired(worker_id: str = W) -> ev.WorkerPaired:
    return ev.WorkerPaired(worker_id=worker_id, request_id="req_1", hostname="box", os="linux",
                           python_version="3.11", worker_version="0.1", roots=["/src"],
                           public_key="pk")


def created(title: str = "Fix it") -> ev.SessionCreated:
    return ev.SessionCreated(title=title, worker_id=W, workdir="/src/app", provider="openai",
                             model="gpt-x", policy="auto-edit")


@pytest.fixture
def log() -> Log:
    return Log()


@pytest.fixture
def state(log: Log) -> State:
    """A paired worker and one session, at seq 2."""
    return apply_all(State(), [log.env(paired(), None), log.env(created())])


def tool_call(item_id: str = "itm_t") -> ev.ToolCall:
    return ev.ToolCall(id=item_id, ts=1.0, call_id="call_1", name="shell",
                       arguments='{"argv":["ls"]}', command=["ls"])


def run_ls(action_id: str = "act_1") -> wk.RunCommand:
    return wk.RunCommand(action_id=action_id, session_id=S, argv=["ls"], workdir="/src/app")


# ---------------------------------------------------------------------------------------------
# workers and pairing


def test_worker_pair_requested_adds_a_pending_request(log: Log) -> None:
    st_ = apply(State(), log.env(ev.WorkerPairRequested(
        request_id="req_1", hostname="box", os="linux", python_version="3.11",
        worker_version="0.1", roots=["/src"], fingerprint="ab:cd", expires_at=600.0), None))
    req = st_.pair_requests["req_1"]
    assert (req.hostname, req.fingerprint, req.roots) == ("box", "ab:cd", ["/src"])
    assert (req.requested_at, req.expires_at) == (1.0, 600.0)


def _with_request(log: Log) -> State:
    return apply(State(), log.env(ev.WorkerPairRequested(
        request_id="req_1", hostname="box", os="linux", python_version="3.11",
        worker_version="0.1", roots=[], fingerprint="f", expires_at=9.0), None))


def test_worker_pair_resolved_removes_the_request(log: Log) -> None:
    st_ = _with_request(log)
    apply(st_, log.env(ev.WorkerPairResolved(request_id="req_1", outcome="denied"), None))
    assert st_.pair_requests == {}
    apply(st_, log.env(ev.WorkerPairResolved(request_id="req_x", outcome="expired"), None))
    assert st_.seq == 3


def test_worker_paired_adds_the_worker_and_drops_the_request(log: Log) -> None:
    st_ = _with_request(log)
    apply(st_, log.env(paired(), None))
    assert st_.pair_requests == {}
    w = st_.workers[W]
    assert (w.hostname, w.os, w.roots, w.paired_at) == ("box", "linux", ["/src"], 2.0)
    assert not w.connected and not w.revoked


def test_worker_connected_and_disconnected(state: State, log: Log) -> None:
    caps = wk.Capabilities(executors=["run_command"],
                           mcp_servers=[wk.McpServerInfo(name="time")])
    apply(state, log.env(ev.WorkerConnected(worker_id=W, hostname="box2", os="darwin",
                                            worker_version="0.2", capabilities=caps), None))
    w = state.workers[W]
    assert w.connected and w.hostname == "box2" and w.os == "darwin"
    assert (w.worker_version, w.capabilities, w.last_seen) == ("0.2", caps, 3.0)
    apply(state, log.env(ev.WorkerDisconnected(worker_id=W, reason="bye"), None))
    assert not state.workers[W].connected
    assert state.workers[W].last_seen == 4.0


def test_a_disconnect_from_another_replica_than_the_current_one_changes_nothing(
        state: State, log: Log) -> None:
    apply(state, log.env(ev.WorkerConnected(worker_id=W, hostname="box", os="linux",
                                            worker_version="0.2", replica="r1"), None))
    apply(state, log.env(ev.WorkerConnected(worker_id=W, hostname="box", os="linux",
                                            worker_version="0.2", replica="r2"), None))
    # r1 notices its old socket's end after the worker came back through r2
    apply(state, log.env(ev.WorkerDisconnected(worker_id=W, replica="r1"), None))
    assert state.workers[W].connected and state.workers[W].replica == "r2"
    apply(state, log.env(ev.WorkerDisconnected(worker_id=W, replica="r2"), None))
    assert not state.workers[W].connected


def test_worker_revoked_disconnects(state: State, log: Log) -> None:
    apply(state, log.env(ev.WorkerConnected(worker_id=W, hostname="b", os="l",
                                            worker_version="1"), None))
    apply(state, log.env(ev.WorkerRevoked(worker_id=W), None))
    w = state.workers[W]
    assert w.revoked and not w.connected and w.last_seen == 4.0


@pytest.mark.parametrize("event", [
    ev.WorkerConnected(worker_id="ghost", hostname="h", os="o", worker_version="v"),
    ev.WorkerDisconnected(worker_id="ghost"),
    ev.WorkerRevoked(worker_id="ghost"),
    ev.WorkerRenamed(worker_id="ghost", name="g"),
], ids=lambda e: type(e).__name__)
def test_events_for_unknown_workers_are_ignored(state: State, log: Log, event: ev.Event) -> None:
    before = copy_state(state)
    apply(state, log.env(event, None))
    assert "ghost" not in state.workers
    before.seq = state.seq
    assert state == before


# ---------------------------------------------------------------------------------------------
# sessions


def test_session_created(state: State) -> None:
    s = state.sessions[S]
    assert (s.title, s.worker_id, s.workdir, s.provider, s.model, s.policy) == (
        "Fix it", W, "/src/app", "openai", "gpt-x", "auto-edit")
    assert (s.status, s.created_at, s.updated_at, s.items) == ("idle", 2.0, 2.0, [])


def test_session_created_without_session_id_is_ignored(log: Log) -> None:
    st_ = apply(State(), log.env(created(), None))
    assert st_.sessions == {} and st_.seq == 1


def test_session_status_changed(state: State, log: Log) -> None:
    apply(state, log.env(ev.SessionStatusChanged(status="waiting_approval", reason="ls?")))
    s = state.sessions[S]
    assert (s.status, s.status_reason, s.updated_at) == ("waiting_approval", "ls?", 3.0)
    apply(state, log.env(ev.SessionStatusChanged(status="idle")))
    assert (s.status, s.status_reason) == ("idle", "")


def test_busy_seconds_add_up_the_turns_not_the_waits_or_later_activity(state: State,
                                                                       log: Log) -> None:
    s = state.sessions[S]
    assert (s.busy_seconds, s.busy_since) == (0.0, None)
    apply(state, log.env(ev.SessionStatusChanged(status="running")))  # ts 3
    assert s.busy_since == 3.0
    apply(state, log.env(ev.SessionStatusChanged(status="waiting_worker")))  # still busy
    apply(state, log.env(ev.SessionStatusChanged(status="waiting_approval")))  # ts 5: the user
    assert (s.busy_seconds, s.busy_since) == (2.0, None)
    apply(state, log.env(ev.SessionStatusChanged(status="running")))  # ts 6
    apply(state, log.env(ev.SessionStatusChanged(status="idle")))  # ts 7
    assert (s.busy_seconds, s.busy_since) == (3.0, None)
    # later activity (a rename, a memory edit) moves updated_at, not the time it took
    apply(state, log.env(ev.SessionTitleChanged(title="Renamed")))
    apply(state, log.env(ev.MemoryUpdated(worker_id=W, workdir="/src/app", text="x"), None))
    apply(state, log.env(ev.SessionStatusChanged(status="idle")))
    assert (s.busy_seconds, s.busy_since, s.updated_at) == (3.0, None, 10.0)
    apply(state, log.env(ev.SessionStatusChanged(status="running")))  # ts 11
    apply(state, log.env(ev.SessionStatusChanged(status="error", reason="boom")))  # ts 12
    assert (s.busy_seconds, s.busy_since) == (4.0, None)
    apply(state, log.env(ev.SessionForked(from_session=S, until_item="", title="B"),
                         "ses_2"))
    assert (state.sessions["ses_2"].busy_seconds, state.sessions["ses_2"].busy_since) == (
        0.0, None), "a fork has done no work of its own yet"


def test_session_title_changed(state: State, log: Log) -> None:
    apply(state, log.env(ev.SessionTitleChanged(title="New")))
    assert state.sessions[S].title == "New"


def test_session_policy_changed(state: State, log: Log) -> None:
    apply(state, log.env(ev.SessionPolicyChanged(policy="full-auto")))
    assert state.sessions[S].policy == "full-auto"


def test_session_sandbox_changed(state: State, log: Log) -> None:
    assert (state.sessions[S].sandbox, state.sessions[S].network) == ("workspace-write", False)
    apply(state, log.env(ev.SessionSandboxChanged(sandbox="full-access", network=True)))
    assert (state.sessions[S].sandbox, state.sessions[S].network) == ("full-access", True)


def test_session_model_changed_and_a_fork_keeps_it(state: State, log: Log) -> None:
    apply(state, log.env(ev.SessionModelChanged(provider="claude", model="sonnet",
                                                effort="high")))
    s = state.sessions[S]
    assert (s.provider, s.model, s.effort) == ("claude", "sonnet", "high")
    apply(state, log.env(ev.SessionItemAppended(item=ev.UserMessage(id="i1", ts=1, text="x"))))
    apply(state, log.env(ev.SessionForked(from_session=S, until_item="i1", title="f"), "ses_f"))
    f = state.sessions["ses_f"]
    assert (f.provider, f.model, f.effort) == ("claude", "sonnet", "high")


def test_a_model_change_leaves_a_mark_in_the_transcript_the_model_never_reads(
        state: State, log: Log) -> None:
    apply(state, log.env(ev.SessionItemAppended(item=ev.UserMessage(id="i1", ts=1, text="x"))))
    switched = log.env(ev.SessionModelChanged(provider="claude", model="sonnet", effort="high"))
    apply(state, switched)
    s = state.sessions[S]
    mark = s.items[-1]
    assert mark == ev.Notice(id=f"itm_model_{switched.seq}", ts=switched.ts,
                             code="model_changed", text="Model: claude / sonnet · effort high")
    # during a turn it counts from the next one; a recovery says why
    apply(state, log.env(ev.SessionStatusChanged(status="waiting_approval")))
    apply(state, log.env(ev.SessionModelChanged(
        provider="local", model="m", reason="the provider 'gone' is not configured")))
    assert s.items[-1].text == ("Model: local / m (from the next turn) — the provider 'gone' "
                                "is not configured")
    assert [e.text for e in conversation_of(s) if hasattr(e, "text")] == ["x"]


def test_providers_saved_changed_and_removed_with_their_login(log: Log) -> None:
    entry = ev.ProviderEntry(name="local", kind="ollama", base_url="http://h:11434/v1",
                             models=["qwen"], auth="none")
    st_ = apply(State(), log.env(ev.ProviderSaved(provider=entry), None))
    assert st_.providers == {"local": entry}
    changed = ev.ProviderEntry(name="local", base_url="http://h2/v1", models=["a", "b"])
    apply(st_, log.env(ev.ProviderSaved(provider=changed), None))
    apply(st_, log.env(ev.AuthStatusUpdated(provider="local", state="logged_in",
                                            method="api_key"), None))
    assert st_.providers["local"].models == ["a", "b"] and "local" in st_.auth
    apply(st_, log.env(ev.ProviderRemoved(name="local"), None))
    assert st_.providers == {} and st_.auth == {}
    apply(st_, log.env(ev.ProviderRemoved(name="local"), None))  # again: nothing to do
    assert st_.providers == {}


def test_a_worktree_made_becomes_the_sessions_workdir_and_counts_its_change(log: Log) -> None:
    worktree = ev.Worktree(repo="/src/app", branch="codey/fix-1a2b", base="main")
    st_ = apply(State(), log.env(ev.SessionCreated(
        title="t", worker_id="w", workdir="/src/app", provider="p", model="m",
        worktree=worktree)))
    assert st_.sessions[S].worktree == worktree and st_.sessions[S].worktree is not worktree
    apply(st_, log.env(ev.WorktreeUpdated(status="ready", path="/wt/app/fix", base_commit="c0")))
    s = st_.sessions[S]
    assert s.workdir == "/wt/app/fix" and s.worktree is not None
    assert (s.worktree.status, s.worktree.base, s.worktree.base_commit) == ("ready", "main", "c0")
    apply(st_, log.env(ev.WorktreeUpdated(files=2, added=5, deleted=1)))
    assert (s.worktree.files, s.worktree.added, s.worktree.deleted, s.workdir) == (
        2, 5, 1, "/wt/app/fix")


def test_session_item_appended_keeps_order(state: State, log: Log) -> None:
    first = ev.UserMessage(id="itm_1", ts=3.0, text="hi")
    second = ev.AssistantMessage(id="itm_2", ts=4.0, streaming=True)
    apply(state, log.env(ev.SessionItemAppended(item=first)))
    apply(state, log.env(ev.SessionItemAppended(item=second)))
    assert state.sessions[S].items == [first, second]
    assert find_item(state.sessions[S], "itm_1") == first
    assert find_item(state.sessions[S], "nope") is None


def test_plan_updated_replaces_the_plan(state: State, log: Log) -> None:
    steps = [ev.PlanStep(step="read", status="done"), ev.PlanStep(step="fix")]
    apply(state, log.env(ev.PlanUpdated(steps=steps, explanation="why")))
    apply(state, log.env(ev.PlanUpdated(steps=steps[1:])))
    s = state.sessions[S]
    assert (s.plan, s.plan_explanation) == ([ev.PlanStep(step="fix")], "")


# ---------------------------------------------------------------------------------------------
# item updates


def _append(state: State, log: Log, item: ev.Item) -> None:
    apply(state, log.env(ev.SessionItemAppended(item=item)))


def test_item_updated_deltas_append(state: State, log: Log) -> None:
    _append(state, log, ev.AssistantMessage(id="itm_a", ts=1.0, streaming=True))
    _append(state, log, tool_call())
    for chunk in ("Hel", "lo"):
        apply(state, log.env(ev.SessionItemUpdated(item_id="itm_a", text_delta=chunk)))
    apply(state, log.env(ev.SessionItemUpdated(item_id="itm_t", output_delta="a\n")))
    apply(state, log.env(ev.SessionItemUpdated(item_id="itm_t", output_delta="b\n")))
    items = state.sessions[S].items
    assert isinstance(items[0], ev.AssistantMessage) and items[0].text == "Hello"
    assert items[0].streaming  # None fields left it alone
    assert isinstance(items[1], ev.ToolCall) and items[1].output == "a\nb\n"


def test_item_updated_replaces_set_fields_and_keeps_none_fields(state: State, log: Log) -> None:
    _append(state, log, tool_call())
    files = [wk.FileChange(path="a.py", op="update", added=1)]
    apply(state, log.env(ev.SessionItemUpdated(
        item_id="itm_t", status="running", action_id="act_1", approval_id="apr_1")))
    apply(state, log.env(ev.SessionItemUpdated(
        item_id="itm_t", status="done", exit_code=0, truncated=True, diff="@@", files=files,
        result="ok")))
    t = state.sessions[S].items[0]
    assert isinstance(t, ev.ToolCall)
    assert (t.status, t.exit_code, t.truncated, t.diff, t.files, t.result) == (
        "done", 0, True, "@@", files, "ok")
    # Left as they were by the second update, whose fields were None:
    assert (t.action_id, t.approval_id, t.error, t.command) == ("act_1", "apr_1", None, ["ls"])


def test_item_updated_output_replaces_after_the_delta(state: State, log: Log) -> None:
    _append(state, log, tool_call())
    apply(state, log.env(ev.SessionItemUpdated(item_id="itm_t", output_delta="x" * 10)))
    apply(state, log.env(ev.SessionItemUpdated(item_id="itm_t", output_delta="y",
                                               output="[truncated]")))
    t = state.sessions[S].items[0]
    assert isinstance(t, ev.ToolCall) and t.output == "[truncated]"


def test_item_updated_ignores_fields_the_item_does_not_have(state: State, log: Log) -> None:
    msg = ev.UserMessage(id="itm_u", ts=1.0, text="hi", queued=True)
    err = ev.ErrorItem(id="itm_e", ts=1.0, message="boom")
    _append(state, log, msg)
    _append(state, log, err)
    apply(state, log.env(ev.SessionItemUpdated(item_id="itm_u", queued=False, status="done",
                                               output_delta="x", exit_code=1)))
    apply(state, log.env(ev.SessionItemUpdated(item_id="itm_e", text_delta="more")))
    u, e = state.sessions[S].items
    assert u == ev.UserMessage(id="itm_u", ts=1.0, text="hi", queued=False)
    assert e == ev.ErrorItem(id="itm_e", ts=1.0, message="boom")


def test_item_updated_for_an_unknown_item_is_ignored(state: State, log: Log) -> None:
    _append(state, log, ev.AssistantMessage(id="itm_a", ts=1.0))
    before = copy_state(state)
    apply(state, log.env(ev.SessionItemUpdated(item_id="itm_zz", text_delta="x", status="done")))
    assert state.sessions[S].items == before.sessions[S].items
    assert state.seq == before.seq + 1


# ---------------------------------------------------------------------------------------------
# approvals


def _request(state: State, log: Log, approval_id: str = "apr_1",
             command: list[str] | None = None) -> None:
    apply(state, log.env(ev.ApprovalRequested(
        approval_id=approval_id, item_id="itm_t", kind="command",
        command=["git", "status"] if command is None else command, reason="asks")))


def test_approval_requested_is_pending(state: State, log: Log) -> None:
    _request(state, log)
    a = state.sessions[S].approvals["apr_1"]
    assert (a.status, a.kind, a.command, a.reason, a.requested_at, a.decided_at) == (
        "pending", "command", ["git", "status"], "asks", 3.0, None)


@pytest.mark.parametrize("decision", ["approved", "rejected", "expired", "cancelled"])
def test_approval_resolved_records_the_decision(state: State, log: Log, decision: Any) -> None:
    _request(state, log)
    apply(state, log.env(ev.ApprovalResolved(approval_id="apr_1", decision=decision,
                                             message="m")))
    a = state.sessions[S].approvals["apr_1"]
    assert (a.status, a.message, a.decided_at) == (decision, "m", 4.0)
    assert state.sessions[S].approved_prefixes == []


def test_approval_first_decision_wins(state: State, log: Log) -> None:
    _request(state, log)
    apply(state, log.env(ev.ApprovalResolved(approval_id="apr_1", decision="rejected",
                                             message="no")))
    apply(state, log.env(ev.ApprovalResolved(approval_id="apr_1", decision="approved",
                                             message="yes", for_session=True)))
    a = state.sessions[S].approvals["apr_1"]
    assert (a.status, a.message, a.decided_at) == ("rejected", "no", 4.0)
    assert state.sessions[S].approved_prefixes == []


def test_approve_for_session_records_the_prefix_once(state: State, log: Log) -> None:
    for n in (1, 2):
        _request(state, log, f"apr_{n}")
        apply(state, log.env(ev.ApprovalResolved(approval_id=f"apr_{n}", decision="approved",
                                                 for_session=True)))
    _request(state, log, "apr_3", ["make"])
    apply(state, log.env(ev.ApprovalResolved(approval_id="apr_3", decision="approved")))
    _request(state, log, "apr_4", ["rm", "-rf"])
    apply(state, log.env(ev.ApprovalResolved(approval_id="apr_4", decision="rejected",
                                             for_session=True)))
    assert state.sessions[S].approved_prefixes == [["git", "status"]]


def test_approval_resolved_for_an_unknown_approval_is_ignored(state: State, log: Log) -> None:
    apply(state, log.env(ev.ApprovalResolved(approval_id="apr_x", decision="approved",
                                             for_session=True)))
    assert state.sessions[S].approvals == {}
    assert state.sessions[S].approved_prefixes == []


# ---------------------------------------------------------------------------------------------
# actions, workspace, usage, rate limits, auth


def test_pending_actions_added_and_removed(state: State, log: Log) -> None:
    for n in (1, 2):
        apply(state, log.env(ev.ActionRequested(action_id=f"act_{n}", item_id="itm_t",
                                                worker_id=W, action=run_ls(f"act_{n}"))))
    pending = state.sessions[S].pending_actions
    assert set(pending) == {"act_1", "act_2"}
    assert pending["act_1"].action == run_ls("act_1")
    assert (pending["act_1"].worker_id, pending["act_1"].item_id) == (W, "itm_t")
    apply(state, log.env(ev.ActionFinished(action_id="act_1", outcome="result")))
    apply(state, log.env(ev.ActionFinished(action_id="act_zz", outcome="lost")))
    assert set(state.sessions[S].pending_actions) == {"act_2"}


def test_workspace_changed_dedups_and_moves_to_the_end(state: State, log: Log) -> None:
    apply(state, log.env(ev.SessionWorkspaceChanged(paths=["a.py", "b.py"])))
    apply(state, log.env(ev.SessionWorkspaceChanged(paths=["c.py", "a.py"])))
    assert state.sessions[S].changed_paths == ["b.py", "c.py", "a.py"]


def test_workspace_changed_is_capped_to_the_most_recent(state: State, log: Log) -> None:
    paths = [f"f{i}.py" for i in range(MAX_CHANGED_PATHS + 50)]
    apply(state, log.env(ev.SessionWorkspaceChanged(paths=paths[:120])))
    apply(state, log.env(ev.SessionWorkspaceChanged(paths=paths[120:])))
    assert state.sessions[S].changed_paths == paths[-MAX_CHANGED_PATHS:]


def test_workspace_changed_dedups_within_one_event(state: State, log: Log) -> None:
    # watchfiles reports (change, path) pairs, so one batch can name a path twice.
    apply(state, log.env(ev.SessionWorkspaceChanged(paths=["a.py", "b.py", "a.py"])))
    assert sorted(state.sessions[S].changed_paths) == ["a.py", "b.py"]


def test_token_usage_sums_and_counts_turns(state: State, log: Log) -> None:
    apply(state, log.env(ev.TokenUsageRecorded(input_tokens=10, output_tokens=5,
                                               reasoning_tokens=2, total_tokens=15)))
    apply(state, log.env(ev.TokenUsageRecorded(input_tokens=1, total_tokens=1)))
    u = state.sessions[S].usage
    assert (u.input_tokens, u.output_tokens, u.reasoning_tokens, u.total_tokens, u.turns) == (
        11, 5, 2, 16, 2)


def test_usage_tracks_the_context_and_cached_tokens(state: State, log: Log) -> None:
    apply(state, log.env(ev.TokenUsageRecorded(input_tokens=900, output_tokens=100,
                                               cached_tokens=600, context_window=8000)))
    apply(state, log.env(ev.TokenUsageRecorded(input_tokens=1200, output_tokens=50,
                                               cached_tokens=900)))
    u = state.sessions[S].usage
    assert (u.cached_tokens, u.context_tokens, u.context_window) == (1500, 1250, 8000)


def test_compaction_request_is_cleared_by_a_summary_or_a_skip(state: State, log: Log) -> None:
    apply(state, log.env(ev.TokenUsageRecorded(input_tokens=900, output_tokens=100)))
    apply(state, log.env(ev.CompactionRequested()))
    assert state.sessions[S].compaction_requested
    apply(state, log.env(ev.SessionItemAppended(item=ev.Summary(
        id="sum", ts=0.0, text="so far", replaces_until="i"))))
    s = state.sessions[S]
    assert not s.compaction_requested and s.usage.context_tokens == 0
    apply(state, log.env(ev.CompactionRequested()))
    apply(state, log.env(ev.SessionItemAppended(item=ev.Notice(
        id="n", ts=0.0, code="compaction_skipped", text="nothing yet"))))
    assert not state.sessions[S].compaction_requested


def test_context_archive_move_and_delete(state: State, log: Log) -> None:
    apply(state, log.env(ev.SessionContextUpdated(
        instructions=[wk.InstructionFile(path="/src/AGENTS.md", text="be kind")],
        skills=[wk.SkillInfo(name="db", description="migrations", path="/src/x/SKILL.md")],
        environment=wk.Environment(os="Linux", git_branch="main"), warnings=["w"])))
    s = state.sessions[S]
    assert s.context is not None and s.context.loaded_at == 3.0
    assert (s.context.instructions[0].text, s.context.skills[0].name,
            s.context.environment.git_branch) == ("be kind", "db", "main")
    apply(state, log.env(ev.SessionArchived()))
    apply(state, log.env(ev.SessionMoved(worker_id="w2", from_worker=W)))
    assert (s.archived, s.worker_id) == (True, "w2")
    apply(state, log.env(ev.SessionArchived(archived=False)))
    assert not s.archived
    apply(state, log.env(ev.SessionDeleted()))
    assert S not in state.sessions


def test_a_fork_copies_the_finished_items_up_to_its_item(state: State, log: Log) -> None:
    done = msgspec.structs.replace(tool_call("t1"), result="ok", status="done")
    for item in [ev.UserMessage(id="u1", ts=1.0, text="go"), done,
                 ev.AssistantMessage(id="a1", ts=1.0, text="Done."),
                 ev.UserMessage(id="u2", ts=1.0, text="more")]:
        apply(state, log.env(ev.SessionItemAppended(item=item)))
    apply(state, log.env(ev.SessionItemAppended(item=tool_call("t2"))))  # unfinished
    apply(state, log.env(ev.SessionForked(from_session=S, until_item="a1", title="Try B"),
                         "ses_2"))
    fork = state.sessions["ses_2"]
    assert [i.id for i in fork.items] == ["u1", "t1", "a1"]
    assert (fork.title, fork.forked_from, fork.status, fork.worker_id) == (
        "Try B", S, "idle", W)
    apply(state, log.env(ev.SessionItemUpdated(item_id="t1", status="failed")))
    assert fork.items[1].status == "done", "the fork has its own copies"  # type: ignore[union-attr]
    everything = ev.SessionForked(from_session=S, until_item="t2", title="All")
    apply(state, log.env(everything, "ses_3"))
    assert [i.id for i in state.sessions["ses_3"].items] == ["u1", "t1", "a1", "u2"]


def test_questions_first_answer_wins(state: State, log: Log) -> None:
    apply(state, log.env(ev.QuestionAsked(question_id="q1", item_id="t", question="Which DB?",
                                          choices=["sqlite", "postgres"])))
    apply(state, log.env(ev.QuestionAnswered(question_id="q1", answer="sqlite")))
    apply(state, log.env(ev.QuestionAnswered(question_id="q1", cancelled=True)))
    q = state.sessions[S].questions["q1"]
    assert (q.status, q.answer, q.choices, q.answered_at) == (
        "answered", "sqlite", ["sqlite", "postgres"], 4.0)


def test_memory_per_worker_and_workdir(log: Log) -> None:
    st_ = apply(State(), log.env(ev.MemoryUpdated(worker_id=W, workdir="/a", text="one"), None))
    apply(st_, log.env(ev.MemoryUpdated(worker_id=W, workdir="/b", text="two"), S))
    apply(st_, log.env(ev.MemoryUpdated(worker_id=W, workdir="/a", text="one\nthree"), None))
    assert {k: m.text for k, m in st_.memories.items()} == {
        f"{W}:/a": "one\nthree", f"{W}:/b": "two"}


def test_rate_limit_updated_replaces_per_provider(log: Log) -> None:
    st_ = apply(State(), log.env(ev.RateLimitUpdated(provider="openai", limit_requests=100,
                                                     remaining_requests=99), None))
    apply(st_, log.env(ev.RateLimitUpdated(provider="openai", remaining_tokens=5,
                                           reset_tokens="1s"), None))
    apply(st_, log.env(ev.RateLimitUpdated(provider="ollama", limit_tokens=1), None))
    rl = st_.rate_limits["openai"]
    assert (rl.limit_requests, rl.remaining_requests) == (None, None)  # a snapshot, not a merge
    assert (rl.remaining_tokens, rl.reset_tokens, rl.updated_at) == (5, "1s", 2.0)
    assert st_.rate_limits["ollama"].limit_tokens == 1


def test_usage_adds_cost_per_session_and_per_day_and_provider(log: Log) -> None:
    st_ = apply(State(), log.env(paired(), None))
    apply(st_, log.env(created()))
    apply(st_, log.env(ev.TokenUsageRecorded(total_tokens=100, cost_micros=250,
                                             provider="openai")))
    apply(st_, log.env(ev.TokenUsageRecorded(total_tokens=50, cost_micros=None)))  # unpriced
    apply(st_, log.env(ev.TokenUsageRecorded(total_tokens=7, cost_micros=3, provider="lab")))
    u = st_.sessions[S].usage
    assert (u.total_tokens, u.cost_micros, u.unpriced_calls) == (157, 253, 1)
    day = st_.spend["1970-01-01"]
    # a call without its provider (recorded before providers were) counts for the session's
    provider = st_.sessions[S].provider
    assert day["openai" if provider == "openai" else provider].calls >= 1
    assert sum(x.tokens for x in day.values()) == 157
    assert sum(x.cost_micros for x in day.values()) == 253
    assert day["lab"].tokens == 7


def test_budgets_set_reached_and_cleared_by_running_again(log: Log) -> None:
    st_ = apply(State(), log.env(paired(), None))
    apply(st_, log.env(created()))
    apply(st_, log.env(ev.BudgetSet(scope="session", max_tokens=10)))
    apply(st_, log.env(ev.BudgetSet(scope="day", max_micros=9), None))
    assert st_.sessions[S].budget is not None and st_.sessions[S].budget.max_tokens == 10
    assert st_.day_budget.max_micros == 9
    apply(st_, log.env(ev.BudgetReached(scope="session", unit="tokens", limit=10, spent=12)))
    stop = st_.sessions[S].budget_stop
    assert stop is not None and (stop.limit, stop.spent) == (10, 12)
    apply(st_, log.env(ev.SessionStatusChanged(status="waiting_user")))
    assert st_.sessions[S].budget_stop is not None
    apply(st_, log.env(ev.SessionStatusChanged(status="running")))
    assert st_.sessions[S].budget_stop is None
    apply(st_, log.env(ev.BudgetSet(scope="session")))  # no limit in either unit: none
    assert st_.sessions[S].budget is None


def test_auth_status_updated(log: Log) -> None:
    st_ = apply(State(), log.env(ev.AuthStatusUpdated(
        provider="openai", state="pending", method="device_code",
        verification_uri="https://x/device", user_code="ABCD"), None))
    apply(st_, log.env(ev.AuthStatusUpdated(provider="openai", state="logged_in",
                                            method="oauth", account="me", expires_at=9.0),
                       None))
    a = st_.auth["openai"]
    assert (a.state, a.method, a.account, a.expires_at) == ("logged_in", "oauth", "me", 9.0)
    assert (a.verification_uri, a.user_code) == (None, None)


def test_telegram_chats_sessions_and_sent_messages(log: Log) -> None:
    st_ = apply(State(), log.env(ev.TelegramChatPaired(chat_id=-100, title="team"), None))
    apply(st_, log.env(ev.TelegramChatPaired(chat_id=-100, title="team 2"), None))
    chat = st_.telegram_chats["-100"]
    assert (chat.title, chat.paired_at, chat.session_id) == ("team 2", 1.0, None)
    apply(st_, log.env(ev.TelegramSessionChosen(chat_id=-100, session_id=S), None))
    apply(st_, log.env(ev.TelegramMessageSent(chat_id=-100, key="approval:a", message_id=7),
                       None))
    apply(st_, log.env(ev.TelegramMessageSent(chat_id=5, key="approval:a"), None))  # unknown
    assert chat.session_id == S and chat.sent == {"approval:a": 7}
    apply(st_, log.env(ev.TelegramUpdateHandled(update_id=9, bot_id=1), None))
    apply(st_, log.env(ev.TelegramUpdateHandled(update_id=4, bot_id=1), None))  # never back
    assert (st_.telegram_bot_id, st_.telegram_offset) == (1, 10)
    # another bot (a new token): its own ids
    apply(st_, log.env(ev.TelegramUpdateHandled(update_id=3, bot_id=2), None))
    assert (st_.telegram_bot_id, st_.telegram_offset) == (2, 4)
    apply(st_, log.env(ev.TelegramChatRemoved(chat_id=-100), None))
    assert st_.telegram_chats == {}


def test_push_devices_added_again_changed_and_removed(log: Log) -> None:
    st_ = apply(State(), log.env(ev.PushDeviceAdded(device_id="dev_1", name="Phone",
                                                    endpoint_host="fcm.example",
                                                    kinds=["approval", "failed"]), None))
    added_at = st_.push_devices["dev_1"].added_at
    # subscribed again: its new subscription, its first date kept
    apply(st_, log.env(ev.PushDeviceAdded(device_id="dev_1", name="Phone",
                                          endpoint_host="fcm2.example", kinds=["approval"]),
                       None))
    d = st_.push_devices["dev_1"]
    assert (d.endpoint_host, d.kinds, d.added_at) == ("fcm2.example", ["approval"], added_at)
    apply(st_, log.env(ev.PushDeviceChanged(device_id="dev_1", name="Pixel", kinds=[]), None))
    apply(st_, log.env(ev.PushDeviceChanged(device_id="dev_x", name="?", kinds=[]), None))
    assert (d.name, d.kinds) == ("Pixel", []) and list(st_.push_devices) == ["dev_1"]
    apply(st_, log.env(ev.PushDeviceRemoved(device_id="dev_1"), None))
    apply(st_, log.env(ev.PushDeviceRemoved(device_id="dev_1", reason="gone"), None))
    assert st_.push_devices == {}


# ---------------------------------------------------------------------------------------------
# every event type: covered above, advances seq, and is ignored for unknown sessions

SESSION_EVENTS: list[ev.Event] = [
    created(),
    ev.SessionStatusChanged(status="running"),
    ev.SessionTitleChanged(title="t"),
    ev.SessionPolicyChanged(policy="full-auto"),
    ev.SessionSandboxChanged(sandbox="read-only", network=True),
    ev.SessionModelChanged(provider="p", model="m", effort="low"),
    ev.WorktreeUpdated(status="ready", path="/wt/x"),
    ev.SessionItemAppended(item=ev.UserMessage(id="i", ts=0.0, text="x")),
    ev.SessionItemUpdated(item_id="i", text_delta="x"),
    ev.PlanUpdated(steps=[ev.PlanStep(step="s")]),
    ev.ApprovalRequested(approval_id="a", item_id="i", kind="command", command=["ls"]),
    ev.ApprovalResolved(approval_id="a", decision="approved", for_session=True),
    ev.SessionAttentionChanged(nudge_after_s=1.0, act_after_s=2.0, on_approval="park"),
    ev.AttentionScheduled(target_id="a", target="approval", nudge_at=1.0, act_at=2.0),
    ev.AttentionNudged(target_id="a", target="approval", step="t1"),
    ev.AttentionActed(target_id="a", target="approval", then="reject"),
    ev.ApprovalReviewed(approval_id="a", verdict="deny", risk=80, reason="r"),
    ev.AgentCommandsUpdated(commands=[ev.AgentCommand(name="init", hint="")]),
    ev.AgentModeUpdated(current_mode="code", modes=[wk.AcpMode(id="code", name="Code")]),
    ev.AgentConfigUpdated(options=[wk.AcpConfigOption(id="web", name="Web", type="boolean",
                                                      current=True)]),
    ev.ActionRequested(action_id="x", item_id="i", worker_id=W, action=run_ls("x")),
    ev.ActionFinished(action_id="x", outcome="result"),
    ev.ProcessStarted(process_id="p", item_id="x", worker_id=W, argv=["x"]),
    ev.ProcessOutput(process_id="p", output_delta="x"),
    ev.ProcessStopRequested(process_id="p"),
    ev.ProcessEnded(process_id="p"),
    ev.ProcessListening(process_id="p", ports=[8000]),
    ev.ProcessForwardRequested(process_id="p", port=8000),
    ev.ProcessForwarded(process_id="p", port=8000, address="127.0.0.1:8000"),
    ev.SessionWorkspaceChanged(paths=["p"]),
    ev.TokenUsageRecorded(input_tokens=1),
    ev.CompactionRequested(),
    ev.SessionContextUpdated(instructions=[wk.InstructionFile(path="/src/AGENTS.md", text="x")]),
    ev.SessionArchived(),
    ev.SessionMoved(worker_id="w2"),
    ev.QuestionAsked(question_id="q", item_id="i", question="which?"),
    ev.QuestionAnswered(question_id="q", answer="this"),
    ev.PlanApproved(),
    ev.TurnRequested(),
    ev.GoalSet(goal_id="g", condition="$ pytest -q", command=["pytest", "-q"]),
    ev.GoalChecked(goal_id="g", attempt=1, met=False, output="1 failed", exit_code=1,
                   after_item="i"),
    ev.GoalMet(goal_id="g", reason="`pytest -q` exited 0"),
    ev.GoalGivenUp(goal_id="g", reason="cleared by the user"),
    ev.BudgetSet(scope="session", max_tokens=10),
    ev.BudgetReached(scope="session", unit="tokens", limit=10, spent=12),
    ev.CheckpointRecorded(turn="u1", commit="c" * 40, files=2),
    ev.ConversationRewound(turn="i"),
    ev.HooksFound(files=[wk.HookFile(path="/w/.claude/settings.json", scope="project",
                                     sha256="abc")]),
    ev.HooksTrusted(path="/w/.claude/settings.json", sha256="abc"),
    ev.HookRan(item_id="i", event="PreToolUse", path="/w/.claude/settings.json",
               command_line="guard", exit_code=2, decision="deny", reason="no"),
    ev.SessionDeleted(),
]
GLOBAL_EVENTS: list[ev.Event] = [
    ev.WorkerPairRequested(request_id="r", hostname="h", os="o", python_version="p",
                           worker_version="v", roots=[], fingerprint="f", expires_at=1.0),
    ev.WorkerPairResolved(request_id="r", outcome="expired"),
    paired("w9"),
    ev.WorkerRenamed(worker_id="w9", name="build box"),
    ev.WorkerRevoked(worker_id="w9"),
    ev.WorkerConnected(worker_id="w9", hostname="h", os="o", worker_version="v"),
    ev.WorkerDisconnected(worker_id="w9"),
    ev.RateLimitUpdated(provider="p"),
    ev.BudgetSet(scope="day", max_micros=5_000_000),
    ev.PricesSet(prices={"m": ev.ModelPrice(input=1.0, cached_input=0.1, output=2.0)}),
    ev.AuthStatusUpdated(provider="p", state="logged_out"),
    ev.ProviderSaved(provider=ev.ProviderEntry(name="p2", base_url="http://h/v1")),
    ev.ProviderRemoved(name="p2"),
    ev.MemoryUpdated(worker_id="w9", workdir="/src", text="- use uv"),
    ev.SessionForked(from_session="ses_gone", until_item="i", title="t"),
    ev.TerminalCreated(terminal_id="term_1", worker_id="w9", workdir="/src", by="b"),
    ev.TerminalAttached(terminal_id="term_1", by="b"),
    ev.TerminalDetached(terminal_id="term_1", by="b"),
    ev.TerminalClosed(terminal_id="term_1", reason="exited"),
    ev.ScheduleSaved(spec=ev.ScheduleSpec(schedule_id="sch_1", name="n", cron="* * * * *",
                                          worker_id="w9", workdir="/src", prompt="p")),
    ev.ScheduleFired(schedule_id="sch_1", due_at=60.0, outcome="failed", error="gone"),
    ev.ScheduleDeleted(schedule_id="sch_1"),
    ev.TriggerSet(spec=ev.TriggerSpec(trigger_id="trg_1", hook_id="h", name="n",
                                      worker_id="w9", workdir="/src", prompt="p")),
    ev.TriggerDelivered(trigger_id="trg_1", delivery_id="dlv_1", outcome="refused",
                        reason="bad signature"),
    ev.TriggerRemoved(trigger_id="trg_1"),
    ev.TaskCreated(task_id="tsk_1", title="t"),
    ev.TaskUpdated(task_id="tsk_1", title="t2", description="d"),
    ev.TaskMoved(task_id="tsk_1", status="review", order=1.5),
    ev.TaskRunStarted(task_id="tsk_1", session_id="ses_gone"),
    ev.TaskDeleted(task_id="tsk_1"),
    ev.PushDeviceAdded(device_id="dev_1", name="Phone", kinds=["approval"]),
    ev.PushDeviceChanged(device_id="dev_1", name="My phone", kinds=[]),
    ev.PushDeviceRemoved(device_id="dev_1", reason="gone"),
    ev.TelegramChatPaired(chat_id=1),
    ev.TelegramSessionChosen(chat_id=1, session_id=S),
    ev.TelegramMessageSent(chat_id=1, key="answer:i", message_id=2),
    ev.TelegramUpdateHandled(update_id=3),
    ev.TelegramChatRemoved(chat_id=1),
    ev.DataUpgraded(upgrade_id="u1", from_format=1, to_format=3, version="0.2.0",
                    changes=["sessions run in the sandbox"], backup="/data/backups/u1"),
    ev.UpgradeNoticeDismissed(upgrade_id="u1"),
]


def test_terminals_count_their_viewers_and_end_once_closed(log: Log) -> None:
    st_ = apply(State(), log.env(ev.TerminalCreated(terminal_id="t1", worker_id=W,
                                                     workdir="/a", by="browser 1"), S))
    t = st_.terminals["t1"]
    assert (t.worker_id, t.workdir, t.session_id, t.created_by) == (W, "/a", S, "browser 1")
    for e in (ev.TerminalAttached(terminal_id="t1", by="x"),
              ev.TerminalAttached(terminal_id="t1", by="y"),
              ev.TerminalDetached(terminal_id="t1", by="x")):
        apply(st_, log.env(e, S))
    assert st_.terminals["t1"].viewers == 1 and not st_.terminals["t1"].closed
    apply(st_, log.env(ev.TerminalClosed(terminal_id="t1", reason="exited"), S))
    assert st_.terminals["t1"].closed and st_.terminals["t1"].closed_reason == "exited"
    assert st_.terminals["t1"].viewers == 0
    before = copy_state(st_)
    apply(st_, log.env(ev.TerminalAttached(terminal_id="nope", by="x"), S))  # ignored
    st_.seq = before.seq
    assert st_ == before


def test_a_turns_checkpoint_is_folded_once_per_turn(state: State, log: Log) -> None:
    apply(state, log.env(ev.CheckpointRecorded(turn="u1", commit="a" * 40, files=2,
                                               skipped=["x.log (ignored)"]), S))
    apply(state, log.env(ev.CheckpointRecorded(turn="u2", commit="b" * 40, shadow=True), S))
    apply(state, log.env(ev.CheckpointRecorded(turn="u1", commit="c" * 40, files=3), S))
    marks = state.sessions[S].checkpoints
    assert [(m.turn, m.commit[0], m.files, m.shadow) for m in marks] == [
        ("u1", "c", 3, False), ("u2", "b", 0, True)]


def test_every_event_type_is_exercised() -> None:
    listed = {type(e) for e in SESSION_EVENTS + GLOBAL_EVENTS}
    assert listed == set(typing.get_args(ev.Event))


@pytest.mark.parametrize("event", SESSION_EVENTS[1:], ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("session_id", ["ses_unknown", None])
def test_session_events_for_unknown_sessions_are_ignored(
    state: State, log: Log, event: ev.Event, session_id: str | None
) -> None:
    before = copy_state(state)
    apply(state, log.env(event, session_id))
    assert state.seq == 3
    state.seq = before.seq
    assert state == before


@pytest.mark.parametrize("event", SESSION_EVENTS + GLOBAL_EVENTS, ids=lambda e: type(e).__name__)
def test_seq_advances_on_every_event(event: ev.Event) -> None:
    env = ev.Envelope(seq=41, ts=1.0, session_id=S, event=event)
    assert apply(State(seq=40), env).seq == 41


def test_apply_all_folds_in_order(log: Log) -> None:
    envs = [log.env(paired(), None), log.env(created()),
            log.env(ev.SessionTitleChanged(title="A")), log.env(ev.SessionTitleChanged(title="B"))]
    st_ = apply_all(State(), envs)
    assert (st_.seq, st_.sessions[S].title, st_.sessions[S].updated_at) == (4, "B", 4.0)


# ---------------------------------------------------------------------------------------------
# a session's processes


def _started(log: Log, state: State, pid: str = "proc_1", output: str = "") -> State:
    return apply(state, log.env(ev.ProcessStarted(
        process_id=pid, item_id="itm_x", worker_id=W, argv=["npm", "run", "dev"], cwd="web",
        tty=True, output=output)))


def test_process_started_lists_it_running_with_what_it_wrote(state: State, log: Log) -> None:
    st_ = _started(log, state, output="ready\n")
    [p] = st_.sessions[S].processes
    assert (p.process_id, p.item_id, p.worker_id, p.argv, p.cwd, p.tty) == (
        "proc_1", "itm_x", W, ["npm", "run", "dev"], "web", True)
    assert (p.status, p.output, p.started_at) == ("running", "ready\n", 3.0)
    again = _started(log, st_, output="other")  # the same id twice: the first stays
    assert [x.output for x in again.sessions[S].processes] == ["ready\n"]


def test_process_output_appends_and_keeps_the_newest_part(state: State, log: Log) -> None:
    from codey_protocol.state import PROCESS_OUTPUT_KEPT

    st_ = _started(log, state, output="a")
    st_ = apply(st_, log.env(ev.ProcessOutput(process_id="proc_1", output_delta="b")))
    [p] = st_.sessions[S].processes
    assert (p.output, p.output_cut) == ("ab", False)
    st_ = apply(st_, log.env(ev.ProcessOutput(process_id="proc_1",
                                              output_delta="x" * PROCESS_OUTPUT_KEPT)))
    assert p.output == "x" * PROCESS_OUTPUT_KEPT and p.output_cut
    apply(st_, log.env(ev.ProcessOutput(process_id="nope", output_delta="z")))  # ignored


def test_process_stop_requested_marks_a_running_process_stopping(state: State,
                                                                 log: Log) -> None:
    st_ = _started(log, state)
    st_ = apply(st_, log.env(ev.ProcessStopRequested(process_id="proc_1", by="user")))
    [p] = st_.sessions[S].processes
    assert (p.status, p.stop_by) == ("stopping", "user")
    st_ = apply(st_, log.env(ev.ProcessEnded(process_id="proc_1", signal=15,
                                             stopped_by="user", output_delta="bye")))
    assert (p.status, p.signal, p.stopped_by, p.output, p.ended_at) == (
        "ended", 15, "user", "bye", 5.0)
    # an ended process is not stopped again, and its first end stays
    apply(st_, log.env(ev.ProcessStopRequested(process_id="proc_1", by="interrupt")))
    apply(st_, log.env(ev.ProcessEnded(process_id="proc_1", stopped_by="gone")))
    assert (p.status, p.stop_by, p.stopped_by) == ("ended", "user", "user")


def test_process_ended_gone_and_the_oldest_ended_leave_the_list(state: State,
                                                                log: Log) -> None:
    from codey_protocol.state import PROCESSES_ENDED_KEPT

    st_ = _started(log, state, "proc_run")
    for n in range(PROCESSES_ENDED_KEPT + 1):
        st_ = _started(log, st_, f"proc_{n}")
        st_ = apply(st_, log.env(ev.ProcessEnded(process_id=f"proc_{n}",
                                                 stopped_by="gone" if n == 1 else "",
                                                 exit_code=None if n == 1 else 0)))
    ids = [p.process_id for p in st_.sessions[S].processes]
    assert ids[0] == "proc_run" and "proc_0" not in ids and len(ids) == PROCESSES_ENDED_KEPT + 1
    statuses = {p.process_id: p.status for p in st_.sessions[S].processes}
    assert statuses["proc_1"] == "gone" and statuses["proc_run"] == "running"


def test_ports_and_forwards_of_a_process_until_it_ends(state: State, log: Log) -> None:
    st_ = _started(log, state)
    st_ = apply(st_, log.env(ev.ProcessListening(process_id="proc_1", ports=[8000, 9000])))
    [p] = st_.sessions[S].processes
    assert p.ports == [8000, 9000] and p.forwards == []
    st_ = apply(st_, log.env(ev.ProcessForwardRequested(process_id="proc_1", port=8000)))
    assert [(f.port, f.status) for f in p.forwards] == [(8000, "opening")]
    st_ = apply(st_, log.env(ev.ProcessForwarded(process_id="proc_1", port=8000,
                                                 address="127.0.0.1:8000")))
    st_ = apply(st_, log.env(ev.ProcessForwardRequested(process_id="proc_1", port=9000)))
    st_ = apply(st_, log.env(ev.ProcessForwarded(process_id="proc_1", port=9000,
                                                 error="refused")))
    assert [(f.port, f.status, f.address, f.error) for f in p.forwards] == [
        (8000, "open", "127.0.0.1:8000", ""), (9000, "failed", "", "refused")]
    # asked again after a failure: tried again
    st_ = apply(st_, log.env(ev.ProcessForwardRequested(process_id="proc_1", port=9000)))
    assert [(f.port, f.status) for f in p.forwards] == [(8000, "open"), (9000, "opening")]
    st_ = apply(st_, log.env(ev.ProcessEnded(process_id="proc_1", exit_code=0)))
    assert p.ports == [] and [f.status for f in p.forwards] == ["closed", "closed"]
    # after its end: nothing more listens, opens or is asked for
    apply(st_, log.env(ev.ProcessListening(process_id="proc_1", ports=[8000])))
    apply(st_, log.env(ev.ProcessForwarded(process_id="proc_1", port=9000, address="x")))
    apply(st_, log.env(ev.ProcessForwardRequested(process_id="proc_1", port=7000)))
    assert p.ports == [] and [(f.port, f.status) for f in p.forwards] == [
        (8000, "closed"), (9000, "closed")]


# ---------------------------------------------------------------------------------------------
# the fold does not alias event payloads


def _streamed(log: Log) -> list[ev.Envelope]:
    return [
        log.env(paired(), None),
        log.env(created()),
        log.env(ev.SessionItemAppended(item=ev.AssistantMessage(id="itm_a", ts=3.0))),
        log.env(ev.SessionItemUpdated(item_id="itm_a", text_delta="hi")),
    ]


def test_apply_does_not_mutate_the_envelopes(log: Log) -> None:
    envs = _streamed(log)
    encoded = [codec.encode(e) for e in envs]
    first = apply_all(State(), envs)
    assert [codec.encode(e) for e in envs] == encoded
    # Folding the same objects again must give the same state.
    assert apply_all(State(), envs) == first


# ---------------------------------------------------------------------------------------------
# properties

IDS = st.sampled_from([S, W, "a", "b", ""])
# Every id field (item, approval, action, worker, request) draws from two values, so updates,
# decisions and finishes usually find what they refer to.
REF_IDS = st.sampled_from(["x1", "x2"])
SMALL_INT = st.integers(min_value=-5, max_value=1000)
SMALL_FLOAT = st.floats(min_value=0, max_value=1e6, allow_nan=False)
ANY_JSON = st.none() | st.booleans() | SMALL_INT | IDS


def _strategy(tp: Any) -> st.SearchStrategy[Any]:
    """Values of ``tp`` whose strings come from a small pool, so ids collide and events meet."""
    if tp is Any:
        return ANY_JSON
    simple = {type(None): st.none(), bool: st.booleans(), int: SMALL_INT,
              float: SMALL_FLOAT, str: IDS}
    if tp in simple:
        return simple[tp]
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        fields = msgspec.structs.fields(tp)
        return st.fixed_dictionaries(
            {f.name: _field_strategy(f) for f in fields if f.required},
            optional={f.name: _field_strategy(f) for f in fields if not f.required},
        ).map(functools.partial(_build, tp))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([_strategy(a) for a in args])
    if origin is list:
        return st.lists(_strategy(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(IDS, _strategy(args[1]), max_size=2)
    raise TypeError(f"no strategy for {tp!r}")


# Session events that build up state are drawn more often than the rest.
_FREQUENT = (ev.SessionItemAppended, ev.SessionItemUpdated, ev.ApprovalRequested,
             ev.ApprovalResolved, ev.ActionRequested)
def _field_strategy(f: msgspec.structs.FieldInfo) -> st.SearchStrategy[Any]:
    if f.type is str and (f.name == "id" or f.name.endswith("_id")):
        return REF_IDS
    return _strategy(f.type)


def _build(cls: type[Any], kwargs: dict[str, Any]) -> Any:
    return cls(**kwargs)


EVENTS = st.one_of([_strategy(cls) for cls in typing.get_args(ev.Event)]
                   + [_strategy(cls) for cls in _FREQUENT] * 3)
SESSION_IDS = st.sampled_from([S, S, S, "ses_2", None])


@st.composite
def envelope_lists(draw: st.DrawFn) -> list[ev.Envelope]:
    """A worker and a session exist first, so most generated events have something to hit."""
    pairs = [(None, paired()), (None, paired("x1")), (S, created())]
    pairs += draw(st.lists(st.tuples(SESSION_IDS, EVENTS), min_size=10, max_size=40))
    return [ev.Envelope(seq=i + 1, ts=float(i), session_id=sid, event=e)
            for i, (sid, e) in enumerate(pairs)]


def _fresh(envs: list[ev.Envelope]) -> list[ev.Envelope]:
    """Decoded copies, as a replay from the log would read them."""
    return [codec.decode_envelope(codec.encode(e)) for e in envs]


PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(envs=envelope_lists())
def test_fold_never_raises_and_is_deterministic(envs: list[ev.Envelope]) -> None:
    a = apply_all(State(), _fresh(envs))
    b = apply_all(State(), _fresh(envs))
    assert a == b
    assert a.seq == envs[-1].seq
    assert copy_state(a) == a
    # The folded state is a valid State: it survives the snapshot codec.
    assert codec.decode_state(codec.encode(a)) == a


@PROPS
@given(envs=envelope_lists(), data=st.data())
def test_replay_from_a_snapshot_equals_the_full_fold(
    envs: list[ev.Envelope], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(envs)))
    full = apply_all(State(), _fresh(envs))
    snapshot = copy_state(apply_all(State(), _fresh(envs[:cut])))
    assert apply_all(snapshot, _fresh(envs[cut:])) == full


@PROPS
@given(envs=envelope_lists())
def test_copy_state_is_independent(envs: list[ev.Envelope]) -> None:
    state = apply_all(State(), _fresh(envs))
    copy = copy_state(state)
    assert copy == state
    # a session of its own: the generated events may have deleted S
    more = _fresh([ev.Envelope(seq=state.seq + n, ts=1e7, session_id="ses_new", event=e)
                   for n, e in enumerate((created(), ev.SessionItemAppended(
                       item=ev.UserMessage(id="itm_new", ts=0.0, text="x"))), start=1)])
    apply_all(copy, more)
    assert copy != state
    assert "ses_new" not in state.sessions
    for s in state.sessions.values():
        assert find_item(s, "itm_new") is None


def test_the_fold_mutates_in_place_and_references_stay_live(state: State, log: Log) -> None:
    """The contract the agent loop relies on (see the reducers' docstring): ``apply`` returns
    the state it was given, and a session, item or approval taken before later events shows
    them, because the fold changes those objects in place instead of replacing them."""
    session = state.sessions[S]
    items, pending, approvals = session.items, session.pending_actions, session.approvals
    appended = ev.SessionItemAppended(item=tool_call())
    assert apply(state, log.env(appended)) is state
    item = find_item(session, "itm_t")
    assert item is not None and item is not appended.item  # stored as a copy
    later = [
        ev.ApprovalRequested(approval_id="apr_1", item_id="itm_t", kind="command",
                             command=["ls"]),
        ev.SessionItemUpdated(item_id="itm_t", status="waiting_approval", approval_id="apr_1"),
        ev.ApprovalResolved(approval_id="apr_1", decision="approved"),
        ev.ActionRequested(action_id="act_1", item_id="itm_t", worker_id=W, action=wk.RunCommand(
            action_id="act_1", session_id=S, argv=["ls"], workdir="/src/app")),
        ev.SessionItemUpdated(item_id="itm_t", status="running", action_id="act_1",
                              output_delta="a.py\n"),
        ev.SessionStatusChanged(status="running"),
    ]
    approval_before_decision = None
    for event in later:
        assert apply(state, log.env(event)) is state
        if isinstance(event, ev.ApprovalRequested):
            approval_before_decision = state.sessions[S].approvals["apr_1"]
    assert state.sessions[S] is session
    assert session.items is items and session.pending_actions is pending
    assert session.approvals is approvals
    assert find_item(session, "itm_t") is item
    assert (item.status, item.action_id, item.output) == ("running", "act_1", "a.py\n")
    assert "act_1" in pending and session.status == "running"
    assert approval_before_decision is approvals["apr_1"]
    assert approval_before_decision.status == "approved"
    assert appended.item.status == "pending" and appended.item.output == ""  # event unchanged


# ---------------------------------------------------------------------------------------------
# the attention ladder and the reviewer


def test_the_ladder_is_folded_step_by_step_and_a_park_ends_when_the_turn_runs(
        log: Log) -> None:
    state = apply(State(), log.env(created()))
    apply(state, log.env(ev.ApprovalRequested(approval_id="a1", item_id="i", kind="command",
                                              command=["rm", "x"])))
    apply(state, log.env(ev.AttentionScheduled(target_id="a1", target="approval",
                                               nudge_at=10.0, act_at=20.0, then="park")))
    s = state.sessions[S]
    assert s.attention is not None and (s.attention.nudged, s.attention.acted) == (False, False)
    apply(state, log.env(ev.AttentionNudged(target_id="other", target="approval", step="t1")))
    assert not s.attention.nudged  # another wait's nudge
    apply(state, log.env(ev.AttentionNudged(target_id="a1", target="approval", step="t1")))
    assert s.attention.nudged and s.parked_on is None
    apply(state, log.env(ev.AttentionActed(target_id="a1", target="approval", then="park")))
    apply(state, log.env(ev.AttentionNudged(target_id="a1", target="approval", step="parked")))
    assert s.attention.acted and s.parked_on == "a1"
    apply(state, log.env(ev.SessionStatusChanged(status="interrupted", reason="parked")))
    assert s.parked_on == "a1"
    apply(state, log.env(ev.SessionStatusChanged(status="running")))
    assert s.parked_on is None


def test_the_reviewers_verdicts_count_denials_in_a_row(log: Log) -> None:
    state = apply(State(), log.env(created()))
    s = state.sessions[S]
    for n in range(3):
        apply(state, log.env(ev.ApprovalRequested(approval_id=f"a{n}", item_id="i",
                                                  kind="command", command=["x"])))
        apply(state, log.env(ev.ApprovalReviewed(approval_id=f"a{n}", verdict="deny", risk=90,
                                                 reason="no")))
    assert s.reviewer_denials == 3
    review = s.approvals["a2"].review
    assert review is not None and (review.decision, review.risk, review.approved) == \
        ("deny", 90, False)
    apply(state, log.env(ev.ApprovalReviewed(approval_id="a2", verdict="error")))
    assert s.reviewer_denials == 3  # a failure is no verdict
    apply(state, log.env(ev.ApprovalResolved(approval_id="a2", decision="approved")))
    assert s.reviewer_denials == 0  # granted: the run is over
