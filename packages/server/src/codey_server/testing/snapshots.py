"""Starts after other code wrote the latest snapshot, on any event log (SQLite in the unit
tests, PostgreSQL in the integration ones): the scenarios of issue 36, problems 5 and 6.

Each takes ``make_log``, which gives a fresh, unopened log on the same store each time it is
called (one server's start after another's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec

from codey_protocol import events as ev
from codey_protocol.codec import encode
from codey_protocol.foldversion import FOLD_VERSION, read_snapshot
from codey_protocol.state import State
from codey_server.core.engine import Engine
from codey_server.eventlog import EventLog
from codey_server.features import RULES
from codey_server.testing.writes import record

__all__ = ["OLD_UNKNOWN", "as_old_code_saw_it", "new_old_new", "story", "tell_story",
           "turn_took"]

MakeLog = Callable[[], EventLog]

#: what release 745192a did not know of this story: its events and the state's fields
OLD_UNKNOWN = (ev.ProviderSaved, ev.SessionSandboxChanged, ev.SessionModelChanged)


def story() -> list[tuple[str | None, ev.Event]]:
    """A worker and a session; a provider added in Settings; the session set to full access
    and switched to another model; a turn of the agent (busy from the running status on)."""
    return [
        (None, ev.WorkerPaired(worker_id="w1", request_id="r1", hostname="vm", os="Linux",
                               python_version="3.11", worker_version="0.2.0", roots=["/"],
                               public_key="k")),
        ("s1", ev.SessionCreated(title="fix it", worker_id="w1", workdir="/w",
                                 provider="openai", model="gpt-a")),
        (None, ev.ProviderSaved(provider=ev.ProviderEntry(
            name="lab", kind="chat", base_url="http://lab:8000/v1", models=["qwen"]))),
        ("s1", ev.SessionSandboxChanged(sandbox="full-access", network=True)),
        ("s1", ev.SessionModelChanged(provider="lab", model="qwen", effort="high")),
        ("s1", ev.SessionStatusChanged(status="running")),
        ("s1", ev.SessionItemAppended(item=ev.UserMessage(id="i1", ts=1.0, text="go"))),
        ("s1", ev.SessionStatusChanged(status="idle")),
    ]


async def tell_story(engine: Engine) -> list[ev.Envelope]:
    """Append :func:`story` through ``engine``, its turn ending in a later append than the one
    it started in (some time passes in it); returns what the log then holds."""
    events = story()
    await record(engine, events[:-2])
    await asyncio.sleep(0.02)  # the turn takes this long: its time must not be 0
    await record(engine, events[-2:])
    return await engine.log.read(0)


def turn_took(stored: list[ev.Envelope]) -> float:
    """The time the story's turn took, from its running status to its idle one."""
    running = next(e for e in stored if isinstance(e.event, ev.SessionStatusChanged)
                   and e.event.status == "running")
    idle = next(e for e in stored if isinstance(e.event, ev.SessionStatusChanged)
                and e.event.status == "idle")
    return idle.ts - running.ts


def as_old_code_saw_it(stored: list[ev.Envelope]) -> State:
    """The state release 745192a folded from ``stored`` (and saved as its snapshot): without
    the events it did not know, and without the time a session took, which it never counted."""
    state = State()
    for env in stored:
        if not isinstance(env.event, OLD_UNKNOWN):
            RULES.apply(state, env)
        state.seq = env.seq
    for session in state.sessions.values():
        session.busy_seconds, session.busy_since = 0.0, None
    return state


async def new_old_new(make_log: MakeLog) -> Engine:
    """New code writes the story and its snapshot; old code then appends and saves its own
    (bare, as every release before stored one, lacking what it did not know); new code starts
    again. It must not trust that snapshot: the provider, the session's full access,
    its model switch and the time its turn took are all in the state, rebuilt from the log, and
    a snapshot of this fold replaces the old one. Returns the last engine, stopped."""
    first = Engine(make_log(), RULES)
    await first.start()
    stored = await tell_story(first)
    await first.stop()

    # the old server: it writes (its writes are events as any), then saves its own snapshot
    second = Engine(make_log(), RULES)
    await second.start()
    after = await record(second, [("s1", ev.SessionTitleChanged(title="renamed by the old one"))])
    stored = await second.log.read(0)
    await second.log.close()  # (its own stop below: this code's would save this fold's)
    log = make_log()
    await log.open()
    try:
        old = as_old_code_saw_it(stored)
        assert not old.providers and old.sessions["s1"].sandbox == "workspace-write"
        await log.save_snapshot(old.seq, encode(old))
    finally:
        await log.close()

    last = Engine(make_log(), RULES)
    await last.start()
    try:
        state = last.state
        assert last.replayed == len(stored), "rebuilt from the whole log"
        assert state.seq == after[-1].seq
        assert "lab" in state.providers and state.providers["lab"].models == ["qwen"]
        s = state.sessions["s1"]
        assert (s.sandbox, s.network) == ("full-access", True)
        assert (s.provider, s.model, s.effort) == ("lab", "qwen", "high")
        assert s.title == "renamed by the old one"
        assert s.busy_seconds == turn_took(stored) > 0 and s.busy_since is None
        snap = await last.log.latest_snapshot()
        assert snap is not None and snap[0] == state.seq
        fold, raw = read_snapshot(snap[1])
        assert fold == FOLD_VERSION, "a fresh snapshot of this fold, written at the start"
        assert msgspec.json.decode(bytes(raw)) == msgspec.to_builtins(state)
    finally:
        await last.stop()
    return last
