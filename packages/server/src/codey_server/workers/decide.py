"""Workers' decisions: pairing, presence, revocation and what a worker reports.

Each is pure, ``(state, input, ctx) -> [(session_id, event)]``, run through
:meth:`~codey_server.core.engine.Engine.submit` by the socket and pairing code, which only
load, decide and append. Secrets (pairing codes, credentials) never reach these: they stay in
:mod:`.pairing`, and the log gets only what a browser may see.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import State
from codey_server.core.fold import find_process
from codey_server.core.processes import LIVE, stopper
from codey_server.core.rules import CommandRejected, Context, Decided, Decider

__all__ = ["COMMANDS", "MAX_WORKER_NAME", "Disconnected", "Hello", "PairAnswer",
           "ProcessReport", "WorkspaceReport", "connected", "disconnected",
           "orphans_disconnected", "pair_expired", "pair_requested", "pair_resolved", "paired",
           "process_reported", "renamed", "restarted", "revoked", "workspace_changed"]

#: paths one workspace report may carry into the log
WORKSPACE_PATHS_MAX = 500


# pairing ---------------------------------------------------------------------------------------


def pair_requested(state: State, request: ev.WorkerPairRequested, ctx: Context) -> Decided:
    """A worker asked to pair (the request's public part; its code and secrets stay out)."""
    return [(None, request)]


def pair_expired(state: State, request_ids: Collection[str], ctx: Context) -> Decided:
    """Requests that lapsed (or lost their secrets in a restart), if still open."""
    return [(None, ev.WorkerPairResolved(request_id=r, outcome="expired"))
            for r in request_ids if r in state.pair_requests]


@dataclass(frozen=True)
class PairAnswer:
    request_id: str
    outcome: Literal["denied", "expired", "locked"]


def pair_resolved(state: State, answer: PairAnswer, ctx: Context) -> Decided:
    """A request denied by the user, locked after wrong codes, or expired."""
    if answer.request_id not in state.pair_requests:
        return []
    return [(None, ev.WorkerPairResolved(request_id=answer.request_id,
                                         outcome=answer.outcome))]


def paired(state: State, event: ev.WorkerPaired, ctx: Context) -> Decided:
    """The user approved a request with its code: the worker exists from now on."""
    if event.worker_id in state.workers:
        raise CommandRejected("conflict", f"worker {event.worker_id!r} is already paired")
    return [(None, event)]


def revoked(state: State, worker_id: str, ctx: Context) -> Decided:
    """The user revoked a worker: every server closes its socket and fails its waits when it
    folds this."""
    info = state.workers.get(worker_id)
    if info is None:
        raise CommandRejected("not_found", f"no worker {worker_id!r}")
    return [] if info.revoked else [(None, ev.WorkerRevoked(worker_id=worker_id))]


#: the longest name a machine may be given (it labels pickers and cards)
MAX_WORKER_NAME = 80


def renamed(state: State, c: cl.RenameWorker, ctx: Context) -> Decided:
    """The user names a machine (runs of white space become one space); "" gives it back its
    hostname. Nothing when the name is the one it has."""
    info = state.workers.get(c.worker_id)
    if info is None or info.revoked:
        raise CommandRejected("not_found", f"no worker {c.worker_id!r}")
    name = " ".join(c.name.split())
    if len(name) > MAX_WORKER_NAME:
        raise CommandRejected("bad_request", f"a machine's name is at most {MAX_WORKER_NAME} "
                                             f"characters (this one has {len(name)})")
    # control and format characters (a bidi override, a zero-width space) would make two
    # names that look alike differ, or a label lie about what follows it
    if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in name):
        raise CommandRejected("bad_request", "a machine's name must not contain control or "
                                             "invisible formatting characters")
    if name == info.hostname:
        name = ""  # its hostname again: it follows the host's from now on
    return [] if name == info.name else [(None, ev.WorkerRenamed(worker_id=c.worker_id,
                                                                  name=name))]


