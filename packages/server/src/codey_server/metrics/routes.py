"""``GET /metrics``: Prometheus text (:mod:`codey_server.metrics.collector`); a scraper logs in with
``Authorization: Bearer <access token>``."""

from __future__ import annotations

from litestar import Response, get
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec

from codey_server.http.errors import errors
from codey_server.metrics.collector import CONTENT_TYPE, ServerMetrics

__all__ = ["metrics"]

_TEXT = ResponseSpec(str, media_type=CONTENT_TYPE, generate_examples=False,
                     description="The Prometheus text exposition format.")


@get("/metrics", sync_to_thread=False, tags=["operations"], responses={200: _TEXT, **errors()})
def metrics(metrics: NamedDependency[ServerMetrics]) -> Response[bytes]:
    """Workers and browsers connected, sessions by status, actions and their round trips,
    model calls and errors by provider, event-log append latency."""
    # the header set whole: from media_type alone Litestar appends its own "; charset=utf-8"
    # to a text/ type, and CONTENT_TYPE has one already
    return Response(metrics.render(), media_type=CONTENT_TYPE,
                    headers={"content-type": CONTENT_TYPE})
