"""Schedules, pure: when one is due, and the events of one firing (no clock, no I/O).

Times are unix seconds; a cron expression is read in the schedule's time zone by croniter
(daylight-saving days included), never by a parser of ours.

Exactly once, across restarts: :func:`fire` refuses a due time at or before the schedule's
``last_due`` (folded from ``schedule_fired``), and the firing and the events that start its
run go into one append (``Engine.execute_decision``), so a crash leaves either both or
neither. Missed due times (the server was down): :func:`plan` fires only the latest one, and
only if it is within the grace period; the older ones, and a latest one past the grace, are
recorded once as ``skipped``.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import ScheduleInfo, State

__all__ = ["CRON", "ISO_TIME", "Plan", "check_spec", "due_times", "fire", "parse_at", "plan",
           "skip", "spec_of"]


def _list(value: str) -> str:
    """A cron field: a list of ``*`` or ``value`` or ``value-value``, each with a ``/step``."""
    element = rf"(?:\*|(?:{value})(?:-(?:{value}))?)(?:/[1-9][0-9]{{0,2}})?"
    return rf"{element}(?:,{element})*"


def _names(*names: str) -> str:
    return "|".join("".join(f"[{c.upper()}{c}]" for c in name) for name in names)


_MINUTE = "[0-5]?[0-9]"
_HOUR = "[01]?[0-9]|2[0-3]"
_DAY = "0?[1-9]|[12][0-9]|3[01]"
_DAY_OF_ANY_MONTH = "0?[1-9]|[12][0-9]"  # the 29th: February has it, in leap years
_MONTH = "0?[1-9]|1[0-2]|" + _names("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug",
                                     "sep", "oct", "nov", "dec")
_WEEKDAY = "[0-7]|" + _names("sun", "mon", "tue", "wed", "thu", "fri", "sat")

_ANY_MONTH = "\\*(?:/[1-9][0-9]{0,2})?"  # every month, or every n-th from January

#: The cron expressions a schedule's REST body takes, as a regular expression: five fields
#: (minute hour day month weekday) of numbers, names, ranges, lists and steps, or a macro
#: (``@daily``). Each one is valid for croniter *and comes due*: a day past the 29th only
#: with every month (February 30th never comes), the last day (``L``) and the n-th weekday
#: of the month (``mon#2``, n at most 4) with any month. A subset of what croniter reads
#: (its seconds field, and ``L`` or ``#`` mixed with other days, are left out), so the
#: OpenAPI document can say it and a unit test can prove it (``test_schedules.py``); the
#: browser socket's command is checked by :func:`check_spec` alone.
CRON = (
    # a macro alone: croniter takes no space around it ("(?!\n)": Python's $ also matches
    # before a last newline)
    "^(?:@(?:yearly|annually|monthly|weekly|daily|midnight|hourly)(?!\\n)$"
    f"| *{_list(_MINUTE)} +{_list(_HOUR)} +(?:"
    f"{_list(_DAY)} +{_ANY_MONTH} +{_list(_WEEKDAY)}"
    f"|{_list(_DAY_OF_ANY_MONTH)} +{_list(_MONTH)} +{_list(_WEEKDAY)}"
    f"|[Ll] +{_list(_MONTH)} +\\*"
    f"|\\* +{_list(_MONTH)} +(?:{_WEEKDAY})#[1-4]"
    ") *$)"
)

# years 1900 to 9899: far from where a time zone's offset would take a date out of Python's
# range; no lookahead, which generators of examples (hypothesis, schemathesis) cannot follow
_CENTURY = "(?:19|[2-8][0-9]|9[0-8])"
_LEAP_YEAR = f"(?:{_CENTURY}(?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[3579][26])00)"
_DATE = (f"(?:{_CENTURY}[0-9]{{2}}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
         "|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
         f"|{_LEAP_YEAR}-02-29)")
_HOURS = "(?:[01][0-9]|2[0-3])"
_TIME = f"{_HOURS}:[0-5][0-9](?::[0-5][0-9](?:[.,][0-9]{{1,6}})?)?"
_OFFSET = f"(?:[Zz]|[+-]{_HOURS}(?::?[0-5][0-9])?)"

#: A one-time schedule's ``at`` as text: an ISO 8601 date and time (``T`` or a space between
#: them, seconds and their fraction optional), with an offset (``Z``, ``+02:00``) or without
#: one — then it is read in the schedule's own ``timezone``, never the server's. Only days
#: that exist (February 29th in leap years), years 1900 to 9899: what matches is taken, so
#: the OpenAPI document can say it (a unit test proves it, as for :data:`CRON`).
ISO_TIME = f"^{_DATE}[Tt ]{_TIME}{_OFFSET}?(?!\\n)$"


def parse_at(at: float | str, timezone: str) -> float:
    """``at`` as unix seconds: a number is already; ISO 8601 text (:data:`ISO_TIME`) without
    an offset is a wall-clock time in ``timezone`` (the schedule's: what the person writing it
    reads on their clock, where the server's own zone would be a guess).

    Raises ValueError, in words, for text that is no such time (February 30th) or an unknown
    zone."""
    if not isinstance(at, str):
        return float(at)
    text = at
    if not re.match(ISO_TIME, text):
        raise ValueError(f"`at` {at!r} is neither unix seconds nor an ISO 8601 date and time "
                         "that exists (1900 to 9899, e.g. 2030-06-01T09:00, "
                         "2030-06-01T09:00:00Z or 2030-06-01T09:00+02:00)")
    try:
        when = dt.datetime.fromisoformat(text.replace(",", ".").replace("z", "Z"))
    except ValueError as err:
        raise ValueError(f"`at` {at!r} is not a date and time: {err}") from None
    if when.tzinfo is None:
        try:
            when = when.replace(tzinfo=ZoneInfo(timezone))
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {timezone!r}") from None
    return when.timestamp()


#: the most due times one plan looks back over (a cron every minute, down for a week, is
#: still a handful of work)
_LOOKBACK = 10_000


def check_spec(spec: ev.ScheduleSpec) -> str | None:
    """What is wrong with a schedule's times, in words; None when nothing is."""
    if (spec.cron is None) == (spec.at is None):
        return "give either a cron expression or a one-time `at`, not both"
    try:
        ZoneInfo(spec.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {spec.timezone!r}"
    from croniter import CroniterBadDateError, croniter  # loaded when schedules are used

    if spec.cron is not None and not croniter.is_valid(spec.cron):
        return f"not a cron expression: {spec.cron!r} (five fields: minute hour day month " \
               "weekday)"
    if spec.cron is not None:
        # valid, yet never due (February 30th): its first tick would fail, for ever
        try:
            croniter(spec.cron, dt.datetime.now(ZoneInfo(spec.timezone))).get_next(float)
        except (CroniterBadDateError, ValueError, OverflowError):
            return f"the cron expression {spec.cron!r} never comes due"
    if not spec.prompt.strip():
        return "the prompt is empty"
    return None


def due_times(spec: ev.ScheduleSpec, after: float, until: float) -> list[float]:
    """The due times in ``(after, until]``, oldest first (at most :data:`_LOOKBACK`)."""
    if spec.at is not None:
        return [spec.at] if after < spec.at <= until else []
    assert spec.cron is not None
    zone = ZoneInfo(spec.timezone)
    from croniter import croniter

    it = croniter(spec.cron, dt.datetime.fromtimestamp(after, zone))
    out: list[float] = []
    while len(out) < _LOOKBACK:
        due = float(it.get_next(float))
        if due > until:
            break
        out.append(due)
    return out


@dataclass(frozen=True)
class Plan:
    """What to record now: fire ``due`` (None: only skip), after ``skipped`` missed ones."""

    due: float | None
    skipped: int
    skipped_until: float  # the latest skipped due time (the firing's due when none)


def plan(info: ScheduleInfo, now: float, grace_s: float) -> Plan | None:
    """What is due for ``info`` at ``now``; None when nothing is."""
    spec = info.spec
    if not spec.enabled:
        return None
    after = max(info.last_due, info.created_at) if spec.at is None else info.last_due
    due = due_times(spec, after, now)
    if not due:
        return None
    latest = due[-1]
    if now - latest <= grace_s:
        return Plan(due=latest, skipped=len(due) - 1, skipped_until=due[-2] if len(due) > 1
                    else latest)
    return Plan(due=None, skipped=len(due), skipped_until=latest)


def fire(state: State, schedule_id: str, due: float, *, session_id: str, item_id: str,
         now: float, provider: str, model: str,
         skipped: int = 0) -> list[tuple[str | None, ev.Event]]:
    """The events of one run of ``schedule_id`` for ``due``: ``schedule_fired`` and the
    session's start (or its prompt), in one list to append as one group.

    Raises ValueError for a due time already dealt with (exactly once)."""
    info = state.schedules.get(schedule_id)
    if info is None:
        raise ValueError(f"no schedule {schedule_id!r}")
    if due <= info.last_due:
        raise ValueError(f"schedule {schedule_id!r} already ran for {due}")
    spec = info.spec
    out: list[tuple[str | None, ev.Event]] = []
    worker = state.workers.get(spec.worker_id)
    error = ""
    if worker is None or worker.revoked:
        error = f"worker {spec.worker_id!r} is gone (revoked or unknown)"
    elif spec.target_session is not None:
        target = state.sessions.get(spec.target_session)
        if target is None or target.status == "closed":
            error = f"session {spec.target_session!r} is gone or closed"
        elif target.worktree is not None and target.worktree.status == "removed":
            # a run there would find no folder (or an empty one): said, not run
            error = (f"session {spec.target_session!r}'s worktree was removed: make it again "
                     "from its branch, or fork the session into a new worktree")
    if error:
        return [(None, ev.ScheduleFired(schedule_id=schedule_id, due_at=due, outcome="failed",
                                        error=error, skipped=skipped))]
    prompt = ev.UserMessage(id=item_id, ts=now, text=spec.prompt)
    if spec.target_session is not None:
        out.append((None, ev.ScheduleFired(schedule_id=schedule_id, due_at=due,
                                           outcome="started", session_id=spec.target_session,
                                           skipped=skipped, item_id=item_id)))
        out.append((spec.target_session, ev.SessionItemAppended(item=prompt)))
        return out
    out.append((None, ev.ScheduleFired(schedule_id=schedule_id, due_at=due, outcome="started",
                                       session_id=session_id, skipped=skipped,
                                       item_id=item_id)))
    out.append((session_id, ev.SessionCreated(
        title=f"{spec.name} · {dt.datetime.fromtimestamp(due, ZoneInfo(spec.timezone)):%H:%M}",
        worker_id=spec.worker_id, workdir=spec.workdir, provider=provider, model=model,
        policy=spec.policy)))
    out.append((session_id, ev.SessionItemAppended(item=prompt)))
    return out


def skip(schedule_id: str, p: Plan) -> list[tuple[str | None, ev.Event]]:
    """Record missed due times that will not run (past the grace period)."""
    return [(None, ev.ScheduleFired(schedule_id=schedule_id, due_at=p.skipped_until,
                                    outcome="skipped", skipped=p.skipped))]


def spec_of(c: cl.SaveSchedule, schedule_id: str) -> ev.ScheduleSpec:
    return ev.ScheduleSpec(
        schedule_id=schedule_id, name=c.name.strip()[:80] or "schedule", cron=c.cron, at=c.at,
        timezone=c.timezone, worker_id=c.worker_id, workdir=c.workdir.strip(),
        prompt=c.prompt, policy=c.policy, target_session=c.target_session, enabled=c.enabled)
