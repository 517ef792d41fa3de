"""Schedules, pure: their times (croniter, in a time zone, across daylight saving), what is
due after a gap, and one firing's events: exactly once, failed when its worker is gone."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import ScheduleInfo, SessionInfo, State, WorkerInfo
from codey_server.core.rules import CommandRejected, Context
from codey_server.features import apply, decide
from codey_server.schedules.routes import TIME_ZONES
from codey_server.schedules.rules import (
    CRON,
    ISO_TIME,
    check_spec,
    due_times,
    fire,
    parse_at,
    plan,
)

UTC = dt.UTC


def ts(text: str, zone: str = "UTC") -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def spec(**kw: object) -> ev.ScheduleSpec:
    base: dict[str, object] = {"schedule_id": "sch_1", "name": "nightly", "cron": "*/1 * * * *",
                               "worker_id": "w1", "workdir": "/w", "prompt": "run the tests"}
    base.update(kw)
    return ev.ScheduleSpec(**base)  # type: ignore[arg-type]


def test_bad_specs_are_said_in_words() -> None:
    assert check_spec(spec()) is None
    assert "not both" in (check_spec(spec(at=1.0)) or "")
    assert "not both" in (check_spec(spec(cron=None)) or "")
    assert "cron" in (check_spec(spec(cron="61 * * * *")) or "")
    assert "time zone" in (check_spec(spec(timezone="Mars/Olympus")) or "")
    assert "empty" in (check_spec(spec(prompt="  ")) or "")


# generating from the long pattern takes most of the time (about 60 ms an example)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cron=st.from_regex(CRON), zone=st.sampled_from(["UTC", "Europe/Paris",
                                                        "Pacific/Kiritimati"]))
def test_every_cron_the_rest_body_takes_is_one_that_comes_due(cron: str, zone: str) -> None:
    """The REST body's pattern (in the OpenAPI document) promises this: a schema-valid cron
    is never refused for not being one, or for never coming due."""
    assert check_spec(spec(cron=cron, timezone=zone)) is None, cron


@pytest.mark.parametrize(("cron", "taken"), [
    ("0 3 * * *", True), ("*/15 9-17 * * mon-fri", True), ("0 9 * * MON-FRI", True),
    ("0 0 1,15 jan-jun *", True), ("0 0 31 * *", True), ("0 0 29 2 *", True),
    ("@daily", True), (" 5 4 * * 0 ", True), ("05 09 * * 7", True),
    # valid, yet never due: refused by the schema as by check_spec
    ("0 0 30 2 *", False), ("0 0 31 4,6 *", False),
    # the last day, the n-th weekday of the month
    ("0 0 L * *", True), ("0 0 l 2 *", True), ("0 0 * * mon#1", True), ("0 0 * 2 7#4", True),
    # valid for croniter, but not in the subset the schema can say
    ("0 0 31 */2 *", True), ("0 0 31 1 *", False), ("0 0 * 2 1#5", False),
    ("0 0 L * 1#1", False), ("0 0 1 * * *", False),
    # not cron at all
    ("nope", False), ("61 * * * *", False), ("* * * *", False), ("*/0 * * * *", False),
])
def test_the_rest_bodys_cron_pattern(cron: str, taken: bool) -> None:
    assert bool(re.search(CRON, cron)) is taken


def test_every_time_zone_the_rest_body_offers_is_one_the_server_reads() -> None:
    assert "UTC" in TIME_ZONES and "Europe/Paris" in TIME_ZONES
    for zone in TIME_ZONES:
        assert check_spec(spec(timezone=zone)) is None, zone


def test_cron_times_follow_the_time_zone_across_daylight_saving() -> None:
    # 02:30 every day in Paris: on 2026-03-29 the clocks jump from 02:00 to 03:00
    nightly = spec(cron="30 2 * * *", timezone="Europe/Paris")
    days = due_times(nightly, ts("2026-03-27T12:00", "Europe/Paris"),
                     ts("2026-03-31T12:00", "Europe/Paris"))
    local = [dt.datetime.fromtimestamp(d, ZoneInfo("Europe/Paris")).strftime("%d %H:%M")
             for d in days]
    # once a day, the day without a 02:30 included (at 03:00, the first time after it)
    assert local == ["28 02:30", "29 03:00", "30 02:30", "31 02:30"]
    once = spec(cron=None, at=ts("2026-05-01T09:00"))
    assert due_times(once, 0, ts("2026-05-01T09:00")) == [ts("2026-05-01T09:00")]
    assert due_times(once, ts("2026-05-01T09:00"), ts("2026-06-01T00:00")) == []


def test_after_a_gap_only_the_latest_runs_within_grace_and_the_rest_are_counted() -> None:
    info = ScheduleInfo(spec=spec(), created_at=ts("2026-11-23T10:00:30"))
    assert plan(info, ts("2026-11-23T10:00:50"), 300) is None
    p = plan(info, ts("2026-11-23T10:05:10"), 300)
    assert p is not None and p.due == ts("2026-11-23T10:05") and p.skipped == 4
    late = plan(info, ts("2026-11-23T10:20:00"), 60)  # the latest is 0 s late: runs
    assert late is not None and late.due == ts("2026-11-23T10:20")
    info.last_due = ts("2026-11-23T10:20")
    stale = plan(info, ts("2026-11-23T10:30:30"), 20)  # 30 s past the latest, grace 20 s
    assert stale is not None and stale.due is None and stale.skipped == 10
    info.spec = spec(enabled=False)
    assert plan(info, ts("2026-11-23T11:00:00"), 300) is None


def _state() -> State:
    state = State()
    state.workers["w1"] = WorkerInfo(worker_id="w1", hostname="h", os="Linux")
    env = ev.Envelope(seq=1, ts=0.0, session_id=None, event=ev.ScheduleSaved(spec=spec()))
    return apply(state, env)


def test_a_firing_starts_a_session_once() -> None:
    state = _state()
    due = ts("2026-11-23T10:01")
    events = fire(state, "sch_1", due, session_id="ses_1", item_id="itm_1", now=due + 1,
                  provider="p", model="m")
    fired, created, prompt = (e for _, e in events)
    assert isinstance(fired, ev.ScheduleFired) and fired.outcome == "started"
    assert fired.session_id == "ses_1"
    assert isinstance(created, ev.SessionCreated) and created.workdir == "/w"
    assert isinstance(prompt, ev.SessionItemAppended)
    for n, (sid, e) in enumerate(events, start=2):
        apply(state, ev.Envelope(seq=n, ts=due + 1, session_id=sid, event=e))
    assert state.schedules["sch_1"].last_due == due
    assert state.schedules["sch_1"].runs[-1].session_id == "ses_1"
    assert "ses_1" in state.sessions
    # the run names its prompt: what the run did is that item and the ones after it
    assert fired.item_id == "itm_1" == prompt.item.id
    assert state.schedules["sch_1"].runs[-1].item_id == "itm_1"
    with pytest.raises(ValueError, match="already ran"):
        fire(state, "sch_1", due, session_id="ses_2", item_id="itm_2", now=due + 2,
             provider="p", model="m")


def test_a_run_into_the_schedules_session_names_its_prompt_there() -> None:
    state = _state()
    state.sessions["ses_t"] = SessionInfo(session_id="ses_t", title="t", worker_id="w1",
                                          workdir="/w", provider="p", model="m")
    state.schedules["sch_1"].spec.target_session = "ses_t"
    fired, prompt = (e for _, e in fire(state, "sch_1", 100.0, session_id="ses_new",
                                         item_id="itm_9", now=101.0, provider="p", model="m"))
    assert isinstance(fired, ev.ScheduleFired) and isinstance(prompt, ev.SessionItemAppended)
    assert (fired.session_id, fired.item_id, prompt.item.id) == ("ses_t", "itm_9", "itm_9")


def test_a_run_into_a_session_whose_worktree_was_removed_fails_and_runs_nothing() -> None:
    state = _state()
    state.sessions["ses_t"] = SessionInfo(
        session_id="ses_t", title="t", worker_id="w1", workdir="/wt/t", provider="p",
        model="m", worktree=ev.Worktree(repo="/w", branch="codey/t", status="removed"))
    state.schedules["sch_1"].spec.target_session = "ses_t"
    (_, fired), = fire(state, "sch_1", 100.0, session_id="s", item_id="i", now=101.0,
                       provider="p", model="m")
    assert isinstance(fired, ev.ScheduleFired) and fired.outcome == "failed"
    assert "worktree was removed" in fired.error


def test_a_run_whose_worker_is_gone_fails_with_its_reason() -> None:
    state = _state()
    state.workers["w1"].revoked = True
    (_, fired), = fire(state, "sch_1", 100.0, session_id="s", item_id="i", now=101.0,
                       provider="p", model="m")
    assert isinstance(fired, ev.ScheduleFired) and fired.outcome == "failed"
    assert "revoked" in fired.error


def test_saving_checks_the_spec_and_the_worker() -> None:
    state = _state()
    ctx = Context(new_id=lambda prefix: f"{prefix}_new")
    ok = decide(state, cl.SaveSchedule(name="n", cron="0 9 * * 1-5", worker_id="w1",
                                       workdir="/w", prompt="p"), ctx)
    assert isinstance(ok[0][1], ev.ScheduleSaved) and ok[0][1].spec.schedule_id == "sch_new"
    with pytest.raises(CommandRejected, match="cron"):
        decide(state, cl.SaveSchedule(name="n", cron="nope", worker_id="w1", workdir="/w",
                                      prompt="p"), ctx)
    with pytest.raises(CommandRejected, match="worker"):
        decide(state, cl.SaveSchedule(name="n", cron="* * * * *", worker_id="w9",
                                      workdir="/w", prompt="p"), ctx)
    gone = decide(state, cl.DeleteSchedule(schedule_id="sch_1"), ctx)
    assert gone == [(None, ev.ScheduleDeleted(schedule_id="sch_1"))]


@pytest.mark.parametrize(("text", "zone", "expected"), [
    # with an offset: that instant, whatever the schedule's zone
    ("2030-06-01T09:00:00Z", "Europe/Paris", "2030-06-01T09:00+00:00"),
    ("2030-06-01T09:00+02:00", "UTC", "2030-06-01T07:00+00:00"),
    ("2030-06-01 09:00:30.250-0130", "UTC", "2030-06-01T10:30:30.250+00:00"),
    ("2030-06-01t09:00z", "UTC", "2030-06-01T09:00+00:00"),
    ("2032-02-29T09:00Z", "UTC", "2032-02-29T09:00+00:00"),  # a leap day
    # without one: a wall-clock time in the schedule's zone (summer time in Paris), never
    # the server's
    ("2030-06-01T09:00", "Europe/Paris", "2030-06-01T07:00+00:00"),
    ("2030-01-01T09:00", "Europe/Paris", "2030-01-01T08:00+00:00"),
    ("2030-06-01T09:00", "UTC", "2030-06-01T09:00+00:00"),
])
def test_at_as_iso_8601(text: str, zone: str, expected: str) -> None:
    assert re.match(ISO_TIME, text)
    assert parse_at(text, zone) == dt.datetime.fromisoformat(expected).timestamp()


def test_at_as_unix_seconds_is_taken_as_it_is() -> None:
    assert parse_at(1906534800, "Europe/Paris") == 1906534800.0
    assert parse_at(1906534800.5, "UTC") == 1906534800.5


@pytest.mark.parametrize(("text", "words"), [
    ("tomorrow at nine", "neither unix seconds nor an ISO 8601"),
    ("2030-06-01", "neither unix seconds nor an ISO 8601"),  # a day is not a time
    ("1906534800", "neither unix seconds nor an ISO 8601"),  # seconds go as a number
    ("2030-06-01T09:00\n", "neither unix seconds nor an ISO 8601"),
    # days and times that do not exist, and years out of range
    ("2030-02-30T09:00", "neither"), ("2030-02-29T09:00", "neither"),
    ("2100-02-29T09:00", "neither"), ("2030-04-31T09:00", "neither"),
    ("2030-06-01T24:00", "neither"), ("2030-06-01T09:60", "neither"),
    ("2030-06-01T09:00+24:00", "neither"), ("1899-12-31T23:59Z", "neither"),
])
def test_bad_at_is_refused_in_words(text: str, words: str) -> None:
    # the REST body's pattern refuses what parse_at refuses
    assert not re.match(ISO_TIME, text)
    with pytest.raises(ValueError, match=words):
        parse_at(text, "UTC")


@settings(max_examples=300, deadline=None)
@given(text=st.from_regex(ISO_TIME), zone=st.sampled_from(["UTC", "Europe/Paris",
                                                           "Pacific/Kiritimati",
                                                           "America/St_Johns"]))
def test_every_at_the_rest_body_takes_is_one_the_server_reads(text: str, zone: str) -> None:
    """The REST body's pattern (in the OpenAPI document) promises this: schema-valid text
    is never refused (leap days, the ends of the years allowed, any offset)."""
    assert isinstance(parse_at(text, zone), float)


def test_a_one_time_schedule_is_done_once_its_time_was_dealt_with() -> None:
    at = ts("2030-06-01T09:00")
    state = _state()
    apply(state, ev.Envelope(seq=2, ts=1.0, session_id=None,
                             event=ev.ScheduleSaved(spec=spec(cron=None, at=at))))
    info = state.schedules["sch_1"]
    assert not info.done
    # run now, before its time: a run, yet still to come
    apply(state, ev.Envelope(seq=3, ts=2.0, session_id=None, event=ev.ScheduleFired(
        schedule_id="sch_1", due_at=at - 3600, outcome="started", session_id="ses_1")))
    assert not info.done and plan(info, at + 1, 300.0) is not None
    apply(state, ev.Envelope(seq=4, ts=3.0, session_id=None, event=ev.ScheduleFired(
        schedule_id="sch_1", due_at=at, outcome="started", session_id="ses_2")))
    assert info.done and plan(info, at + 1, 300.0) is None
    # saved again for a later time: to come again; a cron schedule is never done
    apply(state, ev.Envelope(seq=5, ts=4.0, session_id=None,
                             event=ev.ScheduleSaved(spec=spec(cron=None, at=at + 60))))
    assert not info.done
    apply(state, ev.Envelope(seq=6, ts=5.0, session_id=None, event=ev.ScheduleFired(
        schedule_id="sch_1", due_at=at + 60, outcome="skipped", skipped=1)))
    assert info.done
    apply(state, ev.Envelope(seq=7, ts=6.0, session_id=None,
                             event=ev.ScheduleSaved(spec=spec())))
    assert not info.done
