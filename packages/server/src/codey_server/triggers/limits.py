"""Each trigger's rate limit: at most ``per_minute`` deliveries in any sliding minute, per
server (what passes is recorded; what does not is answered 429 and not, so a flood cannot
fill the log)."""

from __future__ import annotations

from collections import deque

__all__ = ["RateLimits"]

_WINDOW_S = 60.0


class RateLimits:
    def __init__(self) -> None:
        self._seen: dict[str, deque[float]] = {}

    def take(self, trigger_id: str, per_minute: int, now: float) -> bool:
        """Count one delivery to ``trigger_id`` at ``now``; False when it is one too many."""
        seen = self._seen.setdefault(trigger_id, deque())
        while seen and seen[0] <= now - _WINDOW_S:
            seen.popleft()
        if len(seen) >= per_minute:
            return False
        seen.append(now)
        return True

    def forget(self, trigger_id: str) -> None:
        self._seen.pop(trigger_id, None)
