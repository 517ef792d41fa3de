"""Web terminals' decisions: open one, a browser attaching and leaving, its end.

Pure, ``(state, input, ctx) -> [(session_id, event)]``; :mod:`.service` runs them through
:meth:`~codey_server.core.engine.Engine.submit` and moves the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import State
from codey_server.core.rules import CommandRejected, Context, Decided

__all__ = ["Attach", "Close", "Detach", "Open", "attached", "closed", "detached", "opened"]


@dataclass(frozen=True)
class Open:
    worker_id: str
    workdir: str
    session_id: str | None
    by: str


def opened(state: State, o: Open, ctx: Context) -> Decided:
    """A terminal on a worker whose owner turned the terminal on, in an absolute folder."""
    worker = state.workers.get(o.worker_id)
    if worker is None or worker.revoked:
        raise CommandRejected("not_found", f"no worker {o.worker_id!r}")
    if not worker.capabilities.terminal:
        raise CommandRejected("forbidden", f"the web terminal is off on {worker.hostname}: "
                              "its owner enables it with \"terminal\": true in "
                              "worker-config.json")
    if not o.workdir.startswith("/"):
        raise CommandRejected("bad_request", "workdir must be an absolute path")
    if o.session_id is not None and o.session_id not in state.sessions:
        raise CommandRejected("not_found", f"no session {o.session_id!r}")
    return [(o.session_id, ev.TerminalCreated(terminal_id=ctx.new_id("term"),
                                              worker_id=o.worker_id, workdir=o.workdir,
                                              by=o.by))]


@dataclass(frozen=True)
class Close:
    terminal_id: str
    by: str


def closed(state: State, c: Close, ctx: Context) -> Decided:
    """The user closed it (nothing when it was closed already)."""
    t = state.terminals.get(c.terminal_id)
    if t is None:
        raise CommandRejected("not_found", f"no terminal {c.terminal_id!r}")
    if t.closed:
        return []
    return [(t.session_id, ev.TerminalClosed(terminal_id=c.terminal_id, reason="closed",
                                             by=c.by))]


@dataclass(frozen=True)
class Attach:
    terminal_id: str
    by: str


def attached(state: State, a: Attach, ctx: Context) -> Decided:
    t = state.terminals.get(a.terminal_id)
    if t is None:
        return []
    return [(t.session_id, ev.TerminalAttached(terminal_id=a.terminal_id, by=a.by))]


@dataclass(frozen=True)
class Detach:
    terminal_id: str
    by: str
    #: how the worker said the shell ended, when it did (None: the browser left, or the
    #: machine went away, and the shell goes on in tmux)
    ended: wk.TerminalEnded | None = None


def detached(state: State, d: Detach, ctx: Context) -> Decided:
    """A browser's view ended; a shell that ended with it closes the terminal."""
    t = state.terminals.get(d.terminal_id)
    if t is None:
        return []
    out: Decided = [(t.session_id, ev.TerminalDetached(terminal_id=d.terminal_id, by=d.by))]
    ended = d.ended
    if ended is not None and not ended.shell_alive and not t.closed:
        out.append((t.session_id, ev.TerminalClosed(
            terminal_id=d.terminal_id, reason=ended.code,
            by=ended.message[:200] if ended.code not in ("exited", "closed") else "")))
    return out
