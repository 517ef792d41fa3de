"""The audit of issue 22, its pure parts: each confirmed finding kept as a test that failed
before its fix."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol.state import ScheduleInfo, State, WorkerInfo
from codey_server.agent.conversation import ATTACHMENTS_DIR, attachment_path
from codey_server.core.engine import Engine
from codey_server.core.rules import Context
from codey_server.errors import ConfigError
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES, decide
from codey_server.logsetup import RedactSecrets, printable
from codey_server.schedules.rules import check_spec
from codey_server.schedules.scheduler import Scheduler
from codey_server.settings import Settings
from codey_server.testing.writes import record

# --- attachment names -----------------------------------------------------------------------


def _state() -> State:
    state = State()
    state.workers["w1"] = WorkerInfo(worker_id="w1", hostname="h", os="Linux", roots=["/w"])
    return state


@pytest.mark.parametrize(("name", "clean"), [
    ("x/../../../PLANTED.sh", "PLANTED.sh"),
    ("../../.bashrc", "bashrc"),
    ("..\\..\\evil.bat", "evil.bat"),
    ("/etc/passwd", "passwd"),
    ("..", "file"),
    ("report 2026.pdf", "report 2026.pdf"),
])
def test_an_attachment_name_is_reduced_to_a_clean_basename(name: str, clean: str) -> None:
    """An attachment named ``x/../../../PLANTED.sh`` was written at the workdir's root with no
    approval; only names that escaped the workdir were refused."""
    attachment = ev.Attachment(hash="ab" * 32, name=name, mime="text/plain", size=3)
    ctx = Context(blob_exists=lambda digest: True)
    events = decide(_state(), cl.CreateSession(worker_id="w1", workdir="/w", prompt="see",
                                               attachments=[attachment]), ctx)
    item = events[1][1]
    assert isinstance(item, ev.SessionItemAppended) and isinstance(item.item, ev.UserMessage)
    assert [a.name for a in item.item.attachments] == [clean]
    # a name stored before names were cleaned is cleaned again where it is written
    assert attachment_path(attachment) == f"{ATTACHMENTS_DIR}/abababab-{clean}"


# --- schedules ------------------------------------------------------------------------------


def _spec(schedule_id: str, cron: str) -> ev.ScheduleSpec:
    return ev.ScheduleSpec(schedule_id=schedule_id, name=schedule_id, cron=cron, worker_id="w1",
                           workdir="/w", prompt="go")


def test_a_cron_that_never_comes_due_is_refused() -> None:
    """``0 0 30 2 *`` (February 30th) was accepted, and its failing tick stopped the rest."""
    assert "never comes due" in (check_spec(_spec("s", "0 0 30 2 *")) or "")
    assert check_spec(_spec("s", "0 0 29 2 *")) is None  # leap days do come


def test_one_broken_schedule_does_not_keep_the_others_from_firing(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        engine = Engine(MemoryEventLog(), RULES)
        await engine.start()
        await record(engine, [(None, ev.WorkerPaired(worker_id="w1", request_id="r",
                                                    hostname="h", os="Linux", roots=["/w"],
                                                    python_version="3.11", worker_version="1",
                                                    public_key="k"))])
        # stored before crons were checked: one never due, one due every minute
        now = [1_800_000_000.0]
        for name, cron in (("broken", "0 0 30 2 *"), ("fine", "* * * * *")):
            engine.state.schedules[name] = ScheduleInfo(spec=_spec(name, cron),
                                                        created_at=now[0], last_due=now[0])
        scheduler = Scheduler(engine, clock=lambda: now[0], grace_s=300)
        with caplog.at_level(logging.ERROR):
            for _ in range(3):
                now[0] += 60
                await scheduler.tick()
        fired = engine.state.schedules["fine"].runs
        assert len(fired) == 3, fired
        assert all(r.session_id in engine.state.sessions for r in fired), fired
        assert engine.state.schedules["broken"].runs == []
        said = [r for r in caplog.records if "broken" in r.getMessage()]
        assert len(said) == 1  # once, not at every tick
        await engine.stop()

    asyncio.run(main())


# --- settings -------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["https://codey.example", "http://10.0.0.5:8765",
                                 "http://192.168.1.2"])
def test_no_auth_with_a_public_url_elsewhere_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="--no-auth"):
        Settings(auth_required=False, public_url=url).check()


@pytest.mark.parametrize("url", ["http://127.0.0.1:8765", "http://localhost:1", "http://[::1]"])
def test_no_auth_with_a_loopback_public_url_starts(url: str) -> None:
    Settings(auth_required=False, public_url=url).check()


# --- logs -----------------------------------------------------------------------------------


def _record(message: str, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("GET https://x/api/pairing/requests/r/wait?secret=s3cr3t failed "
                               "with Authorization: Bearer tok123")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord("codey", logging.ERROR, __file__, 1, message, None, exc_info)


def test_a_poll_secret_in_a_url_is_masked() -> None:
    record = _record("GET /api/pairing/requests/r/wait?secret=s3cr3t&timeout=25 200")
    RedactSecrets().filter(record)
    assert "s3cr3t" not in record.getMessage() and "secret=[redacted]" in record.getMessage()


def test_a_traceback_is_masked_too() -> None:
    record = _record("the request failed", exc=True)
    RedactSecrets().filter(record)
    text = logging.Formatter().format(record)
    assert "Traceback" in text and "RuntimeError" in text
    assert "s3cr3t" not in text and "tok123" not in text, text


def test_what_a_worker_prints_stays_on_one_line_without_escapes() -> None:
    assert printable("ok\n2026-01-01 INFO forged\r\x1b[2K") == \
        "ok\\x0a2026-01-01 INFO forged\\x0d\\x1b[2K"
    assert printable("tabs\tand üñí çødé") == "tabs\\x09and üñí çødé"
