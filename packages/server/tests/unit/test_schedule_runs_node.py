"""What a schedule's card says a run did (``runReport`` in ``web/views/schedules.js``, run by
node): from the run's session as the store folds it, its prompt (``item_id``) up to the next
prompt — not from the firing's ``started``, which says only that the run began.

``e2e/test_schedules.py`` shows the words on the page for a run in a session of its own; these
cover the other cases: a run into the schedule's own session, runs recorded before runs named
their prompt, the session's status when the run is (or is no longer) what it is doing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

WEB = Path(__file__).resolve().parents[4] / "web"

_NODE = """
const { runReport } = await import(process.argv[1]);
const cases = JSON.parse(process.argv[2]);
console.log(JSON.stringify(cases.map(([run, spec, state]) => runReport(run, spec, state))));
"""


def reports(*cases: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: this test runs web/views/schedules.js under "
                    "Node.js (Debian's nodejs; ./scripts/test installs it)", pytrace=False)
    out = subprocess.run([node, "--input-type=module", "-e", _NODE,
                          (WEB / "views" / "schedules.js").as_uri(), json.dumps(cases)],
                         capture_output=True, text=True, check=True).stdout
    return [f"{r['words']}{' (bad)' if r['bad'] else ''}" for r in json.loads(out)]


def prompt(item_id: str) -> dict[str, Any]:
    return {"kind": "user_message", "id": item_id, "text": "nightly check"}


def command(item_id: str, status: str) -> dict[str, Any]:
    return {"kind": "tool_call", "id": item_id, "name": "shell", "command": ["make"],
            "status": status}


def session(items: list[dict[str, Any]], status: str = "idle",
            reason: str = "") -> dict[str, Any]:
    return {"sessions": {"ses_1": {"items": items, "status": status, "status_reason": reason}}}


RUN = {"outcome": "started", "session_id": "ses_1", "item_id": "itm_p"}
OWN = {"target_session": None}
INTO = {"target_session": "ses_1"}


def test_failed_commands_are_counted_from_the_runs_prompt_to_the_next() -> None:
    items = [prompt("itm_0"), command("c0", "failed"),  # an earlier run into this session
             prompt("itm_p"), command("c1", "failed"), command("c2", "done"),
             {"kind": "tool_call", "id": "r", "name": "read_file", "status": "failed"},
             command("c3", "rejected"), command("c4", "failed"),
             prompt("itm_later"), command("c5", "failed")]  # the user's follow-up
    assert reports((RUN, INTO, session(items, "running"))) == [
        "ran — 2 of 3 commands failed (bad)"]


def test_while_the_run_is_what_its_session_does_its_status_is_the_runs() -> None:
    base = [prompt("itm_p"), command("c1", "failed")]
    assert reports(
        (RUN, OWN, session(base, "running")),
        (RUN, OWN, session([*base, command("c2", "waiting_approval")], "waiting_approval")),
        (RUN, OWN, session(base, "error", "model error: 500")),
        (RUN, OWN, session([*base, command("c2", "cancelled")], "interrupted")),
        (RUN, OWN, session([prompt("itm_p"), command("c1", "done")])),
    ) == ["working — 1 of 1 command failed (bad)",
          "needs approval — 1 of 1 command failed (bad)",
          "ran — 1 of 1 command failed — the session failed: model error: 500 (bad)",
          "ran — 1 of 1 command failed — stopped (bad)",
          "ran"]


def test_runs_recorded_before_they_named_their_prompt_and_runs_that_did_not_start() -> None:
    old = {"outcome": "started", "session_id": "ses_1", "item_id": ""}
    items = [prompt("itm_x"), command("c1", "failed")]
    assert reports(
        (old, OWN, session(items)),  # its own session: the whole session is the run
        (old, INTO, session(items)),  # a prompt into the schedule's session: unknown
        ({**RUN, "session_id": "gone"}, OWN, session(items)),
        ({"outcome": "failed", "session_id": None, "item_id": ""}, OWN, session([])),
        ({"outcome": "skipped", "session_id": None, "item_id": ""}, OWN, session([])),
    ) == ["ran — 1 of 1 command failed (bad)", "ran", "ran", "failed (bad)", "skipped"]
