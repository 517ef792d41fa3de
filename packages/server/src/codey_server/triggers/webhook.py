"""A webhook delivery's checks, pure: GitHub's signature and the trigger's event filter.

GitHub signs the raw body with HMAC-SHA256 under the webhook's secret and sends
``X-Hub-Signature-256: sha256=<hex>``; the compare is constant-time (``hmac.compare_digest``)
so the answer's time says nothing about how much of a forged signature was right.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

__all__ = ["event_label", "passes", "sign", "signature_problem"]


def sign(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_problem(secret: str | None, body: bytes, header: str | None) -> str | None:
    """Why the delivery's signature is refused, in words; None when it holds (or the
    trigger has no secret: then none is asked for)."""
    if secret is None:
        return None
    if not header:
        return "no X-Hub-Signature-256 header (the trigger has a secret)"
    if not hmac.compare_digest(sign(secret, body).encode(), header.strip().encode()):
        return "the X-Hub-Signature-256 signature does not match the trigger's secret"
    return None


def event_label(event: str, action: object) -> str:
    """``pull_request.opened``: the event's name and the payload's ``action``, if it has one."""
    return f"{event}.{action}" if isinstance(action, str) and action else event


def passes(filters: Sequence[str], event: str, action: object) -> bool:
    """Whether a delivery of ``event`` (with ``action``) is one the trigger takes: any filter
    equal to the event's name, or to ``name.action``; every event when there is none."""
    if not filters:
        return True
    return event in filters or event_label(event, action) in filters
