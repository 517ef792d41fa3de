"""``set_sandbox`` and the processes a session runs (``core/toggles.py``): a narrowing stops
those that hold what it takes away, a widening keeps them and says so; and the browser's copy
of the rule (``web/toggles.js``, under node) gives the same answers for every combination."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from codey_protocol import client as cl
from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_protocol.state import PendingAction, SessionInfo, State
from codey_server.core.rules import Context
from codey_server.core.toggles import effects, process_names, stops_at_start
from codey_server.features import apply_all, decide

W, S, NOW = "wrk_1", "ses_1", 50.0
WEB = Path(__file__).resolve().parents[4] / "web"
MODES: tuple[wk.SandboxMode, ...] = ("read-only", "workspace-write", "full-access")


def _ctx() -> Context:
    counter = itertools.count(1)
    return Context(new_id=lambda prefix: f"{prefix}_{next(counter)}", now=lambda: NOW)


def _state(sandbox: wk.SandboxMode = "workspace-write", network: bool = False,
           processes: tuple[tuple[str, list[str], wk.SandboxMode | None, bool | None], ...] = (),
           *, stopping: tuple[str, ...] = (), ended: tuple[str, ...] = ()) -> State:
    """A session with ``processes`` (id, argv, the sandbox and network they started with),
    some of them asked to stop or ended, folded as the engine would have it."""
    events: list[ev.Event] = [
        ev.WorkerPaired(worker_id=W, request_id="r", hostname="h", os="Linux",
                        python_version="3.11", worker_version="0", roots=["/w"], public_key="k"),
        ev.SessionCreated(title="t", worker_id=W, workdir="/w/p", provider="p", model="m",
                          sandbox=sandbox, network=network)]
    events += [ev.ProcessStarted(process_id=pid, item_id=f"itm_{pid}", worker_id=W, argv=argv,
                                 sandbox=mode, network=net)
               for pid, argv, mode, net in processes]
    events += [ev.ProcessStopRequested(process_id=pid, by="user") for pid in stopping]
    events += [ev.ProcessEnded(process_id=pid, exit_code=0) for pid in ended]
    return apply_all(State(), [
        ev.Envelope(seq=n + 1, ts=float(n), session_id=None if n == 0 else S, event=e)
        for n, e in enumerate(events)])


def _set(state: State, sandbox: wk.SandboxMode, network: bool = False) -> list[ev.Event]:
    out = decide(state, cl.SetSandbox(session_id=S, sandbox=sandbox, network=network), _ctx())
    assert {sid for sid, _ in out} == {S}
    return [e for _, e in out]


def _notice(events: list[ev.Event], code: str) -> str:
    [text] = [e.item.text for e in events if isinstance(e, ev.SessionItemAppended)
              and isinstance(e.item, ev.Notice) and e.item.code == code]
    return text


DEV = ["npm", "run", "dev"]
HTTP = ["python", "-m", "http.server"]


def test_turning_the_network_off_stops_what_runs_with_it_and_says_so_before_the_change() -> None:
    state = _state(network=True, processes=(("p1", DEV, "workspace-write", True),
                                            ("p2", HTTP, "workspace-write", True)))
    out = _set(state, "workspace-write", False)
    assert out == [
        ev.ProcessStopRequested(process_id="p1", by="settings"),
        ev.ProcessStopRequested(process_id="p2", by="settings"),
        ev.SessionItemAppended(item=ev.Notice(
            id="itm_1", ts=NOW, code="processes_stopped",
            text="Network turned off: stopping 2 running processes (npm run dev, python -m "
                 "http.server) — they ran with the old settings.")),
        ev.SessionSandboxChanged(sandbox="workspace-write", network=False),
    ]


def test_turning_the_network_on_stops_nothing_and_says_they_keep_their_old_settings() -> None:
    state = _state(processes=(("p1", DEV, "workspace-write", False),))
    out = _set(state, "workspace-write", True)
    assert out == [
        ev.SessionItemAppended(item=ev.Notice(
            id="itm_1", ts=NOW, code="processes_kept",
            text="Network turned on: 1 running process keeps its old settings (npm run dev); "
                 "restart it to get the network.")),
        ev.SessionSandboxChanged(sandbox="workspace-write", network=True),
    ]


def test_a_process_started_without_the_network_survives_it_being_turned_off_again() -> None:
    # started with the network off, then the user turned it on (it kept none), then off:
    # nothing was taken from it
    state = _state(network=True, processes=(("old", DEV, "workspace-write", False),
                                            ("new", HTTP, "workspace-write", True)))
    out = _set(state, "workspace-write", False)
    assert [e.process_id for e in out if isinstance(e, ev.ProcessStopRequested)] == ["new"]
    assert "stopping 1 running process (python -m http.server) — it ran" in \
        _notice(out, "processes_stopped")


def test_a_narrower_mode_stops_writers_and_an_escalated_process_but_not_a_reader() -> None:
    state = _state(processes=(("writer", DEV, "workspace-write", False),
                              ("escalated", ["docker", "compose", "up"], "full-access", True),
                              ("reader", ["tail", "-f", "log"], "read-only", False)))
    out = _set(state, "read-only", False)
    stopped = [e.process_id for e in out if isinstance(e, ev.ProcessStopRequested)]
    assert stopped == ["writer", "escalated"]
    assert _notice(out, "processes_stopped").startswith(
        "Sandbox set to read-only: stopping 2 running processes (npm run dev, docker compose "
        "up)")
    assert out[-1] == ev.SessionSandboxChanged(sandbox="read-only", network=False)


def test_an_escalated_process_is_stopped_by_the_network_off_and_untouched_by_a_widening() -> None:
    escalated = (("esc", ["docker", "compose", "up"], "full-access", True),)
    off = _set(_state(network=True, processes=escalated), "workspace-write", False)
    assert [e.process_id for e in off if isinstance(e, ev.ProcessStopRequested)] == ["esc"]
    wider = _set(_state(processes=escalated), "full-access", False)
    assert wider == [ev.SessionSandboxChanged(sandbox="full-access", network=False)]


def test_leaving_full_access_takes_both_the_writes_and_the_network() -> None:
    state = _state("full-access", processes=(("p1", DEV, "full-access", True),))
    out = _set(state, "workspace-write", False)
    assert _notice(out, "processes_stopped").startswith(
        "Sandbox set to workspace-write, network turned off: stopping 1 running process")


def test_a_mixed_change_stops_what_it_narrows_and_tells_what_it_widens() -> None:
    state = _state(processes=(("writer", DEV, "workspace-write", False),
                              ("reader", ["tail", "-f", "log"], "read-only", False)))
    out = _set(state, "read-only", True)
    assert [e.process_id for e in out if isinstance(e, ev.ProcessStopRequested)] == ["writer"]
    assert _notice(out, "processes_kept") == (
        "Sandbox set to read-only, network turned on: 1 running process keeps its old "
        "settings (tail -f log); restart it to get the network.")


def test_going_to_full_access_tells_a_sandboxed_process_a_restart_gets_it_full_access() -> None:
    out = _set(_state(processes=(("p1", DEV, "workspace-write", False),)), "full-access")
    assert _notice(out, "processes_kept").endswith(
        "keeps its old settings (npm run dev); restart it to get full access.")


def test_a_process_whose_settings_were_not_recorded_is_stopped_by_any_narrowing() -> None:
    state = _state(network=True, processes=(("legacy", DEV, None, None),))
    out = _set(state, "workspace-write", False)
    assert [e.process_id for e in out if isinstance(e, ev.ProcessStopRequested)] == ["legacy"]
    # and a widening tells it as it tells any other
    out = _set(_state(processes=(("legacy", DEV, None, None),)), "workspace-write", True)
    assert "1 running process keeps its old settings" in _notice(out, "processes_kept")


def test_processes_asked_to_stop_or_ended_are_left_alone() -> None:
    state = _state(network=True, processes=(("stopping", DEV, "workspace-write", True),
                                            ("ended", HTTP, "workspace-write", True)),
                   stopping=("stopping",), ended=("ended",))
    assert _set(state, "workspace-write", False) == [
        ev.SessionSandboxChanged(sandbox="workspace-write", network=False)]


def test_without_running_processes_the_change_is_all_there_is() -> None:
    assert _set(_state(), "read-only", True) == [
        ev.SessionSandboxChanged(sandbox="read-only", network=True)]


def test_a_notice_names_three_processes_shortened_and_counts_the_rest() -> None:
    long = ["python3", "-u", "-c", "import socket\nwhile True:\n    socket.create_connection()"]
    procs: tuple[tuple[str, list[str], wk.SandboxMode | None, bool | None], ...] = tuple(
        (f"p{n}", long if n == 0 else [f"job{n}"], "workspace-write", True) for n in range(5))
    out = _set(_state(network=True, processes=procs), "workspace-write", False)
    # its words on one line, cut after a word to 40 characters
    assert _notice(out, "processes_stopped") == (
        "Network turned off: stopping 5 running processes (python3 -u -c import socket while "
        "…, job1, job2 and 2 more) — they ran with the old settings.")


def test_the_stops_come_through_the_fold_as_stopping_processes() -> None:
    state = _state(network=True, processes=(("p1", DEV, "workspace-write", True),))
    out = _set(state, "workspace-write", False)
    state = apply_all(state, [ev.Envelope(seq=state.seq + n + 1, ts=NOW, session_id=S, event=e)
                              for n, e in enumerate(out)])
    s = state.sessions[S]
    [p] = s.processes
    assert (p.status, p.stop_by) == ("stopping", "settings")
    assert (s.sandbox, s.network) == ("workspace-write", False)


# a process whose start raced a narrowing ----------------------------------------------------

def _pending(action_sandbox: wk.SandboxMode, action_network: bool,
             session_sandbox: wk.SandboxMode | None, session_network: bool | None
             ) -> PendingAction:
    return PendingAction(action_id="act_1", item_id="itm_1", worker_id=W,
                         action=wk.ExecStart(action_id="act_1", session_id=S, argv=DEV,
                                             workdir="/w/p", sandbox=action_sandbox,
                                             network=action_network),
                         sandbox=session_sandbox, network=session_network)


def _now(sandbox: wk.SandboxMode, network: bool) -> SessionInfo:
    return _state(sandbox, network).sessions[S]


def test_a_process_requested_with_the_network_and_started_after_it_went_off_stops() -> None:
    pending = _pending("workspace-write", True, "workspace-write", True)
    assert stops_at_start(pending, _now("workspace-write", False))
    assert not stops_at_start(pending, _now("workspace-write", True))  # unchanged
    assert not stops_at_start(pending, _now("full-access", False))  # widened


def test_an_escalated_start_stops_only_when_the_session_narrowed_meanwhile() -> None:
    pending = _pending("full-access", True, "workspace-write", False)
    assert not stops_at_start(pending, _now("workspace-write", False))
    assert stops_at_start(pending, _now("read-only", False))
    # kept from before the session's settings were kept: unknown, so not stopped
    assert not stops_at_start(_pending("full-access", True, None, None),
                              _now("read-only", False))


def test_only_an_exec_start_is_judged() -> None:
    pending = PendingAction(action_id="a", item_id="i", worker_id=W,
                            action=wk.RunCommand(action_id="a", session_id=S, argv=["ls"],
                                                 workdir="/w/p", network=True),
                            sandbox="workspace-write", network=True)
    assert not stops_at_start(pending, _now("read-only", False))


# the browser's copy of the rule ------------------------------------------------------------

_NODE = """
const { processNames, toggleEffects } = await import(process.argv[1]);
const cases = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
const out = cases.map(({ session, sandbox, network }) => {
  const r = toggleEffects(session, sandbox, network);
  return { stop: r.stop.map((p) => p.process_id), keep: r.keep.map((p) => p.process_id),
    words: r.words, names: processNames(r.stop) };
});
process.stdout.write(JSON.stringify(out));
"""


def test_the_browsers_rule_gives_the_servers_answers_for_every_combination() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: this test runs web/toggles.js under Node.js "
                    "(Debian's nodejs; ./scripts/test installs it)", pytrace=False)
    # one process for every sandbox it may have started with, unrecorded included
    kinds: list[tuple[wk.SandboxMode | None, bool | None]] = [
        *itertools.product(MODES, (False, True)), (None, None)]
    # (every other one with a command too long to name whole)
    procs = tuple((f"p{n}", [f"job{n}", *(["--a-long-option", "with  spaces\nand lines"] * (
        n % 2))], mode, net) for n, (mode, net) in enumerate(kinds))
    cases: list[dict[str, Any]] = []
    expected = []
    for (m0, n0), (m1, n1) in itertools.product(itertools.product(MODES, (False, True)),
                                                repeat=2):
        session = _state(m0, n0, procs).sessions[S]  # type: ignore[arg-type]
        found = effects(session, m1, n1)
        cases.append({"session": msgspec.to_builtins(session), "sandbox": m1, "network": n1})
        expected.append({"stop": [p.process_id for p in found.stop],
                         "keep": [p.process_id for p in found.keep], "words": found.words,
                         "names": process_names(found.stop)})
    run = subprocess.run([node, "--input-type=module", "-e",
                          "import { createRequire } from 'node:module';"
                          "const require = createRequire(import.meta.url);" + _NODE,
                          (WEB / "toggles.js").as_uri()],
                         input=json.dumps(cases), capture_output=True, text=True, timeout=60,
                         check=True)
    got = json.loads(run.stdout)
    for case, want, answer in zip(cases, expected, got, strict=True):
        assert answer == want, (case["session"]["sandbox"], case["session"]["network"],
                                case["sandbox"], case["network"])
    # and the rule is the one the decision applies
    assert any(want["stop"] for want in expected) and any(want["keep"] for want in expected)
    assert any(want["names"].endswith(" more") for want in expected)
    assert any(" …" in want["names"] for want in expected)
