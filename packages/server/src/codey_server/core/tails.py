"""Processes' live output for the browsers: a tail in memory, not in the event log.

The worker pushes what a ``live`` process writes (``process_tail``: coalesced, at most 16 KiB
each, ``reset`` when it is the whole tail); :class:`ProcessTails` keeps the newest
:data:`~codey_protocol.state.PROCESS_TAIL_KEPT` characters of each and hands them to every
browser socket that watches (:meth:`ProcessTails.watch`).

Why not events (docs/architecture.md, "A session's processes"): a dev server printing a line a
second would append 86,400 events a day to a session that stays open, which retention never
trims, every browser would replay them, and none of it is a decision anything is taken on —
it is a view of the worker's process, like the web terminal's screen, whose bytes the log
does not keep either. What the model read stays in the log (``process_output``), because it
is part of the conversation.

A reconnecting browser still gets what it missed: each socket, once its catch-up is sent,
gets every tail whole (``reset``), then what comes after; a slow socket's pending text is
merged per process and capped at the tail's size, so a browser that reads slowly gets the
newest tail later, never an unbounded queue. After a server restart the tails are empty
until the worker reconnects and sends each whole again.

Bounded: at most :data:`MAX_TAILS` tails (the least recently written go first), each at most
:data:`~codey_protocol.state.PROCESS_TAIL_KEPT` characters; a deleted session's go at once.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import PROCESS_TAIL_KEPT

__all__ = ["MAX_TAILS", "ProcessTails", "TailWatch"]

#: tails kept at once, across sessions (16 running per session, and the ended ones' last words)
MAX_TAILS = 256


@dataclass(eq=False)
class _Tail:
    session_id: str
    text: str = ""


@dataclass(eq=False)
class TailWatch:
    """One browser socket's view of the tails: what it was not sent yet, merged per process.

    ``await wait()`` until there is something, then ``take()`` it as one frame."""

    pending: dict[str, cl.ProcessTailText] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def _add(self, process_id: str, tail: _Tail, text: str, reset: bool) -> None:
        have = self.pending.get(process_id)
        if have is not None and not reset:
            merged = have.text + text
            if len(merged) > PROCESS_TAIL_KEPT:  # more than the tail: send the tail whole
                have.text, have.reset = tail.text, True
            else:
                have.text = merged
        else:
            self.pending[process_id] = cl.ProcessTailText(
                session_id=tail.session_id, process_id=process_id, text=text, reset=reset)
        self.ready.set()

    async def wait(self) -> None:
        await self.ready.wait()

    def take(self) -> cl.ProcessTails | None:
        self.ready.clear()
        if not self.pending:
            return None
        tails, self.pending = list(self.pending.values()), {}
        return cl.ProcessTails(tails=tails)


class ProcessTails:
    """The tails this server keeps, and the sockets watching them (see the module doc)."""

    def __init__(self, max_tails: int = MAX_TAILS) -> None:
        self.max_tails = max_tails
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._watches: set[TailWatch] = set()

    def __len__(self) -> int:
        return len(self._tails)

    def text(self, process_id: str) -> str | None:
        tail = self._tails.get(process_id)
        return tail.text if tail is not None else None

    def add(self, session_id: str, process_id: str, text: str, reset: bool = False) -> None:
        """A worker pushed ``text`` of a process (``reset``: its whole tail)."""
        tail = self._tails.pop(process_id, None)
        if tail is None or tail.session_id != session_id:
            # one we do not have (a restart, or forgotten) starts here: the browsers' copies,
            # which may hold older text, are replaced rather than appended to
            tail, reset = _Tail(session_id), True
        tail.text = text if reset else tail.text + text
        if len(tail.text) > PROCESS_TAIL_KEPT:
            tail.text = tail.text[-PROCESS_TAIL_KEPT:]
        self._tails[process_id] = tail  # the most recently written last
        while len(self._tails) > self.max_tails:
            self._tails.popitem(last=False)
        for watch in self._watches:
            watch._add(process_id, tail, tail.text if reset else text, reset)

    def watch(self) -> TailWatch:
        """A socket starts watching: every tail kept is pending for it, whole. Taken with no
        await between the copy and the attach, so nothing written falls between them."""
        w = TailWatch()
        for process_id, tail in self._tails.items():
            w._add(process_id, tail, tail.text, True)
        self._watches.add(w)
        return w

    def unwatch(self, w: TailWatch) -> None:
        self._watches.discard(w)

    def on_event(self, env: ev.Envelope) -> None:
        """An engine listener: a deleted session's tails go."""
        if isinstance(env.event, ev.SessionDeleted) and env.session_id is not None:
            for process_id in [p for p, t in self._tails.items()
                               if t.session_id == env.session_id]:
                del self._tails[process_id]
