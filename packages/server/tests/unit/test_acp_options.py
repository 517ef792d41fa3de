"""``pick_option``: a Codey decision as the ACP agent's own option."""

from __future__ import annotations

from codey_protocol.worker import AcpOption
from codey_server.agent.acp import pick_option

OPTIONS = [AcpOption(option_id="a2", name="Always", kind="allow_always"),
           AcpOption(option_id="a1", name="Allow", kind="allow_once"),
           AcpOption(option_id="r1", name="Reject", kind="reject_once")]


def test_decisions_pick_the_matching_option() -> None:
    assert pick_option(OPTIONS, "approved") == "a1"
    assert pick_option(OPTIONS, "rejected") == "r1"
    assert pick_option(OPTIONS, "expired") == "r1"


def test_approved_for_the_session_is_never_the_agents_allow_always() -> None:
    # codex-acp stores allow_always as a permanent rule in ~/.codex: Codey remembers the
    # session's approvals itself and answers allow_once, whatever order the options come in
    assert pick_option(OPTIONS, "approved") == "a1"
    assert pick_option(list(reversed(OPTIONS)), "approved") == "a1"


def test_a_missing_kind_falls_back_or_refuses() -> None:
    only_always = [OPTIONS[0]]
    assert pick_option(only_always, "approved") == "a2"
    assert pick_option(only_always, "rejected") is None  # refused: "cancelled"
