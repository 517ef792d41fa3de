"""What the worker prints: a few short lines, nothing else (design §5).

Every line is printed whole, never wrapped (``soft_wrap``), so a test or a script reading the
worker's output can match it; colours only appear on a real terminal. The same lines also go to
``forward`` when it is set (the connection sends them to the server, whose worker panel shows
the last ones).

A line is a few ``(text, style)`` parts. On a terminal they are printed by ``rich`` (colours);
anywhere else — a log file, a pipe, a service manager — as plain text, with ``rich`` never
imported: the same characters rich would print there, and about 2 MiB less in an idle
worker (``test_console.py`` holds the two to the same text).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, TextIO

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["WorkerConsole", "short_id"]

_MAX_COMMAND = 120

Level = Literal["debug", "info", "warning", "error"]
Part = tuple[str, str]  # (text, rich style; "" for none)


def short_id(session_id: str) -> str:
    """The first 8 characters of a session id: enough to tell sessions apart on screen."""
    return session_id[:8]


class WorkerConsole:
    """The worker's terminal lines. Pass a rich ``Console`` to capture them (tests), or
    ``out`` to have them written there as plain text; by default rich prints to a terminal
    and plain text goes anywhere else."""

    def __init__(self, console: Console | None = None, *, out: TextIO | None = None) -> None:
        if console is None and out is None and sys.stdout.isatty():
            from rich.console import Console

            console = Console(highlight=False)
        self.console = console
        self._out = out
        #: also given every line, plain, with its level (set by the connection)
        self.forward: Callable[[Level, str], None] | None = None

    def _print(self, parts: Sequence[Part], level: Level = "info") -> None:
        plain = "".join(text for text, _ in parts)
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text.assemble(*parts), soft_wrap=True, highlight=False)
        else:
            out = self._out or sys.stdout
            out.write(plain + "\n")
            out.flush()
        if self.forward is not None:
            self.forward(level, plain)

    def _session_line(self, session_id: str, label: str, body: str, style: str,
                      level: Level = "info") -> None:
        self._print([(f"[{short_id(session_id)}] ", "dim"), (f"{label}: ", style), (body, "")],
                    level)

    def pair_url(self, server: str, code: str) -> None:
        """``Open {server}/#/pair/{code} to link this machine`` — the one pairing line."""
        self._print([(f"Open {server}/#/pair/{code} to link this machine", "")])

    def code_expired(self) -> None:
        self._print([("The pairing code expired; here is a new one.", "yellow")])

    def pairing_refused(self, status: str) -> None:
        reason = "was denied" if status == "denied" else "is locked after too many wrong tries"
        self._print([(f"Pairing {reason}; run codey-worker again to start over.", "red")])

    def paired(self, worker_id: str) -> None:
        self._print([("paired as ", "green"), (worker_id, "")])

    def connected(self, server: str) -> None:
        self._print([("connected to ", "green"), (server, "")])

    def reconnecting(self, delay_s: float, reason: str | None = None) -> None:
        suffix = f" ({reason})" if reason else ""
        self._print([(f"reconnecting in {delay_s:.1f} s…{suffix}", "yellow")])

    def running(self, session_id: str, argv: Sequence[str]) -> None:
        command = shlex.join(argv)
        if len(command) > _MAX_COMMAND:
            command = command[: _MAX_COMMAND - 1] + "…"
        self._session_line(session_id, "running", command, "cyan")

    def patch(self, session_id: str, files: int) -> None:
        self._session_line(session_id, "patch", f"{files} file{'' if files == 1 else 's'}",
                           "cyan")

    def attached(self, session_id: str, workdir: str) -> None:
        self._session_line(session_id, "attached", workdir, "cyan")

    def sandbox(self, description: str, available: bool) -> None:
        """``sandbox: bubblewrap 0.8.0`` at start (yellow when there is none)."""
        self._print([("sandbox: ", "green" if available else "yellow"), (description, "")],
                    "info" if available else "warning")

    def error(self, message: str, session_id: str | None = None) -> None:
        """``[session] error: …``, or ``error: …`` when no session is concerned."""
        first = message.strip().splitlines()[0] if message.strip() else "unknown error"
        if session_id:
            self._session_line(session_id, "error", first, "red", "error")
        else:
            self._print([("error: ", "red"), (first, "")], "error")

    def unlinked(self) -> None:
        self._print([("this machine was unlinked; run codey-worker unpair and pair again",
                      "red")])

    def replaced(self) -> None:
        self._print([("another codey-worker with this identity connected; exiting", "yellow")])

    def stopping(self, reason: str) -> None:
        self._print([(f"stopping ({reason})", "dim")])

    def info(self, message: str) -> None:
        self._print([(message, "")])
