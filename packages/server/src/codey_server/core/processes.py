"""What every feature needs to say about a session's processes (the ``exec`` tool's): which
statuses may still run, and who stopped one, in the session's words."""

from __future__ import annotations

from codey_protocol import events as ev

__all__ = ["LIVE", "stopper"]

#: the statuses of a process that may still run on its worker
LIVE = ("running", "stopping")


def stopper(stopped_by: str, session_process_stop_by: str = "") -> ev.ProcessStopper:
    """Who stopped a process, in the session's words: a kill the server sent because someone
    asked (the Stop button, an interrupt, a close) is theirs; otherwise the worker's."""
    if session_process_stop_by and stopped_by in ("exec_kill", "detach", "cancel"):
        return session_process_stop_by  # type: ignore[return-value]
    if stopped_by in ("", "exec_kill", "timeout", "cancel", "detach", "worker_exit"):
        return stopped_by  # type: ignore[return-value]
    return "gone"
