"""Worker pairing and presence: the events this feature folds into the state (pure, in place; see
:mod:`codey_server.core.fold` for what every fold handler must keep to)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codey_protocol import events as ev
from codey_protocol.state import PairRequestInfo, State, WorkerInfo
from codey_server.core.rules import FoldHandler

__all__ = ["FOLD"]


def _pair_requested(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerPairRequested)
    state.pair_requests[e.request_id] = PairRequestInfo(
        request_id=e.request_id, hostname=e.hostname, os=e.os, python_version=e.python_version,
        worker_version=e.worker_version, roots=list(e.roots), fingerprint=e.fingerprint,
        requested_at=env.ts, expires_at=e.expires_at,
    )


def _pair_resolved(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerPairResolved)
    state.pair_requests.pop(e.request_id, None)


def _paired(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerPaired)
    state.pair_requests.pop(e.request_id, None)
    state.workers[e.worker_id] = WorkerInfo(
        worker_id=e.worker_id, hostname=e.hostname, os=e.os, python_version=e.python_version,
        worker_version=e.worker_version, roots=list(e.roots), paired_at=env.ts,
        fingerprint=e.fingerprint,
    )


def _renamed(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerRenamed)
    w = state.workers.get(e.worker_id)
    if w is not None:
        w.name = e.name


def _revoked(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerRevoked)
    w = state.workers.get(e.worker_id)
    if w is not None:
        w.revoked = True
        w.connected = False
        w.last_seen = env.ts


def _connected(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerConnected)
    w = state.workers.get(e.worker_id)
    if w is None:
        return
    w.connected = True
    w.hostname = e.hostname
    w.os = e.os
    w.worker_version = e.worker_version
    w.capabilities = e.capabilities
    w.replica = e.replica
    w.last_seen = env.ts


def _disconnected(state: State, env: ev.Envelope) -> None:
    e = env.event
    assert isinstance(e, ev.WorkerDisconnected)
    w = state.workers.get(e.worker_id)
    if w is not None and not (e.replica and w.replica and e.replica != w.replica):
        w.connected = False
        w.last_seen = env.ts


FOLD: Mapping[type[Any], FoldHandler] = {
    ev.WorkerPairRequested: _pair_requested,
    ev.WorkerPairResolved: _pair_resolved,
    ev.WorkerPaired: _paired,
    ev.WorkerRevoked: _revoked,
    ev.WorkerRenamed: _renamed,
    ev.WorkerConnected: _connected,
    ev.WorkerDisconnected: _disconnected,
}
