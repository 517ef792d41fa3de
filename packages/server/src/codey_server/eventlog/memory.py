"""``MemoryEventLog``: the log in process memory, for tests and throwaway servers."""

from __future__ import annotations

import bisect
import time
from collections.abc import Collection, Sequence

from codey_protocol.codec import encode
from codey_protocol.events import Envelope, Event
from codey_protocol.upcasting import current_json_many
from codey_server.errors import AppendConflict, LogClosed
from codey_server.eventlog.base import (
    SNAPSHOTS_KEPT,
    EventLog,
    Fence,
    _envelope,
    _tag,
    no_leases,
    sessions_of,
)

__all__ = ["MemoryEventLog"]


class MemoryEventLog(EventLog):
    """An in-process log for tests and throwaway servers; nothing survives ``close()``."""

    def __init__(self) -> None:
        super().__init__()
        self._envelopes: list[Envelope] = []
        self._raw: list[bytes] = []
        self._snapshots: list[tuple[int, bytes]] = []
        self._trimmed_through = 0
        self._heads: dict[str, int] = {}  # each session's last stored seq

    async def open(self) -> None:
        self._closed = False

    async def close(self) -> None:
        # Appends complete synchronously, so nothing is in flight.
        self._closed = True
        self._end_subscribers()

    async def append(self, events: Sequence[tuple[str | None, Event]], *,
                     fence: Fence | None = None,
                     expected: int | None = None) -> list[Envelope]:
        if self._closed:
            raise LogClosed("the event log is closed")
        if fence is not None:
            raise no_leases(fence)
        if not events:
            return []
        if expected is not None:
            for sid in sessions_of(events):
                head = self._heads.get(sid, 0)
                if head > expected:
                    raise AppendConflict(sid, head, expected)
        seq = self._last_seq
        ts = time.time()
        envs: list[Envelope] = []
        raws: list[bytes] = []
        for session_id, event in events:
            tag = _tag(event)  # refuse what the SQLite log would refuse
            seq += 1
            env = _envelope(seq, ts, session_id, event, tag)
            raws.append(encode(env))
            envs.append(env)
        self._envelopes.extend(envs)
        self._raw.extend(raws)
        for env in envs:
            if env.session_id is not None:
                self._heads[env.session_id] = env.seq
        self._publish(envs)
        return envs

    def _slice(self, after_seq: int, limit: int | None) -> slice:
        # seqs are ascending (with holes after a trim): find the first one after after_seq
        start = bisect.bisect_right(self._envelopes, after_seq, key=lambda env: env.seq)
        return slice(start, None if limit is None or limit < 0 else start + limit)

    async def read(self, after_seq: int, limit: int | None = None) -> list[Envelope]:
        return self._envelopes[self._slice(after_seq, limit)]

    async def read_session(self, session_id: str) -> list[Envelope]:
        return [env for env in self._envelopes if env.session_id == session_id]

    async def read_raw(self, after_seq: int, limit: int) -> list[bytes]:
        return current_json_many(self._raw[self._slice(after_seq, limit)])

    async def read_session_stored(self, session_id: str) -> list[bytes]:
        return [raw for env, raw in zip(self._envelopes, self._raw, strict=True)
                if env.session_id == session_id]

    async def save_snapshot(self, seq: int, data: bytes) -> None:
        if self._closed:
            raise LogClosed("the event log is closed")
        kept = {s: d for s, d in self._snapshots if s != seq}
        kept[seq] = bytes(data)
        self._snapshots = sorted(kept.items())[-SNAPSHOTS_KEPT:]

    async def latest_snapshot(self) -> tuple[int, bytes] | None:
        return self._snapshots[-1] if self._snapshots else None

    async def first_seq(self) -> int:
        if self._trimmed_through:
            return self._trimmed_through + 1
        return self._envelopes[0].seq if self._envelopes else 0

    async def trim(self, keep: Collection[str], through_seq: int) -> int:
        if self._closed:
            raise LogClosed("the event log is closed")
        kept = set(keep)
        pairs = [(env, raw) for env, raw in zip(self._envelopes, self._raw, strict=True)
                 if env.seq > through_seq or env.session_id is None or env.session_id in kept]
        gone = len(self._envelopes) - len(pairs)
        if gone:
            self._trimmed_through = max(self._trimmed_through, through_seq)
        self._envelopes = [env for env, _ in pairs]
        self._raw = [raw for _, raw in pairs]
        self._heads = {env.session_id: env.seq for env in self._envelopes
                       if env.session_id is not None}
        self._snapshots = [(s, d) for s, d in self._snapshots if s >= through_seq]
        return gone
