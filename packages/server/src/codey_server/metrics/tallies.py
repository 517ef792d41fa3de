"""The tallies the server counts in, plain Python shaped like prometheus_client's
(:class:`Counter`, :class:`Histogram`): counted by :mod:`codey_server.metrics.collector`,
rendered by :mod:`codey_server.metrics.exposition`, which both import them from here."""

from __future__ import annotations

import time
from bisect import bisect_left

__all__ = ["Counter", "Histogram"]

_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)


class Counter:
    """A counter by label values, as prometheus_client's ``Counter``: a series appears (with
    its creation time) on its first increment."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        #: label values → [count, created (unix seconds)]
        self.series: dict[tuple[str, ...], list[float]] = {}

    def inc(self, *values: str) -> None:
        series = self.series.get(values)
        if series is None:
            series = self.series[values] = [0.0, time.time()]
        series[0] += 1


class Histogram:
    """A histogram by label values, as prometheus_client's ``Histogram``: an observation
    counts in the first bucket whose upper bound is at least it (``+Inf`` last). Without
    labels its one series exists from the start."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...] = (),
                 buckets: tuple[float, ...] = _FAST) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.bounds = (*buckets, float("inf"))
        #: label values → [count in each bucket (not cumulative), sum, created]
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        if not labels:
            self._series(())

    def _series(self, values: tuple[str, ...]) -> tuple[list[int], list[float]]:
        series = self.series.get(values)
        if series is None:
            series = self.series[values] = ([0] * len(self.bounds), [0.0, time.time()])
        return series

    def observe(self, amount: float, *values: str) -> None:
        counts, total = self._series(values)
        counts[bisect_left(self.bounds, amount)] += 1
        total[0] += amount
