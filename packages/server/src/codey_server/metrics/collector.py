"""``ServerMetrics``: the server's figures, counted as things happen, rendered when scraped.

Counted as things happen (an engine listener, the model providers' ``observe`` hook, the
engine's ``append_timers``): actions finished by outcome and their round trips
(``action_requested`` → ``action_finished``), model calls and errors by provider with their
latency, event-log appends. Read from the state when scraped: workers connected, sessions by
status, browsers connected. Each server keeps its own figures (no global registry), so several
apps in one process (tests) do not mix them.

The tallies are plain Python (:mod:`codey_server.metrics.tallies`); prometheus_client is
imported by the first scrape (:mod:`codey_server.metrics.exposition` turns them into the
Prometheus text format), so a server nobody scrapes never loads it. Both modules import the
tallies; exposition imports nothing from here (what it renders is a protocol): no cycle.

Behind the same access rules as the rest of ``/api``'s siblings: a scraper sends
``Authorization: Bearer <access token>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from codey_protocol import events as ev
from codey_server.core.engine import Engine
from codey_server.metrics.exposition import render
from codey_server.metrics.tallies import Counter, Histogram

__all__ = ["CONTENT_TYPE", "Counter", "Histogram", "ServerMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServerMetrics:
    def __init__(self, engine: Engine, browsers: Callable[[], int],
                 providers: Iterable[Any]) -> None:
        """``browsers`` counts the browser sockets open now; each of ``providers`` (the model
        providers) gets an ``observe`` hook called after every model call."""
        self.engine = engine
        self.browsers = browsers
        self.actions = Counter("codey_actions", "Actions finished, by outcome.", ("outcome",))
        self.action_seconds = Histogram(
            "codey_action_seconds", "Action round trips, action_requested to action_finished.")
        self.model_seconds = Histogram("codey_model_call_seconds", "Model calls, by provider.",
                                       ("provider",))
        self.model_errors = Counter("codey_model_errors", "Failed model calls, by provider "
                                    "and error code.", ("provider", "code"))
        self.append_seconds = Histogram("codey_event_log_append_seconds",
                                        "Event-log appends, call to commit.")
        self._requested: dict[str, float] = {}
        engine.listeners.append(self._on_event)
        for provider in providers:
            provider.observe = self._on_model_call
        engine.append_timers.append(self.append_seconds.observe)

    def _on_event(self, env: ev.Envelope) -> None:
        e = env.event
        if isinstance(e, ev.ActionRequested):
            self._requested.setdefault(e.action_id, env.ts)
        elif isinstance(e, ev.ActionFinished):
            self.actions.inc(e.outcome)
            started = self._requested.pop(e.action_id, None)
            if started is not None:
                self.action_seconds.observe(max(0.0, env.ts - started))

    def _on_model_call(self, provider: str, seconds: float, error: str | None) -> None:
        self.model_seconds.observe(seconds, provider)
        if error is not None:
            self.model_errors.inc(provider, error)

    def render(self) -> bytes:
        """Everything, in the Prometheus text format (the first call imports
        prometheus_client)."""
        return render(self)
