"""A session's processes between the model's calls: stopping them when someone asks (the Stop
button, an interrupt, a close: ``process_stop_requested``), and learning which ones are gone
after their worker (re)connects.

The decisions here are pure; :class:`~codey_server.agent.service.AgentService` does the I/O —
it sends the worker ``exec_kill`` for each process asked to stop, and ``exec_list`` for each
session with live processes when the worker connects — and submits what came back:

* :func:`stopped`: the kill's answer → the process's last output and its end (the stopper is
  whoever asked: ``user``, ``interrupt``, ``close``); ``process_gone`` → ended all the same
  (a detach may have stopped it first).
* :func:`listed`: the worker's list → every live process it no longer knows is ``gone`` (its
  worker restarted), every one it lists as ended has ended. A process still ``stopping`` is
  killed again: a stop asked while the worker was away is not forgotten.
* :func:`forwarded`: the answer to the ``exec_forward`` of a port the user asked to reach
  (``process_forward_requested``) → open at its address, or failed with the worker's reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import SessionInfo, SessionProcess, State
from codey_server.agent.tools.exec import process_end
from codey_server.core.fold import find_process
from codey_server.core.processes import LIVE, stopper
from codey_server.core.rules import Context, Decided

__all__ = ["LIVE", "Forwarded", "Listed", "Stopped", "forwarded", "listed",
           "live_processes", "stopped"]



@dataclass(frozen=True, slots=True)
class Stopped:
    """The answer to the ``exec_kill`` of a process asked to stop (None: ``process_gone``)."""

    session_id: str
    process_id: str
    outcome: wk.ExecOutput | None


@dataclass(frozen=True, slots=True)
class Listed:
    """The worker's ``exec_list`` for a session, after it (re)connected."""

    session_id: str
    worker_id: str
    listing: wk.ExecProcesses


def live_processes(session: SessionInfo, worker_id: str | None = None) -> list[SessionProcess]:
    """The session's processes that may still run (on ``worker_id``, when given)."""
    return [p for p in session.processes
            if p.status in LIVE and (worker_id is None or p.worker_id == worker_id)]


def stopped(state: State, i: Stopped, ctx: Context) -> Decided:
    s = state.sessions.get(i.session_id)
    p = find_process(s, i.process_id) if s is not None else None
    if s is None or p is None or p.status not in LIVE:
        return []  # ended meanwhile (the model's own kill, a reconcile): the first end stays
    if i.outcome is None:
        return [(s.session_id, ev.ProcessEnded(process_id=p.process_id,
                                               stopped_by=p.stop_by or "gone"))]
    if i.outcome.running:  # (a kill answers once it has ended; a stray answer only reads)
        return [(s.session_id, ev.ProcessOutput(process_id=p.process_id,
                                                output_delta=i.outcome.output))] \
            if i.outcome.output else []
    return [(s.session_id, process_end(i.outcome, p.stop_by))]


def listed(state: State, i: Listed, ctx: Context) -> Decided:
    s = state.sessions.get(i.session_id)
    if s is None:
        return []
    known = {info.process_id: info for info in i.listing.processes}
    out: Decided = []
    for p in live_processes(s, i.worker_id):
        info = known.get(p.process_id)
        if info is None:  # its worker restarted (or dropped the session): it is gone
            by: ev.ProcessStopper = p.stop_by if p.status == "stopping" else "gone"
            out.append((s.session_id, ev.ProcessEnded(process_id=p.process_id, stopped_by=by)))
        elif not info.running:
            out.append((s.session_id, ev.ProcessEnded(
                process_id=p.process_id, exit_code=info.exit_code, signal=info.signal,
                stopped_by=stopper(info.stopped_by, p.stop_by))))
    return out


@dataclass(frozen=True, slots=True)
class Forwarded:
    """The answer to an ``exec_forward``: where the port is reachable, or why not."""

    session_id: str
    process_id: str
    port: int
    outcome: wk.PortForwarded | None
    error: str = ""


def forwarded(state: State, i: Forwarded, ctx: Context) -> Decided:
    s = state.sessions.get(i.session_id)
    p = find_process(s, i.process_id) if s is not None else None
    if s is None or p is None or not any(f.port == i.port and f.status == "opening"
                                         for f in p.forwards):
        return []  # ended meanwhile (its forwards closed with it), or answered already
    if i.outcome is None:
        return [(s.session_id, ev.ProcessForwarded(process_id=p.process_id, port=i.port,
                                                   error=i.error or "it could not be opened"))]
    return [(s.session_id, ev.ProcessForwarded(
        process_id=p.process_id, port=i.port,
        address=f"{i.outcome.host}:{i.outcome.host_port}"))]
