"""``decide``: commands become events, or ``CommandRejected`` and nothing."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import State, WorkerInfo
from codey_server.core.decide import TITLE_MAX, branch_for, title_from_prompt
from codey_server.core.rules import CommandRejected, Context
from codey_server.errors import ServerError
from codey_server.features import apply_all, decide

W, S, NOW = "wrk_1", "ses_main", 1234.5


def context() -> Context:
    counter = itertools.count(1)
    return Context(new_id=lambda prefix: f"{prefix}_{next(counter)}", now=lambda: NOW,
                   default_provider="openai", default_models={"openai": "gpt-x",
                                                              "ollama": "llama"})


def make_state(*, revoked: bool = False, status: ev.SessionStatus = "idle",
               items: list[ev.Item] | None = None, approvals: dict[str, Any] | None = None,
               policy: ev.ApprovalPolicy = "suggest") -> State:
    """A state built by folding events, as the engine would have it."""
    pairs: list[tuple[str | None, ev.Event]] = [
        (None, ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="linux",
                               python_version="3.11", worker_version="0.1", roots=["/src", "/w"],
                               public_key="pk")),
        (S, ev.SessionCreated(title="New session", worker_id=W, workdir="/src", provider="openai",
                              model="gpt-x", policy=policy)),
    ]
    if revoked:
        pairs.append((None, ev.WorkerRevoked(worker_id=W)))
    pairs += [(S, ev.SessionItemAppended(item=i)) for i in items or []]
    for approval_id, outcome in (approvals or {}).items():
        pairs.append((S, ev.ApprovalRequested(approval_id=approval_id, item_id="itm_t",
                                              kind="command", command=["make"])))
        if outcome != "pending":
            pairs.append((S, ev.ApprovalResolved(approval_id=approval_id,
                                                 decision=outcome)))
    if status != "idle":
        pairs.append((S, ev.SessionStatusChanged(status=status)))
    return apply_all(State(), [ev.Envelope(seq=n + 1, ts=float(n), session_id=sid, event=e)
                               for n, (sid, e) in enumerate(pairs)])


def rejected(state: State, command: Any) -> CommandRejected:
    with pytest.raises(CommandRejected) as info:
        decide(state, command, context())
    assert isinstance(info.value, ServerError)
    return info.value


# ---------------------------------------------------------------------------------------------
# CreateSession


def test_create_session_with_a_prompt() -> None:
    out = decide(make_state(), cl.CreateSession(worker_id=W, workdir=" /src/app ",
                                                prompt="Fix the tests\nthey fail",
                                                policy="auto-edit"), context())
    assert out == [
        ("ses_1", ev.SessionCreated(title="Fix the tests", worker_id=W, workdir="/src/app",
                                    provider="openai", model="gpt-x", policy="auto-edit")),
        ("ses_1", ev.SessionItemAppended(item=ev.UserMessage(
            id="itm_2", ts=NOW, text="Fix the tests\nthey fail"))),
    ]


def test_create_session_without_a_prompt_appends_no_item() -> None:
    out = decide(make_state(), cl.CreateSession(worker_id=W, workdir="/src", prompt="  \n"),
                 context())
    assert len(out) == 1
    sid, event = out[0]
    assert sid == "ses_1"
    assert isinstance(event, ev.SessionCreated) and event.title == "New session"


def test_create_session_explicit_title_provider_and_model() -> None:
    out = decide(make_state(), cl.CreateSession(worker_id=W, workdir="/src", prompt="do it",
                                                title="Mine", provider="ollama", model="qwen"),
                 context())
    event = out[0][1]
    assert isinstance(event, ev.SessionCreated)
    assert (event.title, event.provider, event.model) == ("Mine", "ollama", "qwen")


@pytest.mark.parametrize(("provider", "model"), [("ollama", "llama"), ("unknown", "")])
def test_create_session_default_model_of_the_provider(provider: str, model: str) -> None:
    out = decide(make_state(), cl.CreateSession(worker_id=W, workdir="/src", provider=provider),
                 context())
    event = out[0][1]
    assert isinstance(event, ev.SessionCreated) and event.model == model


def test_create_session_events_fold_into_a_session() -> None:
    state = make_state()
    out = decide(state, cl.CreateSession(worker_id=W, workdir="/w", prompt="hello"), context())
    state = apply_all(state, [ev.Envelope(seq=state.seq + n + 1, ts=NOW, session_id=sid,
                                          event=e) for n, (sid, e) in enumerate(out)])
    s = state.sessions["ses_1"]
    assert (s.title, s.workdir, len(s.items)) == ("hello", "/w", 1)


def test_create_session_unknown_worker_is_not_found() -> None:
    err = rejected(make_state(), cl.CreateSession(worker_id="nope", workdir="/src"))
    assert err.code == "not_found"


def test_create_session_revoked_worker_is_forbidden() -> None:
    err = rejected(make_state(revoked=True), cl.CreateSession(worker_id=W, workdir="/src"))
    assert err.code == "forbidden"


@pytest.mark.parametrize("workdir", ["", "   ", "\t\n"])
def test_create_session_empty_workdir_is_bad_request(workdir: str) -> None:
    err = rejected(make_state(), cl.CreateSession(worker_id=W, workdir=workdir))
    assert err.code == "bad_request"


def test_create_session_with_an_acp_agent_the_worker_offers() -> None:
    state = make_state()
    with_agent = apply_all(state, [ev.Envelope(
        seq=state.seq + 1, ts=NOW, session_id=None, event=ev.WorkerConnected(
            worker_id=W, hostname="h", os="linux", worker_version="0.1",
            capabilities=wk.Capabilities(acp_agents=["claude"])))])
    out = decide(with_agent, cl.CreateSession(worker_id=W, workdir="/src", prompt="hi",
                                              agent="claude"), context())
    event = out[0][1]
    assert isinstance(event, ev.SessionCreated)
    assert (event.agent, event.provider, event.model) == ("claude", "acp", "claude")
    err = rejected(with_agent, cl.CreateSession(worker_id=W, workdir="/src", agent="gemini"))
    assert err.code == "not_found" and "no ACP agent 'gemini'" in err.message
    err = rejected(with_agent, cl.CreateSession(worker_id=W, workdir="/src", agent="claude",
                                                plan_mode=True))
    assert err.code == "bad_request"
    # an external agent keeps its own context: nothing to compact
    sid = out[0][0]
    folded = apply_all(with_agent, [ev.Envelope(seq=with_agent.seq + n + 1, ts=NOW,
                                                session_id=s_id, event=e)
                                    for n, (s_id, e) in enumerate(out)])
    err = rejected(folded, cl.CompactSession(session_id=sid))
    assert err.code == "conflict"


# ---------------------------------------------------------------------------------------------
# SendPrompt


def _user(text: str = "earlier") -> ev.UserMessage:
    return ev.UserMessage(id="itm_0", ts=0.0, text=text)


def test_send_prompt_when_idle_is_not_queued() -> None:
    out = decide(make_state(items=[_user()]), cl.SendPrompt(session_id=S, text="next"),
                 context())
    assert out == [(S, ev.SessionItemAppended(item=ev.UserMessage(
        id="itm_1", ts=NOW, text="next", queued=False)))]


@pytest.mark.parametrize("status", ["running", "waiting_approval", "waiting_worker"])
def test_send_prompt_during_a_turn_is_queued(status: ev.SessionStatus) -> None:
    out = decide(make_state(items=[_user()], status=status),
                 cl.SendPrompt(session_id=S, text="steer"), context())
    (sid, event), = out
    assert sid == S
    assert isinstance(event, ev.SessionItemAppended)
    assert isinstance(event.item, ev.UserMessage) and event.item.queued


@pytest.mark.parametrize("status", ["idle", "interrupted", "error", "waiting_user"])
def test_send_prompt_outside_a_turn_is_not_queued(status: ev.SessionStatus) -> None:
    (_, event), = decide(make_state(items=[_user()], status=status),
                         cl.SendPrompt(session_id=S, text="go"), context())
    assert isinstance(event, ev.SessionItemAppended)
    assert isinstance(event.item, ev.UserMessage) and not event.item.queued


def test_send_prompt_first_prompt_sets_the_title() -> None:
    out = decide(make_state(items=[ev.ErrorItem(id="e", ts=0.0, message="x")]),
                 cl.SendPrompt(session_id=S, text="\n  Refactor the parser  \nplease"), context())
    assert out[0] == (S, ev.SessionTitleChanged(title="Refactor the parser"))
    assert isinstance(out[1][1], ev.SessionItemAppended)
    assert len(out) == 2


def test_send_prompt_later_prompts_keep_the_title() -> None:
    out = decide(make_state(items=[_user()]), cl.SendPrompt(session_id=S, text="more"),
                 context())
    assert not any(isinstance(e, ev.SessionTitleChanged) for _, e in out)


def test_send_prompt_keeps_an_explicit_title() -> None:
    ctx = context()
    state = make_state()
    created = decide(state, cl.CreateSession(worker_id=W, workdir="/w", title="Release prep"),
                     ctx)
    state = apply_all(state, [ev.Envelope(seq=state.seq + 1, ts=1.0, session_id=sid, event=e)
                              for sid, e in created])
    sid = created[0][0]
    assert sid is not None
    out = decide(state, cl.SendPrompt(session_id=sid, text="bump the version"), ctx)
    assert not any(isinstance(e, ev.SessionTitleChanged) for _, e in out)


@pytest.mark.parametrize("text", ["", "  ", "\n\t"])
def test_send_prompt_empty_is_bad_request(text: str) -> None:
    assert rejected(make_state(), cl.SendPrompt(session_id=S, text=text)).code == "bad_request"


def test_send_prompt_unknown_session_is_not_found() -> None:
    assert rejected(make_state(), cl.SendPrompt(session_id="x", text="hi")).code == "not_found"


def test_send_prompt_closed_session_is_conflict() -> None:
    err = rejected(make_state(status="closed"), cl.SendPrompt(session_id=S, text="hi"))
    assert err.code == "conflict"


def test_attachments_too_many_unknown_or_too_large() -> None:
    """Too many is the request's fault (400, the REST body's schema says it); an unknown file
    is a 404 and files over 25 MiB a 413: what they refer to, which no schema can say."""
    def prompt(*sizes: int) -> cl.SendPrompt:
        return cl.SendPrompt(session_id=S, text="see", attachments=[
            ev.Attachment(hash=f"{n:064x}", name=f"f{n}", mime="text/plain", size=size)
            for n, size in enumerate(sizes)])

    def refused(command: cl.SendPrompt, *, stored: bool) -> str:
        ctx = Context(blob_exists=lambda digest: stored)
        with pytest.raises(CommandRejected) as info:
            decide(make_state(), command, ctx)
        return info.value.code

    assert refused(prompt(*[1] * 11), stored=True) == "bad_request"
    assert refused(prompt(1, 2), stored=False) == "not_found"
    assert refused(prompt(20 << 20, 10 << 20), stored=False) == "not_found"  # unknown first
    assert refused(prompt(20 << 20, 10 << 20), stored=True) == "too_large"
    out = decide(make_state(), prompt(20 << 20, 5 << 20), Context(blob_exists=lambda d: True))
    assert isinstance(out[-1][1], ev.SessionItemAppended)


# ---------------------------------------------------------------------------------------------
# DecideApproval


@pytest.mark.parametrize(
    ("decision", "expected", "for_session"),
    [("approve", "approved", False), ("approve_for_session", "approved", True),
     ("reject", "rejected", False)],
)
def test_decide_approval(decision: Any, expected: Any, for_session: bool) -> None:
    out = decide(make_state(approvals={"apr_1": "pending"}),
                 cl.DecideApproval(session_id=S, approval_id="apr_1", decision=decision,
                                   message="because"), context())
    assert out == [(S, ev.ApprovalResolved(approval_id="apr_1", decision=expected,
                                           message="because", for_session=for_session))]


def test_decide_approval_unknown_is_not_found() -> None:
    err = rejected(make_state(approvals={"apr_1": "pending"}),
                   cl.DecideApproval(session_id=S, approval_id="apr_2", decision="approve"))
    assert err.code == "not_found"


def test_decide_approval_unknown_session_is_not_found() -> None:
    err = rejected(make_state(approvals={"apr_1": "pending"}),
                   cl.DecideApproval(session_id="x", approval_id="apr_1", decision="approve"))
    assert err.code == "not_found"


@pytest.mark.parametrize("outcome", ["approved", "rejected", "expired", "cancelled"])
def test_decide_approval_already_decided_is_conflict(outcome: str) -> None:
    err = rejected(make_state(approvals={"apr_1": outcome}),
                   cl.DecideApproval(session_id=S, approval_id="apr_1", decision="approve"))
    assert err.code == "conflict"
    assert outcome in err.message


def test_decide_approval_second_decision_after_fold_is_conflict() -> None:
    state = make_state(approvals={"apr_1": "pending"})
    out = decide(state, cl.DecideApproval(session_id=S, approval_id="apr_1",
                                          decision="reject"), context())
    apply_all(state, [ev.Envelope(seq=state.seq + 1, ts=9.0, session_id=sid, event=e)
                      for sid, e in out])
    err = rejected(state, cl.DecideApproval(session_id=S, approval_id="apr_1",
                                            decision="approve"))
    assert err.code == "conflict"
    assert state.sessions[S].approvals["apr_1"].status == "rejected"


# ---------------------------------------------------------------------------------------------
# SetApprovalPolicy, Interrupt, others


def test_set_approval_policy_changes_it() -> None:
    out = decide(make_state(policy="suggest"),
                 cl.SetApprovalPolicy(session_id=S, policy="full-auto"), context())
    assert out == [(S, ev.SessionPolicyChanged(policy="full-auto"))]


def test_set_approval_policy_unchanged_is_a_no_op() -> None:
    out = decide(make_state(policy="auto-edit"),
                 cl.SetApprovalPolicy(session_id=S, policy="auto-edit"), context())
    assert out == []


def test_set_approval_policy_unknown_session_is_not_found() -> None:
    err = rejected(make_state(), cl.SetApprovalPolicy(session_id="x", policy="suggest"))
    assert err.code == "not_found"


@pytest.mark.parametrize("status", ["running", "waiting_approval", "waiting_worker"])
def test_interrupt_a_running_turn(status: ev.SessionStatus) -> None:
    out = decide(make_state(status=status), cl.Interrupt(session_id=S), context())
    (sid, event), = out
    assert sid == S
    assert isinstance(event, ev.SessionStatusChanged) and event.status == "interrupted"


@pytest.mark.parametrize("status", ["idle", "interrupted", "closed", "error", "waiting_user"])
def test_interrupt_when_not_running_is_a_no_op(status: ev.SessionStatus) -> None:
    assert decide(make_state(status=status), cl.Interrupt(session_id=S), context()) == []


def test_interrupt_unknown_session_is_not_found() -> None:
    assert rejected(make_state(), cl.Interrupt(session_id="x")).code == "not_found"


def test_subscribe_is_not_a_command_to_decide() -> None:
    assert rejected(make_state(), cl.Subscribe(after_seq=3)).code == "bad_request"


def test_rejected_commands_leave_the_state_alone() -> None:
    state = make_state(approvals={"apr_1": "approved"})
    before = state.sessions[S].approvals["apr_1"].status
    for command in (cl.DecideApproval(session_id=S, approval_id="apr_1", decision="reject"),
                    cl.CreateSession(worker_id="nope", workdir="/")):
        with pytest.raises(CommandRejected):
            decide(state, command, context())
    assert state.sessions[S].approvals["apr_1"].status == before
    assert list(state.sessions) == [S]


def test_default_context_makes_unique_prefixed_ids() -> None:
    ctx = Context()
    ids = {ctx.new_id("ses") for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("ses_") for i in ids)
    assert ctx.now() > 1.6e9


# ---------------------------------------------------------------------------------------------
# title_from_prompt


@pytest.mark.parametrize(
    ("prompt", "title"),
    [
        ("Fix the bug", "Fix the bug"),
        ("\n\n   Fix the bug  \nin parser", "Fix the bug"),
        ("", "New session"),
        (" \n\t\n", "New session"),
        ("x" * TITLE_MAX, "x" * TITLE_MAX),
        ("x" * (TITLE_MAX + 1), "x" * TITLE_MAX + "…"),
        ("word " * 20, "word word word word word word word word word word word word…"),
        ("Refactor the parser, then " + "y" * 60, "Refactor the parser, then…"),
    ],
)
def test_title_from_prompt(prompt: str, title: str) -> None:
    assert title_from_prompt(prompt) == title


@settings(max_examples=100, deadline=None)
@given(prompt=st.text(max_size=200))
def test_title_from_prompt_is_a_short_prefix_of_the_first_line(prompt: str) -> None:
    title = title_from_prompt(prompt)
    lines = [ln.strip() for ln in prompt.splitlines() if ln.strip()]
    if not lines:
        assert title == "New session"
        return
    assert len(title) <= TITLE_MAX + 1
    if len(lines[0]) <= TITLE_MAX:
        assert title == lines[0]
    else:
        assert title.endswith("…")
        assert lines[0].startswith(title[:-1])


# ---------------------------------------------------------------------------------------------
# session operations and questions


def _with(state: State, *events: ev.Event) -> State:
    return apply_all(state, [ev.Envelope(seq=state.seq + n, ts=0.0, session_id=S, event=e)
                             for n, e in enumerate(events, start=1)])


def test_answering_a_question() -> None:
    state = _with(make_state(status="waiting_user"),
                  ev.QuestionAsked(question_id="q1", item_id="t", question="Which?"))
    out = decide(state, cl.AnswerQuestion(session_id=S, question_id="q1", answer="A"), context())
    assert out == [(S, ev.QuestionAnswered(question_id="q1", answer="A"))]
    assert rejected(state, cl.AnswerQuestion(session_id=S, question_id="q1",
                                             answer=" ")).code == "bad_request"
    assert rejected(state, cl.AnswerQuestion(session_id=S, question_id="nope",
                                             answer="A")).code == "not_found"
    # while a question waits, a prompt is queued and an interrupt stops the turn
    *_, (_, prompt) = decide(state, cl.SendPrompt(session_id=S, text="also"), context())
    assert isinstance(prompt, ev.SessionItemAppended) and prompt.item.queued  # type: ignore[union-attr]
    assert decide(state, cl.Interrupt(session_id=S), context())
    done = _with(state, *[e for _, e in out])  # (folds in place)
    assert rejected(done, cl.AnswerQuestion(session_id=S, question_id="q1",
                                            answer="B")).code == "conflict"


def test_rename_and_archive() -> None:
    state = make_state()
    assert decide(state, cl.RenameSession(session_id=S, title="  Fix   the CI "), context()) == [
        (S, ev.SessionTitleChanged(title="Fix the CI"))]
    assert rejected(state, cl.RenameSession(session_id=S, title=" ")).code == "bad_request"
    assert decide(state, cl.ArchiveSession(session_id=S), context()) == [
        (S, ev.SessionArchived(archived=True))]
    assert decide(state, cl.ArchiveSession(session_id=S, archived=False), context()) == []
    assert rejected(make_state(status="running"),
                    cl.ArchiveSession(session_id=S)).code == "conflict"


def test_close_cancels_what_waits_and_refuses_later_prompts() -> None:
    state = _with(make_state(status="waiting_approval", approvals={"apr_1": "pending"}),
                  ev.QuestionAsked(question_id="q1", item_id="t", question="Which?"))
    out = decide(state, cl.CloseSession(session_id=S, reason="done here"), context())
    assert out == [
        (S, ev.ApprovalResolved(approval_id="apr_1", decision="cancelled", message="done here")),
        (S, ev.QuestionAnswered(question_id="q1", cancelled=True)),
        (S, ev.SessionStatusChanged(status="closed", reason="done here"))]
    closed = _with(state, *[e for _, e in out])
    assert rejected(closed, cl.SendPrompt(session_id=S, text="more")).code == "conflict"
    assert decide(closed, cl.CloseSession(session_id=S), context()) == []


def test_delete_closes_then_removes() -> None:
    out = decide(make_state(status="running"), cl.DeleteSession(session_id=S), context())
    assert [type(e) for _, e in out] == [ev.SessionStatusChanged, ev.SessionDeleted]
    gone = _with(make_state(status="running"), *[e for _, e in out])
    assert S not in gone.sessions
    assert rejected(gone, cl.DeleteSession(session_id=S)).code == "not_found"


def test_fork_from_an_item() -> None:
    items: list[ev.Item] = [ev.UserMessage(id="u1", ts=0, text="go"),
                            ev.AssistantMessage(id="a1", ts=0, text="ok")]
    state = make_state(items=items)
    out = decide(state, cl.ForkSession(session_id=S, item_id="u1", prompt="try B"), context())
    assert out == [("ses_1", ev.SessionForked(from_session=S, until_item="u1",
                                              title="New session (fork)")),
                   ("ses_1", ev.SessionItemAppended(item=ev.UserMessage(
                       id="itm_2", ts=NOW, text="try B")))]
    assert rejected(state, cl.ForkSession(session_id=S, item_id="zz")).code == "not_found"
    assert rejected(make_state(), cl.ForkSession(session_id=S)).code == "bad_request"


def test_move_to_another_worker() -> None:
    state = apply_all(make_state(), [ev.Envelope(seq=99, ts=0.0, session_id=None, event=(
        ev.WorkerPaired(worker_id="w2", request_id="r2", hostname="h2", os="linux",
                        python_version="3.11", worker_version="0.1", roots=["/"],
                        public_key="pk2")))])
    assert decide(state, cl.MoveSession(session_id=S, worker_id="w2"), context()) == [
        (S, ev.SessionMoved(worker_id="w2", from_worker=W))]
    assert rejected(state, cl.MoveSession(session_id=S, worker_id="nope")).code == "not_found"
    busy = _with(state, ev.SessionStatusChanged(status="running"))
    assert rejected(busy, cl.MoveSession(session_id=S, worker_id="w2")).code == "conflict"


def test_set_memory() -> None:
    state = make_state()
    assert decide(state, cl.SetMemory(worker_id=W, workdir="/src", text="- uv run"),
                  context()) == [(None, ev.MemoryUpdated(worker_id=W, workdir="/src",
                                                         text="- uv run"))]
    assert rejected(state, cl.SetMemory(worker_id=W, workdir="/src",
                                        text="x" * 9000)).code == "bad_request"
    assert rejected(state, cl.SetMemory(worker_id="nope", workdir="/src",
                                        text="")).code == "not_found"


def test_interrupting_a_parent_interrupts_its_busy_sub_agents() -> None:
    state = make_state(status="running")
    children = [("ses_c1", "running"), ("ses_c2", "idle"), ("ses_c3", "waiting_approval")]
    for n, (child, status) in enumerate(children):
        state = apply_all(state, [
            ev.Envelope(seq=state.seq + 1, ts=0.0, session_id=child, event=ev.SessionCreated(
                title="explorer", worker_id=W, workdir="/src", provider="openai", model="m",
                parent_id=S, parent_item=f"itm_{n}", role="explorer", read_only=True)),
            ev.Envelope(seq=state.seq + 2, ts=0.0, session_id=child,
                        event=ev.SessionStatusChanged(status=status))])  # type: ignore[arg-type]
    out = decide(state, cl.Interrupt(session_id=S), context())
    assert [sid for sid, _ in out] == [S, "ses_c1", "ses_c3"]
    assert state.sessions["ses_c1"].parent_id == S and state.sessions["ses_c1"].read_only


def test_a_session_keeps_the_sandbox_it_was_created_with_and_changes_it_on_request() -> None:
    state = State()
    state.workers["w1"] = WorkerInfo(worker_id="w1", hostname="h", os="Linux", roots=["/w"])
    made = decide(state, cl.CreateSession(worker_id="w1", workdir="/w", prompt="go",
                                          sandbox="read-only", network=True), Context())
    created = made[0][1]
    assert isinstance(created, ev.SessionCreated)
    assert (created.sandbox, created.network) == ("read-only", True)
    default = decide(state, cl.CreateSession(worker_id="w1", workdir="/w"), Context())[0][1]
    assert isinstance(default, ev.SessionCreated)
    assert (default.sandbox, default.network) == ("workspace-write", False)  # the default
    state = apply_all(state, [ev.Envelope(seq=n + 1, ts=0.0, session_id=sid, event=e)
                              for n, (sid, e) in enumerate(made)])
    sid = made[0][0]
    assert sid is not None
    assert decide(state, cl.SetSandbox(session_id=sid, sandbox="read-only", network=True),
                  Context()) == []  # nothing changes
    (changed,) = decide(state, cl.SetSandbox(session_id=sid, sandbox="full-access"), Context())
    assert changed == (sid, ev.SessionSandboxChanged(sandbox="full-access", network=False))
    with pytest.raises(CommandRejected):
        decide(state, cl.SetSandbox(session_id="ses_nope", sandbox="read-only"), Context())


# a session's processes --------------------------------------------------------------------


def _with_processes(status: ev.SessionStatus = "idle", *running: str,
                    ended: tuple[str, ...] = ()) -> State:
    state = make_state(status=status)
    events: list[ev.Event] = [ev.ProcessStarted(process_id=p, item_id="itm_x", worker_id=W,
                                                argv=["serve"]) for p in (*running, *ended)]
    events += [ev.ProcessEnded(process_id=p, exit_code=0) for p in ended]
    return apply_all(state, [ev.Envelope(seq=state.seq + n, ts=9.0, session_id=S, event=e)
                             for n, e in enumerate(events, start=1)])


def test_stop_process_asks_a_running_process_to_stop_once() -> None:
    state = _with_processes("idle", "proc_1", ended=("proc_2",))
    out = decide(state, cl.StopProcess(session_id=S, process_id="proc_1"), context())
    assert out == [(S, ev.ProcessStopRequested(process_id="proc_1", by="user"))]
    state = apply_all(state, [ev.Envelope(seq=state.seq + 1, ts=10.0, session_id=S,
                                          event=out[0][1])])
    assert decide(state, cl.StopProcess(session_id=S, process_id="proc_1"), context()) == []
    assert rejected(state, cl.StopProcess(session_id=S, process_id="proc_2")).code == \
        "conflict"
    assert rejected(state, cl.StopProcess(session_id=S, process_id="nope")).code == \
        "not_found"


def test_interrupt_stops_the_sessions_processes_even_when_its_turn_is_over() -> None:
    idle = _with_processes("idle", "proc_1", "proc_2", ended=("proc_3",))
    assert decide(idle, cl.Interrupt(session_id=S), context()) == [
        (S, ev.ProcessStopRequested(process_id="proc_1", by="interrupt")),
        (S, ev.ProcessStopRequested(process_id="proc_2", by="interrupt"))]
    running = _with_processes("running", "proc_1")
    assert decide(running, cl.Interrupt(session_id=S), context()) == [
        (S, ev.ProcessStopRequested(process_id="proc_1", by="interrupt")),
        (S, ev.SessionStatusChanged(status="interrupted", reason="interrupted by the user"))]


def test_close_and_delete_stop_the_sessions_processes() -> None:
    state = _with_processes("running", "proc_1")
    closed = decide(state, cl.CloseSession(session_id=S), context())
    assert (S, ev.ProcessStopRequested(process_id="proc_1", by="close")) in closed
    deleted = decide(state, cl.DeleteSession(session_id=S), context())
    assert [type(e).__name__ for _, e in deleted] == [
        "ProcessStopRequested", "SessionStatusChanged", "SessionDeleted"]


# model providers and a session's model ------------------------------------------------------

def _with_session_on(provider: str, *, status: ev.SessionStatus = "error") -> State:
    state = make_state(status=status, items=[ev.UserMessage(id="itm_u", ts=1.0, text="hi")])
    state.sessions[S].provider = provider
    return state


def _saved(state: State, entry: ev.ProviderEntry) -> State:
    return apply_all(state, [ev.Envelope(seq=state.seq + 1, ts=NOW, session_id=None,
                                         event=ev.ProviderSaved(provider=entry))])


LOCAL = ev.ProviderEntry(name="local", base_url="http://h:11434/v1", models=["qwen", "llama"],
                         auth="none")


def test_switching_a_sessions_model_is_an_event_and_the_same_choice_none() -> None:
    state = make_state()
    events = decide(state, cl.SetSessionModel(session_id=S, provider="ollama", model="",
                                              effort="high"), context())
    assert events == [(S, ev.SessionModelChanged(provider="ollama", model="llama",
                                                 effort="high"))]
    assert decide(state, cl.SetSessionModel(session_id=S, provider="openai", model="gpt-x"),
                  context()) == []
    state = _saved(state, LOCAL)  # a provider of Settings → Models is one too
    assert decide(state, cl.SetSessionModel(session_id=S, provider="local", model="llama"),
                  context()) == [(S, ev.SessionModelChanged(provider="local", model="llama"))]


@pytest.mark.parametrize(("command", "code"), [
    (cl.SetSessionModel(session_id=S, provider="nope"), "not_found"),
    (cl.SetSessionModel(session_id="ses_x", provider="openai"), "not_found"),
    (cl.SetSessionModel(session_id=S, provider="openai", model="m" * 201), "bad_request"),
])
def test_switching_to_what_is_not_there_is_refused(command: Any, code: str) -> None:
    assert rejected(make_state(), command).code == code


def test_a_closed_or_acp_session_keeps_its_model() -> None:
    closed = make_state(status="closed")
    assert rejected(closed, cl.SetSessionModel(session_id=S, provider="ollama")).code == \
        "conflict"
    acp = make_state()
    acp.sessions[S].agent = "codex"
    assert rejected(acp, cl.SetSessionModel(session_id=S, provider="ollama")).code == "conflict"


def test_a_session_whose_provider_is_gone_takes_the_default_on_retry_prompt_and_fork() -> None:
    state = _with_session_on("default")
    moved = ev.SessionModelChanged(
        provider="openai", model="gpt-x",
        reason="the provider 'default' is not configured on this server; using 'openai'")
    assert decide(state, cl.RetryTurn(session_id=S), context()) == [
        (S, moved), (S, ev.TurnRequested())]
    prompted = decide(_with_session_on("default", status="idle"),
                      cl.SendPrompt(session_id=S, text="again"), context())
    assert prompted[0] == (S, moved)
    forked = decide(state, cl.ForkSession(session_id=S, item_id="itm_u"), context())
    assert forked[1] == ("ses_1", moved)


def test_a_session_on_a_configured_provider_is_not_moved() -> None:
    assert decide(_with_session_on("ollama"), cl.RetryTurn(session_id=S), context()) == [
        (S, ev.TurnRequested())]


def test_with_no_provider_at_all_a_retry_changes_nothing_but_a_new_one_is_used_at_once() -> None:
    empty = Context(new_id=lambda prefix: f"{prefix}_1", now=lambda: NOW)
    state = _with_session_on("default")
    assert decide(state, cl.RetryTurn(session_id=S), empty) == [(S, ev.TurnRequested())]
    state = _saved(state, LOCAL)  # added in Settings → Models: no restart
    assert decide(state, cl.RetryTurn(session_id=S), empty)[0] == (S, ev.SessionModelChanged(
        provider="local", model="qwen",
        reason="the provider 'default' is not configured on this server; using 'local'"))
    created = decide(state, cl.CreateSession(worker_id=W, workdir="/src"), empty)
    assert isinstance(created[0][1], ev.SessionCreated)
    assert (created[0][1].provider, created[0][1].model) == ("local", "qwen")


def test_a_session_started_with_no_provider_names_none_and_takes_the_first_one_added() -> None:
    # the server's context with no provider (services.py): no "default" nobody made
    none = Context(new_id=lambda prefix: f"{prefix}_1", now=lambda: NOW, default_provider="")
    state = _with_session_on("default")
    [(_, created), *_] = decide(state, cl.CreateSession(worker_id=W, workdir="/src"), none)
    assert isinstance(created, ev.SessionCreated) and (created.provider, created.model) == ("", "")
    state = _with_session_on("", status="error")
    state = _saved(state, LOCAL)
    assert decide(state, cl.RetryTurn(session_id=S), none)[0] == (S, ev.SessionModelChanged(
        provider="local", model="qwen",
        reason="no model provider was set up when the session started; using 'local'"))


def test_saving_a_provider_cleans_it_and_saving_it_again_unchanged_is_nothing() -> None:
    entry = ev.ProviderEntry(name="local", base_url="http://h:11434/v1/",
                             models=["qwen", " qwen", "llama"], default_model=" ", auth="none")
    [(None_, saved)] = decide(State(), cl.SaveProvider(provider=entry), context())
    assert None_ is None and isinstance(saved, ev.ProviderSaved)
    assert saved.provider == ev.ProviderEntry(
        name="local", base_url="http://h:11434/v1", models=["qwen", "llama"],
        default_model=None, auth="none", updated_at=NOW)
    state = _saved(State(), saved.provider)
    assert decide(state, cl.SaveProvider(provider=entry), context()) == []


@pytest.mark.parametrize(("entry", "code"), [
    (ev.ProviderEntry(name="openai", base_url="http://h/v1"), "conflict"),  # config.json's
    (ev.ProviderEntry(name="acp", base_url="http://h/v1"), "conflict"),
    (ev.ProviderEntry(name="-x", base_url="http://h/v1"), "bad_request"),
    (ev.ProviderEntry(name="x", base_url="ftp://h/v1"), "bad_request"),
    (ev.ProviderEntry(name="x", base_url="http:///v1"), "bad_request"),
    (ev.ProviderEntry(name="x", base_url="http://h", models=[" "]), "bad_request"),
    (ev.ProviderEntry(name="x", base_url="http://h", auth="oauth", issuer="https://i"),
     "bad_request"),
])
def test_a_provider_that_cannot_work_is_refused(entry: ev.ProviderEntry, code: str) -> None:
    ctx = Context(default_models={"openai": "gpt-x"}, file_providers=frozenset({"openai"}))
    with pytest.raises(CommandRejected) as info:
        decide(State(), cl.SaveProvider(provider=entry), ctx)
    assert info.value.code == code


def test_removing_a_provider_only_one_of_settings() -> None:
    ctx = Context(default_models={"openai": "gpt-x"}, file_providers=frozenset({"openai"}))
    state = _saved(State(), LOCAL)
    assert decide(state, cl.RemoveProvider(name="local"), ctx) == [
        (None, ev.ProviderRemoved(name="local"))]
    for name, code in [("openai", "conflict"), ("nope", "not_found")]:
        with pytest.raises(CommandRejected) as info:
            decide(state, cl.RemoveProvider(name=name), ctx)
        assert info.value.code == code


# a session's worktree --------------------------------------------------------------------------

def test_a_session_in_a_worktree_gets_a_branch_of_its_title_and_id() -> None:
    events = decide(make_state(), cl.CreateSession(
        worker_id=W, workdir=" /src/app ", prompt="Fix the login page!",
        worktree=ev.WorktreeRequest(base=" main ")), context())
    created = events[0][1]
    assert isinstance(created, ev.SessionCreated)
    assert created.worktree == ev.Worktree(repo="/src/app", branch="codey/fix-the-login-page-es_1",
                                           base="main")
    assert created.workdir == "/src/app"  # until the worktree is made


@pytest.mark.parametrize(("title", "sid", "branch"), [
    ("Fix the login page", "ses_0123456789abcdef", "codey/fix-the-login-page-cdef"),
    ("  ", "ses_0123456789abcdef", "codey/session-cdef"),
    ("Ünïcode & ✓ symbols", "ses_00000000000000aa", "codey/n-code-symbols-00aa"),
    ("x" * 80, "ses_0000000000000001", "codey/" + "x" * 40 + "-0001"),
])
def test_branch_names_are_git_safe(title: str, sid: str, branch: str) -> None:
    assert branch_for(title, sid) == branch


def test_an_acp_agent_takes_no_worktree() -> None:
    state = make_state()
    state.workers[W].capabilities.acp_agents = ["codex"]
    assert rejected(state, cl.CreateSession(worker_id=W, workdir="/src", agent="codex",
                                            worktree=ev.WorktreeRequest())).code == "bad_request"


def test_a_workdir_outside_the_workers_roots_is_refused_by_its_reported_roots_first() -> None:
    from codey_protocol.worker import Capabilities
    from codey_server.core.decide import workdir_outside_roots

    paired = WorkerInfo(worker_id="w", hostname="box", os="Linux", roots=["/src"])
    assert workdir_outside_roots(paired, "/src/app") is None
    assert workdir_outside_roots(paired, "/src") is None
    assert "outside the folders box allows (/src)" in (
        workdir_outside_roots(paired, "/srcx") or "")
    assert workdir_outside_roots(paired, "/src/../etc") is not None
    # the roots of its last hello win over those it paired with (its config changed since)
    moved = WorkerInfo(worker_id="w", hostname="box", os="Linux", roots=["/src"],
                       capabilities=Capabilities(roots=["/code", "/mnt/code"]))
    assert workdir_outside_roots(moved, "/mnt/code/app") is None
    assert workdir_outside_roots(moved, "/src/app") is not None
    # what the text cannot tell is the worker's to judge
    assert workdir_outside_roots(paired, "~/app") is None
    windows = WorkerInfo(worker_id="w", hostname="pc", os="Windows", roots=["C:\\src"])
    assert workdir_outside_roots(windows, "D:\\x") is None
    err = rejected(make_state(), cl.CreateSession(worker_id=W, workdir="/etc"))
    assert err.code == "outside_allowed_roots"
