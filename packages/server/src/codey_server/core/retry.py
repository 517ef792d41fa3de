"""Retrying, one way for the whole server: tenacity's loop, wait strategies, stop and retry
conditions, each policy configured where its retry is:

- a model call (:mod:`codey_server.agent.models`): a 429, a 5xx, or a connection that fails
  before the answer starts, up to the provider's ``max_retries``; ``Retry-After`` when the
  provider sends one, else 0.5 s doubling to 30 s, jittered into the upper half
  (:data:`~codey_server.agent.models.MODEL_WAIT`); each retry is announced (a ``Retrying``
  event: "retrying in 1.3 s") before it waits, with the very delay it waits;
- a token refresh that failed (:mod:`codey_server.providers.service`): none before 1 s,
  doubling to 5 min, reset by a refresh, a login or a new key;
- the Telegram bot (:mod:`codey_server.channels.telegram`): 1 s doubling to a minute to reach
  Telegram and to poll it, 5 s between tries to send.

Why tenacity: its waits are composable (full jitter is ``wait_random_exponential``, the model
call's is a fixed half plus a random half), its ``before_sleep`` sees the delay it is about to
sleep (so a retry can say when), and its ``sleep`` is a seam: tests hand a policy a sleep that
records the delays instead of waiting them (``policy.copy(sleep=...)``), so they prove the
delays and the attempts without sleeping.

:func:`wait_after` applies a wait strategy outside a tenacity loop: a refresh schedule (the
failures are counted between calls, not inside one) and the turn's timer before it tries a
cut-off answer again.
"""

from __future__ import annotations

from collections.abc import Callable

from tenacity import RetryCallState, Retrying

__all__ = ["wait_after"]


def wait_after(wait: Callable[[RetryCallState], float], attempt: int) -> float:
    """What ``wait`` waits after try number ``attempt`` (1: the first try) failed."""
    state = RetryCallState(Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    return float(wait(state))
