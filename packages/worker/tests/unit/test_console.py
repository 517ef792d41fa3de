"""The worker's terminal lines, rendered exactly."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from rich.console import Console

from codey_worker.console import WorkerConsole


def render(call: Callable[[WorkerConsole], None], *, terminal: bool = False) -> str:
    out = io.StringIO()
    call(WorkerConsole(Console(file=out, width=80, force_terminal=terminal)))
    return out.getvalue()


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda c: c.paired("wrk_1234"), "paired as wrk_1234\n"),
        (lambda c: c.connected("http://127.0.0.1:8600"), "connected to http://127.0.0.1:8600\n"),
        (lambda c: c.reconnecting(2.345), "reconnecting in 2.3 s…\n"),
        (lambda c: c.reconnecting(0.5, "closed with code 1011"),
         "reconnecting in 0.5 s… (closed with code 1011)\n"),
        (lambda c: c.running("ses_0123456789", ["git", "status"]),
         "[ses_0123] running: git status\n"),
        (lambda c: c.running("s1", ["sh", "-c", "echo hi; ls"]),
         "[s1] running: sh -c 'echo hi; ls'\n"),
        (lambda c: c.patch("ses_0123456789", 2), "[ses_0123] patch: 2 files\n"),
        (lambda c: c.patch("s1", 1), "[s1] patch: 1 file\n"),
        (lambda c: c.error("denied_command: no\nmore", "s1"), "[s1] error: denied_command: no\n"),
        (lambda c: c.error("no server"), "error: no server\n"),
        (lambda c: c.sandbox("bubblewrap 0.8.0", True), "sandbox: bubblewrap 0.8.0\n"),
        (lambda c: c.sandbox("none (bwrap (bubblewrap) is not installed); commands are "
                             "refused unless a session runs them with full access", False),
         "sandbox: none (bwrap (bubblewrap) is not installed); commands are refused unless a "
         "session runs them with full access\n"),
        (lambda c: c.unlinked(),
         "this machine was unlinked; run codey-worker unpair and pair again\n"),
    ],
)
def test_lines(call: Callable[[WorkerConsole], None], expected: str) -> None:
    assert render(call) == expected
    # without rich (not a terminal): the very same text
    plain = io.StringIO()
    call(WorkerConsole(out=plain))
    assert plain.getvalue() == expected


def test_pair_line_is_one_line_even_when_longer_than_the_terminal() -> None:
    server = "http://codey.example.internal:8600/with/a/long/prefix/to/pass/eighty/columns"
    text = render(lambda c: c.pair_url(server, "BCDF-GHJK"))
    assert text == f"Open {server}/#/pair/BCDF-GHJK to link this machine\n"


def test_long_commands_are_shortened() -> None:
    text = render(lambda c: c.running("s1", ["echo", "x" * 300]))
    assert text.startswith("[s1] running: echo xxx") and text.endswith("…\n")
    assert len(text) == len("[s1] running: ") + 120 + 1


def test_colours_only_on_a_terminal() -> None:
    assert "\x1b[" not in render(lambda c: c.error("bad", "s1"))
    coloured = render(lambda c: c.error("bad", "s1"), terminal=True)
    assert "\x1b[" in coloured and "error: " in coloured
