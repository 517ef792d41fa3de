"""The Prometheus text format of the server's figures
(:class:`~codey_server.metrics.collector.ServerMetrics`, as :class:`Figures`), through
prometheus_client, which each function here imports where it uses it: the first scrape loads
it, and a server nobody scrapes never does (``test_lazy_imports``)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import TYPE_CHECKING, Protocol

from codey_server.core.engine import Engine
from codey_server.metrics.tallies import Counter, Histogram

if TYPE_CHECKING:
    from prometheus_client.core import Metric

__all__ = ["Figures", "render"]


class Figures(Protocol):
    """What is rendered: :class:`~codey_server.metrics.collector.ServerMetrics` has it."""

    engine: Engine
    browsers: Callable[[], int]
    actions: Counter
    action_seconds: Histogram
    model_seconds: Histogram
    model_errors: Counter
    append_seconds: Histogram


def render(metrics: Figures) -> bytes:
    """Everything, in the Prometheus text format."""
    from prometheus_client import generate_latest

    return generate_latest(_Figures(metrics))


class _Figures:  # a prometheus_client Collector
    def __init__(self, metrics: Figures) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        yield from _state(m)
        yield _counter(m.actions)
        yield _histogram(m.action_seconds)
        yield _histogram(m.model_seconds)
        yield _counter(m.model_errors)
        yield _histogram(m.append_seconds)


def _state(m: Figures) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    state = m.engine.state
    workers = GaugeMetricFamily("codey_workers_connected", "Workers connected now.")
    workers.add_metric([], sum(1 for w in state.workers.values()
                               if w.connected and not w.revoked))
    yield workers
    sessions = GaugeMetricFamily("codey_sessions", "Sessions by status.", labels=["status"])
    for status, n in sorted(Tally(s.status for s in state.sessions.values()).items()):
        sessions.add_metric([status], n)
    yield sessions
    browsers = GaugeMetricFamily("codey_browsers_connected", "Browser sockets open now.")
    browsers.add_metric([], m.browsers())
    yield browsers
    seq = GaugeMetricFamily("codey_event_log_seq", "The last event's seq.")
    seq.add_metric([], state.seq)
    yield seq
    conflicts = CounterMetricFamily(
        "codey_event_log_append_conflicts", "Appends refused because a session moved on "
        "after their decision (each decided again).")
    conflicts.add_metric([], m.engine.conflicts)
    yield conflicts


def _counter(counter: Counter) -> Metric:
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily(counter.name, counter.documentation, labels=counter.labels)
    for values, (count, created) in counter.series.items():
        family.add_metric(values, count, created=created)
    return family


def _histogram(histogram: Histogram) -> Metric:
    from prometheus_client.core import HistogramMetricFamily
    from prometheus_client.utils import floatToGoString

    # a bucket's ``le`` as prometheus_client writes it ("0.005", "1.0", "+Inf"); untyped there
    le: Callable[[float], str] = floatToGoString
    family = HistogramMetricFamily(histogram.name, histogram.documentation,
                                   labels=histogram.labels)
    bounds = [le(b) for b in histogram.bounds]
    for values, (counts, (total, created)) in histogram.series.items():
        family.add_metric(values, list(zip(bounds, accumulate(counts), strict=True)), total)
        labels = dict(zip(histogram.labels, values, strict=True))
        family.add_sample(f"{histogram.name}_created", labels, created)
    return family
