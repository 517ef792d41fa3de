"""How a feature declares its part of the write path and of the fold, and how they compose.

Every event comes from a pure decision ``(state, input, ctx) -> [(session_id, event)]`` and
is folded by pure handlers ``(state, envelope) -> None``. Each feature package declares its own
in a :class:`Feature` (carried by its plugin, ``<feature>/plugin.py``): the browser commands
it decides and the events it folds. The core is one feature too. :class:`Rules` puts them
together (``codey_server.features.PLUGINS`` lists them); the engine holds one and never
imports a feature.

Decisions that are not browser commands (a worker connecting, a pairing request, a Telegram
update, a turn's step) are plain functions of the same shape in each feature's ``decide``
module, run through :meth:`~codey_server.core.engine.Engine.submit`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import State
from codey_server.errors import ServerError

__all__ = ["CommandRejected", "Context", "Decided", "Decider", "Feature", "FoldHandler",
           "Rules"]

#: what a decision produces: events, each with its session id (None for global events)
Decided = list[tuple[str | None, ev.Event]]
#: decides one browser command (of the types its feature declares)
Decider = Callable[[State, Any, "Context"], Decided]
#: folds one event into the state, in place
FoldHandler = Callable[[State, ev.Envelope], None]


class CommandRejected(ServerError):
    """The command was refused. ``code``: not_found | conflict | bad_request | forbidden."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass
class Context:
    """What a decision may not compute itself: fresh ids, the time, server defaults."""

    new_id: Callable[[str], str] = _new_id
    now: Callable[[], float] = time.time
    default_provider: str = "default"
    #: each provider of config.json → its default model (those of Settings → Models are in the
    #: state: see :func:`codey_server.core.decide.known_providers`)
    default_models: dict[str, str] = field(default_factory=dict)
    #: the providers config.json defines: Settings → Models may not define one of theirs
    file_providers: frozenset[str] = frozenset()
    #: whether a file sent with a prompt is stored (``/api/blobs``)
    blob_exists: Callable[[str], bool] = lambda digest: False
    #: who sends the command being decided, when not a browser (``mcp:<token id>``): recorded
    #: on the sessions and prompts it makes
    origin: str = ""
    #: a goal's cap of turns when it sets none (``Settings.goal_max_turns``)
    goal_max_turns: int = 10


@dataclass(frozen=True)
class Feature:
    """One feature's part of the write path and of the fold."""

    name: str
    #: the browser commands it decides, by command type
    commands: Mapping[type[Any], Decider] = field(default_factory=dict)
    #: the events it folds, by event type; several features may fold one event (each sees
    #: the state the features listed before it left)
    fold: Mapping[type[Any], FoldHandler] = field(default_factory=dict)


class Rules:
    """The features' decisions and folds, composed: one :meth:`decide`, one :meth:`apply`."""

    def __init__(self, features: Iterable[Feature]) -> None:
        self.features = tuple(features)
        commands: dict[type[Any], Decider] = {}
        fold: dict[type[Any], list[FoldHandler]] = {}
        for feature in self.features:
            for command, decider in feature.commands.items():
                if command in commands:
                    raise ValueError(f"{command.__name__} is decided by two features")
                commands[command] = decider
            for event, handler in feature.fold.items():
                fold.setdefault(event, []).append(handler)
        self._commands = commands
        # one handler is the common case: call it without a loop
        self._fold: dict[type[Any], Callable[[State, ev.Envelope], None]] = {
            event: handlers[0] if len(handlers) == 1 else _chain(handlers)
            for event, handlers in fold.items()}

    def decide(self, state: State, command: cl.ClientToServer, ctx: Context) -> Decided:
        """The events of a browser command; raises :class:`CommandRejected` (nothing to
        append) when it cannot be carried out."""
        decider = self._commands.get(type(command))
        if decider is None:
            raise CommandRejected("bad_request",
                                  f"{type(command).__name__} is not a command to decide")
        return decider(state, command, ctx)

    def apply(self, state: State, env: ev.Envelope) -> State:
        """Fold one event into ``state`` (in place) and return it. An event no feature folds
        only advances the seq."""
        handler = self._fold.get(type(env.event))
        if handler is not None:
            handler(state, env)
        state.seq = env.seq
        return state

    def apply_all(self, state: State, envelopes: Iterable[ev.Envelope]) -> State:
        for env in envelopes:
            state = self.apply(state, env)
        return state

    def folded(self) -> frozenset[type[Any]]:
        """The event types some feature folds."""
        return frozenset(self._fold)

    def decided(self) -> frozenset[type[Any]]:
        """The command types some feature decides."""
        return frozenset(self._commands)


def _chain(handlers: list[FoldHandler]) -> FoldHandler:
    def fold(state: State, env: ev.Envelope) -> None:
        for handler in handlers:
            handler(state, env)

    return fold
