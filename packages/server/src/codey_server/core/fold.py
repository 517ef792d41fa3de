"""The core's part of the fold: a session's life (created, renamed, its settings, archived,
forked, moved, deleted, its status) and project memory; and what every feature's fold keeps to.

What happens inside a session's turns (its items, plan, approvals, actions, processes, usage,
questions, compaction) is the agent's part (``codey_server.agent.fold``); each feature folds
its own events the same way (``<feature>/fold.py``).

The whole fold is ``apply(state, envelope) -> state`` (:class:`codey_server.core.rules.Rules`,
composed from each feature plugin's table in ``codey_server.features.PLUGINS``): one function for
start-up replay and live updates, with no I/O and no clock — everything it needs is in the
envelope (``ts`` included), so the same log always folds to the same state. The web client's
store (``web/store.js``) is the same fold in JavaScript; tests replay logs through both and
compare.

Every handler here and in the features' ``fold.py`` keeps to what follows.

**It is not pure: it mutates.** For speed ``apply`` updates ``state`` in place and returns the
same object — replaying a million events must not copy the state a million times. What
callers must know:

* The engine keeps ONE ``State`` for its life (``Engine.state``). Sessions, workers, items,
  approvals and a session's ``items``/``approvals``/``pending_actions`` containers are
  changed in place by later events, never swapped (a session or worker object is created once,
  by its creation or pairing event). So a reference to one taken before an ``await`` shows,
  after it, everything folded meanwhile. (``plan``, ``changed_paths`` and the ``auth`` and
  ``rate_limits`` entries are replaced whole: read those through their owner.) Code that
  keeps such a reference across an ``await`` relies on this (the agent's turns do not: a turn
  machine is handed the state at each step). A fold that returned new objects would leave
  such code reading stale state; change that code before changing this.
* Code that needs a value as of one moment reads it before its next ``await``, or keeps a
  copy (:func:`copy_state`; encoding the state is a copy too, and the loop thread sees one
  consistent state between awaits).
* The fold does not change the event: an appended item is stored as a copy (later updates
  change the stored item in place, and the envelope may still be encoded). Values taken from
  an update are stored as they are, and nothing changes them in place afterwards.
* Only the engine calls ``apply`` on its state, in seq order; tests and tools fold their own.

Unknown references (an update for an item that does not exist) are ignored: the fold never
raises on a well-formed event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from codey_protocol import events as ev
from codey_protocol.state import (
    BUSY_STATUSES,
    MAX_CHANGED_PATHS,
    MODEL_CHANGED,
    WORKING_STATUSES,
    ProjectMemory,
    SessionInfo,
    SessionProcess,
    State,
    memory_key,
)
from codey_protocol.worker import SandboxMode
from codey_server.core import goals, rewind
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD", "MAX_CHANGED_PATHS", "copy_state", "find_item", "find_process",
           "model_change_words", "session_of"]


def copy_state(state: State) -> State:
    """A deep copy (through the codec, which is the fastest deep copy for structs)."""
    return msgspec.json.decode(msgspec.json.encode(state), type=State)


def find_item(session: SessionInfo, item_id: str) -> ev.Item | None:
    """The item with ``item_id``; searched from the end, where updates nearly always land."""
    items = session.items
    for i in range(len(items) - 1, -1, -1):
        if items[i].id == item_id:
            return items[i]
    return None


def find_process(session: SessionInfo, process_id: str) -> SessionProcess | None:
    """The session's process ``process_id`` (the ``exec`` tool's; folded by the agent)."""
    for p in session.processes:
        if p.process_id == process_id:
            return p
    return None


# ---------------------------------------------------------------------------------------------
# sessions


def session_of(state: State, env: ev.Envelope) -> SessionInfo | None:
    """The session ``env`` is for (None: none, or no longer there), its last activity moved to
    the event's time: every handler of a session's event starts here."""
    if env.session_id is None:
        return None
    s = state.sessions.get(env.session_id)
    if s is not None:
        s.updated_at = env.ts
    return s


def _session_created(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionCreated)
    if env.session_id is None:
        return
    # ``none``: created before the sandbox existed. It runs sandboxed now, without the
    # network, as a new session does (issue 36: that default is right, and the upgrade's
    # notice tells the user); its event keeps saying how it ran then
    sandbox: SandboxMode = "workspace-write" if e.sandbox == "none" else e.sandbox
    network = False if e.sandbox == "none" else e.network
    state.sessions[env.session_id] = SessionInfo(
        session_id=env.session_id, title=e.title, worker_id=e.worker_id, workdir=e.workdir,
        provider=e.provider, model=e.model, policy=e.policy, created_at=env.ts,
        updated_at=env.ts, plan_mode=e.plan_mode, parent_id=e.parent_id,
        parent_item=e.parent_item, role=e.role, read_only=e.read_only, turn_cap=e.turn_cap,
        agent=e.agent, sandbox=sandbox, network=network,
        worktree=msgspec.structs.replace(e.worktree) if e.worktree is not None else None,
    )


def _status(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionStatusChanged)
    s = session_of(state, env)
    if s is not None:
        s.status = e.status
        s.status_reason = e.reason
        if e.status == "running":
            s.parked_on = None  # (a parked session's turn goes on)
        # the session's own working time, turn by turn (not its last activity, which a
        # rename or a memory edit moves)
        if e.status in BUSY_STATUSES:
            if s.busy_since is None:
                s.busy_since = env.ts
        elif s.busy_since is not None:
            s.busy_seconds += max(0.0, env.ts - s.busy_since)
            s.busy_since = None
        if e.status == "running":
            s.budget_stop = None  # running again: no longer stopped at a budget


def _title(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionTitleChanged)
    s = session_of(state, env)
    if s is not None:
        s.title = e.title


def _policy(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionPolicyChanged)
    s = session_of(state, env)
    if s is not None:
        s.policy = e.policy


def _sandbox(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionSandboxChanged)
    s = session_of(state, env)
    if s is not None:
        s.sandbox, s.network = e.sandbox, e.network


def _model(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionModelChanged)
    s = session_of(state, env)
    if s is not None:
        s.provider, s.model, s.effort = e.provider, e.model, e.effort
        # a mark in the transcript where it changed (the model never reads a notice); its id
        # from the event's seq, so both folds, and every replay, make the same item
        s.items.append(ev.Notice(id=f"itm_model_{env.seq}", ts=env.ts, code=MODEL_CHANGED,
                                 text=model_change_words(e, s.status in WORKING_STATUSES)))


def model_change_words(e: ev.SessionModelChanged, mid_turn: bool) -> str:
    """The model-change mark's text: "Model: openai / gpt-5 · effort high — why", and "(from
    the next turn)" when a turn was under way (it keeps the model it started with). The
    browser's fold writes the same words (``web/store.js``)."""
    words = f"Model: {e.provider} / {e.model}"
    if e.effort:
        words += f" · effort {e.effort}"
    if mid_turn:
        words += " (from the next turn)"
    if e.reason:
        words += f" — {e.reason}"
    return words


