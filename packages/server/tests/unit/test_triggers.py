"""Triggers, pure: the prompt template (one pass, missing fields listed), GitHub's signature
(HMAC-SHA256 over the raw body), the event filter, and what a delivery starts."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from codey_protocol import events as ev
from codey_protocol.state import State, WorkerInfo
from codey_server.core.rules import CommandRejected, Context
from codey_server.features import apply
from codey_server.triggers import rules
from codey_server.triggers.limits import RateLimits
from codey_server.triggers.template import MAX_VALUE_CHARS, problems, render
from codey_server.triggers.webhook import event_label, passes, sign, signature_problem

GITHUB = Path(__file__).resolve().parents[1] / "data" / "github"


def payload(name: str) -> Any:
    return json.loads((GITHUB / f"{name}.json").read_text())


# the template --------------------------------------------------------------------------------


def test_fields_are_dotted_paths_with_array_indices() -> None:
    p = payload("issue_comment.created")
    out = render("{{payload.repository.full_name}}#{{ payload.issue.number }}: "
                 "{{payload.issue.labels[0].name}} — {{payload.comment.body}} ({{event}})",
                 {"payload": p, "event": "issue_comment"})
    assert out.text == ("octo-org/hello-world#1347: bug — @codey please fix the off-by-one in "
                        "pager.py (issue_comment)")
    assert out.missing == ()


def test_a_missing_field_renders_empty_and_is_listed_once() -> None:
    out = render("[{{payload.issue.milestone.title}}] {{payload.nope[3]}} "
                 "{{payload.issue.milestone.title}} {{payload.issue.labels[9].name}}",
                 {"payload": payload("issue_comment.created")})
    assert out.text == "[]   "
    assert out.missing == ("payload.issue.milestone.title", "payload.nope[3]",
                           "payload.issue.labels[9].name")


def test_null_renders_empty_but_is_present_and_objects_render_as_json() -> None:
    out = render("a{{payload.x}}b {{payload.y}} {{payload.n}} {{payload.t}}",
                 {"payload": {"x": None, "y": {"k": [1, "é"]}, "n": 3, "t": True}})
    assert out.text == 'ab {"k":[1,"é"]} 3 true'
    assert out.missing == ()


def test_template_syntax_inside_a_value_is_not_expanded_again() -> None:
    """Attack: a comment body (anyone's words) holding template syntax stays that text."""
    hostile = {"comment": {"body": "{{payload.secret}} {{payload.comment.body}} {{event}}"},
               "secret": "hunter2"}
    out = render("said: {{payload.comment.body}}", {"payload": hostile, "event": "x"})
    assert out.text == "said: {{payload.secret}} {{payload.comment.body}} {{event}}"
    assert "hunter2" not in out.text


def test_anything_but_a_path_is_no_field_and_stays_as_it_is() -> None:
    template = "{{payload.__class__}} {{ payload.a() }} {{payload|upper}} {{os.environ}}"
    out = render(template, {"payload": {"a": 1}})
    # a dotted name is a (missing) field; calls and filters are not fields at all
    assert out.text == " {{ payload.a() }} {{payload|upper}} "
    assert out.missing == ("payload.__class__", "os.environ")
    wrong = problems(template, rules.ROOTS)
    assert len(wrong) == 3 and any("'os'" in w for w in wrong)


def test_a_huge_value_is_cut() -> None:
    out = render("{{payload.body}}", {"payload": {"body": "x" * (MAX_VALUE_CHARS * 3)}})
    assert len(out.text) == MAX_VALUE_CHARS + 1


# the signature and the filter -----------------------------------------------------------------


def test_the_signature_is_githubs_hmac_sha256_of_the_raw_body() -> None:
    # GitHub's documented example (docs.github.com, "Validating webhook deliveries")
    secret, body = "It's a Secret to Everybody", b"Hello, World!"
    assert sign(secret, body) == ("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4"
                                  "379c8b043e17")
    assert sign(secret, body) == "sha256=" + hmac.new(secret.encode(), body,
                                                       hashlib.sha256).hexdigest()
    assert signature_problem(secret, body, sign(secret, body)) is None
    assert signature_problem(None, body, None) is None  # no secret: none asked for
    assert "no X-Hub-Signature-256" in (signature_problem(secret, body, None) or "")
    assert "does not match" in (signature_problem(secret, body, sign("other", body)) or "")
    assert "does not match" in (signature_problem(secret, body + b" ", sign(secret, body))
                                or "")
    assert "does not match" in (signature_problem(secret, body, "sha256=zz") or "")


def test_the_event_filter() -> None:
    assert passes([], "push", None)
    assert passes(["issue_comment"], "issue_comment", "created")
    assert passes(["pull_request.opened"], "pull_request", "opened")
    assert not passes(["pull_request.opened"], "pull_request", "closed")
    assert not passes(["pull_request.opened"], "issues", "opened")
    assert event_label("pull_request", "opened") == "pull_request.opened"
    assert event_label("ping", None) == "ping"


def test_the_rate_limit_slides_over_a_minute() -> None:
    limits = RateLimits()
    assert [limits.take("t", 2, 0.0), limits.take("t", 2, 1.0), limits.take("t", 2, 2.0)] == [
        True, True, False]
    assert limits.take("other", 2, 2.0)
    assert limits.take("t", 2, 60.5)  # the first one left the window


# what a delivery starts ------------------------------------------------------------------------


def _state(**fields: Any) -> State:
    state = State()
    state.workers["w1"] = WorkerInfo(worker_id="w1", hostname="h", os="Linux")
    f = ev.TriggerFields(**{"name": "fix", "worker_id": "w1", "workdir": "/w",
                            "prompt": "Fix {{payload.repository.full_name}}: "
                                      "{{payload.comment.body}}", **fields})
    for _, e in rules.save(state, rules.Save(fields=f, trigger_id="trg_1", hook_id="H" * 32,
                                             has_secret=True, new=True), Context()):
        apply(state, ev.Envelope(seq=state.seq + 1, ts=1.0, session_id=None, event=e))
    return state


def _fold(state: State, events: list[tuple[str | None, ev.Event]]) -> None:
    for sid, e in events:
        apply(state, ev.Envelope(seq=state.seq + 1, ts=2.0, session_id=sid, event=e))


def test_a_delivery_starts_a_session_with_the_rendered_prompt_and_its_budget() -> None:
    state = _state(events=["issue_comment"], budget_tokens=5000, budget_usd=1.5,
                   policy="auto-edit")
    out = rules.deliver(state, rules.Delivery(trigger_id="trg_1", event="issue_comment",
                                              payload=payload("issue_comment.created"),
                                              payload_hash="ab" * 32), Context())
    delivered = out[0][1]
    assert isinstance(delivered, ev.TriggerDelivered)
    assert (delivered.outcome, delivered.event) == ("started", "issue_comment.created")
    kinds = [type(e).__name__ for _, e in out]
    assert kinds == ["TriggerDelivered", "SessionCreated", "BudgetSet", "SessionItemAppended"]
    created = out[1][1]
    assert isinstance(created, ev.SessionCreated)
    assert (created.policy, created.origin) == ("auto-edit", "trigger:trg_1")
    budget = out[2][1]
    assert isinstance(budget, ev.BudgetSet)
    assert (budget.max_tokens, budget.max_micros) == (5000, 1_500_000)
    prompt = out[3][1]
    assert isinstance(prompt, ev.SessionItemAppended) and isinstance(prompt.item,
                                                                     ev.UserMessage)
    assert prompt.item.text == ("Fix octo-org/hello-world: @codey please fix the off-by-one "
                                "in pager.py")
    _fold(state, out)
    [d] = state.triggers["trg_1"].deliveries
    assert (d.outcome, d.session_id, d.payload) == ("started", delivered.session_id, "ab" * 32)
    assert state.sessions[delivered.session_id or ""].title == "fix · issue_comment.created"


def test_a_filtered_event_starts_nothing() -> None:
    state = _state(events=["pull_request.opened"])
    out = rules.deliver(state, rules.Delivery(trigger_id="trg_1", event="pull_request",
                                              payload={"action": "closed"}), Context())
    assert len(out) == 1
    e = out[0][1]
    assert isinstance(e, ev.TriggerDelivered)
    assert (e.outcome, e.event) == ("filtered", "pull_request.closed")


def test_githubs_ping_is_filtered_even_without_a_filter() -> None:
    state = _state()
    out = rules.deliver(state, rules.Delivery(trigger_id="trg_1", event="ping",
                                              payload={"zen": "Keep it logically awesome.",
                                                       "hook_id": 1}), Context())
    assert [(type(e).__name__, getattr(e, "outcome", "")) for _, e in out] == [
        ("TriggerDelivered", "filtered")]


def test_a_refused_delivery_says_why_and_starts_nothing() -> None:
    state = _state()
    out = rules.deliver(state, rules.Delivery(trigger_id="trg_1", event="issue_comment",
                                              payload=None, refused="bad signature"), Context())
    assert [(type(e).__name__, getattr(e, "outcome", ""), getattr(e, "reason", ""))
            for _, e in out] == [("TriggerDelivered", "refused", "bad signature")]
    state.workers["w1"].revoked = True
    out = rules.deliver(state, rules.Delivery(trigger_id="trg_1", event="x", payload={}),
                        Context())
    assert "gone" in getattr(out[0][1], "reason", "") and len(out) == 1
    with pytest.raises(CommandRejected):
        rules.deliver(state, rules.Delivery(trigger_id="trg_none", event="x", payload={}),
                      Context())


def test_a_task_target_creates_a_board_task() -> None:
    state = _state(target="task")
    out = rules.deliver(state, rules.Delivery(trigger_id="trg_1", event="issue_comment",
                                              payload=payload("issue_comment.created")),
                        Context())
    assert [type(e).__name__ for _, e in out] == ["TriggerDelivered", "TaskCreated"]
    _fold(state, out)
    [task] = state.tasks.values()
    assert task.description.startswith("Fix octo-org/hello-world")
    assert state.triggers["trg_1"].deliveries[0].task_id == task.task_id


def test_a_delivery_with_a_missing_field_lists_it() -> None:
    state = _state()
    out = rules.deliver(state, rules.Delivery(trigger_id="trg_1", event="pull_request",
                                              payload=payload("pull_request.opened")),
                        Context())
    e = out[0][1]
    assert isinstance(e, ev.TriggerDelivered)
    assert (e.outcome, e.missing) == ("started", ["payload.comment.body"])


def test_saving_keeps_the_url_and_checks_the_fields() -> None:
    state = _state()
    f = ev.TriggerFields(name="x", worker_id="w1", workdir="/w", prompt="p",
                         events=["pull_request.opened", "pull_request.opened"])
    [(_, e)] = rules.save(state, rules.Save(fields=f, trigger_id="trg_1", hook_id="new",
                                            has_secret=False), Context())
    assert isinstance(e, ev.TriggerSet)
    assert (e.spec.hook_id, e.spec.events, e.spec.has_secret) == ("H" * 32,
                                                                 ["pull_request.opened"], False)
    for bad in ({"prompt": " "}, {"events": ["Pull Request"]}, {"per_minute": 0},
                {"workdir": ""}):
        g = ev.TriggerFields(**{"name": "x", "worker_id": "w1", "workdir": "/w",
                                "prompt": "p", **bad})
        with pytest.raises(CommandRejected):
            rules.save(state, rules.Save(fields=g, trigger_id="trg_1", has_secret=False),
                       Context())
    with pytest.raises(CommandRejected, match="no worker"):
        rules.save(state, rules.Save(fields=ev.TriggerFields(
            name="x", worker_id="w9", workdir="/w", prompt="p"), trigger_id="trg_2",
            has_secret=False, new=True), Context())


def test_a_hook_id_is_compared_with_every_trigger_in_constant_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No timing oracle on the URL: a hit and a miss both compare with every trigger's id,
    each with ``hmac.compare_digest``, never ``==`` or a dict lookup that stops early."""
    from codey_server.triggers import routes

    state = _state()
    for n in (2, 3):
        f = ev.TriggerFields(name=f"t{n}", worker_id="w1", workdir="/w", prompt="p")
        for _, e in rules.save(state, rules.Save(fields=f, trigger_id=f"trg_{n}",
                                                 hook_id=f"{n}" * 32, has_secret=False,
                                                 new=True), Context()):
            apply(state, ev.Envelope(seq=state.seq + 1, ts=1.0, session_id=None, event=e))
    compared: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(routes.hmac, "compare_digest", counting)
    found = routes._find(state, "H" * 32)
    assert found is not None and found.spec.trigger_id == "trg_1"
    assert len(compared) == 3
    compared.clear()
    assert routes._find(state, "H" * 31 + "X") is None
    assert len(compared) == 3
