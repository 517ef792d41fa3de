"""The shared rate-limit window over the real stack: one session's call gets a 429 (scripted,
with ``Retry-After``); every session of that provider then waits until the reset — the
dashboard says "queued for rate limit (resets in N s)" — and after it they resume one by one,
a second apart, with no burst."""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

from codey_testkit.scenarios import create_session

if TYPE_CHECKING:  # the suite imports test modules with importlib
    from conftest import Stack

RESET_S = 15  # long enough for the other two sessions to reach the queue on a loaded machine
GAP_S = 1.0  # the governor's spacing (codey_server.agent.governor.GAP_S)


def test_a_429_pauses_every_session_of_the_provider_and_they_resume_one_by_one(
        stack: Stack, page: Page) -> None:
    model = stack.model({"model": "scripted-1", "steps": [
        {"match": {"user": "job A"}, "times": 1,
         "reply": {"error": {"status": 429, "retry_after": RESET_S}}},
        {"match": {"user": "job"}, "reply": {"text": "answered"}},
        {"match": {"any": True}, "reply": {"text": "unexpected"}},
    ]})
    server = stack.server()
    worker = stack.worker()
    stack.open(page)

    a = create_session(server, worker, stack.workdir(worker, "a"), "job A")
    limited = stack.wait_until(
        lambda: next((r for r in model.requests() if r.get("status") == 429), None),
        timeout=30, what="the scripted 429")
    b = create_session(server, worker, stack.workdir(worker, "b"), "job B")
    c = create_session(server, worker, stack.workdir(worker, "c"), "job C")

    # B and C never reach the provider before the reset: they wait in the shared window,
    # and their cards say so
    for sid in (b, c):
        card = page.locator(f"[data-testid=session-card][data-session-id='{sid}']")
        expect(card.get_by_test_id("session-queued")).to_contain_text(
            "queued for rate limit (resets in ", timeout=20_000)
        expect(card.get_by_test_id("session-status")).to_have_text("queued")
    card_a = page.locator(f"[data-testid=session-card][data-session-id='{a}']")
    expect(card_a.get_by_test_id("session-status")).to_have_attribute("data-status", "running")
    assert time.time() < limited["ts"] + RESET_S, "the test was too slow to see the queue"
    assert [r for r in model.requests() if r.get("status") != 429] == []

    for sid in (a, b, c):
        card = page.locator(f"[data-testid=session-card][data-session-id='{sid}']")
        expect(card.get_by_test_id("session-status")).to_have_attribute(
            "data-status", "idle", timeout=RESET_S * 1000 + 30_000)

    answered = [r for r in model.requests() if r.get("step") == 1]
    assert len(answered) == 3
    # after the reset, one at a time: the two that waited first (in the order they reached
    # the queue), then the one that got the 429 (it asked again only when its own wait was
    # over)
    order = [r["latest"]["text"] for r in answered]
    assert sorted(order[:2]) == ["job B", "job C"] and order[2] == "job A", order
    times = [r["ts"] for r in answered]
    assert times[0] >= limited["ts"] + RESET_S - 0.5, (limited["ts"], times)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # no burst: each admitted a gap after the one before (and only once the first one's
    # answer began); arrivals differ from admissions by each request's own latency
    assert all(g >= GAP_S / 2 for g in gaps), gaps
    print(f"first call {times[0] - limited['ts']:.2f} s after the 429 (reset {RESET_S} s); "
          f"gaps {', '.join(f'{g:.2f}' for g in gaps)} s")
    state = stack.browser_state(page)
    for sid in (a, b, c):
        assert state["sessions"][sid]["items"][-1]["text"] == "answered"
        assert state["sessions"][sid]["status_reason"] == ""
