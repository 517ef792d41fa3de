"""What the turn loop needs from the rest of the server, as narrow interfaces.

:class:`~codey_server.agent.runner.TurnRunner` depends on these and nothing else, so it can be
driven in unit tests on the in-memory log with a scripted model stream and a stand-in worker,
and it does not import the service that starts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from codey_protocol import events as ev
from codey_protocol.state import SessionInfo, State
from codey_server.agent.history import History
from codey_server.agent.models import ModelProvider
from codey_server.core.actions import Actions
from codey_server.settings import RoleConfig

__all__ = ["Actions", "Approvals", "Children", "Limits", "Models", "Store", "TurnDeps"]


class Store(Protocol):
    """The folded state and the only way to change it (the engine)."""

    @property
    def state(self) -> State: ...

    async def append(self, events: Sequence[tuple[str | None, ev.Event]]) -> list[ev.Envelope]:
        """Append, commit and fold; returns once ``state`` shows the events."""

    def new_id(self, prefix: str) -> str: ...


class Models(Protocol):
    """Configured providers, and each session's encoded history."""

    def provider(self, name: str) -> ModelProvider | None: ...

    def history(self, session_id: str, wire_name: str) -> History: ...


class Children(Protocol):
    """Sub-agent sessions (``delegate``)."""

    async def wait_done(self, session_id: str) -> None:
        """Return once the session's turn is over (it is not running and not busy), or the
        session is gone."""


class Approvals(Protocol):
    def approval_waiter(self, approval_id: str) -> asyncio.Future[None]:
        """A future set when the approval (or question) with this id is resolved (answered);
        register before checking its status."""


@dataclass(frozen=True)
class Limits:
    turn_iteration_cap: int = 50
    action_timeout_s: float = 900.0
    #: an approval nobody decides in this long expires (None: approvals wait for ever)
    approval_timeout_s: float | None = None


@dataclass
class TurnDeps:
    store: Store
    actions: Actions
    models: Models
    approvals: Approvals
    limits: Limits
    #: True while the server shuts down: runners stop without touching their sessions
    stopping: Callable[[], bool]
    #: the project memory for a session (its worker and workdir)
    memory_of: Callable[[SessionInfo], str] = lambda session: ""
    #: sessions whose AGENTS.md or skills changed on disk: reloaded before the next call
    stale_context: set[str] = field(default_factory=set)
    #: roles the model can delegate to, and the sub-agent sessions it waits for
    roles: dict[str, RoleConfig] = field(default_factory=dict)
    children: Children | None = None
    #: files sent with prompts, by content hash
    load_blob: Callable[[str], bytes | None] | None = None
