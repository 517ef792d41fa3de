"""``GET /metrics``: the server's figures in the Prometheus text format (prometheus_client).

Counted as things happen (an engine listener, the model providers' ``observe`` hook, the
engine's ``append_timers``): actions finished by outcome and their round trips
(``action_requested`` → ``action_finished``), model calls and errors by provider with their
latency, event-log appends. Read from the state when scraped: workers connected, sessions by
status, browsers connected. One registry per server (not prometheus_client's global one), so
several apps in one process (tests) do not mix their figures.

Behind the same access rules as the rest of ``/api``'s siblings: a scraper sends
``Authorization: Bearer <access token>``.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from codey_protocol import events as ev
from codey_server.core.engine import Engine

__all__ = ["CONTENT_TYPE", "ServerMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)


class _StateGauges(Collector):
    def __init__(self, engine: Engine, browsers: Callable[[], int]) -> None:
        self.engine = engine
        self.browsers = browsers

    def collect(self) -> Iterator[Metric]:
        state = self.engine.state
        workers = GaugeMetricFamily("codey_workers_connected", "Workers connected now.")
        workers.add_metric([], sum(1 for w in state.workers.values()
                                   if w.connected and not w.revoked))
        yield workers
        sessions = GaugeMetricFamily("codey_sessions", "Sessions by status.",
                                     labels=["status"])
        for status, n in sorted(Tally(s.status for s in state.sessions.values()).items()):
            sessions.add_metric([status], n)
        yield sessions
        browsers = GaugeMetricFamily("codey_browsers_connected", "Browser sockets open now.")
        browsers.add_metric([], self.browsers())
        yield browsers
        seq = GaugeMetricFamily("codey_event_log_seq", "The last event's seq.")
        seq.add_metric([], state.seq)
        yield seq


class ServerMetrics:
    def __init__(self, engine: Engine, browsers: Callable[[], int],
                 providers: Iterable[Any]) -> None:
        """``browsers`` counts the browser sockets open now; each of ``providers`` (the model
        providers) gets an ``observe`` hook called after every model call."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_StateGauges(engine, browsers))
        self.actions = Counter("codey_actions", "Actions finished, by outcome.", ["outcome"],
                               registry=self.registry)
        self.action_seconds = Histogram(
            "codey_action_seconds", "Action round trips, action_requested to action_finished.",
            buckets=_FAST, registry=self.registry)
        self.model_seconds = Histogram("codey_model_call_seconds", "Model calls, by provider.",
                                       ["provider"], buckets=_FAST, registry=self.registry)
        self.model_errors = Counter("codey_model_errors", "Failed model calls, by provider "
                                    "and error code.", ["provider", "code"],
                                    registry=self.registry)
        self.append_seconds = Histogram("codey_event_log_append_seconds",
                                        "Event-log appends, call to commit.", buckets=_FAST,
                                        registry=self.registry)
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
            self.actions.labels(e.outcome).inc()
            started = self._requested.pop(e.action_id, None)
            if started is not None:
                self.action_seconds.observe(max(0.0, env.ts - started))

    def _on_model_call(self, provider: str, seconds: float, error: str | None) -> None:
        self.model_seconds.labels(provider).observe(seconds)
        if error is not None:
            self.model_errors.labels(provider, error).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
