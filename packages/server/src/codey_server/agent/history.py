"""A session's conversation, encoded for one wire format, cached so a call costs O(new items).

Items only ever get appended, and an item stops changing (for the conversation) once it is
final (:func:`~codey_server.agent.conversation.is_final`). So the encoded messages of a prefix
of final items can be kept: each call encodes only what came after the last *clean point* —
where every earlier item is final, no tool result waits for its answer's other calls, and the
wire's assembler has no open message. A new summary (compaction) starts the cache again, and
so does a rewind (``conversation_rewound`` takes items out of the list: the last item seen
is no longer where it was).

The cache is an optimisation of :func:`~codey_server.agent.conversation.conversation_of`:
``History(wire).messages(items)`` always equals encoding ``conversation_of`` afresh (a unit
test checks that on every prefix of long generated sessions).
"""

from __future__ import annotations

from collections.abc import Sequence

from codey_protocol import events as ev
from codey_server.agent.conversation import SummaryEntry, Walker, base_of, is_final
from codey_server.agent.wire import Loader, Wire

__all__ = ["History"]


class History:
    def __init__(self, wire: Wire, load: Loader | None = None) -> None:
        self.wire = wire
        self.load = load  # images' bytes, for the encoded messages
        self._summary: ev.Summary | None = None
        self._scanned = 0  # items looked at for a new summary
        self._last_id = ""  # the id of the last of them (a rewind changes it)
        self._next = 0  # items before this index are encoded in _prefix
        self._answer: str | None = None  # the walker's state at _next
        self._prefix: list[bytes] = []
        #: size of the last body built from this history, for the context estimate
        self.last_body_len = 0

    def _rebase(self, items: Sequence[ev.Item]) -> None:
        summary, start = base_of(items)
        self._summary = summary
        self._next = start
        self._answer = None
        self._prefix = []
        if summary is not None:
            asm = self.wire.assembler(self.load)
            asm.add(SummaryEntry(summary.text))
            self._prefix = asm.finish()

    def messages(self, items: Sequence[ev.Item]) -> list[bytes]:
        """The encoded conversation of ``items`` (a session's items, in order)."""
        n = len(items)
        if n < self._scanned or (
                self._scanned and items[self._scanned - 1].id != self._last_id):
            # not the list we cached (a rebuilt state, or a rewind took items back and others
            # came after): start again
            self._scanned = 0
        fresh = self._scanned == 0 or any(
            isinstance(items[i], ev.Summary) for i in range(self._scanned, n))
        if fresh:
            self._rebase(items)
        self._scanned = n
        self._last_id = items[n - 1].id if n else ""
        asm = self.wire.assembler(self.load)
        walker = Walker(self._answer)
        out = list(self._prefix)
        stable = True
        for i in range(self._next, n):
            item = items[i]
            for entry in walker.begin(item):
                asm.add(entry)
            if stable and i > self._next and walker.clean and asm.at_boundary():
                taken = asm.take()
                self._prefix.extend(taken)
                out.extend(taken)
                self._next = i
                self._answer = walker.answer
            for entry in walker.own(item):
                asm.add(entry)
            if stable and not is_final(item):
                stable = False
        for entry in walker.end():
            asm.add(entry)
        out.extend(asm.finish())
        return out