# presence --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """A worker that proved itself and said hello on a socket of ``replica``."""

    worker_id: str
    hello: wk.Hello
    replica: str = ""


def connected(state: State, h: Hello, ctx: Context) -> Decided:
    info = state.workers.get(h.worker_id)
    if info is None or info.revoked:
        return []  # revoked during its handshake: the revocation closes its socket
    m = h.hello
    return [(None, ev.WorkerConnected(worker_id=h.worker_id, hostname=m.hostname, os=m.os,
                                      worker_version=m.worker_version,
                                      capabilities=m.capabilities, replica=h.replica))]


@dataclass(frozen=True)
class Disconnected:
    worker_id: str
    reason: str
    replica: str = ""


def disconnected(state: State, d: Disconnected, ctx: Context) -> Decided:
    """The worker's socket on ``replica`` closed (a newer one elsewhere keeps it connected:
    the fold ignores a disconnect from another replica than the current one)."""
    if d.worker_id not in state.workers:
        return []
    return [(None, ev.WorkerDisconnected(worker_id=d.worker_id, reason=d.reason[:200],
                                         replica=d.replica))]


def restarted(state: State, replica: str, ctx: Context) -> Decided:
    """At a server's start: no socket survived it, so its workers still shown as connected
    are not (they come back through a new hello). Among replicas, only its own."""
    return [(None, ev.WorkerDisconnected(worker_id=w.worker_id, reason="server restarted",
                                         replica=replica))
            for w in state.workers.values() if w.connected and w.replica == replica]


def orphans_disconnected(state: State, live: Collection[str], ctx: Context) -> Decided:
    """Among replicas: the workers whose socket was on a replica that is no longer alive."""
    return [(None, ev.WorkerDisconnected(worker_id=w.worker_id, reason="its server stopped",
                                         replica=w.replica))
            for w in state.workers.values()
            if w.connected and w.replica and w.replica not in live]


# what a worker reports -------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkspaceReport:
    worker_id: str
    report: wk.WorkspaceChanged


def workspace_changed(state: State, r: WorkspaceReport, ctx: Context) -> Decided:
    """Files changed under a session's workdir — only for a session that runs on that worker:
    one worker must not write into another's sessions."""
    session = state.sessions.get(r.report.session_id)
    if session is None or session.worker_id != r.worker_id or not r.report.paths:
        return []
    return [(session.session_id,
             ev.SessionWorkspaceChanged(paths=r.report.paths[:WORKSPACE_PATHS_MAX]))]


#: ports one report may carry into the log
PORTS_MAX = 32


@dataclass(frozen=True)
class ProcessReport:
    """What a worker pushed about a ``live`` process: the ports it listens on inside its own
    network, or its end."""

    worker_id: str
    report: wk.ProcessPorts | wk.ProcessExited


def process_reported(state: State, r: ProcessReport, ctx: Context) -> Decided:
    """A live process's ports (when they differ from the state's) or its end (the first end
    wins) — only for a process of that worker, still running: one worker must not write into
    another's sessions, and an end someone else recorded first stays."""
    session = state.sessions.get(r.report.session_id)
    p = find_process(session, r.report.process_id) if session is not None else None
    if session is None or p is None or p.worker_id != r.worker_id or p.status not in LIVE:
        return []
    if isinstance(r.report, wk.ProcessPorts):
        ports = sorted({n for n in r.report.ports if 0 < n < 65536})[:PORTS_MAX]
        return [] if ports == p.ports else [
            (session.session_id, ev.ProcessListening(process_id=p.process_id, ports=ports))]
    return [(session.session_id, ev.ProcessEnded(
        process_id=p.process_id, exit_code=r.report.exit_code, signal=r.report.signal,
        stopped_by=stopper(r.report.stopped_by, p.stop_by)))]


COMMANDS: Mapping[type[Any], Decider] = {
    cl.RenameWorker: renamed,
}
