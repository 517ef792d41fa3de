"""What a turn needs from the rest of the server, as narrow interfaces.

The turn machines (:mod:`~codey_server.agent.turn`, :mod:`~codey_server.agent.acp`) read the
folded state and the providers' settings (:func:`provider_infos`); the driver
(:mod:`~codey_server.agent.driver`) uses the rest — the :class:`Models` (providers' clients
and each session's encoded history), the write path (:class:`Store`, the engine), the
workers' :class:`Actions`, and the :class:`Waits` of the agent service. Tests drive a turn
through the real engine (on the in-memory log) and the real service, with a scripted model
and a stand-in worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.agent.history import History
from codey_server.agent.machine import Limits
from codey_server.agent.models import ModelProvider
from codey_server.agent.route import ProviderInfo
from codey_server.agent.web.run import WebTools
from codey_server.core.actions import Actions
from codey_server.core.rules import Context, Decided
from codey_server.settings import RoleConfig

__all__ = ["Actions", "Limits", "Models", "Store", "TurnDeps", "Waits", "provider_infos"]

In = TypeVar("In")


class Store(Protocol):
    """The folded state and the one write path (the engine)."""

    @property
    def state(self) -> State: ...

    @property
    def context(self) -> Context: ...

    async def submit(self, decision: Callable[[State, In, Context], Decided], input: In, *,
                     exclusive: bool = True) -> list[ev.Envelope]:
        """Run the pure ``decision`` against the state and append what it decides; returns
        once ``state`` shows the events."""


class Models(Protocol):
    """Configured providers, and each session's encoded history."""

    def provider(self, name: str) -> ModelProvider | None: ...

    def history(self, session_id: str, wire_name: str) -> History: ...


def provider_infos(models: Models) -> Callable[[str], ProviderInfo | None]:
    """The providers of ``models`` as a turn machine looks them up: values, no clients."""

    def info(name: str) -> ProviderInfo | None:
        provider = models.provider(name)
        return None if provider is None else provider.info

    return info


class Waits(Protocol):
    """Waiting for what someone else decides. Each returns at once when it is already so."""

    async def approval(self, session_id: str, approval_id: str) -> None:
        """Return once the approval is no longer pending (or is gone)."""

    async def answer(self, session_id: str, question_id: str) -> None:
        """Return once the question is no longer pending (or is gone)."""

    async def turn_over(self, session_id: str) -> None:
        """Return once the session's turn is over (it is not running and not busy), or the
        session is gone: a sub-agent's, for the ``delegate`` call that started it."""

    async def hello(self, worker_id: str) -> None:
        """Return once the worker said hello to this server since it started (or is
        connected, among replicas to another one), or is revoked or not known."""


@dataclass
class TurnDeps:
    store: Store
    actions: Actions
    models: Models
    waits: Waits
    limits: Limits
    #: True while the server shuts down: turns stop without touching their sessions
    stopping: Callable[[], bool]
    #: roles the model can delegate to
    roles: dict[str, RoleConfig] = field(default_factory=dict)
    #: files sent with prompts, by content hash
    load_blob: Callable[[str], bytes | None] | None = None
    #: keep bytes in the blob store (an image the model was shown); returns their sha256
    store_blob: Callable[[bytes], str] | None = None
    #: web_fetch and web_search, run on the server (None: not available)
    web: WebTools | None = None
    #: the checkpoints' service (``codey_server.checkpoints``): a checkpoint before a turn's
    #: first change, its end state after it (None: none are kept)
    checkpoints: Any = None