def _workspace_changed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionWorkspaceChanged)
    s = session_of(state, env)
    if s is None:
        return
    new = list(dict.fromkeys(e.paths))
    seen = set(new)
    kept = [p for p in s.changed_paths if p not in seen]
    s.changed_paths = (kept + new)[-MAX_CHANGED_PATHS:]


def _archived(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionArchived)
    s = session_of(state, env)
    if s is not None:
        s.archived = e.archived


def _deleted(state: State, env: ev.Envelope) -> None:
    if env.session_id is not None:
        state.sessions.pop(env.session_id, None)


def _kept_by_fork(item: ev.Item) -> bool:
    """Finished items only: a fork starts idle, with nothing half done."""
    if isinstance(item, ev.ToolCall):
        return item.result is not None
    if isinstance(item, ev.UserMessage):
        return not item.queued
    if isinstance(item, (ev.AssistantMessage, ev.Reasoning)):
        return not item.streaming
    return True


def _forked(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionForked)
    src = state.sessions.get(e.from_session)
    if src is None or env.session_id is None or env.session_id in state.sessions:
        return
    items: list[ev.Item] = []
    for item in src.items:
        if _kept_by_fork(item):
            items.append(msgspec.structs.replace(item))
        if item.id == e.until_item:
            break
    # a fork into a worktree of its own starts in the repository, as a new session does
    worktree = msgspec.structs.replace(e.worktree) if e.worktree is not None else None
    state.sessions[env.session_id] = SessionInfo(
        session_id=env.session_id, title=e.title, worker_id=src.worker_id,
        workdir=worktree.repo if worktree is not None else src.workdir, provider=src.provider,
        model=src.model, effort=src.effort, policy=src.policy, created_at=env.ts,
        updated_at=env.ts, items=items, forked_from=e.from_session, context=src.context,
        sandbox=src.sandbox, network=src.network, worktree=worktree)


def _moved(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.SessionMoved)
    s = session_of(state, env)
    if s is not None:
        s.worker_id = e.worker_id
        if e.workdir:  # moved with its files: a folder of its own there (no worktree)
            s.workdir = e.workdir
            s.worktree = None
            s.updated_at = env.ts


def _memory(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.MemoryUpdated)
    state.memories[memory_key(e.worker_id, e.workdir)] = ProjectMemory(
        worker_id=e.worker_id, workdir=e.workdir, text=e.text, updated_at=env.ts)


#: the events the core folds (a session's life, project memory); each feature folds its own
#: (``agent/fold.py``: what happens in a session's turns; ``board/fold.py``, …)
FOLD: Mapping[type[Any], FoldHandler] = {
    ev.SessionCreated: _session_created,
    ev.SessionStatusChanged: _status,
    ev.SessionTitleChanged: _title,
    ev.SessionPolicyChanged: _policy,
    ev.SessionSandboxChanged: _sandbox,
    ev.SessionModelChanged: _model,
    ev.SessionWorkspaceChanged: _workspace_changed,
    ev.SessionArchived: _archived,
    ev.SessionDeleted: _deleted,
    ev.SessionForked: _forked,
    ev.SessionMoved: _moved,
    ev.MemoryUpdated: _memory,
    **goals.FOLD,
    **rewind.FOLD,
}
