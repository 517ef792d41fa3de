"""The fleet governor, pure: a 429 pauses every session of a provider, the window recovers
one by one, a low window queues by priority (the session being viewed first)."""

from __future__ import annotations

from codey_server.agent import governor as gv
from codey_server.agent.ratewindow import limits_from_headers

P = "openai"


def _ask(g: gv.Governor, *tickets: tuple[int, str], now: float = 0.0) -> gv.Governor:
    for ticket, sid in tickets:
        g = gv.ask(g, P, ticket, sid, now)
    return g


def test_an_open_window_lets_everyone_go_at_once() -> None:
    g = _ask(gv.Governor(), (1, "a"), (2, "b"), (3, "c"))
    g, going, wake = gv.admit(g, P, 0.0)
    assert (going, wake) == ((1, 2, 3), None)
    assert g.windows[P].running == {1, 2, 3} and not g.windows[P].queue


def test_a_429_pauses_every_session_then_they_resume_one_by_one() -> None:
    g = gv.Governor(gap_s=1.0)
    g = gv.limited(g, P, 10.0, now=0.0)  # one call got a 429, retry-after 10 s
    g = _ask(g, (1, "a"), (2, "b"), (3, "c"), now=1.0)
    g, going, wake = gv.admit(g, P, 1.0)
    assert (going, wake) == ((), 10.0)
    assert gv.queued_reason(g, P, 1.0) == "queued for rate limit (resets in 9 s)"
    # at the reset: one probe, and nobody else until its answer began
    g, going, wake = gv.admit(g, P, 10.0)
    assert (going, wake) == ((1,), None)
    g, going, _ = gv.admit(g, P, 30.0)
    assert going == ()
    g = gv.started(g, P, 1)
    # then one every gap, never two at once
    g, going, wake = gv.admit(g, P, 10.2)
    assert (going, wake) == ((), 11.0)
    g, going, wake = gv.admit(g, P, 11.0)
    assert (going, wake) == ((2,), 12.0)
    g, going, wake = gv.admit(g, P, 12.0)
    assert (going, wake) == ((3,), None)
    for t in (1, 2, 3):
        g = gv.done(g, P, t, 13.0)
    g, going, _ = gv.admit(g, P, 13.0)
    assert not g.windows[P].recovering  # open again: the next calls go at once
    g = _ask(g, (4, "a"), (5, "b"), now=14.0)
    assert gv.admit(g, P, 14.0)[1] == (4, 5)


def test_a_429_on_the_probe_pauses_again() -> None:
    g = gv.limited(gv.Governor(), P, 5.0, now=0.0)
    g = _ask(g, (1, "a"), (2, "b"))
    g, going, _ = gv.admit(g, P, 5.0)
    assert going == (1,)
    g = gv.limited(g, P, 5.0, now=5.5)
    g = gv.done(g, P, 1, 5.5)
    g, going, wake = gv.admit(g, P, 6.0)
    assert (going, wake) == ((), 10.5)


def test_a_low_window_queues_by_priority_the_viewed_session_first() -> None:
    g = gv.Governor(gap_s=1.0)
    g = gv.seen(g, P, gv.Limits(limit_requests=100, remaining_requests=3,
                                requests_reset_s=30.0), now=0.0)
    g = gv.viewing(g, frozenset({"c"}))
    g = _ask(g, (1, "a"), (2, "b"), (3, "c"))
    g, going, wake = gv.admit(g, P, 0.0)
    assert (going, wake) == ((3,), 1.0)  # the one the user looks at first
    g, going, wake = gv.admit(g, P, 1.0)
    assert going == (1,)  # then the oldest
    # the remaining count went down with each admission: 3 - 2 = 1, then 0 → wait the reset
    g, going, wake = gv.admit(g, P, 2.0)
    assert going == (2,)
    g = _ask(g, (4, "d"), now=2.5)
    g, going, wake = gv.admit(g, P, 3.0)
    assert (going, wake) == ((), 30.0)
    assert gv.queued_reason(g, P, 3.0) == "queued for rate limit (resets in 27 s)"
    g, going, _ = gv.admit(g, P, 30.0)  # reset passed: open
    assert going == (4,)


def test_a_call_that_gives_up_waiting_leaves_the_queue() -> None:
    g = gv.limited(gv.Governor(), P, 5.0, now=0.0)
    g = _ask(g, (1, "a"), (2, "b"))
    g = gv.done(g, P, 1, 1.0)  # interrupted while queued
    g, going, _ = gv.admit(g, P, 5.0)
    assert going == (2,)


def test_reset_headers_openai_durations_anthropic_times() -> None:
    assert gv.parse_reset("1s", 0.0) == 1.0
    assert gv.parse_reset("6m0s", 0.0) == 360.0
    assert gv.parse_reset("20ms", 0.0) == 0.02
    assert gv.parse_reset("1h2m3.5s", 0.0) == 3723.5
    assert gv.parse_reset("2.5", 0.0) == 2.5
    assert gv.parse_reset("1970-01-01T00:01:00Z", 30.0) == 30.0
    assert gv.parse_reset("soon", 0.0) is None
    lim = limits_from_headers({"Anthropic-RateLimit-Requests-Limit": "50",
                               "anthropic-ratelimit-requests-remaining": "1",
                               "anthropic-ratelimit-requests-reset": "1970-01-01T00:00:40Z"},
                              10.0)
    assert lim == gv.Limits(limit_requests=50, remaining_requests=1, requests_reset_s=30.0)
    assert limits_from_headers({"x-ratelimit-remaining-tokens": "9",
                                "x-ratelimit-reset-tokens": "2s"}, 0.0) == gv.Limits(
        remaining_tokens=9, tokens_reset_s=2.0)
    assert limits_from_headers({"content-type": "text/event-stream"}, 0.0) is None


def test_the_rate_limit_event_reads_openai_and_anthropic_headers() -> None:
    from codey_protocol.ratelimits import rate_limit_event

    openai = rate_limit_event("o", {"X-RateLimit-Remaining-Requests": "4",
                                    "x-ratelimit-reset-requests": "1s"})
    assert openai is not None and (openai.remaining_requests, openai.reset_requests) == (4, "1s")
    anthropic = rate_limit_event("a", {"anthropic-ratelimit-tokens-limit": "80000",
                                       "anthropic-ratelimit-tokens-remaining": "12",
                                       "anthropic-ratelimit-tokens-reset": "2026-11-28T19:00:00Z"})
    assert anthropic is not None
    assert (anthropic.limit_tokens, anthropic.remaining_tokens, anthropic.reset_tokens) == (
        80000, 12, "2026-11-28T19:00:00Z")
    assert rate_limit_event("x", {"content-type": "text/plain"}) is None
