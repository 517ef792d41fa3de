"""Events a test puts in the log as they are, through the one write path."""

from __future__ import annotations

from collections.abc import Sequence

from codey_protocol.events import Envelope, Event
from codey_protocol.state import State
from codey_server.core.engine import Engine
from codey_server.core.rules import Context, Decided

__all__ = ["given", "record"]


def given(state: State, events: Sequence[tuple[str | None, Event]], ctx: Context) -> Decided:
    """The decision that decides exactly ``events``: for tests that set up a log."""
    return list(events)


async def record(engine: Engine,
                 events: Sequence[tuple[str | None, Event]]) -> list[Envelope]:
    """Append ``events`` as they are (a test's setup), checked like any other decision's."""
    return await engine.submit(given, events)
