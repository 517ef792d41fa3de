"""``codey_server.channels.chat``: commands, texts, cutting, button data — no network."""

from __future__ import annotations

import pytest

from codey_protocol import events as ev
from codey_protocol.state import Approval, Question, SessionInfo, State
from codey_server.channels import chat


def _session(sid: str = "ses_0123456789abcdef", **kw: object) -> SessionInfo:
    base: dict[str, object] = {"session_id": sid, "title": "Fix it", "worker_id": "w",
                               "workdir": "/p", "provider": "p", "model": "m"}
    return SessionInfo(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "name", "args", "rest"), [
    ("/sessions", "sessions", (), ""),
    ("/sessions@codey_bot", "sessions", (), ""),
    ("/STOP", "stop", (), ""),
    ("/start", "help", (), ""),
    ("/pair ab12-cd34", "pair", ("ab12-cd34",), ""),
    ("/use 0123", "use", ("0123",), ""),
    ("/new box /home/me/app fix the   tests\nplease", "new", ("box", "/home/me/app"),
     "fix the   tests\nplease"),
    ("  make it faster  ", "prompt", (), "make it faster"),
])
def test_parse(text: str, name: str, args: tuple[str, ...], rest: str) -> None:
    command = chat.parse(text)
    assert (command.name, command.args, command.text) == (name, args, rest)


@pytest.mark.parametrize(("text", "says"), [
    ("/pair", "usage: /pair CODE"),
    ("/use", "usage: /use"),
    ("/new box /p", "usage: /new"),
    ("/frobnicate", "unknown command /frobnicate"),
    ("   ", "/sessions"),
])
def test_bad_commands_say_why(text: str, says: str) -> None:
    command = chat.parse(text)
    assert command.name == "bad" and says in command.error


def test_button_data_round_trips_and_fits_telegram() -> None:
    for _, decision in chat.BUTTONS:
        data = chat.button_data("apr_0123456789abcdef0123", decision)
        assert len(data.encode()) <= 64
        assert chat.parse_button(data) == ("apr_0123456789abcdef0123", decision)
    for junk in ("", "a", "x:apr_1", "a:", "approve"):
        assert chat.parse_button(junk) is None


def test_cut_keeps_short_text_and_cuts_long_text_on_a_line_with_the_link() -> None:
    link = chat.session_link("https://codey.example/", "ses_1")
    assert link == "https://codey.example/#/session/ses_1"
    assert chat.cut("short", link) == "short"
    long = "\n".join(f"line {i:05d}" for i in range(1000))
    out = chat.cut(long, link)
    head, tail = out.split("\n…\n")
    assert len(head) <= chat.MAX_TEXT and long.startswith(head)
    assert head.endswith(("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"))
    assert tail == f"(cut: the whole text is at {link})"
    assert len(out) < 4096  # Telegram's limit
    one_word = "x" * 5000
    assert chat.cut(one_word, link).startswith("x" * chat.MAX_TEXT + "\n…")


def test_sessions_text_marks_the_current_one_and_hides_archived_and_sub_agents() -> None:
    state = State(sessions={
        "ses_aaaaaaaa11": _session("ses_aaaaaaaa11", title="old", updated_at=1.0),
        "ses_bbbbbbbb22": _session("ses_bbbbbbbb22", title="new", status="running",
                                   updated_at=2.0),
        "ses_cccccccc33": _session("ses_cccccccc33", title="gone", archived=True),
        "ses_dddddddd44": _session("ses_dddddddd44", title="child", parent_id="ses_aaaaaaaa11"),
    })
    text = chat.sessions_text(state, "ses_aaaaaaaa11")
    lines = text.splitlines()
    assert lines[:2] == ["  bbbbbbbb [running] new", "* aaaaaaaa [idle] old"]
    assert "gone" not in text and "child" not in text
    assert "No sessions yet" in chat.sessions_text(State(), None)


def test_find_session_by_id_or_unique_prefix() -> None:
    state = State(sessions={"ses_ab1": _session("ses_ab1"), "ses_ab2": _session("ses_ab2")})
    assert chat.find_session(state, "ses_ab1") is state.sessions["ses_ab1"]
    assert chat.find_session(state, "ab2") is state.sessions["ses_ab2"]
    assert chat.find_session(state, "ab") is None  # two match
    assert chat.find_session(state, "zz") is None


def test_approval_and_decision_texts() -> None:
    a = Approval(approval_id="a", item_id="i", kind="command", command=["rm", "-rf", "build"],
                 reason="cleans the build")
    s = _session()
    text = chat.approval_text(s, a)
    assert "Approval needed in “Fix it” (01234567): run" in text
    assert "$ rm -rf build" in text and "cleans the build" in text
    a.status = "approved"
    assert chat.decided_text(s, a).endswith("✅ approved")
    s.approved_prefixes.append(["rm", "-rf", "build"])
    assert chat.decided_text(s, a).endswith("✅ approved for the session")
    a.status = "rejected"
    assert chat.decided_text(s, a).endswith("❌ rejected")


def test_an_acp_agents_request_reads_as_its_reason() -> None:
    a = Approval(approval_id="a", item_id="i", kind="acp", command=["acp", "edit"],
                 reason="Write hello.txt")
    text = chat.approval_text(_session(), a)
    assert text.endswith(": the agent asks\nWrite hello.txt")
    assert "$" not in text


def test_question_text_lists_the_choices() -> None:
    q = Question(question_id="q", item_id="i", question="Which DB?", choices=["sqlite", "pg"])
    text = chat.question_text(_session(), q)
    assert "Which DB?" in text and "- sqlite\n- pg" in text


def test_last_answer_only_when_the_model_had_the_last_word() -> None:
    answer = ev.AssistantMessage(id="m", ts=0.0, text="done")
    s = _session(items=[ev.UserMessage(id="u", ts=0.0, text="go"), answer])
    assert chat.last_answer(s) is answer
    s.items.append(ev.Notice(id="n", ts=0.0, code="x", text="y"))  # notices don't count
    assert chat.last_answer(s) is answer
    s.items.append(ev.UserMessage(id="u2", ts=0.0, text="more"))
    assert chat.last_answer(s) is None
    s.items.append(ev.AssistantMessage(id="m2", ts=0.0, text="partial", streaming=True))
    assert chat.last_answer(s) is None


def test_a_delegation_to_another_folder_says_what_it_grants() -> None:
    a = Approval(approval_id="a", item_id="i", kind="delegate", path="/home/u",
                 reason="a developer sub-agent in /home/u, outside this session's folder "
                        "/home/u/app, able to change files there: tidy up")
    text = chat.approval_text(_session(), a)
    assert ": give a sub-agent another folder or machine\n/home/u\na developer" in text
